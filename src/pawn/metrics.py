"""The one metric registry: every number a run, an evaluation or a report shows, with its key, the
names it had in older files, its label, unit, format and direction.

A metric is one :class:`Metric` row in :data:`METRICS`. The run record (:mod:`pawn.runs`), the
tables of ``pawn pretrain``/``pawn eval``, the model card, the curves and the reports take names,
labels and formats from here, so adding a metric is one row (plus the code that computes it).

Keys are the field's standard terms (spec ``eval-probe-generate-sweep-bench.md`` §1.2, §1.5,
§4.1; ``training-and-adapters.md`` §1.6–§1.8): ``loss`` (nats), ``top1``, ``legal_rate``,
``late_legal_rate``, ``completion_rate``... The ``v1`` names are the keys older PAWN files used
(``val/accuracy_<model>``, ``val_top1``, ``train/accuracy``, ``late_legal_move_rate``); the run
reader maps them to the key on read. ``eval_key`` is where ``pawn eval --json`` keeps the metric
in a model's ``random_games`` block.

This module imports nothing heavy (no JAX), so help texts and readers stay fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

MIN_EVAL_PLY = 10
"""First sequence position of the legal-masked (MAIA-style) accuracy of ``pawn eval``: v1's
``min_eval_ply`` (spec eval §1.6); ``pawn adapt``'s validation top-1 counts every move decision."""

SCOPE_ALL = "every move"
SCOPE_FROM = f"moves at position ≥ {MIN_EVAL_PLY}"
"""Which positions a top-1 counts, as the tables say it. A legal-masked or moves-only figure counts
**move decisions**: supervised positions whose target is a move (so whose legal set is a real move
set); never the end-of-game slot, whose legal set is {PAD} alone (a certain hit under the legal
mask, which v1 counted), nor the last slot of a game cut at the ply cap. ``pawn adapt``'s
validation under its legal mask and the human-move top-1 of ``pawn eval`` count every move
decision, the legal-masked top-1 of ``pawn eval`` those from :data:`MIN_EVAL_PLY` (for pure moves,
position p predicts ply p + 1). The published (v1) figures — pretraining's validation and the
``published/*`` figures of ``pawn eval`` (spec eval §1.2) — count every supervised position,
end-of-game slot included; :data:`pawn.runs.POSITIONS` names the sets a run record's figures count."""

UNITS = ("nats", "fraction", "ratio", "plies", "count", "seconds", "tokens/s", "games/s", "GiB", "lr", "norm")
"""Units a metric may have: ``fraction`` is a rate in [0, 1] (shown as a percentage)."""


@dataclass(frozen=True)
class Metric:
    """One metric.

    Attributes:
        key: the canonical key in run records and reports (``top1``).
        label: the header in report tables (``Top-1``). short: the header in compact tables.
        unit: one of :data:`UNITS`.
        better: ``"min"`` or ``"max"`` when lower/higher is better, else None.
        v1: the names older PAWN files used for it (without the ``val/`` prefix or variant suffix).
        eval_key: its key in a ``pawn eval --json`` model's ``random_games`` block, if there.
        kinds: the record types that carry it (``train``, ``val``, ``eval``).
        fmt: Python format spec of a value in tables (``.4f``; ``%`` for fractions).
    """

    key: str
    label: str
    short: str
    unit: str
    better: Optional[str] = None
    v1: tuple[str, ...] = ()
    eval_key: Optional[str] = None
    kinds: tuple[str, ...] = ("val",)
    fmt: str = ".4f"

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"metric {self.key!r}: unknown unit {self.unit!r} (one of {', '.join(UNITS)})")
        if self.better not in (None, "min", "max"):
            raise ValueError(f"metric {self.key!r}: better must be 'min', 'max' or None")

    def format(self, value: Any) -> str:
        """``value`` as a table cell: fractions as percentages (2 dp), counts with thousands
        separators, ``—`` for a missing or non-finite value."""
        if value is None or isinstance(value, bool):
            return "—"
        if isinstance(value, (list, tuple)):
            return " / ".join(self.format(v) for v in value)
        try:
            x = float(value)
        except (TypeError, ValueError):
            return str(value)
        if not math.isfinite(x):
            return "—"
        if self.unit == "fraction":
            return f"{100 * x:.2f}%"
        if self.unit in ("count", "plies") and x == int(x):
            return f"{int(x):,}"
        return format(x, self.fmt)


