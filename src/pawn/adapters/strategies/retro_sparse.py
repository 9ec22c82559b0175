"""``retro-sparse`` (spec ``training-and-adapters.md`` §4.6): the RoSA warm-up and gradient masks,
then the sparse Δ alone trains. Its settings, module and phases are the RoSA family's
(:mod:`pawn.adapters.strategies.rosa`); this module is its row of the strategy table.
"""

from __future__ import annotations

from pawn.adapters.strategies.rosa import SPACE, RetroSparseConfig, RoSAAdapter, build, count
from pawn.adapters.table import Strategy, register

ROW = register(Strategy(
    "retro-sparse", "LoRA warm-up (discarded), then Δ alone under a fixed gradient mask",
    "Σ max(1, int(density·numel)) over targets·L_sel", RetroSparseConfig, build("retro-sparse"), True, order=90, lr=3e-2,
    count=count("retro-sparse"), module=RoSAAdapter, random_init=True, space=SPACE,
))
"""retro-sparse's row of the strategy table."""
