"""Legal-move masks of replayed games, their alignment to model positions, and perft
(spec ``engine.md`` §4, §1.7, §3.4).

Every mask function replays ``tokens`` int16 [B, T] (C-order; slots at and after a game's length
are ignored, normally PAD = 1968) for ``lengths`` int16 [B] from the standard start position.
Masks are indexed by **game ply**: entry ``t`` describes the position *before* move ``t`` (the
options of the side about to play ``tokens[b, t]``), for ``0 <= t < length``. Use
:meth:`pawn.data.layout.Layout.align_masks` to index them by model sequence position instead.

Errors shared by all of them:

* ``TypeError``: ``tokens`` is not a 2-D int16 array or ``lengths`` not a 1-D int16 array.
* ``ValueError``: batch sizes differ, a length is negative or above T, or a token is not legal
  when replayed (the message names the game index, the ply and the token).
* ``MemoryError``: the output array (e.g. [B, T, V] for a huge ``vocab_size``) cannot be
  allocated.

The work runs in Rust, one game per rayon task, with the GIL released.
"""

from __future__ import annotations

import numpy as np

from pawn import _engine
from pawn.vocab import NUM_ACTIONS


def legal_move_masks(tokens: np.ndarray, lengths: np.ndarray, vocab_size: int = NUM_ACTIONS + 1) -> np.ndarray:
    """Dense legal-token masks by game ply (spec §4 ``compute_legal_token_masks``, plus PAD).

    Args:
        tokens: int16 [B, T] move tokens.
        lengths: int16 [B] game lengths in plies, each in 0…T.
        vocab_size: width V of the last axis. 1969 (default) gives the 1968 actions plus the PAD
            column; 1980 gives the model's full vocabulary directly (outcome columns stay false);
            exactly 1968 gives actions only, with no PAD column (the spec's original output).

    Returns:
        bool [B, T, V]: ``[b, t, k]`` is true iff action k is legal before move t (t < length).
        When V > 1968, the PAD column (1968) is set at ``t = length`` for games with
        ``length < T``: "the game is over, the correct prediction is end-of-game" (§3.4 makes PAD
        the final target). All other rows (t > length) are all false.

    Raises:
        TypeError, ValueError: see the module docstring; ``ValueError`` also for
        ``vocab_size < 1968``.
    """
    return _engine.legal_move_masks(tokens, lengths, int(vocab_size))


def legal_move_masks_sparse(
    tokens: np.ndarray, lengths: np.ndarray, seq_len: int | None = None, vocab_size: int = 1980
) -> np.ndarray:
    """Sparse legal-token masks (spec §4 ``compute_legal_token_masks_sparse``).

    Args:
        tokens: int16 [B, T] move tokens.
        lengths: int16 [B] game lengths, each in 0…T.
        seq_len: row stride of the flattened index; defaults to T; must be ≥ every length.
        vocab_size: V, must exceed 1968 because the PAD entry is always written.

    Returns:
        int64 [N] flat indices ``b*seq_len*V + t*V + token`` of every legal token at every ply
        t < length — ordered by game, then ply, then the engine's legal-move order (§2.4) —
        plus one PAD entry ``b*seq_len*V + length*V + 1968`` after each game with
        ``length < seq_len``. Setting these indices in a zeroed bool [B, seq_len, V] array gives
        :func:`legal_move_masks` (with ``vocab_size=V``, when seq_len = T).

    Raises:
        TypeError, ValueError: see the module docstring; ``ValueError`` also for
        ``vocab_size <= 1968``, ``seq_len`` below the longest game, or ``B·seq_len·V`` beyond
        the int64 range of the flat indices.
    """
    return _engine.legal_move_masks_sparse(tokens, lengths, None if seq_len is None else int(seq_len), int(vocab_size))


def legal_move_grid(tokens: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Legal moves as square grids (spec §4 ``compute_legal_move_masks``, §1.7).

    Returns:
        ``(grid, promo)``: ``grid`` uint64 [B, T, 64], bit d of ``grid[b, t, s]`` set iff a legal
        move goes from square s to square d (a1 = 0 … h8 = 63; castling is the king's two-square
        step; the four promotions of a pair share one bit); ``promo`` bool [B, T, 44, 4],
        ``promo[b, t, pair, k]`` true iff promotion pair ``pair`` (§1.7 order, see
        :func:`pawn.vocab.promo_pairs`) with piece k (0 q, 1 r, 2 b, 3 n) is legal. Zero/false
        for t ≥ length.

    Raises:
        TypeError, ValueError: see the module docstring.
    """
    return _engine.legal_move_grid(tokens, lengths)


def legal_move_counts(tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Number of legal moves before move t: int16 [B, T], 0 for t ≥ length.

    The accuracy ceiling of a perfect rules-only predictor is the mean of ``1 / count`` over
    positions t < length (spec §3.6); the probes' ``legal_move_count`` target equals it.

    Raises:
        TypeError, ValueError: see the module docstring.
    """
    return _engine.legal_move_counts(tokens, lengths)


def perft(fen: str, depth: int) -> int:
    """Perft: leaf count of the legal-move tree of ``depth`` plies from ``fen``.

    The walk uses the engine's own path (legal moves → tokens → play by token), so it checks
    move generation and tokenization together. Reference values: start position depth 5 =
    4,865,609; Kiwipete depth 4 = 4,085,603.

    Args:
        fen: a FEN string, or ``"startpos"`` for the standard start position.
        depth: plies, ≥ 0 (depth 0 gives 1).

    Returns:
        The number of leaf nodes.

    Raises:
        ValueError: malformed FEN, illegal position or negative depth.
    """
    return _engine.perft(fen, int(depth))
