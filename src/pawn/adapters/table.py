"""The strategy table's row type (spec ``training-and-adapters.md`` §4): :class:`Strategy`, the
sweep-space entries, and :func:`register`, which every module of :mod:`pawn.adapters.strategies`
calls with its row. The table is complete once :mod:`pawn.adapters.registry` (which discovers the
strategy modules) is imported; read it there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, Optional, Union

import jax
from pydantic import BaseModel, ValidationError

from pawn.adapters.base import Adapter
from pawn.adapters.configs import AdapterConfigError, one_line
from pawn.config import ModelConfig
from pawn.model import PAWNModel


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
        module: the :class:`~pawn.adapters.base.Adapter` subclass ``build`` returns.
        random_init: the adapter has randomly initialised weights (``init_scale`` applies);
            False when every trainable weight starts at a fixed value (γ = 1, Δ = 0, the backbone's).
        space: the sweep search space (spec sweep §6.1), setting name (a field of ``settings`` or
            a ``pawn adapt`` setting of :meth:`flags`) → :class:`Choice` / :class:`FloatRange` /
            :class:`IntRange`; the trainer-wide dimensions (lr, batch size, …) are the sweep's.
        order: the row's place in the table (``--list-strategies``, the ``--strategy`` help, the
            sweep's strategy list): ascending, ties in registration order; the built-in rows use
            10, 20, …, a row without one goes last.
        lr: the peak learning rate ``pawn adapt`` uses for this strategy when ``--lr`` is not
            given (the built-in rows' values are the lowest mean validation loss of a grid sweep
            over three seeds, ``benchmarks/adapter_lr.py``; a row without one takes the shared
            optimizer default, 3e-4).
    """

    name: str
    trains: str
    formula: str
    settings: type[BaseModel]
    build: Callable[[Any, PAWNModel, jax.Array], Adapter]
    mergeable: bool
    uses_backbone: bool = True
    count: Optional[Callable[[Any, ModelConfig], int]] = None
    module: type = field(kw_only=True)
    random_init: bool = field(kw_only=True)
    space: Mapping[str, SpaceEntry] = field(kw_only=True, default_factory=dict)
    order: int = field(kw_only=True, default=1000)
    lr: float = field(kw_only=True, default=3e-4)

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
            raise AdapterConfigError(f"{self.name} adapter setting {one_line(e)}") from None
        except TypeError as e:
            raise AdapterConfigError(f"{self.name} adapter settings: {e}") from None


TARGET_CHOICES = choice("qkvo", "qv", "qkv")
"""The sweep dimension over the attention targets that strategies with ``targets`` share."""

STRATEGIES: dict[str, Strategy] = {}
"""Every strategy by name, in the table's order (:attr:`Strategy.order`)."""


def _annotation(settings: type[BaseModel], name: str) -> Any:
    return settings.model_fields[name].annotation


def register(row: Strategy) -> Strategy:
    """Add ``row`` to :data:`STRATEGIES` after checking that it is complete.

    Raises:
        TypeError: a half-added strategy — a duplicate name, a settings model that is not a
            pydantic model or has a field without a description (its help text), a ``module``
            that is not an :class:`~pawn.adapters.base.Adapter`, a non-bool ``random_init``,
            a sweep-space name that is no setting of the strategy or an entry that is not a
            :class:`Choice` / :class:`FloatRange` / :class:`IntRange`, an ``lr`` outside (0, 1), or a ``pawn adapt``
            setting name that another strategy declares with another type.
    """
    where = f"adapter strategy {row.name!r}"
    if row.name in STRATEGIES:
        raise TypeError(f"{where} is registered twice")
    if not (isinstance(row.settings, type) and issubclass(row.settings, BaseModel)):
        raise TypeError(f"{where}: settings must be a pydantic model class, got {row.settings!r}")
    if not callable(row.build):
        raise TypeError(f"{where}: build is not callable")
    if not (isinstance(row.module, type) and issubclass(row.module, Adapter)):
        raise TypeError(f"{where}: module must be an Adapter subclass, got {row.module!r}")
    if not isinstance(row.random_init, bool):
        raise TypeError(f"{where}: random_init must be True or False")
    if isinstance(row.lr, bool) or not isinstance(row.lr, (int, float)) or not 0 < row.lr < 1:
        raise TypeError(f"{where}: lr must be a learning rate in (0, 1), got {row.lr!r}")
    undocumented = [f for f, info in row.settings.model_fields.items() if not (info.description or "").strip()]
    if undocumented:
        raise TypeError(f"{where}: settings field(s) {undocumented} have no description (the pawn adapt help text)")
    try:
        row.settings()
    except ValidationError as e:
        raise TypeError(f"{where}: the settings defaults do not validate ({one_line(e)})") from None
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
    rows = sorted([*STRATEGIES.values(), row], key=lambda r: r.order)  # stable: ties keep registration order
    STRATEGIES.clear()
    STRATEGIES.update((r.name, r) for r in rows)
    return row
