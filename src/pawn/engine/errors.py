"""Exceptions raised by the Rust engine ``pawn._engine``, all under :class:`EngineError`.

The engine has one error enum (``crates/pawn-engine/src/error.rs``) mapped to these classes in
one place (``python/error.rs``). Each class also derives from the builtin the engine raised
before (``ValueError``, ``IndexError``, ``RuntimeError``, ``TypeError``, ``MemoryError``), so
existing ``except`` clauses keep working, and from :class:`pawn.errors.PawnError`, so the CLI
prints one line and an exit code. Messages name the game (0-based index in the batch), the ply
and the move or token at fault, or the argument and what it should be. Unreadable files stay
``FileNotFoundError``/``OSError``.
"""

from __future__ import annotations

from pawn.errors import DataError, PawnError, UsageError


class EngineError(PawnError):
    """Base of every error the engine raises on purpose."""


class EngineInputError(EngineError, DataError):
    """The games, moves, tokens or FEN given cannot be used: an illegal or malformed move, a
    non-move token within a game's length, an invalid position (a ``ValueError``)."""


class EngineUsageError(EngineError, UsageError):
    """An argument outside its domain (``max_ply``, ``min_ply``, ``vocab_size``, ``on_error``,
    generation options) or a move offered to a ``BatchEnv`` game whose turn it is not
    (a ``ValueError``)."""


class EngineIndexError(EngineError, IndexError):
    """A ``BatchEnv`` game index outside ``0..n_games`` (an ``IndexError``)."""


class EngineStateError(EngineError, RuntimeError):
    """A ``BatchEnv`` method called before ``reset()`` (a ``RuntimeError``)."""


class EngineTypeError(EngineError, TypeError):
    """An argument of the wrong type, dtype or rank, e.g. ``tokens`` that is not a 2-D int16
    array or ``n_games=2.7`` (a ``TypeError``); the message names the argument, what it must be
    and what was given."""

    exit_code = 2


class EngineMemoryError(EngineError, MemoryError):
    """A request whose output cannot be allocated, e.g. ``random_games(10**15)`` (a
    ``MemoryError``); the message names the call, the array, its shape and its size in bytes."""


__all__ = [
    "EngineError",
    "EngineIndexError",
    "EngineInputError",
    "EngineMemoryError",
    "EngineStateError",
    "EngineTypeError",
    "EngineUsageError",
]
