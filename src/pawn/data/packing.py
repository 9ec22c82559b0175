"""Pack games into model sequences (spec ``engine.md`` §3.4): the flag-style entry point to
:meth:`pawn.data.layout.Layout.pack`."""

from __future__ import annotations

import numpy as np

from pawn.data.layout import Layout


def pack_games(
    tokens: np.ndarray,
    lengths: np.ndarray,
    outcome: np.ndarray,
    seq_len: int,
    *,
    prepend_outcome: bool = False,
) -> dict[str, np.ndarray]:
    """``Layout.of(prepend_outcome).pack(tokens, lengths, outcome, seq_len)``: next-token
    sequences of games; shapes, dtypes and errors as :meth:`pawn.data.layout.Layout.pack`
    (``input_ids``/``targets`` int32 [N, T], ``attn_mask``/``loss_mask`` bool [N, T])."""
    return Layout.of(prepend_outcome).pack(tokens, lengths, outcome, seq_len)
