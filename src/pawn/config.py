"""Model configurations: ``ModelConfig`` and the named supernets and variants
(spec ``model-and-checkpoints.md`` §3)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from pydantic import BaseModel, ConfigDict, model_validator

from pawn.vocab import MAX_SEQ_LEN, N_OUTCOMES, VOCAB_SIZE


class ModelConfig(BaseModel):
    """Shape of a PAWN transformer (spec §3.1). Frozen and hashable, so it can be a static
    argument of jitted functions. Field order is the ``config.json`` serialization order.

    Attributes:
        d_model: residual width d.
        n_layers: number of transformer blocks L.
        n_heads: attention heads H; ``head_dim = d_model // n_heads`` must be even (RoPE pairs).
        d_ff: SwiGLU hidden width F (4·d for every published size).
        vocab_size: V, 1980 for the published vocabulary.
        max_seq_len: context in tokens; sizes RoPE tables and the KV cache.
        n_outcomes: rows of ``outcome_embed`` (11).
        rope_base: RoPE base θ (10000.0).

    Raises:
        pydantic.ValidationError: unknown fields, non-positive sizes, ``d_model % n_heads != 0``
            or an odd head_dim.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    vocab_size: int = VOCAB_SIZE
    max_seq_len: int = MAX_SEQ_LEN
    n_outcomes: int = N_OUTCOMES
    rope_base: float = 10000.0

    @model_validator(mode="after")
    def _check_shapes(self) -> "ModelConfig":
        for name in ("d_model", "n_layers", "n_heads", "d_ff", "vocab_size", "max_seq_len", "n_outcomes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim = d_model / n_heads = {self.head_dim} must be even for RoPE pairs")
        return self

    @property
    def head_dim(self) -> int:
        """Per-head width ``d_model // n_heads``."""
        return self.d_model // self.n_heads

    @property
    def name(self) -> str:
        """Metric key of this shape, ``d{d}_L{L}_F{F}`` (spec §3.5)."""
        return f"d{self.d_model}_L{self.n_layers}_F{self.d_ff}"

    def to_json_dict(self) -> dict:
        """All fields in serialization order (spec §5.3)."""
        return self.model_dump()


@dataclass(frozen=True)
class ParamSpec:
    """One row of the parameter table (spec model §2, §3.5, §5.2, §6.1).

    Attributes:
        name: the canonical v2 name (``model.safetensors`` key, :class:`pawn.model.PAWNModel` field).
        dims: the v2 shape in symbols — ``"L"`` layers, ``"d"`` d_model, ``"F"`` d_ff, ``"V"``
            vocab_size, ``"O"`` n_outcomes — or fixed ints; linear weights ``[in, out]``.
        init: ``"normal"`` (N(0, 0.02), spec §2.7), ``"ones"`` (RMSNorm scales) or ``"zeros"``.
        v1_name: the v1 (PyTorch) state-dict key; ``{i}`` marks a per-layer tensor (stacked on
            the leading ``L`` axis in v2).
        v1_transposed: v1 stores it ``[out, in]`` (every linear weight, ``lm_head`` included).
    """

    name: str
    dims: tuple[str | int, ...]
    init: str
    v1_name: str
    v1_transposed: bool = False

    def shape(self, cfg: "ModelConfig") -> tuple[int, ...]:
        """The v2 shape for ``cfg``."""
        sizes = {"L": cfg.n_layers, "d": cfg.d_model, "F": cfg.d_ff, "V": cfg.vocab_size, "O": cfg.n_outcomes}
        return tuple(sizes[x] if isinstance(x, str) else x for x in self.dims)

    def nested_slice(self, variant: "ModelConfig") -> tuple[slice, ...]:
        """The prefix slice taking ``variant``'s array out of a supernet's (spec §3.5): ``L``,
        ``d`` and ``F`` axes cut to the variant's sizes, every other axis whole."""
        sizes = {"L": variant.n_layers, "d": variant.d_model, "F": variant.d_ff}
        return tuple(slice(0, sizes[x]) if x in sizes else slice(None) for x in self.dims)

    def v1_shape(self, cfg: "ModelConfig") -> tuple[int, ...]:
        """The shape of one v1 tensor (one layer's, for per-layer rows; transposed if stored so)."""
        s = self.shape(cfg)[1:] if "{i}" in self.v1_name else self.shape(cfg)
        return s[::-1] if self.v1_transposed else s


PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("src_embed", (64, "d"), "normal", "embed.src_embed.weight"),
    ParamSpec("dst_embed", (64, "d"), "normal", "embed.dst_embed.weight"),
    ParamSpec("promo_embed", (5, "d"), "normal", "embed.promo_embed.weight"),
    ParamSpec("pad_embed", ("d",), "zeros", "embed.pad_embed"),  # no ``.weight`` in v1 (spec §8.5)
    ParamSpec("outcome_embed", ("O", "d"), "normal", "embed.outcome_embed.weight"),
    ParamSpec("attn_norm", ("L", "d"), "ones", "layers.{i}.attn_norm.weight"),
    ParamSpec("wq", ("L", "d", "d"), "normal", "layers.{i}.attn.wq.weight", True),
    ParamSpec("wk", ("L", "d", "d"), "normal", "layers.{i}.attn.wk.weight", True),
    ParamSpec("wv", ("L", "d", "d"), "normal", "layers.{i}.attn.wv.weight", True),
    ParamSpec("wo", ("L", "d", "d"), "normal", "layers.{i}.attn.wo.weight", True),
    ParamSpec("ffn_norm", ("L", "d"), "ones", "layers.{i}.ffn_norm.weight"),
    ParamSpec("w_gate", ("L", "d", "F"), "normal", "layers.{i}.ffn.w_gate.weight", True),
    ParamSpec("w_up", ("L", "d", "F"), "normal", "layers.{i}.ffn.w_up.weight", True),
    ParamSpec("w_down", ("L", "F", "d"), "normal", "layers.{i}.ffn.w_down.weight", True),
    ParamSpec("final_norm", ("d",), "ones", "final_norm.weight"),
    ParamSpec("lm_head", ("d", "V"), "normal", "lm_head.weight", True),
)
"""The parameter table, the one home of the tensor schema: the 16 canonical arrays in declaration
order (spec §5.2). The model's names, shapes, init and slicing (:mod:`pawn.model`), the counts
(:func:`param_count`), the torch loader (:mod:`pawn.torch`) and the v1 converter
(:mod:`pawn.convert`) derive from it."""


