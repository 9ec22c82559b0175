"""Sparse additive deltas under a fixed random mask (v1 semantics; spec ``training-and-adapters.md``
§4.5): its settings, the v1 mask generator, its adapter module (also the Δ half of the RoSA
family) and its row of the strategy table.
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array
from pydantic import Field

from pawn.adapters.base import Adapter, norm, scatter
from pawn.adapters.configs import TargetSettings, check_layers
from pawn.adapters.table import TARGET_CHOICES, FloatRange, Strategy, choice, register
from pawn.config import ModelConfig
from pawn.model import PAWNModel, param_shapes


class SparseConfig(TargetSettings):
    """Sparse, v1 semantics (spec §4.5): fixed random mask ``U(0,1) < density`` per matrix."""

    flag_names: ClassVar[dict[str, str]] = {"targets": "sparse_targets", "ffn": "sparse_ffn", "layers": "adapter_layers",
                                            "seed": "sparse_seed"}

    density: float = Field(0.01, gt=0.0, le=1.0, description="Fraction of each targeted matrix that trains.")
    seed: int = Field(42, ge=0, description="Sparse: seed of the random mask generator (v1: 42).")


def random_masks(shapes: dict[str, tuple[int, int]], layers: tuple[int, ...], density: float, seed: int) -> dict[str, np.ndarray]:
    """v1 sparse masks (spec §4.5): one ``numpy.random.default_rng(seed)`` drawing ``U(0,1) <
    density`` per matrix, iterating ``layers`` in order and the targets (in ``shapes`` order)
    within each layer. Returns target -> bool [len(layers), d_in, d_out]."""
    rng = np.random.default_rng(seed)
    out = {n: np.zeros((len(layers),) + tuple(s), bool) for n, s in shapes.items()}
    for j in range(len(layers)):
        for n, s in shapes.items():
            out[n][j] = rng.random(s, dtype=np.float32) < density
    return out


class Sparse(Adapter):
    """Sparse additive delta (spec §4.5, v1): ``W_eff = W + Δ ⊙ mask`` per targeted matrix of the
    selected layers; ``Δ`` zero-initialised, full size, but only masked entries get gradient.

    Attributes:
        delta: target -> float32 [L_sel, d_in, d_out] (trainable).
        mask: target -> bool [L_sel, d_in, d_out] (fixed, not trainable; saved with the weights).
    """

    delta: dict[str, Array]
    mask: dict[str, Array]
    layers: tuple[int, ...] = eqx.field(static=True)
    n_layers: int = eqx.field(static=True)

    def __init__(self, backbone: PAWNModel, targets: tuple[str, ...], layers: tuple[int, ...], masks: dict[str, np.ndarray]):
        self.mask = {n: jnp.asarray(masks[n], bool) for n in targets}
        self.delta = {n: jnp.zeros(self.mask[n].shape, jnp.float32) for n in targets}
        self.layers, self.n_layers = tuple(layers), backbone.config.n_layers

    def scan_params(self, dtype):
        return {n: scatter((d * self.mask[n]).astype(dtype), self.layers, self.n_layers, 0.0) for n, d in self.delta.items()}

    def layer_weights(self, lw, ap):
        return {k: (w + ap[k] if k in ap else w) for k, w in lw.items()}

    def trainable_filter(self):
        f = jax.tree_util.tree_map(eqx.is_array, self)
        return eqx.tree_at(lambda s: s.mask, f, replace={n: False for n in self.mask})

    def num_params(self) -> int:
        """Exact active parameters: the number of True mask entries."""
        return int(sum(int(np.asarray(m).sum()) for m in self.mask.values()))

    def weight_report(self, prefix="sparse/"):
        out = {}
        for n in self.delta:
            for j, i in enumerate(self.layers):
                out[f"{prefix}layer{i}.{n}.delta"] = norm(self.delta[n][j] * self.mask[n][j])
        return out

    def merge(self, params):
        p = dict(params)
        for n in self.delta:
            w = np.array(p[n], np.float32)
            w[list(self.layers)] += np.asarray(self.delta[n]) * np.asarray(self.mask[n])
            p[n] = w
        return p


def _sparse_shapes(s: SparseConfig, cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    shapes = param_shapes(cfg)
    return {n: shapes[n][1:] for n in s.target_names()}


def build(s: SparseConfig, bb: PAWNModel, key) -> Sparse:
    """The sparse adapter of settings ``s`` on ``bb`` (masks from ``s.seed``, ``key`` unused; Δ = 0).

    Raises:
        AdapterConfigError: layers outside the backbone.
    """
    layers = check_layers(s.layers, bb.config.n_layers, "sparse layers")
    masks = random_masks(_sparse_shapes(s, bb.config), layers, s.density, s.seed)
    return Sparse(bb, s.target_names(), layers, masks)


def count(s: SparseConfig, cfg: ModelConfig) -> int:
    """Exact trainable parameters: the True entries of the masks ``s`` draws on a backbone of shape ``cfg``."""
    layers = check_layers(s.layers, cfg.n_layers, "sparse layers")
    return int(sum(int(m.sum()) for m in random_masks(_sparse_shapes(s, cfg), layers, s.density, s.seed).values()))


ROW = register(Strategy(
    "sparse", "masked entries of an additive Δ in the targeted matrices (fixed random mask)",
    "Σ mask ≈ density·Σ numel(targets)·L_sel", SparseConfig, build, True, count=count, order=50, lr=1e-1,
    module=Sparse, random_init=False,
    space={"density": FloatRange(1e-3, 0.1, log=True), "targets": TARGET_CHOICES, "sparse_ffn": choice(False, True)},
))
"""The sparse strategy's row of the strategy table."""
