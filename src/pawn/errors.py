"""PAWN's error hierarchy: every error a user can cause derives from :class:`PawnError`.

The CLI maps a :class:`PawnError` to one ``error: <message>`` line on stderr and the class's
``exit_code`` (1 for a failure of the input or the run, 2 for a bad command line or setting), never
a traceback. Library code raises the most specific subclass with a message that names the file,
game or field at fault. This module imports nothing from PAWN, so every layer may use it.
"""

from __future__ import annotations


class PawnError(Exception):
    """Base of every user-facing PAWN error (one-line message; exit code 1)."""

    exit_code: int = 1


class UsageError(PawnError, ValueError):
    """A setting or flag value that cannot be used (exit code 2, like a bad command line)."""

    exit_code = 2


class DataError(PawnError, ValueError):
    """Input data (games, PGN, parquet, caches) that cannot be read or used."""


class EngineFailure(PawnError, RuntimeError):
    """An external process PAWN drives (e.g. a UCI engine) failed or is missing."""
