"""Legal-move masks of replayed games, their alignment to model positions, and perft
(spec ``engine.md`` §4, §1.7, §3.4).

Every mask function replays ``tokens`` int16 [B, T] (C-order; slots at and after a game's length
are ignored, normally PAD = 1968) for ``lengths`` int16 [B] from the standard start position.
Masks are indexed by **game ply**: entry ``t`` describes the position *before* move ``t`` (the
options of the side about to play ``tokens[b, t]``), for ``0 <= t < length``. Use
:func:`align_masks_to_positions` to index them by model sequence position instead.

Errors shared by all of them:

* ``TypeError``: ``tokens`` is not a 2-D int16 array or ``lengths`` not a 1-D int16 array.
* ``ValueError``: batch sizes differ, a length is negative or above T, or a token is not legal
  when replayed (the message names the game index, the ply and the token).
* ``MemoryError``: the output array (e.g. [B, T, V] for a huge ``vocab_size``) cannot be
  allocated.

The work runs in Rust, one game per rayon task, with the GIL released.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from pawn import _engine
from pawn.vocab import NUM_ACTIONS, PAD_TOKEN


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


def align_masks_to_positions(
    mask: np.ndarray,
    lengths: np.ndarray,
    layout: Literal["pure_moves", "outcome_prefix"] = "pure_moves",
) -> np.ndarray:
    """Re-index ply masks by model sequence position (spec §4 alignment notes, §3.4 packing).

    The model at sequence position p predicts ``targets[p]``; the aligned mask row p marks the
    targets that are legal there, so ``logits`` can be masked row by row.

    * ``"pure_moves"`` (published models): ``input_ids = [m0 … m(L-1), PAD …]`` and
      ``targets[p] = input_ids[p + 1]``, supervised at p = 0 … L−1. Row p is ply mask p+1 (shift
      down one ply, drop ply 0); row L−1 holds only PAD (the end-of-game target), also for games
      with L = T, where the ply mask has no row L. Output [B, T, V].
    * ``"outcome_prefix"``: ``input_ids = [outcome, m0 … m(L-1), PAD …]``, seq_len = T + 1,
      supervised at p = 0 … L. Row p is ply mask p for p < L and row L holds only PAD. The ply axis
      has max_ply = seq_len − 1 = T rows, so one row is appended: output [B, T + 1, V].

    Rows at unsupervised positions are all false. PAD is set by this function, so it does not
    matter whether ``mask`` already carries the PAD entry of :func:`legal_move_masks`.

    Args:
        mask: bool [B, T, V] ply masks from :func:`legal_move_masks`, V ≥ 1969.
        lengths: int [B] game lengths, each in 0…T.
        layout: ``"pure_moves"`` or ``"outcome_prefix"``.

    Returns:
        bool [B, T, V] (pure moves) or bool [B, T + 1, V] (outcome prefix).

    Raises:
        ValueError: ``mask`` is not 3-D with V ≥ 1969, lengths do not match B or lie outside
        0…T, or ``layout`` is unknown.
    """
    mask = np.asarray(mask, dtype=bool)
    lengths = np.asarray(lengths)
    if mask.ndim != 3 or mask.shape[2] <= PAD_TOKEN:
        raise ValueError(f"mask must be bool [B, T, V] with V > {PAD_TOKEN}, got shape {mask.shape}")
    n_games, max_ply, _ = mask.shape
    if lengths.shape != (n_games,):
        raise ValueError(f"lengths must have shape ({n_games},), got {lengths.shape}")
    if lengths.size and (lengths.min() < 0 or lengths.max() > max_ply):
        raise ValueError(f"lengths must lie in 0..{max_ply}, got range {lengths.min()}..{lengths.max()}")
    lengths = lengths.astype(np.int64)
    rows = np.arange(max_ply)[None, :]
    if layout == "pure_moves":
        out = np.zeros_like(mask)
        out[:, :-1] = mask[:, 1:]
        end = lengths - 1  # position whose target is end-of-game
        n_pos = max_ply
    elif layout == "outcome_prefix":
        out = np.zeros((n_games, max_ply + 1, mask.shape[2]), dtype=bool)
        out[:, :-1] = mask
        end = lengths
        n_pos = max_ply + 1
        rows = np.arange(n_pos)[None, :]
    else:
        raise ValueError(f"layout must be 'pure_moves' or 'outcome_prefix', got {layout!r}")
    # Clear everything from the end-of-game position on, then set PAD there.
    out[rows >= end[:, None]] = False
    has_end = (end >= 0) & (end < n_pos)
    out[np.nonzero(has_end)[0], end[has_end], PAD_TOKEN] = True
    return out


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
