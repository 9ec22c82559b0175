"""The strategy table (spec ``training-and-adapters.md`` §4): name, what trains, parameter formula,
settings model (with defaults) and builder of every adapter strategy. ``rosa``, ``retro-sparse``
and ``retro-bottleneck`` (issue 14, :mod:`pawn.adapters.rosa`) are phased entries: one
:class:`~pawn.adapters.rosa.RoSAAdapter` composing :class:`~pawn.adapters.modules.LoRA` /
:class:`~pawn.adapters.modules.Bottleneck` with :class:`~pawn.adapters.modules.Sparse` whose masks
come from gradients instead of :func:`~pawn.adapters.modules.random_masks`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import equinox as eqx
import jax
import numpy as np
from pydantic import BaseModel, ValidationError

from pawn.adapters import configs as C
from pawn.adapters import modules as M
from pawn.adapters import rosa as R
from pawn.config import ModelConfig, param_count
from pawn.model import PAWNModel


@dataclass(frozen=True)
class Strategy:
    """One row of the strategy table.

    Attributes:
        name: CLI name (``--strategy``).
        trains: what is trainable, in words.
        formula: trainable-parameter formula (spec §4; ``L_sel`` selected layers, ``d``, ``d_ff``, ``V``).
        settings: the pydantic settings model (its field defaults are the strategy's defaults).
        build: ``(settings, backbone, key) -> Adapter``.
        mergeable: can be folded into a standalone v2 checkpoint (:func:`pawn.adapters.merge`).
        uses_backbone: False for ``specialized_clm`` (a new model trained from scratch).
        count: exact count from settings and backbone shape when the generic shape-based count
            does not apply (``sparse``: the mask's True entries).
    """

    name: str
    trains: str
    formula: str
    settings: type[BaseModel]
    build: Callable[[Any, PAWNModel, jax.Array], M.Adapter]
    mergeable: bool
    uses_backbone: bool = True
    count: Optional[Callable[[Any, ModelConfig], int]] = None

    def defaults(self) -> dict:
        """Default settings as a JSON-able dict."""
        return self.settings().model_dump(mode="json")

    def parse(self, settings: Any = None) -> BaseModel:
        """Settings from a dict (or an instance, or None for the defaults).

        Raises:
            AdapterConfigError: an unknown field or a value out of range (one line, naming the field).
        """
        if isinstance(settings, self.settings):
            return settings
        try:
            return self.settings(**(settings or {}))
        except ValidationError as e:
            raise C.AdapterConfigError(f"{self.name} adapter setting {C.one_line(e)}") from None
        except TypeError as e:
            raise C.AdapterConfigError(f"{self.name} adapter settings: {e}") from None


def _lora(s: C.LoRAConfig, bb: PAWNModel, key) -> M.LoRA:
    layers = C.check_layers(s.layers, bb.config.n_layers, "lora layers")
    return M.LoRA(bb, s.target_names(), s.rank, s.scale, layers, key, s.init_scale)


def _film(s: C.FiLMConfig, bb: PAWNModel, key) -> M.FiLM:
    return M.FiLM(bb, C.check_layers(s.layers, bb.config.n_layers, "film layers"), s.use_output_film)


def _bottleneck(s: C.BottleneckConfig, bb: PAWNModel, key) -> M.Bottleneck:
    L = bb.config.n_layers
    placement = {}
    if s.adapt_attn:
        placement["attn"] = C.check_layers(s.attn_layers if s.attn_layers is not None else s.layers, L, "bottleneck attn layers")
    if s.adapt_ffn:
        placement["ffn"] = C.check_layers(s.ffn_layers if s.ffn_layers is not None else s.layers, L, "bottleneck ffn layers")
    return M.Bottleneck(bb, placement, s.bottleneck_dim, s.n_hidden, key, s.init_scale)


class Hybrid(M.Composite):
    """LoRA + FiLM; report ``lora/layer{i}.{proj}.B`` and ``film/…`` (spec §4.4)."""

    def weight_report(self, prefix=""):
        lora, film = self.parts
        out = {k: v for k, v in lora.weight_report(prefix + "lora/").items() if k.endswith(".B")}
        out.update(film.weight_report(prefix + "film/"))
        return out


def _hybrid(s: C.HybridConfig, bb: PAWNModel, key) -> Hybrid:
    return Hybrid((_lora(s.lora(), bb, jax.random.fold_in(key, 0)), _film(s.film(), bb, jax.random.fold_in(key, 1))), ("lora/", "film/"))


def _sparse_shapes(s: C.SparseConfig, cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    from pawn.model import param_shapes

    shapes = param_shapes(cfg)
    return {n: shapes[n][1:] for n in s.target_names()}


def _sparse(s: C.SparseConfig, bb: PAWNModel, key) -> M.Sparse:
    layers = C.check_layers(s.layers, bb.config.n_layers, "sparse layers")
    masks = M.random_masks(_sparse_shapes(s, bb.config), layers, s.density, s.seed)
    return M.Sparse(bb, s.target_names(), layers, masks)


def _sparse_count(s: C.SparseConfig, cfg: ModelConfig) -> int:
    layers = C.check_layers(s.layers, cfg.n_layers, "sparse layers")
    return int(sum(int(m.sum()) for m in M.random_masks(_sparse_shapes(s, cfg), layers, s.density, s.seed).values()))


def _unfreeze(s: C.UnfreezeConfig, bb: PAWNModel, key) -> M.Unfreeze:
    layers = C.check_layers(s.selected(bb.config.n_layers), bb.config.n_layers, "unfreeze layers")
    return M.Unfreeze(bb, layers, s.include_lm_head, s.include_embeddings)


def specialized_config(s: C.SpecializedCLMConfig, like: Optional[ModelConfig] = None) -> ModelConfig:
    """The from-scratch model's shape; vocabulary, context and outcome rows follow ``like``.

    Raises:
        AdapterConfigError: the shape is invalid (e.g. odd head_dim).
    """
    extra = {} if like is None else {k: getattr(like, k) for k in ("vocab_size", "max_seq_len", "n_outcomes", "rope_base")}
    try:
        return ModelConfig(d_model=s.d_model, n_layers=s.n_layers, n_heads=s.n_heads, d_ff=s.d_ff, **extra)
    except ValidationError as e:
        raise C.AdapterConfigError(f"specialized_clm shape: {e.errors()[0]['msg']}") from None


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("lora", "low-rank A, B in the targeted projections of the selected layers",
                 "L_sel·n_targets·2·d·r (+ 3·r·(d + d_ff) per layer with ffn)", C.LoRAConfig, _lora, True),
        Strategy("film", "per-block γ, β on the residual stream (+ γ_out, β_out on the logits)",
                 "2·L_sel·d (+ 2·V with use_output_film)", C.FiLMConfig, _film, False),
        Strategy("bottleneck", "Houlsby down/hidden/up after attention and/or FFN of the selected layers",
                 "positions·L_sel·(2·d·bn + n_hidden·bn²)", C.BottleneckConfig, _bottleneck, False),
        Strategy("hybrid", "LoRA in the projections + FiLM after every block",
                 "LoRA + FiLM", C.HybridConfig, _hybrid, False),
        Strategy("sparse", "masked entries of an additive Δ in the targeted matrices (fixed random mask)",
                 "Σ mask ≈ density·Σ numel(targets)·L_sel", C.SparseConfig, _sparse, True, count=_sparse_count),
        Strategy("unfreeze", "all weights of the selected blocks (+ head, + embeddings)",
                 "L_sel·(4d² + 3·d·d_ff + 2d) (+ d + d·V head, + 145·d embeddings)", C.UnfreezeConfig, _unfreeze, True),
        Strategy("specialized_clm", "every weight of a new small PAWN model trained from scratch",
                 "145·d + L·(4d² + 3·d·d_ff + 2d) + d + V·d", C.SpecializedCLMConfig,
                 lambda s, bb, key: M.FromScratch(), True, uses_backbone=False,
                 count=lambda s, cfg: param_count(specialized_config(s, cfg))),
        Strategy("rosa", "LoRA warm-up, then LoRA (re-initialised) + Δ under a fixed gradient mask",
                 "L_sel·Σ_targets r·(d_in + d_out) + Σ max(1, int(density·numel))", R.RoSAConfig, R.build("rosa"), True,
                 count=R.count("rosa")),
        Strategy("retro-sparse", "LoRA warm-up (discarded), then Δ alone under a fixed gradient mask",
                 "Σ max(1, int(density·numel)) over targets·L_sel", R.RetroSparseConfig, R.build("retro-sparse"), True,
                 count=R.count("retro-sparse")),
        Strategy("retro-bottleneck", "LoRA warm-up (discarded), then Δ under a gradient mask + Houlsby bottlenecks",
                 "Σ max(1, int(density·numel)) + positions·L_bn·(2·d·bn + n_hidden·bn²)", R.RetroBottleneckConfig,
                 R.build("retro-bottleneck"), False, count=R.count("retro-bottleneck")),
    )
}
"""Every strategy by name."""


def get_strategy(name: str) -> Strategy:
    """The table row for ``name``.

    Raises:
        AdapterConfigError: unknown name (the message lists the known ones).
    """
    try:
        return STRATEGIES[name]
    except KeyError:
        raise C.AdapterConfigError(f"unknown adapter strategy {name!r}; choose from {', '.join(STRATEGIES)}") from None


def count_params(name: str, settings: Any, config: ModelConfig) -> int:
    """Trainable parameters of strategy ``name`` with ``settings`` on a backbone of shape
    ``config``, computed from shapes (no weights are allocated; ``sparse`` draws its masks).

    Raises:
        AdapterConfigError: unknown strategy or bad settings.
    """
    st = get_strategy(name)
    s = st.parse(settings)
    if st.count is not None:
        return st.count(s, config)

    def trainable():
        bb = PAWNModel(config, jax.random.PRNGKey(0))
        ad = st.build(s, bb, jax.random.PRNGKey(0))
        return eqx.filter(ad, ad.trainable_filter())

    leaves = jax.tree_util.tree_leaves(jax.eval_shape(trainable))
    return int(sum(int(np.prod(x.shape)) for x in leaves))


def strategy_table() -> list[dict]:
    """One row per strategy for ``pawn adapt --list-strategies``: ``name``, ``trains``,
    ``formula``, ``defaults`` (dict), ``mergeable``."""
    return [{"name": s.name, "trains": s.trains, "formula": s.formula, "defaults": s.defaults(), "mergeable": s.mergeable}
            for s in STRATEGIES.values()]
