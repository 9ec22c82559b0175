"""``specialized_clm`` (spec ``training-and-adapters.md`` §4.8): a small PAWN-architecture model
trained from scratch instead of an adapter — its settings, its shape (:func:`specialized_config`),
its (empty) adapter module and its row of the strategy table.
"""

from __future__ import annotations

from typing import ClassVar, Optional

from pydantic import Field, model_validator

from pawn.adapters.base import Adapter
from pawn.adapters.configs import AdapterConfigError, StrategySettings
from pawn.adapters.table import IntRange, Strategy, choice, register
from pawn.config import ModelConfig, param_count
from pydantic import ValidationError


class SpecializedCLMConfig(StrategySettings):
    """A small PAWN-architecture model trained from scratch (spec §4.8, v2 defaults 84/2/2/192)."""

    flag_names: ClassVar[dict[str, str]] = {"d_ff": "specialized_d_ff"}

    d_model: int = Field(84, ge=2, description="specialized_clm: model width.")
    n_layers: int = Field(2, ge=1, description="specialized_clm: layers.")
    n_heads: int = Field(2, ge=1, description="specialized_clm: attention heads.")
    d_ff: int = Field(192, ge=1, description="specialized_clm: FFN width.")
    seed: int = Field(0, ge=0, description="Initialisation seed.")

    @model_validator(mode="after")
    def _even_head_dim(self):
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(f"d_model ({self.d_model}) / n_heads ({self.n_heads}) must be an even integer head_dim")
        return self


class FromScratch(Adapter):
    """``specialized_clm`` (spec §4.8): no adapter; the (freshly initialised) backbone itself is
    the trainable model."""

    trains_backbone = True
    uses_layer_hooks = False

    def merge(self, params):
        return dict(params)


def specialized_config(s: SpecializedCLMConfig, like: Optional[ModelConfig] = None) -> ModelConfig:
    """The from-scratch model's shape; vocabulary, context and outcome rows follow ``like``.

    Raises:
        AdapterConfigError: the shape is invalid (e.g. odd head_dim).
    """
    extra = {} if like is None else {k: getattr(like, k) for k in ("vocab_size", "max_seq_len", "n_outcomes", "rope_base")}
    try:
        return ModelConfig(d_model=s.d_model, n_layers=s.n_layers, n_heads=s.n_heads, d_ff=s.d_ff, **extra)
    except ValidationError as e:
        raise AdapterConfigError(f"specialized_clm shape: {e.errors()[0]['msg']}") from None


ROW = register(Strategy(
    "specialized_clm", "every weight of a new small PAWN model trained from scratch",
    "145·d + L·(4d² + 3·d·d_ff + 2d) + d + V·d", SpecializedCLMConfig,
    lambda s, bb, key: FromScratch(), True, uses_backbone=False, order=70, lr=3e-3,
    count=lambda s, cfg: param_count(specialized_config(s, cfg)), module=FromScratch, random_init=False,
    space={"d_model": choice(32, 64, 84, 128), "n_layers": IntRange(1, 4), "n_heads": choice(1, 2, 4)},
))
"""specialized_clm's row of the strategy table."""
