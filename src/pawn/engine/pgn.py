"""Lichess PGN parsing (spec ``engine.md`` §6.1–§6.4): games → move tokens, outcome tokens,
clocks, evals and header columns, with every dropped game reported.

Unlike the v1 parser, the PGN dialects python-chess reads are read the same way: move-quality
glyphs (``e4!?``), NAGs (``$14``), evaluation symbols outside comments, alone or glued to the
move (``±``, ``+/-``, ``=``, ``∞``, ``N``, ``TN``, ``Δ``, ``□``, …), ``{…}`` and ``;`` comments,
``%`` escape lines, nested variations, ``0-0`` castling, promotion without ``=`` (``bxa8Q``),
long algebraic (``Ng1-f3``, ``e2e4``), missing or extra capture marks, ``e.p.``, ``1.e4`` and
``1...e5``, Unicode spaces, a UTF-8 BOM, CRLF line ends and two games glued on one line
(``… 1-0[Event "b"]``). A game with an illegal or unreadable move (a null move, or a piece
letter python-chess does not know either, such as ``Sf3``, ``nf3``, ``♘f3``), a variant
(Chess960, …) or a set-up (FEN) start is skipped and reported with its game number and ply —
never silently truncated. As in §6.1, the first result token ends the main line.
"""

from __future__ import annotations

import os
from pathlib import Path

from pawn import _engine
from pawn._engine import PgnGames
from pawn.engine.errors import EngineUsageError
from pawn.errors import DataError

SKIP_REASONS: tuple[str, ...] = tuple(_engine.SKIP_REASONS)
"""Reasons a game is skipped, as used in ``skipped`` and ``counts`` (from the engine)."""
PARSE_SKIP_REASONS: tuple[str, ...] = tuple(_engine.PARSE_SKIP_REASONS)
"""The skip reasons that are faults of the PGN text: all but ``too_short`` (from the engine)."""
SKIP_REASON_TEXT: dict[str, str] = dict(_engine.SKIP_REASON_TEXT)
"""One-line description of each skip reason (from the engine)."""
PARSER_VERSION: int = int(_engine.PARSER_VERSION)
"""Version of the parser's output (from the engine); a game cache built by another version is rebuilt."""

CLOCK_MISSING: int = _engine.CLOCK_MISSING
"""Clock of a move without a ``[%clk]`` annotation inside a game (spec §6.4)."""
EVAL_MISSING: int = _engine.EVAL_MISSING
"""Eval of a move without an ``[%eval]`` annotation inside a game (spec §6.4)."""

__all__ = ["CLOCK_MISSING", "EVAL_MISSING", "PARSER_VERSION", "PARSE_SKIP_REASONS", "SKIP_REASONS", "SKIP_REASON_TEXT",
           "NotPgnFileError", "PgnGames", "check_pgn", "is_pgn_text", "parse_pgn"]


class NotPgnFileError(DataError):
    """A file given as PGN that does not read as PGN at all (JSON, binary); the message names it."""


def check_pgn(games: PgnGames, label: str) -> PgnGames:
    """Return ``games``, or raise :class:`NotPgnFileError` naming ``label`` when the input they were
    parsed from is not PGN (``games.looks_like_pgn`` is False: a NUL byte, or neither a tag pair
    nor a readable move anywhere)."""
    if not games.looks_like_pgn:
        raise NotPgnFileError(f"{label}: not a PGN file (no tag pair and no move in it)")
    return games


def _check_plies(max_ply: int, min_ply: int) -> None:
    """Raise ``EngineUsageError`` (a ``ValueError``) for max_ply outside 1..32767 or min_ply
    outside 0..max_ply, before any file is read."""
    if not 1 <= max_ply <= 32767:
        raise EngineUsageError(f"max_ply must be in 1..32767, got {max_ply}")
    if not 0 <= min_ply <= max_ply:
        raise EngineUsageError(f"min_ply must be in 0..max_ply ({max_ply}), got {min_ply}")


def is_pgn_text(source: str | bytes | os.PathLike) -> bool:
    """The rule for ``parse_pgn``'s input: bytes, or a str that contains a newline or starts
    with ``[`` (after leading whitespace), is PGN text; any other str or path-like is a path."""
    if isinstance(source, (bytes, bytearray)):
        return True
    if isinstance(source, str):
        return "\n" in source or source.lstrip().startswith("[")
    return False


def parse_pgn(source: str | bytes | os.PathLike, max_ply: int = 512, min_ply: int = 1) -> PgnGames:
    """Parse Lichess PGN games (spec §6.1–§6.4) in Rust, in parallel, keeping file order.

    Args:
        source: a path (str or path-like) to a PGN file or named pipe, or PGN text (see ``is_pgn_text``:
            bytes, or a str containing a newline or starting with ``[``). Bytes may be UTF-8
            or Latin-1, with an optional BOM and LF or CRLF line ends.
        max_ply: width T of the token arrays; longer games are truncated to T plies and get
            outcome PLY_LIMIT (1973) — the whole game is still replayed and checked.
        min_ply: games with fewer plies are skipped as ``too_short``.

    Returns:
        ``PgnGames``, the engine's record (declared with shapes and dtypes in
        ``pawn/_engine.pyi``; ``path`` is the file read, or None for text input).

    Raises:
        FileNotFoundError: the path does not exist, or is neither a file nor a named pipe (the
            message names it).
        IsADirectoryError: the path is a directory.
        NotPgnFileError: the file is not PGN at all (JSON, binary; see :func:`check_pgn`). Text
            and bytes input are not checked: call :func:`check_pgn` on the result.
        ValueError: max_ply outside 1..32767, min_ply outside 0..max_ply, or an empty string.
    """
    _check_plies(max_ply, min_ply)
    if is_pgn_text(source):
        data = source.encode("utf-8") if isinstance(source, str) else bytes(source)
        return _engine.parse_pgn_bytes(data, max_ply, min_ply)
    if source == "":
        raise ValueError("parse_pgn got an empty string: pass a file path or PGN text")
    path = Path(source)
    if path.is_dir():
        raise IsADirectoryError(f"PGN path is a directory, not a file: {path}")
    # a named pipe (``<(zstdcat month.pgn.zst)``, ``/dev/stdin``) is read as a stream, as a file is
    if not (path.is_file() or path.is_fifo()):
        raise FileNotFoundError(f"PGN file not found: {path}")
    return check_pgn(_engine.parse_pgn_path(str(path), max_ply, min_ply), str(path))