_M = Metric
_ROWS: tuple[Metric, ...] = (
    # --- losses and accuracies (train, val, eval)
    _M("loss", "Loss (nats)", "loss", "nats", "min", ("loss", "val_loss"), "published/loss", ("train", "val", "eval")),
    _M("loss_mean", "Loss, chunk mean (nats)", "loss mean", "nats", "min", ("loss_mean",), None, ("train",)),
    _M("perplexity", "Perplexity", "perplexity", "ratio", "min", ("perplexity",), "published/perplexity", ("val", "eval"), ".1f"),
    _M("top1", "Top-1", "top-1", "fraction", "max", ("accuracy", "val_top1", "train/accuracy", "train_top1"),
       "published/top1", ("train", "val", "eval")),
    _M("top1_mean", "Top-1, chunk mean", "top-1 mean", "fraction", "max", ("train/accuracy_mean",), None, ("train",)),
    _M("top5", "Top-5", "top-5", "fraction", "max", ("top5_accuracy", "val_top5"), "published/top5", ("val", "eval")),
    _M("top1_over_ceiling", "Top-1 / ceiling", "top-1/ceiling", "ratio", "max", (), "published/top1_over_ceiling", ("val", "eval")),
    _M("ceiling", "Ceiling E[1/N_legal]", "ceiling", "fraction", None, (), "ceiling/e_inv_n_legal", ("val", "eval")),
    _M("moves_only_top1", "Top-1, move positions only", "moves-only top-1", "fraction", "max", ("moves_only_top1",),
       "moves_only/top1", ("val", "eval")),
    _M("legal_masked_top1", f"Top-1 legal-masked ({SCOPE_FROM})", "masked top-1", "fraction", "max", (), "legal_masked/top1",
       ("eval",)),
    _M("legal_masked_top1_all_moves", f"Top-1 legal-masked ({SCOPE_ALL})", "masked top-1 (all)", "fraction", "max", (),
       "legal_masked/top1_all_moves", ("eval",)),
    _M("legal_masked_loss_all_moves", f"Loss legal-masked ({SCOPE_ALL})", "masked loss (all)", "nats", "min", (),
       "legal_masked/loss_all_moves", ("eval",)),
    _M("legal_masked_ceiling", f"Ceiling E[1/N_legal] ({SCOPE_FROM})", "masked ceiling", "fraction", None, (),
       "ceiling/legal_masked", ("eval",)),
    _M("legal_masked_top1_over_ceiling", f"Top-1 legal-masked / ceiling ({SCOPE_FROM})", "masked top-1/ceiling", "ratio",
       "max", (), "legal_masked/top1_over_ceiling", ("eval",)),
    # --- game integrity (spec eval §1.2)
    _M("legal_rate", "Legal move rate", "legal rate", "fraction", "max", ("legal_move_rate",), "published/legal_rate", ("val", "eval")),
    _M("late_legal_rate", "Late legal rate", "late legal", "fraction", "max", ("late_legal_move_rate", "late_legal_rate"),
       "published/late_legal_rate", ("val", "eval")),
    _M("illegal_pred_rate", "Illegal prediction rate", "illegal pred", "fraction", "min", ("val_illegal_pred_rate",),
       "published/illegal_pred_rate", ("val", "eval")),
    _M("illegal_prob_mass", "Illegal probability mass", "illegal mass", "fraction", "min", ("val_illegal_prob_mass",),
       "published/illegal_prob_mass", ("val", "eval")),
    _M("completion_rate", "Game completion (teacher-forced)", "completion", "fraction", "max", ("game_completion_rate",),
       "published/completion_rate", ("val", "eval")),
    _M("avg_plies_completed", "Avg plies completed", "plies completed", "plies", "max", ("avg_plies_completed",),
       "published/avg_plies_completed", ("val", "eval"), ".1f"),
    _M("avg_pct_completion", "Avg % of game completed", "% completed", "fraction", "max", ("avg_pct_completion",),
       "published/avg_pct_completion", ("val", "eval")),
    _M("median_forfeit_ply", "Median forfeit ply", "forfeit ply", "plies", "max", ("median_forfeit_ply",),
       "published/median_forfeit_ply", ("val", "eval"), ".0f"),
    _M("forfeit_ply", "Forfeit ply min / median / max", "forfeit ply", "plies", "max", (), None, ("eval",), ".0f"),
    _M("games", "Games", "games", "count", None, ("n_games",), "counts/n_games", ("eval",), ".0f"),
    _M("positions", "Positions", "positions", "count", None, ("val_positions",), "counts/n_positions", ("val", "eval"), ".0f"),
    # --- optimisation (train)
    _M("lr", "Learning rate", "lr", "lr", None, ("lr",), None, ("train",), ".3g"),
    _M("grad_norm", "Gradient norm", "grad norm", "norm", None, ("grad_norm",), None, ("train",), ".3g"),
    _M("grad_norm_mean", "Gradient norm, chunk mean", "grad norm mean", "norm", None, ("grad_norm_mean",), None, ("train",), ".3g"),
    _M("n_supervised_mean", "Supervised positions per step", "supervised", "count", None, ("n_supervised_mean",), None,
       ("train",), ".1f"),
    # --- throughput and time (train, val)
    _M("tokens_per_s", "Tokens/s", "tok/s", "tokens/s", "max", ("tokens_per_s",), None, ("train",), ",.0f"),
    _M("games_per_s", "Games/s", "games/s", "games/s", "max", ("games_per_s",), None, ("train",), ",.1f"),
    _M("data_wait_s", "Data wait (s)", "data wait", "seconds", "min", ("data_wait_s",), None, ("train",), ".3f"),
    _M("data_wait_frac", "Data-wait fraction", "data wait", "fraction", "min", ("data_wait_frac",), None, ("train",)),
    _M("chunk_wall_s", "Chunk wall time (s)", "chunk s", "seconds", "min", ("chunk_wall_s",), None, ("train",), ".2f"),
    _M("val_wall_s", "Validation wall time (s)", "val s", "seconds", "min", ("val_wall_s",), None, ("train", "val"), ".2f"),
    _M("checkpoint_wall_s", "Checkpoint wall time (s)", "ckpt s", "seconds", "min", ("checkpoint_wall_s",), None, ("train",), ".2f"),
)

