"""``retro-bottleneck`` (spec ``training-and-adapters.md`` §4.6): the RoSA warm-up and gradient
masks, then the sparse Δ and Houlsby bottlenecks train together. Its settings, module and phases
are the RoSA family's (:mod:`pawn.adapters.strategies.rosa`); this module is its row of the
strategy table.
"""

from __future__ import annotations

from pawn.adapters.strategies.rosa import SPACE, RetroBottleneckConfig, RoSAAdapter, build, count
from pawn.adapters.table import Strategy, choice, register

ROW = register(Strategy(
    "retro-bottleneck", "LoRA warm-up (discarded), then Δ under a gradient mask + Houlsby bottlenecks",
    "Σ max(1, int(density·numel)) + positions·L_bn·(2·d·bn + n_hidden·bn²)", RetroBottleneckConfig,
    build("retro-bottleneck"), False, order=100, lr=1e-2, count=count("retro-bottleneck"), module=RoSAAdapter, random_init=True,
    space={**SPACE, "bottleneck_dim": choice(4, 8, 16), "n_hidden": choice(0, 1, 2)},
))
"""retro-bottleneck's row of the strategy table."""
