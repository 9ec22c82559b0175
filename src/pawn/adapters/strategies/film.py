"""FiLM (Perez et al. 2018, "FiLM: Visual Reasoning with a General Conditioning Layer"; spec
``training-and-adapters.md`` §4.2): its settings, its adapter module and its row of the strategy
table.
"""

from __future__ import annotations

from typing import ClassVar, Optional

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array
from pydantic import Field

from pawn.adapters.base import Adapter, non_move_logits, norm, scatter
from pawn.adapters.configs import StrategySettings, check_layers
from pawn.adapters.table import Strategy, choice, register
from pawn.model import PAWNModel


class FiLMConfig(StrategySettings):
    """FiLM (spec §4.2): per-block γ/β on the residual stream, optional output FiLM on logits."""

    flag_names: ClassVar[dict[str, str]] = {"layers": "adapter_layers"}

    layers: Optional[tuple[int, ...]] = Field(None, min_length=1, description="Comma list of blocks with FiLM γ/β (default: all).")
    use_output_film: bool = Field(False, description="Also γ/β on the output logits (2·V parameters; v1 default off).")


class FiLM(Adapter):
    """FiLM (Perez et al. 2018; spec §4.2): ``h ← γ_l ⊙ h + β_l`` after each selected block (after
    the FFN residual add), optional ``z ← γ_out ⊙ z + β_out`` on the float32 logits.

    Attributes:
        gamma, beta: float32 [L_sel, d], ones / zeros; cast to the compute dtype before use.
        out_gamma, out_beta: float32 [V] (ones / zeros) or None.
    """

    gamma: Array
    beta: Array
    out_gamma: Optional[Array]
    out_beta: Optional[Array]
    layers: tuple[int, ...] = eqx.field(static=True)
    n_layers: int = eqx.field(static=True)

    def __init__(self, backbone: PAWNModel, layers: tuple[int, ...], use_output_film: bool):
        cfg = backbone.config
        self.gamma = jnp.ones((len(layers), cfg.d_model), jnp.float32)
        self.beta = jnp.zeros((len(layers), cfg.d_model), jnp.float32)
        self.out_gamma = jnp.ones((cfg.vocab_size,), jnp.float32) if use_output_film else None
        self.out_beta = jnp.zeros((cfg.vocab_size,), jnp.float32) if use_output_film else None
        self.layers, self.n_layers = tuple(layers), cfg.n_layers

    def scan_params(self, dtype):
        return {"gamma": scatter(self.gamma.astype(dtype), self.layers, self.n_layers, 1.0),
                "beta": scatter(self.beta.astype(dtype), self.layers, self.n_layers, 0.0)}

    def after_ffn(self, h, ap):
        return h * ap["gamma"] + ap["beta"]

    def logits(self, z):
        if self.out_gamma is None:
            return z
        return z * self.out_gamma + self.out_beta

    def num_unreached(self, legal_mask: bool) -> int:
        """Under the hard legal mask, γ_out and β_out of the 12 non-move tokens (their logits are −inf
        at every move decision): 24 entries with the output FiLM, else none."""
        if self.out_gamma is None or not legal_mask:
            return 0
        return 2 * non_move_logits(int(self.out_gamma.shape[0]))

    def weight_report(self, prefix=""):
        out = {}
        for j, i in enumerate(self.layers):
            out[f"{prefix}hidden_{i}/gamma_dev"] = norm(self.gamma[j] - 1.0)
            out[f"{prefix}hidden_{i}/beta_norm"] = norm(self.beta[j])
        if self.out_gamma is not None:
            out[f"{prefix}output/gamma_dev"] = norm(self.out_gamma - 1.0)
            out[f"{prefix}output/beta_norm"] = norm(self.out_beta)
        return out


def build(s: FiLMConfig, bb: PAWNModel, key) -> FiLM:
    """The FiLM adapter of settings ``s`` on ``bb`` (``key`` unused: γ = 1, β = 0).

    Raises:
        AdapterConfigError: layers outside the backbone.
    """
    return FiLM(bb, check_layers(s.layers, bb.config.n_layers, "film layers"), s.use_output_film)


ROW = register(Strategy(
    "film", "per-block γ, β on the residual stream (+ γ_out, β_out on the logits)",
    "2·L_sel·d (+ 2·V with use_output_film)", FiLMConfig, build, False, order=20, lr=3e-2,
    module=FiLM, random_init=False, space={"use_output_film": choice(False, True)},
))
"""FiLM's row of the strategy table."""
