"""LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models"; spec
``training-and-adapters.md`` §4.1): its settings, its adapter module and its row of the strategy
table. :mod:`pawn.adapters.peft` reads and writes these adapters in the PEFT layout.
"""

from __future__ import annotations

from typing import ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array
from pydantic import Field

from pawn.adapters.base import Adapter, norm, scatter, uniform_init
from pawn.adapters.configs import TargetSettings, check_layers
from pawn.adapters.table import TARGET_CHOICES, Strategy, choice, register
from pawn.model import PARAM_NAMES, PAWNModel, dense


class LoRAConfig(TargetSettings):
    """LoRA (spec §4.1): ``W_eff = W + (α/r)·A·B``; ``alpha`` None means ``α = r`` (scale 1)."""

    flag_names: ClassVar[dict[str, str]] = {"rank": "lora_rank", "alpha": "lora_alpha", "targets": "lora_targets", "ffn": "lora_ffn",
                                            "layers": "adapter_layers"}

    rank: int = Field(4, ge=1, description="LoRA rank r.")
    alpha: Optional[float] = Field(None, gt=0, description="LoRA α (default r, i.e. scale 1).")
    init_scale: float = Field(1.0, gt=0, description="Multiplier on the random init bound 1/√fan_in of LoRA A and the bottleneck "
                                                     "down/hidden weights (v1: 1); the adapter stays the identity at init.")

    @property
    def scale(self) -> float:
        """``α / r``."""
        return (self.rank if self.alpha is None else self.alpha) / self.rank


class LoRA(Adapter):
    """LoRA (Hu et al. 2021; spec §4.1): ``y = x·W + (α/r)·(x·A)·B`` for each target — equal to
    ``x·W_eff`` with ``W_eff = W + (α/r)·A·B``, computed factored so training never forms the
    ``d_in × d_out`` weight gradient.

    Attributes:
        A: target -> float32 [L_sel, d_in, r], Kaiming-uniform (bound init_scale/√d_in; v1 init:
            init_scale 1). Each
            target's values come from ``fold_in(key, canonical target index)`` drawn for all L
            layers, so target and layer subsets share values.
        B: target -> float32 [L_sel, r, d_out], zeros (identity at init).
        layers: the selected layers (static), n_layers: L, scale: α/r.
    """

    A: dict[str, Array]
    B: dict[str, Array]
    layers: tuple[int, ...] = eqx.field(static=True)
    n_layers: int = eqx.field(static=True)
    scale: float = eqx.field(static=True)

    def __init__(self, backbone: PAWNModel, targets: tuple[str, ...], rank: int, scale: float, layers: tuple[int, ...], key,
                 init_scale: float = 1.0):
        cfg = backbone.config
        shapes = {n: getattr(backbone, n).shape[1:] for n in targets}
        idx = np.asarray(layers)
        self.A = {n: uniform_init(jax.random.fold_in(key, PARAM_NAMES.index(n)), (cfg.n_layers, shapes[n][0], rank), shapes[n][0],
                              init_scale)[idx]
                  for n in targets}
        self.B = {n: jnp.zeros((len(layers), rank, shapes[n][1]), jnp.float32) for n in targets}
        self.layers, self.n_layers, self.scale = tuple(layers), cfg.n_layers, float(scale)

    def scan_params(self, dtype):
        return {
            "A": {n: scatter(a.astype(dtype), self.layers, self.n_layers, 0.0) for n, a in self.A.items()},
            "B": {n: scatter((b * self.scale).astype(dtype), self.layers, self.n_layers, 0.0) for n, b in self.B.items()},
        }

    def project(self, name, x, y, ap):
        if name not in self.A:
            return y
        return y + dense(dense(x, ap["A"][name]), ap["B"][name])

    def weight_report(self, prefix=""):
        out = {}
        for n in self.A:
            for j, i in enumerate(self.layers):
                out[f"{prefix}layer{i}.{n}.A"] = norm(self.A[n][j])
                out[f"{prefix}layer{i}.{n}.B"] = norm(self.B[n][j])
        return out

    def merge(self, params):
        p = dict(params)
        for n in self.A:
            delta = self.scale * np.einsum("lir,lro->lio", np.asarray(self.A[n]), np.asarray(self.B[n]))
            w = np.array(p[n], np.float32)
            w[list(self.layers)] += delta
            p[n] = w
        return p


def build(s: LoRAConfig, bb: PAWNModel, key) -> LoRA:
    """The LoRA adapter of settings ``s`` on ``bb`` (A drawn from ``key``, B = 0).

    Raises:
        AdapterConfigError: layers outside the backbone.
    """
    layers = check_layers(s.layers, bb.config.n_layers, "lora layers")
    return LoRA(bb, s.target_names(), s.rank, s.scale, layers, key, s.init_scale)


ROW = register(Strategy(
    "lora", "low-rank A, B in the targeted projections of the selected layers",
    "L_sel·n_targets·2·d·r (+ 3·r·(d + d_ff) per layer with ffn)", LoRAConfig, build, True, order=10, lr=1e-2,
    module=LoRA, random_init=True,
    space={"rank": choice(2, 4, 8, 16, 32), "targets": TARGET_CHOICES, "lora_ffn": choice(False, True)},
))
"""LoRA's row of the strategy table."""