def param_count(cfg: ModelConfig) -> int:
    """Number of parameters, ``P = 145·d + L·(4d² + 3·d·F + 2d) + d + V·d`` (spec §3.3):
    embeddings (64 + 64 + 5 + 1 pad + O outcome rows, with O = 11 giving 145), per layer q/k/v/o,
    SwiGLU and two norms, the final norm and the untied ``lm_head``."""
    return sum(math.prod(p.shape(cfg)) for p in PARAMS)  # the table's shapes; equals the formula (tested)


def flops_per_token(cfg: ModelConfig, seq_len: int) -> int:
    """Training FLOPs per token of one model: ``6·N + 12·L·T·d`` — 6N for the forward (2N),
    activation-gradient (2N) and weight-gradient (2N) matmuls with N = all parameters
    (:func:`param_count`), plus materialised attention ``QKᵀ`` and ``AV``
    (4·T·d per layer forward, ×3 with the backward), not skipping the causal half (spec eval §7.3); ``pawn bench`` and the run summary use it."""
    return 6 * param_count(cfg) + 12 * cfg.n_layers * seq_len * cfg.d_model


TOY = ModelConfig(d_model=64, n_layers=2, n_heads=4, d_ff=256)
"""Test-only config (head_dim 16); nests into neither supernet."""

SUPERNET = ModelConfig(d_model=640, n_layers=10, n_heads=10, d_ff=2560)
"""The production supernet (head_dim 64); its largest variant is ``VARIANTS["large"]``."""

VARIANTS: dict[str, ModelConfig] = {
    "small": ModelConfig(d_model=256, n_layers=8, n_heads=4, d_ff=1024),
    "base": ModelConfig(d_model=512, n_layers=8, n_heads=8, d_ff=2048),
    "large": SUPERNET,
}
"""Nested variants of :data:`SUPERNET` (spec §3.2). v2 large has 10 heads; the published v1 large
has 8 (head_dim 80) and is *not* a variant: converted checkpoints keep their own head count."""

TINY_SUPERNET = ModelConfig(d_model=192, n_layers=4, n_heads=3, d_ff=768)
"""Small supernet for laptops and tests (head_dim 64)."""

TINY_VARIANTS: dict[str, ModelConfig] = {
    "small": ModelConfig(d_model=64, n_layers=2, n_heads=1, d_ff=256),
    "base": ModelConfig(d_model=128, n_layers=3, n_heads=2, d_ff=512),
    "large": TINY_SUPERNET,
}
"""Nested variants of :data:`TINY_SUPERNET`."""

SUPERNETS: dict[str, tuple[ModelConfig, dict[str, ModelConfig]]] = {
    "large": (SUPERNET, VARIANTS),
    "tiny": (TINY_SUPERNET, TINY_VARIANTS),
}
"""Supernets by CLI name: ``(supernet config, nested variants)``."""

NAMED_CONFIGS: dict[str, ModelConfig] = {"toy": TOY, **VARIANTS}
"""Single-model configs by CLI name (``--variant``)."""


def validate_nested(variant: ModelConfig, supernet: ModelConfig) -> None:
    """Check that ``variant`` is a prefix slice of ``supernet`` (spec §3.4).

    Raises:
        ValueError: naming the first rule broken: equal head_dim; equal vocab_size, max_seq_len,
            n_outcomes and rope_base; d_model, n_layers and d_ff each ≤ the supernet's.
    """
    if variant.head_dim != supernet.head_dim:
        raise ValueError(
            f"variant head_dim {variant.head_dim} != supernet head_dim {supernet.head_dim}: "
            "width slices must drop whole heads"
        )
    for f in ("vocab_size", "max_seq_len", "n_outcomes", "rope_base"):
        if getattr(variant, f) != getattr(supernet, f):
            raise ValueError(f"variant {f}={getattr(variant, f)} differs from supernet {f}={getattr(supernet, f)}")
    for f in ("d_model", "n_layers", "d_ff"):
        if getattr(variant, f) > getattr(supernet, f):
            raise ValueError(f"variant {f}={getattr(variant, f)} exceeds supernet {f}={getattr(supernet, f)}")


def supernet_of(config: ModelConfig, run_config: Optional[dict]) -> Optional[str]:
    """Supernet name recorded in the run config, else the supernet whose config equals ``config``.
    A variant exported from a supernet run (``supernet_checkpoint`` in its run config) is not a
    supernet, and neither is a checkpoint whose model is not the named supernet's shape."""
    if run_config:
        if run_config.get("variant") or run_config.get("supernet_checkpoint"):
            return None
        name = run_config.get("supernet")
        if name in SUPERNETS and SUPERNETS[name][0] == config:
            return name
    for name, (sup, _) in SUPERNETS.items():
        if sup == config:
            return name
    return None
