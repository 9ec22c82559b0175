"""``hybrid`` (spec ``training-and-adapters.md`` §4.4): LoRA in the projections plus FiLM after every
block — its settings, its adapter module (a :class:`~pawn.adapters.base.Composite` of the two)
and its row of the strategy table.
"""

from __future__ import annotations

from typing import Optional

import jax
from pydantic import Field

from pawn.adapters.base import Composite
from pawn.adapters.strategies.film import FiLMConfig
from pawn.adapters.strategies.film import build as build_film
from pawn.adapters.strategies.lora import LoRAConfig
from pawn.adapters.strategies.lora import build as build_lora
from pawn.adapters.table import TARGET_CHOICES, Strategy, choice, register
from pawn.model import PAWNModel


class HybridConfig(LoRAConfig):
    """LoRA (layers = ``layers``) + FiLM (``film_layers``, optional output FiLM), spec §4.4."""

    film_layers: Optional[tuple[int, ...]] = Field(None, min_length=1, description="Hybrid: comma list of blocks with FiLM γ/β (default: all).")
    use_output_film: bool = Field(False, description="Also γ/β on the output logits (2·V parameters; v1 default off).")

    def lora(self) -> LoRAConfig:
        return LoRAConfig(targets=self.targets, ffn=self.ffn, layers=self.layers, rank=self.rank, alpha=self.alpha,
                          init_scale=self.init_scale)

    def film(self) -> FiLMConfig:
        return FiLMConfig(layers=self.film_layers, use_output_film=self.use_output_film)


class Hybrid(Composite):
    """LoRA + FiLM; report ``lora/layer{i}.{proj}.B`` and ``film/…`` (spec §4.4)."""

    def weight_report(self, prefix=""):
        lora, film = self.parts
        out = {k: v for k, v in lora.weight_report(prefix + "lora/").items() if k.endswith(".B")}
        out.update(film.weight_report(prefix + "film/"))
        return out


def build(s: HybridConfig, bb: PAWNModel, key) -> Hybrid:
    """The LoRA (``fold_in(key, 0)``) + FiLM adapter of settings ``s`` on ``bb``.

    Raises:
        AdapterConfigError: layers outside the backbone.
    """
    return Hybrid((build_lora(s.lora(), bb, jax.random.fold_in(key, 0)), build_film(s.film(), bb, jax.random.fold_in(key, 1))),
                  ("lora/", "film/"))


ROW = register(Strategy(
    "hybrid", "LoRA in the projections + FiLM after every block",
    "LoRA + FiLM", HybridConfig, build, False, order=40, lr=1e-2, module=Hybrid, random_init=True,
    space={"rank": choice(2, 4, 8, 16), "targets": TARGET_CHOICES, "use_output_film": choice(False, True)},
))
"""hybrid's row of the strategy table."""
