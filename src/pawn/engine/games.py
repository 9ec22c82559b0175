"""Uniformly random legal games from the Rust engine (spec ``engine.md`` §3)."""

from __future__ import annotations

import operator

from pawn import _engine
from pawn._engine import RandomGames
from pawn.engine.errors import EngineTypeError

__all__ = ["INTERRUPT_BLOCK", "RandomGames", "random_games"]


def random_games(
    n_games: int,
    max_ply: int = 512,
    seed: int = 0,
    *,
    mate_boost: float = 0.0,
    discard_ply_limit: bool = False,
    first_game: int = 0,
) -> RandomGames:
    """Play ``n_games`` uniformly random legal games from the start position (spec §3.1).

    Each ply runs the termination check of spec §2.2 (checkmate/stalemate, then the ply cap,
    then the 75-move rule, fivefold repetition and insufficient material) and otherwise picks a
    legal move uniformly. Game ``i`` depends only on ``(seed, i, max_ply, mate_boost)``: per-game
    ChaCha8 seeds are derived from ``seed`` (spec §3.2), so results do not change with the thread
    count or with ``n_games`` (the first k games of a larger call are the k games of a smaller
    one). Work runs in parallel over rayon's pool (``RAYON_NUM_THREADS``) with the GIL released.

    Args:
        n_games: number of games N (≥ 0).
        max_ply: ply cap and width of the token array (1–65535). The published models use 512.
        seed: base seed, an unsigned 64-bit integer.
        mate_boost: probability in [0, 1] of playing an available mate in one (spec §3.1); the
            published runs used 0.
        discard_ply_limit: drop games that hit the ply cap, generating in rounds of
            ``max(4096, 2N)`` games with base seed ``seed + k·round`` (spec §3.3).
        first_game: index of the first game in the seed's stream; the call returns games
            ``first_game … first_game + N − 1`` of that stream, so training batch s of size B
            is ``random_games(B, T, seed, first_game=s·B)``. Ignored with ``discard_ply_limit``.

    Returns:
        ``RandomGames``, the engine's record (declared with shapes and dtypes in
        ``pawn/_engine.pyi``): ``tokens`` int16 [N, max_ply] (PAD-filled), ``lengths`` int16
        [N], ``termination`` uint8 [N] (spec §2.2 codes, names in
        :data:`pawn.vocab.TERMINATION_NAMES`), ``outcome`` int16 [N] (spec §2.3), ``seed``, the
        ``max_ply`` property and ``attention_mask()``.

    Raises:
        EngineTypeError: (a ``TypeError``) ``n_games``, ``max_ply``, ``seed`` or ``first_game``
            not an integer (``2.7`` is refused, not cut to 2).
        EngineUsageError: (a ``ValueError``) ``n_games < 0``, ``max_ply`` outside 1–65535,
            ``mate_boost`` outside [0, 1], or ``max_ply < 4`` with ``discard_ply_limit`` (every
            game would hit the cap).
        OverflowError: ``seed`` negative or ≥ 2**64.
        EngineMemoryError: (a ``MemoryError``) the token array [N, max_ply] cannot be allocated.
    """
    args = {"n_games": n_games, "max_ply": max_ply, "seed": seed, "first_game": first_game}
    for name, value in args.items():
        try:
            args[name] = operator.index(value)  # ints and NumPy integers; 2.7 or "3" are refused
        except TypeError:
            raise EngineTypeError(f"{name} must be an integer, got {value!r}") from None
    # Large calls run in blocks of games, Ctrl-C honoured between blocks (the engine holds no
    # GIL while it plays); by the determinism contract the result does not depend on the block.
    return _engine.random_games(args["n_games"], args["max_ply"], args["seed"], float(mate_boost),
                                bool(discard_ply_limit), args["first_game"], INTERRUPT_BLOCK)


INTERRUPT_BLOCK = 32768
"""Games per block inside :func:`random_games` (Ctrl-C is checked between blocks)."""
