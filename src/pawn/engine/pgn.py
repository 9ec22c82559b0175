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
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import numpy.typing as npt

from pawn import _engine

SKIP_REASONS: tuple[str, ...] = (
    "illegal_move",
    "unreadable_move",
    "malformed",
    "variant",
    "fen_start",
    "no_outcome",
    "too_short",
)
"""Reasons a game is skipped, as used in ``skipped`` and ``counts``."""

CLOCK_MISSING: int = 0x8000
"""Clock of a move without a ``[%clk]`` annotation inside a game (spec §6.4)."""
EVAL_MISSING: int = -0x8000
"""Eval of a move without an ``[%eval]`` annotation inside a game (spec §6.4)."""


@dataclass(frozen=True)
class PgnGames:
    """Games parsed from one PGN input, in file order (N kept games, T = ``max_ply``).

    Attributes:
        tokens: int16 [N, T] move tokens, PAD (1968) after each game's length.
        lengths: int16 [N] plies kept (≤ T; a longer game is truncated and gets 1973).
        outcome: int16 [N] outcome token per spec §6.3.
        white_elo, black_elo: uint16 [N], 0 when missing.
        clocks: uint16 [N, T] seconds left after each move; 32768 for a move without
            ``[%clk]``, 0 beyond the length (spec §6.4).
        evals: int16 [N, T] centipawns (mate ±(32767 − |N|)); -32768 for a move without
            ``[%eval]``, 0 beyond the length (spec §6.4).
        game_index: int64 [N] 1-based number in the input of each kept game.
        full_length: int64 [N] plies of the whole game before truncation.
        headers: dict of str columns [N]: event, site, date, utc_date, utc_time, white, black,
            result, termination, time_control, eco, opening.
        skipped: (game number, ply, reason) for each skipped game; reasons in ``SKIP_REASONS``.
        counts: ``read``, ``kept`` and one count per skip reason.
        path: the file read, or None for text input.
    """

    tokens: npt.NDArray[np.int16]
    lengths: npt.NDArray[np.int16]
    outcome: npt.NDArray[np.int16]
    white_elo: npt.NDArray[np.uint16]
    black_elo: npt.NDArray[np.uint16]
    clocks: npt.NDArray[np.uint16]
    evals: npt.NDArray[np.int16]
    game_index: npt.NDArray[np.int64]
    full_length: npt.NDArray[np.int64]
    headers: dict[str, list[str]]
    skipped: list[tuple[int, int, str]]
    counts: dict[str, int]
    path: Path | None = None
    _san_joined: list[str] = field(default_factory=list, repr=False)
    _uci_joined: list[str] = field(default_factory=list, repr=False)

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @cached_property
    def san(self) -> list[list[str]]:
        """SAN of each kept move, as written (normalised: ``0-0`` → ``O-O``, ``bxa8Q`` → ``bxa8=Q``,
        glyphs dropped)."""
        return [s.split() for s in self._san_joined]

    @cached_property
    def uci(self) -> list[list[str]]:
        """UCI of each kept move (castling ``e1g1``)."""
        return [s.split() for s in self._uci_joined]


def _check_plies(max_ply: int, min_ply: int) -> None:
    if not 1 <= max_ply <= 32767:
        raise ValueError(f"max_ply must be in 1..32767, got {max_ply}")
    if not 0 <= min_ply <= max_ply:
        raise ValueError(f"min_ply must be in 0..max_ply ({max_ply}), got {min_ply}")


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
        source: a path (str or path-like) to a PGN file, or PGN text (see ``is_pgn_text``:
            bytes, or a str containing a newline or starting with ``[``). Bytes may be UTF-8
            or Latin-1, with an optional BOM and LF or CRLF line ends.
        max_ply: width T of the token arrays; longer games are truncated to T plies and get
            outcome PLY_LIMIT (1973) — the whole game is still replayed and checked.
        min_ply: games with fewer plies are skipped as ``too_short``.

    Returns:
        ``PgnGames`` (see its attributes for shapes and dtypes).

    Raises:
        FileNotFoundError: the path does not exist (the message names it).
        IsADirectoryError: the path is a directory.
        ValueError: max_ply outside 1..32767, min_ply outside 0..max_ply, or an empty string.
    """
    _check_plies(max_ply, min_ply)
    path: Path | None = None
    if is_pgn_text(source):
        data = source.encode("utf-8") if isinstance(source, str) else bytes(source)
        raw = _engine.parse_pgn_bytes(data, max_ply, min_ply)
    else:
        if source == "":
            raise ValueError("parse_pgn got an empty string: pass a file path or PGN text")
        path = Path(source)
        if path.is_dir():
            raise IsADirectoryError(f"PGN path is a directory, not a file: {path}")
        if not path.is_file():
            raise FileNotFoundError(f"PGN file not found: {path}")
        raw = _engine.parse_pgn_path(str(path), max_ply, min_ply)
    return PgnGames(
        tokens=raw["tokens"],
        lengths=raw["lengths"],
        outcome=raw["outcome"],
        white_elo=raw["white_elo"],
        black_elo=raw["black_elo"],
        clocks=raw["clocks"],
        evals=raw["evals"],
        game_index=raw["game_index"],
        full_length=raw["full_length"],
        headers=raw["headers"],
        skipped=[tuple(s) for s in raw["skipped"]],
        counts=raw["counts"],
        path=path,
        _san_joined=raw["san_joined"],
        _uci_joined=raw["uci_joined"],
    )
