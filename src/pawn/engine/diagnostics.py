"""Game validation, edge-case statistics, diagnostic sets and the accuracy ceiling (spec
``engine.md`` §7).

All token inputs are ``int16`` NumPy arrays ``[B, T]`` (C-contiguous) with ``int16`` lengths
``[B]``; a wrong dtype or rank raises ``TypeError``, a length outside ``0..T`` ``ValueError``.
Token outputs are PAD-filled (1968) after each game's end.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pawn import _engine
from pawn._engine import AccuracyCeiling, DiagnosticSets

__all__ = [
    "AccuracyCeiling",
    "DiagnosticSets",
    "accuracy_ceiling",
    "accuracy_ceiling_of",
    "edge_case_bits",
    "edge_stats_per_ply",
    "generate_diagnostic_sets",
    "validate_games",
]


def validate_games(
    tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int16]]:
    """Check that every game is a legal move sequence from the start position (§7.4).

    Args:
        tokens: int16 ``[B, T]`` move tokens.
        lengths: int16 ``[B]`` plies to check per game.

    Returns:
        ``(is_valid bool [B], first_illegal int16 [B])``: the ply of the first token that is
        not a legal move (PAD and outcome tokens inside the length count as illegal), ``-1``
        when all are legal. Moves after a draw rule would have ended the game are accepted.

    Raises:
        TypeError, ValueError: wrong dtype/shape or a length outside ``0..T``; never for
        illegal moves.
    """
    return _engine.validate_games(tokens, lengths)


def edge_case_bits() -> dict[str, int]:
    """The 43 edge-case bits of §7.1 as ``name -> 1 << bit`` (e.g. ``IN_CHECK -> 1``),
    in bit order."""
    return _engine.edge_case_bits()


def edge_stats_per_ply(
    tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16]
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """Edge-case bits of every position of every game (§7.2).

    Args:
        tokens: int16 ``[B, T]`` move tokens.
        lengths: int16 ``[B]``.

    Returns:
        ``(per_ply uint64 [B, T], white uint64 [B], black uint64 [B])``. ``per_ply[b, t]`` for
        ``t < length`` holds the bits of the position before move ``t``; entry ``length`` holds
        the final position when ``length < T``; other entries are 0. ``white``/``black`` OR the
        bits of positions with that side to move (even/odd ``t``), the final position included
        even when it does not fit into ``per_ply``. Draw bits 40–42 appear only on the final
        position; a position without legal moves carries only CHECKMATE/STALEMATE (+ draw bits).

    Raises:
        ValueError: an illegal move, naming the game and ply; TypeError/ValueError for bad input.
    """
    return _engine.edge_stats_per_ply(tokens, lengths)


def generate_diagnostic_sets(
    quotas_white: npt.NDArray[np.int32],
    quotas_black: npt.NDArray[np.int32],
    total_games: int,
    max_ply: int = 256,
    seed: int = 42,
    max_simulated_factor: float = 100.0,
) -> DiagnosticSets:
    """Random games selected to fill per-bit quotas of edge cases (§7.3).

    Games are simulated in batches of 256; game ``g`` uses a ChaCha8 generator seeded with
    ``seed + g`` (plain sequential seeds), until ``total_games`` are accepted or
    ``floor(total_games * max_simulated_factor)`` were simulated. While the remaining slots are
    at most the remaining need (Σ max(quota − filled, 0)), games that fill no open quota are
    rejected; each accepted game is credited to the open (bit, colour) quota present in its
    accumulators with the largest need (bits 0→63, white before black, later wins ties).

    Args:
        quotas_white, quotas_black: int32 ``[>= 64]`` wanted games per bit number (§7.1).
        total_games: games wanted; fewer may be returned.
        max_ply: ply cap (1…32767).
        seed: base of the sequential per-game seeds.
        max_simulated_factor: simulation budget as a multiple of ``total_games``.

    Returns:
        ``DiagnosticSets``, the engine's record (declared in ``pawn/_engine.pyi``; ``len()`` is
        N, ``sets["move_ids"]`` and ``to_dict()`` give dict-style access) with ``move_ids`` int16 ``[N, max_ply]`` (PAD-filled), ``game_lengths`` int16
        ``[N]``, ``termination_codes`` uint8 ``[N]``, ``per_ply_stats`` uint64 ``[N, max_ply]``
        (as :func:`edge_stats_per_ply`), ``white``/``black`` uint64 ``[N]`` (ORs of the stored
        per-ply entries), ``quota_assignment_white``/``_black`` uint64 ``[N]`` (one-hot bit or 0),
        ``quotas_filled_white``/``_black`` int32 ``[64]`` and ``n_simulated`` (int).

    Raises:
        EngineTypeError: (a ``TypeError``) quotas not int32 arrays; EngineUsageError (a
        ``ValueError``): fewer than 64 quotas, bad max_ply or factor; EngineMemoryError (a
        ``MemoryError``): ``total_games × max_ply`` outputs cannot be allocated.
    """
    return _engine.generate_diagnostic_sets(
        quotas_white, quotas_black, total_games, max_ply, seed, max_simulated_factor
    )


def accuracy_ceiling(
    n_games: int = 1000,
    max_ply: int = 512,
    sample_rate: float = 0.01,
    seed: int = 77777,
    n_rollouts: int = 0,
) -> AccuracyCeiling:
    """Monte-Carlo top-1 accuracy ceiling of uniformly random games (§7.5).

    Plays ``n_games`` random games (derived seeds of §3.2 from ``seed``), samples positions
    (ChaCha8 seeded ``seed + 999``; a position is kept when a uniform float is below
    ``sample_rate``, always when ``sample_rate >= 1``) and estimates per position:
    ``unconditional`` = 1/N_legal; ``naive_conditional`` = 1/(N_legal − moves that end the game
    at once with another outcome class); with ``n_rollouts > 0``, ``conditional`` and
    ``conditional_corrected`` from random playouts (two halves of ``max(n_rollouts // 2, 1)``
    playouts per legal move; otherwise they equal ``unconditional``). The published reference
    (§3.6, max_ply 512) is E[1/N_legal] = 0.0843.

    Returns:
        ``AccuracyCeiling``, the engine's record (declared in ``pawn/_engine.pyi``;
        ``r["ply"]`` and ``to_dict()`` give dict-style access) with ``n_positions, n_games, n_rollouts, sample_rate``, the four means
        ``unconditional_ceiling, naive_conditional_ceiling, conditional_ceiling,
        conditional_corrected_ceiling`` (float) and per-position arrays ``ply`` uint16,
        ``game_length`` uint16, ``n_legal`` uint16, the four estimates float64, ``outcome``
        uint8 (class 0 white mated, 1 black mated, 2 stalemate, 3 75-move, 4 fivefold,
        5 insufficient material, 6 ply limit) and ``game_idx`` uint32.

    Raises:
        EngineUsageError: (a ``ValueError``) ``max_ply`` outside 1…65535 or ``sample_rate <= 0``.
        EngineMemoryError: (a ``MemoryError``) the ``n_games × max_ply`` games cannot be
            allocated.
    """
    return _engine.accuracy_ceiling(n_games, max_ply, sample_rate, seed, n_rollouts)


def accuracy_ceiling_of(
    tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16]
) -> npt.NDArray[np.float64]:
    """Per-position unconditional ceiling 1/N_legal of the given games.

    Args:
        tokens: int16 ``[B, T]``; lengths: int16 ``[B]``.

    Returns:
        float64 ``[B, T]``: 1/N_legal of the position before move ``t`` for ``t < length``,
        0 beyond. ``out.sum() / lengths.sum()`` is the ceiling of exactly these games.

    Raises:
        ValueError: an illegal move (naming game and ply); TypeError/ValueError for bad input.
    """
    return _engine.accuracy_ceiling_of(tokens, lengths)
