"""The strategy table (spec ``training-and-adapters.md`` §4), the only home of a strategy: one
:class:`Strategy` row per strategy holds its settings model (fields with defaults and help text),
builder, adapter module, random-init flag and sweep space. ``pawn adapt``'s strategy flags
(:mod:`pawn.train.adapt_config`), ``--list-strategies``, the sweep spaces (:mod:`pawn.sweep.space`)
and the tests' strategy matrices are derived from these rows.

``rosa``, ``retro-sparse`` and ``retro-bottleneck`` (issue 14, :mod:`pawn.adapters.rosa`) are
phased entries: one :class:`~pawn.adapters.rosa.RoSAAdapter` composing
:class:`~pawn.adapters.modules.LoRA` / :class:`~pawn.adapters.modules.Bottleneck` with
:class:`~pawn.adapters.modules.Sparse` whose masks come from gradients instead of
:func:`~pawn.adapters.modules.random_masks`.

Adding a strategy: a module in :mod:`pawn.adapters.strategies` that calls :func:`register` with
its row (discovered at import, e.g. :mod:`pawn.adapters.strategies.ia3`), plus its test.
:func:`register` refuses a half-added row (a field without help text, a sweep-space name that is
no setting, a ``pawn adapt`` setting name used by two strategies with different types), so the
mistake fails at import, not at run time.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Optional, Union

import equinox as eqx
import jax
import numpy as np
from pydantic import BaseModel, ValidationError

from pawn.adapters import configs as C
from pawn.adapters import modules as M
from pawn.adapters import rosa as R
from pawn.config import ModelConfig, param_count
from pawn.model import PAWNModel, param_shapes


# ----------------------------------------------------------------------------- sweep-space entries
@dataclass(frozen=True)
class Choice:
    """A categorical sweep dimension (Optuna ``CategoricalDistribution``)."""

    choices: tuple


@dataclass(frozen=True)
class FloatRange:
    """A float sweep dimension ``[low, high]`` (log-uniform with ``log``)."""

    low: float
    high: float
    log: bool = False


@dataclass(frozen=True)
class IntRange:
    """An integer sweep dimension ``[low, high]`` in steps of ``step``."""

    low: int
    high: int
    step: int = 1


SpaceEntry = Union[Choice, FloatRange, IntRange]


def choice(*choices: Any) -> Choice:
    """A categorical sweep dimension over ``choices``."""
    return Choice(tuple(choices))


class Flag(NamedTuple):
    """How one strategy setting is set from ``pawn adapt``: the setting's name (flag
    ``--name-with-dashes``, variable ``PAWN_NAME``, config key ``name``) and whether the flag has
    the opposite polarity (``--no-adapt-attn`` sets ``adapt_attn = False``)."""

    name: str
    negated: bool


@dataclass(frozen=True)
class Strategy:
    """One row of the strategy table.

    Attributes:
        name: CLI name (``--strategy``).
        trains: what is trainable, in words.
        formula: trainable-parameter formula (spec §4; ``L_sel`` selected layers, ``d``, ``d_ff``, ``V``).
        settings: the pydantic settings model (its field defaults are the strategy's defaults; its
            field descriptions are the flags' help; ``flag_names`` / ``negated_flags`` map fields
            to ``pawn adapt`` settings, :meth:`flags`).
        build: ``(settings, backbone, key) -> Adapter``, an instance of ``module``.
        mergeable: can be folded into a standalone v2 checkpoint (:func:`pawn.adapters.merge`).
        uses_backbone: False for ``specialized_clm`` (a new model trained from scratch).
        count: exact count from settings and backbone shape when the generic shape-based count
            does not apply (``sparse``: the mask's True entries).
        module: the :class:`~pawn.adapters.modules.Adapter` subclass ``build`` returns.
        random_init: the adapter has randomly initialised weights (``init_scale`` applies);
            False when every trainable weight starts at a fixed value (γ = 1, Δ = 0, the backbone's).
        space: the sweep search space (spec sweep §6.1), setting name (a field of ``settings`` or
            a ``pawn adapt`` setting of :meth:`flags`) → :class:`Choice` / :class:`FloatRange` /
            :class:`IntRange`; the trainer-wide dimensions (lr, batch size, …) are the sweep's.
    """

    name: str
    trains: str
    formula: str
    settings: type[BaseModel]
    build: Callable[[Any, PAWNModel, jax.Array], M.Adapter]
    mergeable: bool
    uses_backbone: bool = True
    count: Optional[Callable[[Any, ModelConfig], int]] = None
    module: type = field(kw_only=True)
    random_init: bool = field(kw_only=True)
    space: Mapping[str, SpaceEntry] = field(kw_only=True, default_factory=dict)

    def defaults(self) -> dict:
        """Default settings as a JSON-able dict."""
        return self.settings().model_dump(mode="json")

    def flags(self) -> dict[str, Flag]:
        """Settings field → the :class:`Flag` that sets it from ``pawn adapt`` (the field's own
        name unless ``settings.flag_names`` says otherwise)."""
        names = getattr(self.settings, "flag_names", {})
        negated = getattr(self.settings, "negated_flags", frozenset())
        return {f: Flag(names.get(f, f), f in negated) for f in self.settings.model_fields}

    def setting_of(self, name: str) -> str:
        """The ``pawn adapt`` setting that a sweep-space or settings ``name`` sets (a settings
        field is mapped through :meth:`flags`; a setting name is returned as is).

        Raises:
            KeyError: ``name`` is neither.
        """
        flags = self.flags()
        if name in flags:
            return flags[name].name
        if name in {f.name for f in flags.values()}:
            return name
        raise KeyError(name)

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


_TARGETS = choice("qkvo", "qv", "qkv")
_ROSA_SPACE: dict[str, SpaceEntry] = {"density": FloatRange(1e-3, 0.1, log=True), "rank": choice(2, 4, 8, 16), "targets": _TARGETS,
                                      "rosa_warmup_steps": IntRange(32, 256, step=32), "mask_samples": choice(16, 32, 64),
                                      "grad_alpha": choice(1, 2)}

STRATEGIES: dict[str, Strategy] = {}
"""Every strategy by name, in registration order (the table's order)."""


def _annotation(settings: type[BaseModel], name: str) -> Any:
    return settings.model_fields[name].annotation


def register(row: Strategy) -> Strategy:
    """Add ``row`` to :data:`STRATEGIES` after checking that it is complete.

    Raises:
        TypeError: a half-added strategy — a duplicate name, a settings model that is not a
            pydantic model or has a field without a description (its help text), a ``module``
            that is not an :class:`~pawn.adapters.modules.Adapter`, a non-bool ``random_init``,
            a sweep-space name that is no setting of the strategy or an entry that is not a
            :class:`Choice` / :class:`FloatRange` / :class:`IntRange`, or a ``pawn adapt``
            setting name that another strategy declares with another type.
    """
    where = f"adapter strategy {row.name!r}"
    if row.name in STRATEGIES:
        raise TypeError(f"{where} is registered twice")
    if not (isinstance(row.settings, type) and issubclass(row.settings, BaseModel)):
        raise TypeError(f"{where}: settings must be a pydantic model class, got {row.settings!r}")
    if not callable(row.build):
        raise TypeError(f"{where}: build is not callable")
    if not (isinstance(row.module, type) and issubclass(row.module, M.Adapter)):
        raise TypeError(f"{where}: module must be an Adapter subclass, got {row.module!r}")
    if not isinstance(row.random_init, bool):
        raise TypeError(f"{where}: random_init must be True or False")
    undocumented = [f for f, info in row.settings.model_fields.items() if not (info.description or "").strip()]
    if undocumented:
        raise TypeError(f"{where}: settings field(s) {undocumented} have no description (the pawn adapt help text)")
    try:
        row.settings()
    except ValidationError as e:
        raise TypeError(f"{where}: the settings defaults do not validate ({C.one_line(e)})") from None
    for name, entry in row.space.items():
        try:
            row.setting_of(name)
        except KeyError:
            raise TypeError(f"{where}: sweep-space name {name!r} is no setting of {row.settings.__name__}") from None
        if not isinstance(entry, (Choice, FloatRange, IntRange)):
            raise TypeError(f"{where}: sweep-space entry {name!r} must be a Choice, FloatRange or IntRange, got {entry!r}")
    mine = {flag.name: _annotation(row.settings, f) for f, flag in row.flags().items()}
    for other in STRATEGIES.values():
        for f, flag in other.flags().items():
            if flag.name in mine and mine[flag.name] != _annotation(other.settings, f):
                raise TypeError(f"{where}: setting {flag.name!r} is {mine[flag.name]} here but "
                                f"{_annotation(other.settings, f)} for {other.name!r} (one pawn adapt flag, one type)")
    STRATEGIES[row.name] = row
    return row


for _row in (
    Strategy("lora", "low-rank A, B in the targeted projections of the selected layers",
             "L_sel·n_targets·2·d·r (+ 3·r·(d + d_ff) per layer with ffn)", C.LoRAConfig, _lora, True,
             module=M.LoRA, random_init=True,
             space={"rank": choice(2, 4, 8, 16, 32), "targets": _TARGETS, "lora_ffn": choice(False, True)}),
    Strategy("film", "per-block γ, β on the residual stream (+ γ_out, β_out on the logits)",
             "2·L_sel·d (+ 2·V with use_output_film)", C.FiLMConfig, _film, False,
             module=M.FiLM, random_init=False, space={"use_output_film": choice(False, True)}),
    Strategy("bottleneck", "Houlsby down/hidden/up after attention and/or FFN of the selected layers",
             "positions·L_sel·(2·d·bn + n_hidden·bn²)", C.BottleneckConfig, M.build_bottleneck, False,
             module=M.Bottleneck, random_init=True,
             space={"bottleneck_dim": choice(4, 8, 16, 32, 64, 128), "n_hidden": choice(0, 1, 2),
                    "no_adapt_attn": choice(False, True), "no_adapt_ffn": choice(False, True)}),
    Strategy("hybrid", "LoRA in the projections + FiLM after every block",
             "LoRA + FiLM", C.HybridConfig, _hybrid, False, module=Hybrid, random_init=True,
             space={"rank": choice(2, 4, 8, 16), "targets": _TARGETS, "use_output_film": choice(False, True)}),
    Strategy("sparse", "masked entries of an additive Δ in the targeted matrices (fixed random mask)",
             "Σ mask ≈ density·Σ numel(targets)·L_sel", C.SparseConfig, _sparse, True, count=_sparse_count,
             module=M.Sparse, random_init=False,
             space={"density": FloatRange(1e-3, 0.1, log=True), "targets": _TARGETS, "sparse_ffn": choice(False, True)}),
    Strategy("unfreeze", "all weights of the selected blocks (+ head, + embeddings)",
             "L_sel·(4d² + 3·d·d_ff + 2d) (+ d + d·V head, + 145·d embeddings)", C.UnfreezeConfig, _unfreeze, True,
             module=M.Unfreeze, random_init=False),
    Strategy("specialized_clm", "every weight of a new small PAWN model trained from scratch",
             "145·d + L·(4d² + 3·d·d_ff + 2d) + d + V·d", C.SpecializedCLMConfig,
             lambda s, bb, key: M.FromScratch(), True, uses_backbone=False,
             count=lambda s, cfg: param_count(specialized_config(s, cfg)), module=M.FromScratch, random_init=False,
             space={"d_model": choice(32, 64, 84, 128), "n_layers": IntRange(1, 4), "n_heads": choice(1, 2, 4)}),
    Strategy("rosa", "LoRA warm-up, then LoRA (re-initialised) + Δ under a fixed gradient mask",
             "L_sel·Σ_targets r·(d_in + d_out) + Σ max(1, int(density·numel))", R.RoSAConfig, R.build("rosa"), True,
             count=R.count("rosa"), module=R.RoSAAdapter, random_init=True, space=_ROSA_SPACE),
    Strategy("retro-sparse", "LoRA warm-up (discarded), then Δ alone under a fixed gradient mask",
             "Σ max(1, int(density·numel)) over targets·L_sel", R.RetroSparseConfig, R.build("retro-sparse"), True,
             count=R.count("retro-sparse"), module=R.RoSAAdapter, random_init=True, space=_ROSA_SPACE),
    Strategy("retro-bottleneck", "LoRA warm-up (discarded), then Δ under a gradient mask + Houlsby bottlenecks",
             "Σ max(1, int(density·numel)) + positions·L_bn·(2·d·bn + n_hidden·bn²)", R.RetroBottleneckConfig,
             R.build("retro-bottleneck"), False, count=R.count("retro-bottleneck"), module=R.RoSAAdapter, random_init=True,
             space={**_ROSA_SPACE, "bottleneck_dim": choice(4, 8, 16), "n_hidden": choice(0, 1, 2)}),
):
    register(_row)


def _discover() -> None:
    """Import every module of :mod:`pawn.adapters.strategies` (each registers its row; by file
    path, so this module has no import edge to the strategies that import it)."""
    folder = Path(__file__).parent / "strategies"
    for info in sorted(pkgutil.iter_modules([str(folder)]), key=lambda i: i.name):
        importlib.import_module(f"{__package__}.strategies.{info.name}")


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


_discover()
