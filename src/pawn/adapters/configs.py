"""Settings of every adapter strategy: one frozen pydantic model per strategy, with the defaults and
constraints of spec ``training-and-adapters.md`` §4. Layer indices are 0-based block indices."""

from __future__ import annotations

from typing import ClassVar, Literal, Optional

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
    """Base of every strategy's settings. ``flag_names`` maps a field to the ``pawn adapt`` setting
    (flag, ``PAWN_*`` variable, config key) that sets it when the names differ (v1's flat names,
    spec §3: ``rank`` is ``--lora-rank``); ``negated_flags`` are fields whose setting has the
    opposite polarity (``adapt_attn`` is set by ``--no-adapt-attn``). Every field's
    ``description`` is its help text (:mod:`pawn.adapters.registry` checks both at import)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)  # inf/nan: "Input should be a finite number"
    flag_names: ClassVar[dict[str, str]] = {}
    negated_flags: ClassVar[frozenset[str]] = frozenset()


class _Targets(_Settings):
    targets: tuple[Target, ...] = Field(("q", "k", "v", "o"), min_length=1, description="Comma list of the attention projections adapted (q,k,v,o).")
    ffn: bool = Field(False, description="Also adapt the SwiGLU projections w_gate, w_up, w_down.")
    layers: Optional[tuple[int, ...]] = Field(None, min_length=1, description="Comma list of 0-based layers to adapt (default: all).")

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


class FiLMConfig(_Settings):
    """FiLM (spec §4.2): per-block γ/β on the residual stream, optional output FiLM on logits."""

    flag_names: ClassVar[dict[str, str]] = {"layers": "adapter_layers"}

    layers: Optional[tuple[int, ...]] = Field(None, min_length=1, description="Comma list of blocks with FiLM γ/β (default: all).")
    use_output_film: bool = Field(False, description="Also γ/β on the output logits (2·V parameters; v1 default off).")


class BottleneckConfig(_Settings):
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


class HybridConfig(LoRAConfig):
    """LoRA (layers = ``layers``) + FiLM (``film_layers``, optional output FiLM), spec §4.4."""

    film_layers: Optional[tuple[int, ...]] = Field(None, min_length=1, description="Hybrid: comma list of blocks with FiLM γ/β (default: all).")
    use_output_film: bool = Field(False, description="Also γ/β on the output logits (2·V parameters; v1 default off).")

    def lora(self) -> LoRAConfig:
        return LoRAConfig(targets=self.targets, ffn=self.ffn, layers=self.layers, rank=self.rank, alpha=self.alpha,
                          init_scale=self.init_scale)

    def film(self) -> FiLMConfig:
        return FiLMConfig(layers=self.film_layers, use_output_film=self.use_output_film)


class SparseConfig(_Targets):
    """Sparse, v1 semantics (spec §4.5): fixed random mask ``U(0,1) < density`` per matrix."""

    flag_names: ClassVar[dict[str, str]] = {"targets": "sparse_targets", "ffn": "sparse_ffn", "layers": "adapter_layers",
                                            "seed": "sparse_seed"}

    density: float = Field(0.01, gt=0.0, le=1.0, description="Fraction of each targeted matrix that trains.")
    seed: int = Field(42, ge=0, description="Sparse: seed of the random mask generator (v1: 42).")


class UnfreezeConfig(_Settings):
    """Unfreeze (spec §4.7): ``layers`` (explicit, v1) or ``top_n`` (indices ≥ L − n, v2); neither
    given means ``top_n = 2``."""

    flag_names: ClassVar[dict[str, str]] = {"layers": "unfreeze_layers", "top_n": "n_unfreeze"}

    layers: Optional[tuple[int, ...]] = Field(None, min_length=1, description="Unfreeze: comma list of layers (v1); default the top --n-unfreeze.")
    top_n: Optional[int] = Field(None, ge=1, description="Unfreeze: the top N layers, when no layer list is given (default 2).")
    include_lm_head: bool = Field(False, description="Unfreeze: also train final_norm and lm_head.")
    include_embeddings: bool = Field(False, description="Unfreeze: also train the five embedding tables.")

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