METRICS: dict[str, Metric] = {m.key: m for m in _ROWS}
"""Key → :class:`Metric`, for every metric PAWN writes or shows."""

if len(METRICS) != len(_ROWS):  # a key added twice would silently shadow the first row
    raise RuntimeError("pawn.metrics: duplicate metric key in the registry")

V1_NAMES: dict[str, str] = {}
"""Every older name (``accuracy``, ``val_top1``, ``late_legal_move_rate``…) → its key."""
for _m in _ROWS:
    for _n in (_m.key, *_m.v1):
        if V1_NAMES.get(_n, _m.key) != _m.key:
            raise RuntimeError(f"pawn.metrics: the name {_n!r} maps to both {V1_NAMES[_n]!r} and {_m.key!r}")
        V1_NAMES[_n] = _m.key

EVAL_TABLE: tuple[tuple[str, str, Optional[str]], ...] = (
    ("loss", "published/loss", "moves_only/loss"), ("perplexity", "published/perplexity", None),
    ("top1", "published/top1", "moves_only/top1"), ("top5", "published/top5", "moves_only/top5"),
    ("top1_over_ceiling", "published/top1_over_ceiling", "moves_only/top1_over_ceiling"),
    ("ceiling", "ceiling/e_inv_n_legal", "ceiling/moves_only"), ("legal_rate", "published/legal_rate", "moves_only/legal_rate"),
    ("late_legal_rate", "published/late_legal_rate", None), ("illegal_pred_rate", "published/illegal_pred_rate", None),
    ("illegal_prob_mass", "published/illegal_prob_mass", None), ("completion_rate", "published/completion_rate", None),
    ("avg_plies_completed", "published/avg_plies_completed", None), ("avg_pct_completion", "published/avg_pct_completion", None),
)
"""The rows of ``pawn eval``'s published / moves-only table: (metric key, its key in a model's
``random_games`` block for the published (v1) convention, for the moves-only (v2) one or None).
The CLI table and the report's Suite section both read it."""

PROBE_LABELS: dict[str, str] = {
    "piece_type": "Piece type", "side_to_move": "Side to move", "is_check": "Is check", "castling_rights": "Castling rights",
    "ep_square": "En passant square", "material_count": "Material count", "legal_move_count": "Legal move count",
    "halfmove_clock": "Halfmove clock", "game_phase": "Game phase",
}
"""The nine linear probes (spec eval §2.1) by name, with the labels of the published table (§2.5);
:mod:`pawn.evaluate.probes` checks its probe set against these names."""

EDGE_LABELS: dict[str, str] = {
    "in_check": "In check", "double_check": "Double check", "pin_restricts": "Pin restricts movement",
    "ep_available": "En passant available", "castle_legal_k": "Castling legal (K-side)",
    "castle_legal_q": "Castling legal (Q-side)", "castle_blocked_check": "Castling blocked by check",
    "promotion_available": "Promotion available", "checkmate": "Checkmate (P(PAD))", "stalemate": "Stalemate (P(PAD))",
}
"""The edge-case categories of the diagnostics (spec eval §3.5) with the labels of its table;
:mod:`pawn.evaluate.diagnostics` checks its categories against these names."""

VALIDATION_COLUMNS: tuple[str, ...] = ("loss", "top1", "top5", "legal_rate", "completion_rate")
"""The per-variant columns of the pretrain validation table."""


def metric(key: str) -> Metric:
    """``METRICS[key]``.

    Raises:
        KeyError: an unknown key (the message lists the known ones).
    """
    try:
        return METRICS[key]
    except KeyError:
        raise KeyError(f"unknown metric {key!r}; known: {', '.join(METRICS)}") from None


def label(key: str) -> str:
    """The report-table header of ``key``; raises KeyError for an unknown key."""
    return metric(key).label


def eval_values(random_games: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical metrics of one model's ``random_games`` block of a ``pawn eval --json``
    report (``published/top1`` → ``top1``…); absent keys are left out."""
    return {m.key: random_games[m.eval_key] for m in _ROWS if m.eval_key and m.eval_key in random_games}
