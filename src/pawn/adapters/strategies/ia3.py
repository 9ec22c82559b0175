"""IA³ (Liu et al. 2022, "Few-Shot Parameter-Efficient Fine-Tuning is Better and Cheaper than
In-Context Learning", §3.3): learned vectors that rescale the attention keys and values and the
FFN's inner activation, ``k ← l_k ⊙ k``, ``v ← l_v ⊙ v``, ``h_ff ← l_ff ⊙ h_ff``, initialised
to ones, so the adapted model is exactly the backbone at init.

On PAWN's SwiGLU FFN (spec model §2.5) the inner activation is ``silu(x·W_gate) ⊙ (x·W_up)``;
scaling it by ``l_ff`` equals scaling the ``x·W_up`` factor, which is where it is applied. Keys
are rescaled at the projection output, before RoPE (as PEFT's IA³ does for rotary models).

Trainable parameters: ``L_sel·(2·d + d_ff)`` (``L_sel·2·d`` with ``ffn = False``). Because
each vector scales the output columns of one projection, IA³ folds into the weights:
``W_k ← W_k·diag(l_k)``, ``W_v ← W_v·diag(l_v)``, ``W_up ← W_up·diag(l_ff)``.

This module is the whole strategy: it registers its row with the strategy table
(:func:`pawn.adapters.table.register`) when :mod:`pawn.adapters.registry` imports it.
"""

from __future__ import annotations

from typing import ClassVar, Optional

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array
from pydantic import Field

from pawn.adapters.base import Adapter, norm, scatter
from pawn.adapters.configs import StrategySettings, check_layers
from pawn.adapters.table import Strategy, choice, register
from pawn.model import PAWNModel


class IA3Config(StrategySettings):
    """IA³ settings: the adapted layers and whether the FFN activation is rescaled too."""

    flag_names: ClassVar[dict[str, str]] = {"layers": "adapter_layers", "ffn": "ia3_ffn"}

    layers: Optional[tuple[int, ...]] = Field(None, min_length=1, description="Comma list of 0-based layers to adapt (default: all).")
    ffn: bool = Field(True, description="IA³: also rescale the FFN's inner activation (l_ff, d_ff per layer); off: keys and values only.")


class IA3(Adapter):
    """IA³ vectors of the selected layers.

    Attributes:
        l_k, l_v: float32 [L_sel, d], ones — scales of the ``wk`` / ``wv`` outputs.
        l_ff: float32 [L_sel, d_ff], ones, or None (``ffn = False``) — scale of the ``w_up`` output.
        layers: the selected layers (static), n_layers: L.
    """

    l_k: Array
    l_v: Array
    l_ff: Optional[Array]
    layers: tuple[int, ...] = eqx.field(static=True)
    n_layers: int = eqx.field(static=True)

    def __init__(self, backbone: PAWNModel, layers: tuple[int, ...], ffn: bool):
        cfg = backbone.config
        self.l_k = jnp.ones((len(layers), cfg.d_model), jnp.float32)
        self.l_v = jnp.ones((len(layers), cfg.d_model), jnp.float32)
        self.l_ff = jnp.ones((len(layers), cfg.d_ff), jnp.float32) if ffn else None
        self.layers, self.n_layers = tuple(layers), cfg.n_layers

    def _vectors(self) -> dict[str, Array]:
        out = {"wk": self.l_k, "wv": self.l_v}
        if self.l_ff is not None:
            out["w_up"] = self.l_ff
        return out

    def scan_params(self, dtype):
        # one-filled at unselected layers: those layers stay exactly the backbone's
        return {n: scatter(v.astype(dtype), self.layers, self.n_layers, 1.0) for n, v in self._vectors().items()}

    def project(self, name, x, y, ap):
        return y * ap[name] if name in ap else y

    def weight_report(self, prefix=""):
        """``layer{i}.{l_k|l_v|l_ff}_dev = ‖l − 1‖`` per selected layer."""
        out = {}
        for n, v in (("l_k", self.l_k), ("l_v", self.l_v), ("l_ff", self.l_ff)):
            if v is None:
                continue
            for j, i in enumerate(self.layers):
                out[f"{prefix}layer{i}.{n}_dev"] = norm(v[j] - 1.0)
        return out

    def merge(self, params):
        p = dict(params)
        for n, v in self._vectors().items():
            w = np.array(p[n], np.float32)
            w[list(self.layers)] *= np.asarray(v, np.float32)[:, None, :]  # scale output columns: W·diag(l)
            p[n] = w
        return p


def _build(s: IA3Config, bb: PAWNModel, key) -> IA3:
    return IA3(bb, check_layers(s.layers, bb.config.n_layers, "ia3 layers"), s.ffn)


ROW = register(Strategy(
    "ia3", "learned scales of the keys, values and FFN activation of the selected layers (ones at init)",
    "L_sel·(2·d + d_ff) (L_sel·2·d without ffn)", IA3Config, _build, True,
    module=IA3, random_init=False, space={"ffn": choice(True, False)}, order=110, lr=3e-1,
))
"""IA³'s row of the strategy table."""
