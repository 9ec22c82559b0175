"""Adapters for a frozen PAWN backbone (spec ``training-and-adapters.md`` §4): the strategy table,
the adapted model the trainer partitions, adapter checkpoints and merging.

Model layer: imports :mod:`pawn.model`, :mod:`pawn.config`, :mod:`pawn.checkpoint` and
:mod:`pawn.errors`, never the trainer or the evaluators.
"""

from pawn.adapters.adapted import AdaptedModel, build_adapted
from pawn.adapters.configs import AdapterConfigError
from pawn.adapters.errors import AdapterError
from pawn.adapters.registry import STRATEGIES, Strategy, count_params, get_strategy, strategy_table

__all__ = [
    "AdaptedModel", "AdapterConfigError", "AdapterError", "STRATEGIES", "Strategy",
    "build_adapted", "count_params", "get_strategy", "strategy_table",
]
