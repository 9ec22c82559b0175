"""Adapters for a frozen PAWN backbone (spec ``training-and-adapters.md`` §4): the strategy table,
the adapted model the trainer partitions, adapter checkpoints and merging, PEFT LoRA folders.

Model layer: imports :mod:`pawn.model`, :mod:`pawn.config`, :mod:`pawn.checkpoint` and
:mod:`pawn.errors`, never the trainer or the evaluators.

The names below load on first use (PEP 562), so a JAX-free submodule (:mod:`pawn.adapters.peft`,
read by the PyTorch loader) can be imported without importing JAX.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pawn.adapters.adapted import AdaptedModel, build_adapted
    from pawn.adapters.configs import AdapterConfigError
    from pawn.adapters.errors import AdapterError
    from pawn.adapters.registry import STRATEGIES, Strategy, count_params, get_strategy, strategy_table

_HOME = {
    "AdaptedModel": "adapted", "build_adapted": "adapted", "AdapterConfigError": "configs", "AdapterError": "errors",
    "STRATEGIES": "registry", "Strategy": "registry", "count_params": "registry", "get_strategy": "registry",
    "strategy_table": "registry",
}

__all__ = [
    "AdaptedModel", "AdapterConfigError", "AdapterError", "STRATEGIES", "Strategy",
    "build_adapted", "count_params", "get_strategy", "strategy_table",
]


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value
