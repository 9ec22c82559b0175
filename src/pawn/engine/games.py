"""Uniformly random legal games from the Rust engine (spec ``engine.md`` §3)."""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from pawn import _engine
from pawn.vocab import PAD_TOKEN


@dataclass(frozen=True)
class RandomGames:
    """A batch of random games.

    Attributes:
        tokens: int16 [N, max_ply]. Move tokens in slots ``0 … length−1``; every later slot is
            PAD (1968), never 0 (token 0 is the real move ``a1b1``).
        lengths: int16 [N]. Plies played, ``0 ≤ length ≤ max_ply``.
        termination: uint8 [N]. Spec §2.2 codes: 0 checkmate, 1 stalemate, 2 seventy-five-move
            rule, 3 fivefold repetition, 4 insufficient material, 5 ply limit
            (names in :data:`pawn.vocab.TERMINATION_NAMES`).
        outcome: int16 [N]. Outcome token per spec §2.3 (1969–1973).
        seed: the call's base seed.
    """

    tokens: np.ndarray
    lengths: np.ndarray
    termination: np.ndarray
    outcome: np.ndarray
    seed: int

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def max_ply(self) -> int:
        """Width of the ply axis of :attr:`tokens`."""
        return int(self.tokens.shape[1])

    def attention_mask(self) -> np.ndarray:
        """bool [N, max_ply]: true on real move slots (``token != PAD``)."""
        return self.tokens != PAD_TOKEN


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
        :class:`RandomGames` with ``tokens`` int16 [N, max_ply] (PAD-filled), ``lengths`` int16
        [N], ``termination`` uint8 [N] and ``outcome`` int16 [N].

    Raises:
        TypeError: ``n_games``, ``max_ply``, ``seed`` or ``first_game`` not an integer (``2.7`` is
            refused, not cut to 2).
        ValueError: ``n_games < 0``, ``max_ply`` outside 1–65535, ``mate_boost`` outside [0, 1],
            or ``max_ply < 4`` with ``discard_ply_limit`` (every game would hit the cap).
        OverflowError: ``seed`` negative or ≥ 2**64.
        MemoryError: the token array [N, max_ply] cannot be allocated.
    """
    args = {"n_games": n_games, "max_ply": max_ply, "seed": seed, "first_game": first_game}
    for name, value in args.items():
        try:
            args[name] = operator.index(value)  # ints and NumPy integers; 2.7 or "3" are refused
        except TypeError:
            raise TypeError(f"{name} must be an integer, got {value!r}") from None
    n, first = args["n_games"], args["first_game"]

    def call(count: int, start: int) -> dict:
        return _engine.random_games(count, args["max_ply"], args["seed"], float(mate_boost), bool(discard_ply_limit), start)

    if discard_ply_limit or n <= INTERRUPT_BLOCK:
        return RandomGames(seed=int(seed), **call(n, first))
    # Large calls run in blocks of games so that Ctrl-C is honoured between blocks (the engine
    # holds no GIL while it plays); by the determinism contract the result is the same.
    try:
        out = {
            "tokens": np.empty((n, args["max_ply"]), np.int16), "lengths": np.empty(n, np.int16),
            "termination": np.empty(n, np.uint8), "outcome": np.empty(n, np.int16),
        }
    except (ValueError, MemoryError):
        raise MemoryError(f"random_games: cannot allocate tokens int16 [{n}, {args['max_ply']}]") from None
    for start in range(0, n, INTERRUPT_BLOCK):
        block = call(min(INTERRUPT_BLOCK, n - start), first + start)
        for k, v in block.items():
            out[k][start:start + len(v)] = v
    return RandomGames(seed=int(seed), **out)


INTERRUPT_BLOCK = 32768
"""Games per engine call inside :func:`random_games` (Ctrl-C is checked between calls)."""
