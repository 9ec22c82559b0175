"""The public base of every strategy's settings (JAX-free, so :mod:`pawn.adapters.peft` and the
PyTorch loader can use it): :class:`StrategySettings` (a frozen pydantic model whose fields are
the ``pawn adapt`` flags), :class:`TargetSettings` for strategies that adapt chosen projections,
the target names, :class:`AdapterConfigError` and the layer check. Each strategy's own settings
model lives in its module of :mod:`pawn.adapters.strategies`. Layer indices are 0-based block
indices."""

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


class StrategySettings(BaseModel):
    """Base of every strategy's settings. ``flag_names`` maps a field to the ``pawn adapt`` setting
    (flag, ``PAWN_*`` variable, config key) that sets it when the names differ (v1's flat names,
    spec §3: ``rank`` is ``--lora-rank``); ``negated_flags`` are fields whose setting has the
    opposite polarity (``adapt_attn`` is set by ``--no-adapt-attn``). Every field's
    ``description`` is its help text (:mod:`pawn.adapters.registry` checks both at import)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)  # inf/nan: "Input should be a finite number"
    flag_names: ClassVar[dict[str, str]] = {}
    negated_flags: ClassVar[frozenset[str]] = frozenset()


class TargetSettings(StrategySettings):
    """Settings of a strategy that adapts chosen projections of chosen layers: the attention
    ``targets``, the SwiGLU projections with ``ffn``, and ``layers`` (None: all)."""

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
