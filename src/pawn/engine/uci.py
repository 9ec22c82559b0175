"""UCI and SAN move lists ↔ tokens (spec ``engine.md`` §6.7, §1.4), with clear errors.

UCI moves are 4–5 characters; the promotion letter is case-insensitive; a pawn move onto the
back rank without a letter is rejected; castling is the king moving two squares (``e1g1``) —
king-takes-rook ``e1h1`` is an ordinary rook move id, never castling. Every move is checked for
legality by replaying the game from the standard start position.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import numpy.typing as npt

from pawn import _engine
from pawn._engine import UciGames
from pawn.engine.pgn import _check_plies

__all__ = ["UciGames", "parse_uci_file", "san_to_uci", "tokens_to_san", "tokens_to_uci", "uci_to_san", "uci_to_tokens"]


def _move_lists(games: Sequence[Sequence[str] | str]) -> list[list[str]]:
    """Games as lists of move strings; a game given as one string is split on whitespace
    (without this, ``list("e2e4 e7e5")`` would turn every character into a move)."""
    if isinstance(games, (str, bytes)):
        raise TypeError(
            "games must be a sequence of games (each a list of moves or a space-separated string), "
            "got a single string"
        )
    return [g.split() if isinstance(g, str) else list(g) for g in games]


def uci_to_tokens(
    games: Sequence[Sequence[str] | str],
    max_ply: int = 512,
    on_error: Literal["raise", "truncate"] = "raise",
) -> tuple[npt.NDArray[np.int16], npt.NDArray[np.int16]]:
    """UCI games → ``(tokens int16 [N, max_ply] PAD-filled, lengths int16 [N])``.

    Each game is a list of UCI strings or one space-separated string. Games longer than
    max_ply are cut at max_ply (later moves are still checked).

    Raises:
        ValueError: with ``on_error="raise"``, a malformed or illegal move, naming the game
            (0-based) and ply; ``"truncate"`` instead keeps the moves before it. Also for
            max_ply outside 1..32767 or an unknown ``on_error``.
        TypeError: ``games`` is a single string.
    """
    _check_plies(max_ply, 0)
    return _engine.uci_to_tokens(_move_lists(games), max_ply, on_error)


def tokens_to_uci(tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16]) -> list[list[str]]:
    """``tokens int16 [B, T]``, ``lengths int16 [B]`` → UCI lists (no legality check).

    Raises:
        TypeError: wrong dtype or rank. ValueError: a length out of range or a non-move token
            (PAD, outcome) within a game's length, naming game and ply.
    """
    return _engine.tokens_to_uci(tokens, lengths)


def tokens_to_san(tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16]) -> list[list[str]]:
    """``tokens int16 [B, T]``, ``lengths int16 [B]`` → SAN lists (``+``/``#``, ``O-O``,
    ``e8=Q``, minimal disambiguation).

    Raises:
        TypeError: wrong dtype or rank. ValueError: a length out of range or a token that is
            not a legal move, naming game and ply.
    """
    return _engine.tokens_to_san(tokens, lengths)


def uci_to_san(games: Sequence[Sequence[str] | str]) -> list[list[str]]:
    """UCI lists (or space-separated strings) → SAN lists. Raises ValueError naming game and
    ply of a bad move, TypeError if ``games`` is a single string."""
    return _engine.uci_to_san(_move_lists(games))


def san_to_uci(games: Sequence[Sequence[str] | str]) -> list[list[str]]:
    """SAN lists or space-separated strings → UCI lists (castling ``e1g1``). Each move is read
    with ``parse_pgn``'s dialect rules: glyphs (``e4!?``, ``Nf3±``), ``0-0``, ``bxa8Q``,
    ``Ng1-f3``, ``ed5``. Raises ValueError naming game and ply of a bad move (null moves,
    ``Sf3``, results and bare annotations are malformed), TypeError if ``games`` is a single
    string."""
    return _engine.san_to_uci(_move_lists(games))


def parse_uci_file(path: str | os.PathLike, max_ply: int = 512, min_ply: int = 1) -> UciGames:
    """Read a UCI file (spec §6.7): one game per non-empty line, whitespace-separated moves, a
    trailing result token (``1-0``, ``0-1``, ``1/2-1/2``, ``*``) dropped.

    A game with a malformed or illegal move is skipped and reported (game, ply, reason); a game
    longer than max_ply is truncated; one with fewer than min_ply moves is skipped.

    Returns:
        ``UciGames``, the engine's record (declared with shapes and dtypes in ``pawn/_engine.pyi``).

    Raises:
        FileNotFoundError: the path does not exist (the message names it).
        IsADirectoryError: the path is a directory.
        ValueError: max_ply outside 1..32767 or min_ply outside 0..max_ply.
    """
    _check_plies(max_ply, min_ply)
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"UCI path is a directory, not a file: {p}")
    if not p.is_file():
        raise FileNotFoundError(f"UCI file not found: {p}")
    return _engine.parse_uci_path(str(p), max_ply, min_ply)
