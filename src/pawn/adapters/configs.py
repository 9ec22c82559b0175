"""Settings of every adapter strategy: one frozen pydantic model per strategy, with the defaults and
constraints of spec ``training-and-adapters.md`` §4. Layer indices are 0-based block indices."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pawn.errors import UsageError

Target = Literal["q", "k", "v", "o"]
"""Attention projections an adapter can target (``wq, wk, wv, wo``)."""

ATTN_TARGETS: dict[str, str] = {"q": "wq", "k": "wk", "v": "wv", "o": "wo"}
"""Short target name -> canonical parameter name (spec model §5.2)."""

FFN_TARGETS: tuple[str, ...] = ("w_gate", "w_up", "w_down")
"""SwiGLU projections added by ``ffn=True`` (v1 ``lora_ffn`` / ``sparse_ffn``)."""

LAYER_WEIGHTS: tuple[str, ...] = ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down")
"""All weights of one block, in canonical order (what ``unfreeze`` trains per layer, spec §4.7)."""


class AdapterConfigError(UsageError):
    """Adapter settings that cannot be used (unknown strategy, bad field, layer out of range)."""


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)  # inf/nan: "Input should be a finite number"


class _Targets(_Settings):
    targets: tuple[Target, ...] = Field(("q", "k", "v", "o"), min_length=1, description="attention projections adapted")
    ffn: bool = Field(False, description="also adapt the SwiGLU projections w_gate, w_up, w_down")
    layers: Optional[tuple[int, ...]] = Field(None, min_length=1, description="adapted layers (default: all)")

    @model_validator(mode="after")
    def _unique_targets(self):
        if len(set(self.targets)) != len(self.targets):
            raise ValueError(f"targets {list(self.targets)} repeat an entry")
        return self

    def target_names(self) -> tuple[str, ...]:
        """Canonical parameter names targeted, in canonical order (q, k, v, o, then FFN)."""
        names = tuple(ATTN_TARGETS[t] for t in ("q", "k", "v", "o") if t in self.targets)
        return names + (FFN_TARGETS if self.ffn else ())


class LoRAConfig(_Targets):
    """LoRA (spec §4.1): ``W_eff = W + (α/r)·A·B``; ``alpha`` None means ``α = r`` (scale 1)."""

    rank: int = Field(4, ge=1, description="r")
    alpha: Optional[float] = Field(None, gt=0, description="α (default r)")
    init_scale: float = Field(1.0, gt=0, description="multiplier on A's init bound 1/√d_in (v1: 1)")

    @property
    def scale(self) -> float:
        """``α / r``."""
        return (self.rank if self.alpha is None else self.alpha) / self.rank


class FiLMConfig(_Settings):
    """FiLM (spec §4.2): per-block γ/β on the residual stream, optional output FiLM on logits."""

    layers: Optional[tuple[int, ...]] = Field(None, min_length=1, description="blocks with γ/β (default: all)")
    use_output_film: bool = Field(False, description="γ/β on the V logits after lm_head (v1 default False)")


class BottleneckConfig(_Settings):
    """Houlsby bottleneck (spec §4.3) after the attention and/or FFN residual add."""

    bottleneck_dim: int = Field(8, ge=1, description="bn")
    n_hidden: int = Field(0, ge=0, description="extra bn x bn stages")
    init_scale: float = Field(1.0, gt=0, description="multiplier on the down/hidden init bound 1/√fan_in (v1: 1)")
    adapt_attn: bool = True
    adapt_ffn: bool = True
    layers: Optional[tuple[int, ...]] = Field(None, min_length=1, description="adapted layers (default: all)")
    attn_layers: Optional[tuple[int, ...]] = Field(None, description="override of layers for the attention position")
    ffn_layers: Optional[tuple[int, ...]] = Field(None, description="override of layers for the FFN position")

    @model_validator(mode="after")
    def _some_position(self):
        if not (self.adapt_attn or self.adapt_ffn):
            raise ValueError("adapt_attn and adapt_ffn are both off: the bottleneck would adapt nothing")
        return self


class HybridConfig(LoRAConfig):
    """LoRA (layers = ``layers``) + FiLM (``film_layers``, optional output FiLM), spec §4.4."""

    film_layers: Optional[tuple[int, ...]] = Field(None, min_length=1, description="blocks with γ/β (default: all)")
    use_output_film: bool = False

    def lora(self) -> LoRAConfig:
        return LoRAConfig(targets=self.targets, ffn=self.ffn, layers=self.layers, rank=self.rank, alpha=self.alpha,
                          init_scale=self.init_scale)

    def film(self) -> FiLMConfig:
        return FiLMConfig(layers=self.film_layers, use_output_film=self.use_output_film)


class SparseConfig(_Targets):
    """Sparse, v1 semantics (spec §4.5): fixed random mask ``U(0,1) < density`` per matrix."""

    density: float = Field(0.01, gt=0.0, le=1.0)
    seed: int = Field(42, ge=0, description="mask generator seed (v1: 42)")


class UnfreezeConfig(_Settings):
    """Unfreeze (spec §4.7): ``layers`` (explicit, v1) or ``top_n`` (indices ≥ L − n, v2); neither
    given means ``top_n = 2``."""

    layers: Optional[tuple[int, ...]] = Field(None, min_length=1)
    top_n: Optional[int] = Field(None, ge=1)
    include_lm_head: bool = Field(False, description="also train final_norm and lm_head")
    include_embeddings: bool = Field(False, description="also train the five embedding tables")

    @model_validator(mode="after")
    def _one_selection(self):
        if self.layers is not None and self.top_n is not None:
            raise ValueError("give layers or top_n, not both")
        return self

    def selected(self, n_layers: int) -> Optional[tuple[int, ...]]:
        """The unfrozen layer indices (None when ``layers`` must be validated by the caller)."""
        if self.layers is not None:
            return self.layers
        n = 2 if self.top_n is None else self.top_n
        if n > n_layers:
            raise AdapterConfigError(f"unfreeze top_n={n} exceeds the backbone's {n_layers} layers")
        return tuple(range(n_layers - n, n_layers))


class SpecializedCLMConfig(_Settings):
    """A small PAWN-architecture model trained from scratch (spec §4.8, v2 defaults 84/2/2/192)."""

    d_model: int = Field(84, ge=2)
    n_layers: int = Field(2, ge=1)
    n_heads: int = Field(2, ge=1)
    d_ff: int = Field(192, ge=1)
    seed: int = Field(0, ge=0, description="initialisation seed")


def one_line(e: ValidationError) -> str:
    """The first pydantic error as ``field: message``."""
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ())) or "settings"
    return f"{loc}: {err['msg']}"


def check_layers(layers: Optional[tuple[int, ...]], n_layers: int, what: str) -> tuple[int, ...]:
    """Sorted layer indices (all layers for None).

    Raises:
        AdapterConfigError: an index outside ``[0, n_layers)`` or repeated (names ``what``).
    """
    if layers is None:
        return tuple(range(n_layers))
    bad = [i for i in layers if not 0 <= i < n_layers]
    if bad:
        raise AdapterConfigError(f"{what}: layer(s) {bad} outside 0..{n_layers - 1} of the backbone")
    if len(set(layers)) != len(layers):
        raise AdapterConfigError(f"{what}: layers {list(layers)} repeat an index")
    return tuple(sorted(layers))
