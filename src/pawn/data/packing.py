"""Pack games into model sequences (spec ``engine.md`` §3.4, ``training-and-adapters.md`` §1.2)."""

from __future__ import annotations

import numpy as np

from pawn.vocab import PAD_TOKEN


def pack_games(
    tokens: np.ndarray,
    lengths: np.ndarray,
    outcome: np.ndarray,
    seq_len: int,
    *,
    prepend_outcome: bool = False,
) -> dict[str, np.ndarray]:
    """Build next-token-prediction sequences from games.

    Pure-moves layout (``prepend_outcome=False``, the published one): ``input_ids = [m1 … mL,
    PAD …]``; ``targets[t] = input_ids[t+1]`` with PAD in the last slot, so position L−1 predicts
    PAD ("game over") and the first move is never a target; ``loss_mask`` is positions
    ``0 … L−1``. Outcome-prefix layout: ``input_ids = [outcome, m1 … mL, PAD …]`` (at most
    seq_len − 1 moves), ``loss_mask`` covers ``0 … L``. In both, ``loss_mask`` is AND-ed with
    ``attn_mask``, so a zero-length game supervises nothing (the v1 bug made it predict PAD from
    PAD at position 0).

    Args:
        tokens: int16/int32 [N, P] move tokens; slots ≥ length are ignored (PAD-filled here).
        lengths: int [N] plies per game (clipped to the available moves).
        outcome: int [N] outcome tokens (used only with ``prepend_outcome``).
        seq_len: T, the output sequence length.

    Returns:
        dict of ``input_ids`` int32 [N, T], ``targets`` int32 [N, T], ``attn_mask`` bool [N, T]
        (``input_ids != PAD``), ``loss_mask`` bool [N, T].

    Raises:
        ValueError: mismatched batch sizes, a negative length, or seq_len < 1 (< 2 with the
            outcome prefix).
    """
    tokens = np.asarray(tokens)
    lengths = np.asarray(lengths).astype(np.int64)
    n = tokens.shape[0]
    if lengths.shape != (n,):
        raise ValueError(f"lengths has shape {lengths.shape}, expected ({n},)")
    if (lengths < 0).any():
        raise ValueError(f"negative game length at game {int(np.argmax(lengths < 0))}")
    offset = 1 if prepend_outcome else 0
    if seq_len < 1 + offset:
        raise ValueError(f"seq_len must be ≥ {1 + offset}, got {seq_len}")
    n_moves = np.minimum(lengths, min(seq_len - offset, tokens.shape[1]))
    ids = np.full((n, seq_len + 1), PAD_TOKEN, np.int32)  # one spare column for the shift
    width = int(min(seq_len - offset, tokens.shape[1]))
    cols = np.arange(width)
    moves = np.where(cols[None, :] < n_moves[:, None], tokens[:, :width], PAD_TOKEN)
    ids[:, offset:offset + width] = moves
    if prepend_outcome:
        ids[:, 0] = np.asarray(outcome, np.int32)
    input_ids = ids[:, :seq_len]
    targets = ids[:, 1:seq_len + 1]
    attn_mask = input_ids != PAD_TOKEN
    pos = np.arange(seq_len)[None, :]
    loss_mask = (pos < (n_moves + offset)[:, None]) & attn_mask
    return {
        "input_ids": np.ascontiguousarray(input_ids),
        "targets": np.ascontiguousarray(targets),
        "attn_mask": attn_mask,
        "loss_mask": loss_mask,
    }
