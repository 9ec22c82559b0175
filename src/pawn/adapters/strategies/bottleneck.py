"""Houlsby bottleneck adapters (Houlsby et al. 2019, "Parameter-Efficient Transfer Learning for
NLP"; spec ``training-and-adapters.md`` §4.3): its settings, its adapter module, its builder (also
the bottleneck half of ``retro-bottleneck``) and its row of the strategy table.
"""

from __future__ import annotations

from typing import ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array
from pydantic import Field, model_validator

from pawn.adapters.base import Adapter, norm, scatter, uniform_init
from pawn.adapters.configs import StrategySettings, check_layers
from pawn.adapters.table import Strategy, choice, register
from pawn.model import PAWNModel, dense


class BottleneckConfig(StrategySettings):
    """Houlsby bottleneck (spec §4.3) after the attention and/or FFN residual add."""

    flag_names: ClassVar[dict[str, str]] = {"n_hidden": "bottleneck_n_hidden", "adapt_attn": "no_adapt_attn", "adapt_ffn": "no_adapt_ffn",
                                            "layers": "adapter_layers", "attn_layers": "bottleneck_attn_layers",
                                            "ffn_layers": "bottleneck_ffn_layers"}
    negated_flags: ClassVar[frozenset[str]] = frozenset({"adapt_attn", "adapt_ffn"})

    bottleneck_dim: int = Field(8, ge=1, description="Bottleneck width bn.")
    n_hidden: int = Field(0, ge=0, description="Extra bn×bn hidden stages in each bottleneck.")
    init_scale: float = Field(1.0, gt=0, description="Multiplier on the random init bound 1/√fan_in of LoRA A and the bottleneck "
                                                     "down/hidden weights (v1: 1); the adapter stays the identity at init.")
    adapt_attn: bool = Field(True, description="Bottleneck after attention (off: --no-adapt-attn).")
    adapt_ffn: bool = Field(True, description="Bottleneck after the FFN (off: --no-adapt-ffn).")
    layers: Optional[tuple[int, ...]] = Field(None, min_length=1, description="Comma list of 0-based layers to adapt (default: all).")
    attn_layers: Optional[tuple[int, ...]] = Field(None, description="Bottleneck: comma list of layers for the attention position (default: the adapted layers).")
    ffn_layers: Optional[tuple[int, ...]] = Field(None, description="Bottleneck: comma list of layers for the FFN position (default: the adapted layers).")

    @model_validator(mode="after")
    def _some_position(self):
        if not (self.adapt_attn or self.adapt_ffn):
            raise ValueError("adapt_attn and adapt_ffn are both off: the bottleneck would adapt nothing")
        return self


class Bottleneck(Adapter):
    """Houlsby bottleneck (Houlsby et al. 2019; spec §4.3) on the residual stream:
    ``z = h·down``; ``z = gelu(z)·H_k`` for each hidden stage; ``h ← h + gelu(z)·up``, exact-erf
    GELU, no biases or norms.

    Attributes:
        down: position ("attn"/"ffn") -> float32 [L_pos, d, bn], U(±init_scale/√d) (v1: init_scale 1).
        hidden: position -> float32 [L_pos, n_hidden, bn, bn], U(±init_scale/√bn) (absent if n_hidden = 0).
        up: position -> float32 [L_pos, bn, d], zeros (identity for any n_hidden).
        placement: ((position, layers), …) static.
    """

    down: dict[str, Array]
    hidden: dict[str, Array]
    up: dict[str, Array]
    placement: tuple[tuple[str, tuple[int, ...]], ...] = eqx.field(static=True)
    n_layers: int = eqx.field(static=True)
    n_hidden: int = eqx.field(static=True)

    def __init__(self, backbone: PAWNModel, placement: dict[str, tuple[int, ...]], bn: int, n_hidden: int, key,
                 init_scale: float = 1.0):
        d, L = backbone.config.d_model, backbone.config.n_layers
        self.down, self.hidden, self.up = {}, {}, {}
        for p_i, (pos, layers) in enumerate(placement.items()):
            k = jax.random.fold_in(key, p_i)
            idx = np.asarray(layers)
            self.down[pos] = uniform_init(jax.random.fold_in(k, 0), (L, d, bn), d, init_scale)[idx]
            if n_hidden:
                self.hidden[pos] = uniform_init(jax.random.fold_in(k, 1), (L, n_hidden, bn, bn), bn, init_scale)[idx]
            self.up[pos] = jnp.zeros((len(layers), bn, d), jnp.float32)
        self.placement = tuple((p, tuple(ls)) for p, ls in placement.items())
        self.n_layers, self.n_hidden = L, n_hidden

    def scan_params(self, dtype):
        out = {}
        for pos, layers in self.placement:
            s = {"down": self.down[pos], "up": self.up[pos]}
            if self.n_hidden:
                s["hidden"] = self.hidden[pos]
            out[pos] = {k: scatter(v.astype(dtype), layers, self.n_layers, 0.0) for k, v in s.items()}
        return out

    def _apply(self, h, p):
        z = dense(h, p["down"])
        for k in range(self.n_hidden):
            z = dense(jax.nn.gelu(z, approximate=False), p["hidden"][k])
        return h + dense(jax.nn.gelu(z, approximate=False), p["up"])

    def after_attn(self, h, ap):
        return self._apply(h, ap["attn"]) if "attn" in ap else h

    def after_ffn(self, h, ap):
        return self._apply(h, ap["ffn"]) if "ffn" in ap else h

    def weight_report(self, prefix="adapter/"):
        out = {}
        for pos, layers in self.placement:
            for j, i in enumerate(layers):
                out[f"{prefix}layer{i}.{pos}.down"] = norm(self.down[pos][j])
                for k in range(self.n_hidden):
                    out[f"{prefix}layer{i}.{pos}.hidden{k}"] = norm(self.hidden[pos][j, k])
                out[f"{prefix}layer{i}.{pos}.up"] = norm(self.up[pos][j])
        return out


def build_bottleneck(s: BottleneckConfig, bb: PAWNModel, key) -> Bottleneck:
    """The Houlsby bottleneck of settings ``s`` on ``bb`` (the ``bottleneck`` row's builder, and
    the bottleneck half of ``retro-bottleneck``).

    Raises:
        AdapterConfigError: layers outside the backbone.
    """
    L = bb.config.n_layers
    placement = {}
    if s.adapt_attn:
        placement["attn"] = check_layers(s.attn_layers if s.attn_layers is not None else s.layers, L, "bottleneck attn layers")
    if s.adapt_ffn:
        placement["ffn"] = check_layers(s.ffn_layers if s.ffn_layers is not None else s.layers, L, "bottleneck ffn layers")
    return Bottleneck(bb, placement, s.bottleneck_dim, s.n_hidden, key, s.init_scale)


ROW = register(Strategy(
    "bottleneck", "Houlsby down/hidden/up after attention and/or FFN of the selected layers",
    "positions·L_sel·(2·d·bn + n_hidden·bn²)", BottleneckConfig, build_bottleneck, False, order=30, lr=3e-2,
    module=Bottleneck, random_init=True,
    space={"bottleneck_dim": choice(4, 8, 16, 32, 64, 128), "n_hidden": choice(0, 1, 2),
           "no_adapt_attn": choice(False, True), "no_adapt_ffn": choice(False, True)},
))
"""The bottleneck's row of the strategy table."""
