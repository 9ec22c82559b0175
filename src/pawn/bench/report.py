"""Rendering of a :class:`~pawn.bench.runner.BenchReport`: each section's record becomes a
:class:`TableView` (title, columns named by column key, rows of values, notes) through the
``view`` of its section module (beside the section's ``run``), and one printer,
:func:`print_report`, renders every view through the single column table :data:`COLUMNS`
(column label, alignment, number format)."""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, Callable, Optional, Sequence

from pawn.bench.records import Measurement
from pawn.bench.section import SECTIONS


def _n(x: Optional[float], digits: int = 0) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def _ms(m: Measurement) -> str:
    return f"{1e3 * m.median_s:,.2f} ({1e3 * m.min_s:,.2f}–{1e3 * m.max_s:,.2f})"


def _range(m: Measurement, unit: str, digits: int = 0) -> str:
    return f"{_n(m.rates[f'{unit}_min'], digits)}–{_n(m.rates[f'{unit}_max'], digits)}"


_YES = {True: "yes", False: "no", None: "?"}


def size_text(n: Optional[float]) -> str:
    """A size in bytes written in the binary unit that fits it, three significant figures:
    ``0 B``, ``512 B``, ``4.25 MiB``, ``186 MiB``, ``11.6 GiB`` (``—`` for None). Units are
    powers of 1024 (IEC 60027-2: KiB, MiB, GiB, TiB)."""
    if n is None:
        return "—"
    v, unit = float(n), "B"
    for nxt in ("KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1023.5:  # 1023.7 MiB reads "1.00 GiB", not "1024 MiB"
            break
        v, unit = v / 1024, nxt
    if unit == "B":
        return f"{v:.0f} B"
    return f"{v:.{2 if abs(v) < 9.995 else 1 if abs(v) < 99.95 else 0}f} {unit}"


@dataclass(frozen=True)
class BenchColumn:
    """A column of a ``pawn bench`` table: its header, whether it is left-aligned and how a value
    is written (a table column, not a :class:`pawn.metrics.Metric` of the run records)."""

    label: str
    fmt: Callable[[Any], str] = str
    left: bool = False


COLUMNS: dict[str, BenchColumn] = {
    # labels and row names
    "workload": BenchColumn("workload", left=True), "form": BenchColumn("form", left=True), "source": BenchColumn("source", left=True),
    "remat": BenchColumn("remat", left=True), "quantity": BenchColumn("quantity", left=True), "value": BenchColumn("value"),
    "attention": BenchColumn("attention"), "threads": BenchColumn("threads"), "processes": BenchColumn("processes"),
    # times
    "time_ms": BenchColumn("time ms", lambda m: m if isinstance(m, str) else _ms(m)),
    "call_ms": BenchColumn("time ms (per call)", _ms), "batch_build_ms": BenchColumn("batch build ms", _ms),
    "first_call_s": BenchColumn("first call s", lambda x: _n(x, 2)), "compile_s": BenchColumn("compile s", lambda x: _n(x, 2)),
    "chunk_compile_s": BenchColumn("compile s", lambda x: f"{x:.1f}"),
    "wall_s": BenchColumn("train wall s", lambda x: _n(x, 2)), "wait_s": BenchColumn("data wait s", lambda x: _n(x, 3)),
    "wait_frac": BenchColumn("wait fraction", lambda x: f"{100 * x:.1f}%"), "window_s": BenchColumn("window s", lambda x: _n(x, 2)),
    # compiled memory (bytes per device, written in the unit that fits each value)
    **{f"{k}_bytes": BenchColumn(lab, size_text)
       for k, lab in (("temp", "temp"), ("argument", "args"), ("output", "out"), ("alias", "alias"), ("peak", "peak"))},
    # throughputs (work / time)
    "rate": BenchColumn("rate (median)"), "rate_range": BenchColumn("rate min–max"),
    "tokens": BenchColumn("tokens"), "positions": BenchColumn("positions", lambda x: f"{x:,}"),
    "tokens_per_s": BenchColumn("tokens/s", _n), "tokens_per_s_range": BenchColumn("tokens/s min–max"),
    "positions_per_s": BenchColumn("positions/s", _n), "positions_per_s_range": BenchColumn("positions/s min–max"),
    "games_per_s": BenchColumn("games/s", _n), "eval_games_per_s": BenchColumn("games/s", lambda x: _n(x, 1)),
    "steps_per_s": BenchColumn("steps/s", lambda x: _n(x, 2)),
    "train_tokens_per_s": BenchColumn("train tokens/s", _n), "aggregate_tokens_per_s": BenchColumn("aggregate tokens/s"),
    "per_process_tokens_per_s": BenchColumn("per-process tokens/s"), "speedup_vs_1": BenchColumn("speed-up vs 1"),
}
"""Every named column ``pawn bench`` prints, by key."""


@dataclass
class TableView:
    """One printed table: ``columns`` are :data:`COLUMNS` keys or ad-hoc :class:`BenchColumn`\\ s,
    ``rows`` map a column's key (or label, for ad-hoc ones) to its value (missing = blank), and
    ``notes`` are dim lines printed under the table."""

    title: str
    columns: list[Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class _Views(Mapping):
    """Section name → its :attr:`~pawn.bench.section.Section.view` (a live view of the section table)."""

    def __getitem__(self, name: str) -> Callable[[Any], TableView]:
        return SECTIONS[name].view

    def __iter__(self):
        return iter(SECTIONS)

    def __len__(self) -> int:
        return len(SECTIONS)


VIEWS: Mapping[str, Callable[[Any], TableView]] = _Views()
"""Section name → the function that lays out its record as a :class:`TableView` (from the
section table, :data:`pawn.bench.section.SECTIONS`)."""


def render(view: TableView):
    """A rich ``Table`` of ``view``; each cell is written by its column's :class:`BenchColumn`."""
    from rich.table import Table

    t = Table(title=view.title)
    cols = [(c, c) if isinstance(c, BenchColumn) else (COLUMNS[c], c) for c in view.columns]
    for m, _ in cols:
        t.add_column(m.label, justify="left" if m.left else "right")
    for row in view.rows:
        cells = []
        for m, key in cols:
            k = m.label if isinstance(key, BenchColumn) else key
            if k not in row:
                cells.append("")
            elif isinstance(row[k], str) and m.fmt is not str and not isinstance(key, BenchColumn):
                cells.append(row[k])  # pre-written cell (a ratio, a blank)
            else:
                cells.append(m.fmt(row[k]))
        t.add_row(*cells)
    return t


def print_report(report, console=None, *, only: Optional[Sequence[str]] = None, header: bool = True, footer: bool = True) -> None:
    """Print a :class:`~pawn.bench.runner.BenchReport` as rich tables (one per section): the
    header line, the tables of the completed sections in ``only`` (default: all of them) and the
    total time."""
    from pawn.progress import output_console

    console = console or output_console()
    h = report.header
    if header:
        console.print(f"[bold]pawn bench[/bold] {h.timestamp}  {h.backend}: {h.device} ×{h.device_count}  "
                      f"JAX {h.jax_version}  CPU {h.cpu_model} ({h.cpus_available} threads available, "
                      f"rayon {h.rayon_threads})  pawn {h.pawn_version}")
        console.print("[dim]median (min–max) over timed runs after warm-up; rates are work / time[/dim]")
    for name in VIEWS:
        if name in report.results and (only is None or name in only):
            view = VIEWS[name](report.results[name])
            console.print(render(view))
            for note in view.notes:
                console.print(f"[dim]{note}[/dim]")
    if footer and report.wall_s is not None:
        console.print(f"[dim]total {report.wall_s:.1f} s[/dim]")
