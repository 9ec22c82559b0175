"""The one map from metric keys to display names and units (spec ``eval-probe-generate-sweep-bench.md``
§1.2, §1.5, §4.1; training §1.8). Tables in the CLI take their headers from here; the JSON files
keep the keys.

``unit``: ``"fraction"`` (a rate in [0, 1], shown as a percentage in report tables), ``"nats"``,
``"ratio"`` (unitless), ``"plies"``, ``"count"``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """Display names of one metric: ``label`` in report tables, ``short`` in compact tables
    (the pretrain validation table), and its unit."""

    label: str
    short: str
    unit: str


METRICS: dict[str, Metric] = {
    "loss": Metric("Loss (nats)", "loss", "nats"),
    "perplexity": Metric("Perplexity", "perplexity", "ratio"),
    "accuracy": Metric("Top-1", "top-1", "fraction"),
    "top5_accuracy": Metric("Top-5", "top-5", "fraction"),
    "top1_over_ceiling": Metric("Top-1 / ceiling", "top-1/ceiling", "ratio"),
    "ceiling": Metric("Ceiling E[1/N_legal]", "ceiling", "fraction"),
    "legal_move_rate": Metric("Legal move rate", "legal rate", "fraction"),
    "late_legal_rate": Metric("Late legal rate", "late legal", "fraction"),
    "illegal_pred_rate": Metric("Illegal prediction rate", "illegal pred", "fraction"),
    "illegal_prob_mass": Metric("Illegal probability mass", "illegal mass", "fraction"),
    "game_completion_rate": Metric("Game completion (teacher-forced)", "completion", "fraction"),
    "avg_plies_completed": Metric("Avg plies completed", "plies completed", "plies"),
    "avg_pct_completion": Metric("Avg % of game completed", "% completed", "fraction"),
    "forfeit_ply": Metric("Forfeit ply min / median / max", "forfeit ply", "plies"),
    "positions": Metric("Positions", "positions", "count"),
    "games": Metric("Games", "games", "count"),
    "elo_band": Metric("Elo band", "Elo band", "count"),
}
"""Metric key (as in ``val/<key>_<model>`` records and the JSON reports) → display names."""

VALIDATION_COLUMNS: tuple[str, ...] = ("loss", "accuracy", "top5_accuracy", "legal_move_rate", "game_completion_rate")
"""The per-variant columns of the pretrain validation table (keys of ``val/<key>_<model>``)."""


def label(key: str) -> str:
    """``METRICS[key].label``; raises KeyError for an unknown key."""
    return METRICS[key].label
