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
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional, Sequence, overload

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


RECORD_KINDS = ("train", "val", "eval")
"""The run-record types that carry metric values (:data:`pawn.runs.METRIC_RECORDS`); a row's
``kinds`` names those it may be written into, and the record writer refuses the others."""

VIEWS: dict[str, str] = {
    "pretrain_val": "the per-variant values of a pretraining val record (pawn.train.pretrain.VAL_METRICS)",
    "adapt_val": "the values of an adapter run's val record (pawn.train.adapter_step.VAL_FIELDS)",
    "validation_table": "the per-variant columns of pawn pretrain's validation table",
    "eval_table": "the rows of pawn eval's published / moves-only table and of the report's Suite section",
    "card": "the columns of a model card's evaluation table (read from pawn eval --json)",
    "compare": "the metrics of the report's and the dashboard's Compare menu",
    "integrity": "the game-integrity rates drawn on one chart of the report and the dashboard",
}
"""Where a metric can show, by name: a row's ``views`` maps some of these names to its place."""


@dataclass(frozen=True)
class Metric:
    """One metric: its names and format, and where it is written and shown.

    Attributes:
        key: the canonical key in run records and reports (``top1``).
        label: the header in report tables (``Top-1``). short: the header in compact tables.
        unit: one of :data:`UNITS`.
        better: ``"min"`` or ``"max"`` when lower/higher is better, else None.
        v1: the names older PAWN files used for it (without the ``val/`` prefix or variant suffix).
        eval_key: its key in a ``pawn eval --json`` model's ``random_games`` block, if there.
        kinds: the record types that may carry it (of :data:`RECORD_KINDS`); writing it into
            another record type raises (:func:`pawn.runs.record_line`).
        fmt: Python format spec of a value in tables (``.4f``; ``%`` for fractions).
        moves_only_key: its key in the ``random_games`` block for the moves-only (v2) convention,
            for the ``eval_table`` view's second column.
        views: view name (of :data:`VIEWS`) → its place there (1 first; a tie keeps the
            registry's order). Every list of keys a view shows is derived from these
            (:func:`keys_in`), so a row without a view shows only where all metrics do (the run
            record's values, the model card's validation rows, the report's series).
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
    moves_only_key: Optional[str] = field(default=None, kw_only=True)
    views: Mapping[str, int] = field(default_factory=dict, kw_only=True, hash=False, compare=False)

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"metric {self.key!r}: unknown unit {self.unit!r} (one of {', '.join(UNITS)})")
        if self.better not in (None, "min", "max"):
            raise ValueError(f"metric {self.key!r}: better must be 'min', 'max' or None")
        bad = [k for k in self.kinds if k not in RECORD_KINDS]
        if bad or not self.kinds:
            raise ValueError(f"metric {self.key!r}: kinds {list(self.kinds)} must name record types of {', '.join(RECORD_KINDS)}")
        for view, place in self.views.items():
            if view not in VIEWS:
                raise ValueError(f"metric {self.key!r}: unknown view {view!r} (one of {', '.join(VIEWS)})")
            if isinstance(place, bool) or not isinstance(place, int) or place < 1:
                raise ValueError(f"metric {self.key!r}: the place in view {view!r} must be an integer >= 1, got {place!r}")
        if "eval_table" in self.views and not self.eval_key:
            raise ValueError(f"metric {self.key!r}: the eval_table view needs an eval_key")

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
    _M("loss", "Loss (nats)", "loss", "nats", "min", ("loss", "val_loss"), "published/loss", ("train", "val", "eval"),
       moves_only_key="moves_only/loss",
       views={"pretrain_val": 1, "adapt_val": 1, "validation_table": 1, "eval_table": 1, "card": 5, "compare": 1}),
    _M("loss_mean", "Loss, chunk mean (nats)", "loss mean", "nats", "min", ("loss_mean",), None, ("train",)),
    _M("perplexity", "Perplexity", "perplexity", "ratio", "min", ("perplexity",), "published/perplexity", ("val", "eval"), ".1f",
       views={"pretrain_val": 2, "eval_table": 2, "compare": 10}),
    _M("top1", "Top-1", "top-1", "fraction", "max", ("accuracy", "val_top1", "train/accuracy", "train_top1"),
       "published/top1", ("train", "val", "eval"),
       moves_only_key="moves_only/top1",
       views={"pretrain_val": 3, "adapt_val": 2, "validation_table": 2, "eval_table": 3, "card": 1, "compare": 2}),
    _M("top1_mean", "Top-1, chunk mean", "top-1 mean", "fraction", "max", ("train/accuracy_mean",), None, ("train",)),
    _M("top5", "Top-5", "top-5", "fraction", "max", ("top5_accuracy", "val_top5"), "published/top5", ("val", "eval"),
       moves_only_key="moves_only/top5",
       views={"pretrain_val": 4, "adapt_val": 3, "validation_table": 3, "eval_table": 4, "card": 2, "compare": 3}),
    _M("top1_over_ceiling", "Top-1 / ceiling", "top-1/ceiling", "ratio", "max", (), "published/top1_over_ceiling", ("val", "eval"),
       moves_only_key="moves_only/top1_over_ceiling", views={"eval_table": 5, "compare": 4}),
    _M("ceiling", "Ceiling E[1/N_legal]", "ceiling", "fraction", None, (), "ceiling/e_inv_n_legal", ("val", "eval"),
       moves_only_key="ceiling/moves_only", views={"eval_table": 6}),
    _M("moves_only_top1", "Top-1, move positions only", "moves-only top-1", "fraction", "max", ("moves_only_top1",),
       "moves_only/top1", ("val", "eval"), views={"pretrain_val": 11, "card": 6}),
    _M("legal_masked_top1", f"Top-1 legal-masked ({SCOPE_FROM})", "masked top-1", "fraction", "max", (), "legal_masked/top1",
       ("eval",)),
    _M("legal_masked_top1_all_moves", f"Top-1 legal-masked ({SCOPE_ALL})", "masked top-1 (all)", "fraction", "max", (),
       "legal_masked/top1_all_moves", ("eval",)),
    _M("legal_masked_loss_all_moves", f"Loss legal-masked ({SCOPE_ALL})", "masked loss (all)", "nats", "min", (),
       "legal_masked/loss_all_moves", ("val", "eval"), views={"pretrain_val": 12}),
    # the figure that ranks models on random games (pawn.metrics_core.AccuracyReport): the legal-masked loss against
    # the uniform-over-legal player's E[ln N_legal] over the same positions; <= 0 is better than a rules-only player
    _M("uniform_legal_loss", f"Uniform over legal E[ln N_legal] ({SCOPE_ALL})", "uniform loss", "nats", None, (),
       "legal_masked/uniform_loss_all_moves", ("val", "eval"), views={"pretrain_val": 13}),
    _M("excess_nats", f"Excess over uniform, nats ({SCOPE_ALL})", "excess nats", "nats", "min", (),
       "legal_masked/excess_nats_all_moves", ("val", "eval"),
       views={"pretrain_val": 14, "validation_table": 6, "compare": 15}),
    _M("excess_nats_lo", "Excess over uniform, 95% interval low (nats)", "excess lo", "nats", None, (),
       "legal_masked/excess_nats_lo", ("val", "eval"), views={"pretrain_val": 15}),
    _M("excess_nats_hi", "Excess over uniform, 95% interval high (nats)", "excess hi", "nats", None, (),
       "legal_masked/excess_nats_hi", ("val", "eval"), views={"pretrain_val": 16}),
    _M("legal_masked_ceiling", f"Ceiling E[1/N_legal] ({SCOPE_FROM})", "masked ceiling", "fraction", None, (),
       "ceiling/legal_masked", ("eval",)),
    _M("legal_masked_top1_over_ceiling", f"Top-1 legal-masked / ceiling ({SCOPE_FROM})", "masked top-1/ceiling", "ratio",
       "max", (), "legal_masked/top1_over_ceiling", ("eval",)),
    # --- game integrity (spec eval §1.2)
    _M("legal_rate", "Legal move rate", "legal rate", "fraction", "max", ("legal_move_rate",), "published/legal_rate", ("val", "eval"),
       moves_only_key="moves_only/legal_rate",
       views={"pretrain_val": 5, "validation_table": 4, "eval_table": 7, "card": 3, "compare": 5, "integrity": 1}),
    _M("late_legal_rate", "Late legal rate", "late legal", "fraction", "max", ("late_legal_move_rate", "late_legal_rate"),
       "published/late_legal_rate", ("val", "eval"),
       views={"pretrain_val": 6, "eval_table": 8, "card": 4, "compare": 6, "integrity": 2}),
    _M("illegal_pred_rate", "Illegal prediction rate", "illegal pred", "fraction", "min", ("val_illegal_pred_rate",),
       "published/illegal_pred_rate", ("val", "eval"), views={"adapt_val": 4, "eval_table": 9}),
    _M("illegal_prob_mass", "Illegal probability mass", "illegal mass", "fraction", "min", ("val_illegal_prob_mass",),
       "published/illegal_prob_mass", ("val", "eval"), views={"adapt_val": 5, "eval_table": 10}),
    _M("completion_rate", "Game completion (teacher-forced)", "completion", "fraction", "max", ("game_completion_rate",),
       "published/completion_rate", ("val", "eval"),
       views={"pretrain_val": 7, "validation_table": 5, "eval_table": 11, "compare": 7, "integrity": 3}),
    _M("avg_plies_completed", "Avg plies completed", "plies completed", "plies", "max", ("avg_plies_completed",),
       "published/avg_plies_completed", ("val", "eval"), ".1f", views={"pretrain_val": 8, "eval_table": 12, "compare": 8}),
    _M("avg_pct_completion", "Avg % of game completed", "% completed", "fraction", "max", ("avg_pct_completion",),
       "published/avg_pct_completion", ("val", "eval"), views={"pretrain_val": 9, "eval_table": 13}),
    _M("median_forfeit_ply", "Median forfeit ply", "forfeit ply", "plies", "max", ("median_forfeit_ply",),
       "published/median_forfeit_ply", ("val", "eval"), ".0f", views={"pretrain_val": 10, "compare": 9}),
    _M("forfeit_ply", "Forfeit ply min / median / max", "forfeit ply", "plies", "max", (), None, ("eval",), ".0f"),
    _M("games", "Games", "games", "count", None, ("n_games",), "counts/n_games", ("eval",), ".0f"),
    _M("positions", "Positions", "positions", "count", None, ("val_positions",), "counts/n_positions", ("val", "eval"), ".0f"),
    # --- optimisation (train)
    _M("lr", "Learning rate", "lr", "lr", None, ("lr",), None, ("train",), ".3g", views={"compare": 11}),
    _M("grad_norm", "Gradient norm", "grad norm", "norm", None, ("grad_norm",), None, ("train",), ".3g", views={"compare": 12}),
    _M("grad_norm_mean", "Gradient norm, chunk mean", "grad norm mean", "norm", None, ("grad_norm_mean",), None, ("train",), ".3g"),
    _M("n_supervised_mean", "Supervised positions per step", "supervised", "count", None, ("n_supervised_mean",), None,
       ("train",), ".1f"),
    # --- throughput and time (train, val)
    _M("tokens_per_s", "Tokens/s", "tok/s", "tokens/s", "max", ("tokens_per_s",), None, ("train",), ",.0f",
       views={"compare": 13}),
    _M("games_per_s", "Games/s", "games/s", "games/s", "max", ("games_per_s",), None, ("train",), ",.1f"),
    _M("data_wait_s", "Data wait (s)", "data wait", "seconds", "min", ("data_wait_s",), None, ("train",), ".3f"),
    _M("data_wait_frac", "Data-wait fraction", "data wait", "fraction", "min", ("data_wait_frac",), None, ("train",),
       views={"compare": 14}),
    _M("chunk_wall_s", "Chunk wall time (s)", "chunk s", "seconds", "min", ("chunk_wall_s",), None, ("train",), ".2f"),
    _M("val_wall_s", "Validation wall time (s)", "val s", "seconds", "min", ("val_wall_s",), None, ("train", "val"), ".2f"),
    _M("checkpoint_wall_s", "Checkpoint wall time (s)", "ckpt s", "seconds", "min", ("checkpoint_wall_s",), None, ("train",), ".2f"),
)

METRICS: dict[str, Metric] = {}
"""Key → :class:`Metric`, for every metric PAWN writes or shows, in registration order."""

V1_NAMES: dict[str, str] = {}
"""Every older name (``accuracy``, ``val_top1``, ``late_legal_move_rate``…) → its key."""


def register(row: Metric) -> Metric:
    """Add ``row`` to :data:`METRICS` (and its older names to :data:`V1_NAMES`); every record,
    table, chart and card that reads the registry then shows it where its ``kinds`` and
    ``views`` say.

    Raises:
        ValueError: the key is registered already, or one of its names is another metric's.
    """
    if row.key in METRICS:
        raise ValueError(f"pawn.metrics: metric {row.key!r} is registered twice")
    for name in (row.key, *row.v1):
        if V1_NAMES.get(name, row.key) != row.key:
            raise ValueError(f"pawn.metrics: the name {name!r} maps to both {V1_NAMES[name]!r} and {row.key!r}")
    METRICS[row.key] = row
    for name in (row.key, *row.v1):
        V1_NAMES[name] = row.key
    return row


def unregister(key: str) -> None:
    """Remove metric ``key`` and its older names (the inverse of :func:`register`; for tests and
    plug-ins that add a metric for a while). Raises KeyError for an unknown key."""
    row = METRICS.pop(key)
    for name in (row.key, *row.v1):
        V1_NAMES.pop(name, None)


for _row in _ROWS:
    register(_row)


def in_view(view: str) -> list[Metric]:
    """The rows shown in ``view``, in their place order (ties in registry order).

    Raises:
        KeyError: an unknown view.
    """
    if view not in VIEWS:
        raise KeyError(f"unknown view {view!r}; known: {', '.join(VIEWS)}")
    rows = [m for m in METRICS.values() if view in m.views]
    return sorted(rows, key=lambda m: m.views[view])  # sorted() is stable: ties keep registry order


def keys_in(view: str) -> tuple[str, ...]:
    """The keys of :func:`in_view`."""
    return tuple(m.key for m in in_view(view))


class ViewKeys(Sequence[str]):
    """The keys of one view as a live, read-only sequence: it reads :data:`METRICS` at each use,
    so a metric registered after import shows too. Compares equal to a tuple of the same keys."""

    def __init__(self, view: str):
        if view not in VIEWS:
            raise KeyError(f"unknown view {view!r}; known: {', '.join(VIEWS)}")
        self.view = view

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...
    def __getitem__(self, i):
        return keys_in(self.view)[i]

    def __len__(self) -> int:
        return len(keys_in(self.view))

    def __iter__(self) -> Iterator[str]:
        return iter(keys_in(self.view))

    def __contains__(self, key: object) -> bool:
        m = METRICS.get(key) if isinstance(key, str) else None
        return m is not None and self.view in m.views

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (ViewKeys, tuple, list)) else other)

    def __hash__(self) -> int:
        return hash((ViewKeys, self.view))

    def __repr__(self) -> str:
        return f"ViewKeys({self.view!r}: {', '.join(self)})"


class _EvalTable(Sequence[tuple[str, str, Optional[str]]]):
    """The ``eval_table`` view as ``(key, eval_key, moves_only_key)`` rows, live like :class:`ViewKeys`."""

    def _rows(self) -> tuple[tuple[str, str, Optional[str]], ...]:
        return tuple((m.key, m.eval_key or "", m.moves_only_key) for m in in_view("eval_table"))

    def __getitem__(self, i):
        return self._rows()[i]

    def __len__(self) -> int:
        return len(self._rows())

    def __iter__(self):
        return iter(self._rows())

    def __repr__(self) -> str:
        return f"EVAL_TABLE{self._rows()!r}"


EVAL_TABLE: Sequence[tuple[str, str, Optional[str]]] = _EvalTable()
"""The rows of ``pawn eval``'s published / moves-only table (the ``eval_table`` view): (metric
key, its key in a model's ``random_games`` block for the published (v1) convention, for the
moves-only (v2) one or None). The CLI table and the report's Suite section both read it."""

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

VALIDATION_COLUMNS: Sequence[str] = ViewKeys("validation_table")
"""The per-variant columns of the pretrain validation table (the ``validation_table`` view)."""


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
    return {m.key: random_games[m.eval_key] for m in METRICS.values() if m.eval_key and m.eval_key in random_games}
