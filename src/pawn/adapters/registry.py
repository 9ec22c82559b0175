"""The strategy table (spec ``training-and-adapters.md`` §4), the only home of a strategy: one
:class:`~pawn.adapters.table.Strategy` row per strategy holds its settings model (fields with
defaults and help text), builder, adapter module, random-init flag, sweep space and place in the
table. ``pawn adapt``'s strategy flags and ``--strategy`` help (:mod:`pawn.train.adapt_config`),
``--list-strategies``, the sweep spaces (:mod:`pawn.sweep.space`) and the tests' strategy matrices
are derived from these rows.

Every strategy is one module of :mod:`pawn.adapters.strategies` (the PEFT shape: its settings on
:class:`~pawn.adapters.configs.StrategySettings`, its module on the public base
:class:`~pawn.adapters.base.Adapter`, and its row, handed to :func:`~pawn.adapters.table.register`),
imported here at import time, so adding a strategy is its module plus its test.
:func:`~pawn.adapters.table.register` refuses a half-added row (a field without help text, a
sweep-space name that is no setting, a ``pawn adapt`` setting name used by two strategies with
different types), so the mistake fails at import, not at run time.

``rosa``, ``retro-sparse`` and ``retro-bottleneck`` (:mod:`pawn.adapters.strategies.rosa`) are
phased entries: one :class:`~pawn.adapters.strategies.rosa.RoSAAdapter` composing LoRA /
bottleneck with the sparse Δ, whose masks come from gradients instead of random draws.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np

from pawn.adapters.configs import AdapterConfigError
from pawn.adapters.table import (STRATEGIES, TARGET_CHOICES, Choice, Flag, FloatRange, IntRange, SpaceEntry, Strategy, choice,
                                 register)
from pawn.config import ModelConfig
from pawn.model import PAWNModel


def _discover() -> None:
    """Import every module of :mod:`pawn.adapters.strategies` (each registers its row with
    :func:`~pawn.adapters.table.register`; found by file path)."""
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
        raise AdapterConfigError(f"unknown adapter strategy {name!r}; choose from {', '.join(STRATEGIES)}") from None


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


__all__ = ["STRATEGIES", "TARGET_CHOICES", "Choice", "Flag", "FloatRange", "IntRange", "SpaceEntry", "Strategy", "choice",
           "count_params", "get_strategy", "register", "strategy_table"]
