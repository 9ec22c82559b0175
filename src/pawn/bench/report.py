"""Rendering of a :class:`~pawn.bench.runner.BenchReport`: each section's record becomes a
:class:`TableView` (title, columns named by metric key, rows of values, notes), and one printer,
:func:`print_report`, renders every view through the single metric-name table :data:`METRICS`
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


@dataclass(frozen=True)
class Metric:
    """A column: its header, whether it is left-aligned and how a value is written."""

    label: str
    fmt: Callable[[Any], str] = str
    left: bool = False


METRICS: dict[str, Metric] = {
    # labels and row names
    "workload": Metric("workload", left=True), "form": Metric("form", left=True), "source": Metric("source", left=True),
    "remat": Metric("remat", left=True), "quantity": Metric("quantity", left=True), "value": Metric("value"),
    "attention": Metric("attention"), "threads": Metric("threads"), "processes": Metric("processes"),
    # times
    "time_ms": Metric("time ms", lambda m: m if isinstance(m, str) else _ms(m)),
    "call_ms": Metric("time ms (per call)", _ms), "batch_build_ms": Metric("batch build ms", _ms),
    "first_call_s": Metric("first call s", lambda x: _n(x, 2)), "compile_s": Metric("compile s", lambda x: _n(x, 2)),
    "chunk_compile_s": Metric("compile s", lambda x: f"{x:.1f}"),
    "wall_s": Metric("train wall s", lambda x: _n(x, 2)), "wait_s": Metric("data wait s", lambda x: _n(x, 3)),
    "wait_frac": Metric("wait fraction", lambda x: f"{100 * x:.1f}%"), "window_s": Metric("window s", lambda x: _n(x, 2)),
    # compiled memory (GiB per device)
    **{f"{k}_gib": Metric(f"{lab} GiB", lambda x: f"{x:.2f}")
       for k, lab in (("temp", "temp"), ("argument", "args"), ("output", "out"), ("alias", "alias"), ("peak", "peak"))},
    # throughputs (work / time)
    "rate": Metric("rate (median)"), "rate_range": Metric("rate min–max"),
    "tokens": Metric("tokens"), "positions": Metric("positions", lambda x: f"{x:,}"),
    "tokens_per_s": Metric("tokens/s", _n), "tokens_per_s_range": Metric("tokens/s min–max"),
    "positions_per_s": Metric("positions/s", _n), "positions_per_s_range": Metric("positions/s min–max"),
    "games_per_s": Metric("games/s", _n), "eval_games_per_s": Metric("games/s", lambda x: _n(x, 1)),
    "steps_per_s": Metric("steps/s", lambda x: _n(x, 2)),
    "train_tokens_per_s": Metric("train tokens/s", _n), "aggregate_tokens_per_s": Metric("aggregate tokens/s"),
    "per_process_tokens_per_s": Metric("per-process tokens/s"), "speedup_vs_1": Metric("speed-up vs 1"),
}
"""Every column ``pawn bench`` prints, by metric key."""


@dataclass
class TableView:
    """One printed table: ``columns`` are :data:`METRICS` keys or ad-hoc :class:`Metric`\\ s,
    ``rows`` map a column's key (or label, for ad-hoc ones) to its value (missing = blank), and
    ``notes`` are dim lines printed under the table."""

    title: str
    columns: list[Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _memory(m) -> TableView:
    dev_cols = [Metric(f"fits {d['name'].split(' (')[0]}", _YES.__getitem__) for d in m.named_devices]
    cap = m.this_device["bytes"]
    here = Metric(f"fits here ({cap / 2**30:.0f} GiB)" if cap else "fits here", lambda x: x if isinstance(x, str) else _YES[x])
    v = TableView(f"compiled train-step memory: {m.model}, batch {m.batch_size} × seq {m.seq_len} ({m.compute_dtype}), "
                  f"K = {m.steps_per_chunk}, accumulation {m.accumulation_steps}, per device ({m.backend})",
                  ["remat", "attention", "temp_gib", "argument_gib", "output_gib", "alias_gib", "peak_gib", "chunk_compile_s",
                   *dev_cols, here],
                  notes=[f"{m.source}; fits = peak ≤ {100 * (1 - m.headroom):.0f}% of the device; this device: {m.this_device['source']}"])
    for r in m.rows:
        v.rows.append({"remat": r.remat, "attention": r.attention, **r.estimate, "chunk_compile_s": r.compile_s,
                       **{c.label: r.fits[d["name"]] for c, d in zip(dev_cols, m.named_devices)},
                       here.label: r.estimate.get("verdict") or r.fits_this_device})
    return v


def _engine(e) -> TableView:
    v = TableView("engine", ["workload", "threads", "time_ms", "rate", "rate_range"])
    for r in e.threads:
        rg, pg, lm, th = r.random_games, r.parse_pgn, r.legal_masks, str(r.threads)
        v.rows += [
            {"workload": f"random games ×{rg.work['games']} (max_ply {rg.work['max_ply']})", "threads": th, "time_ms": rg,
             "rate": f"{_n(rg.rates['games_per_s'])} games/s, {_n(rg.rates['plies_per_s'])} plies/s",
             "rate_range": f"{_range(rg, 'games_per_s')} games/s"},
            {"workload": f"parse PGN ×{pg.work['games']} ({pg.work['mb']:.1f} MB, {pg.work['source']})", "threads": th,
             "time_ms": pg, "rate": f"{_n(pg.rates['games_per_s'])} games/s", "rate_range": _range(pg, "games_per_s")},
            {"workload": f"legal masks ×{lm.work['positions']} positions", "threads": th, "time_ms": lm,
             "rate": f"{_n(lm.rates['positions_per_s'])} positions/s", "rate_range": _range(lm, "positions_per_s")}]
    pc = e.python_chess
    if isinstance(pc, Measurement):
        v.rows.append({"workload": f"python-chess random games ×{pc.work['games']}", "threads": "1", "time_ms": pc,
                       "rate": f"{_n(pc.rates['games_per_s'], 1)} games/s, {_n(pc.rates['plies_per_s'])} plies/s",
                       "rate_range": f"{_range(pc, 'games_per_s', 1)} games/s"})
    elif pc:
        v.rows.append({"workload": "python-chess", "threads": "", "time_ms": "", "rate": pc["skipped"], "rate_range": ""})
    return v


def _step(st) -> TableView:
    names = {"eager": "eager (no jit)", "jit_step": "jit, 1 step per call", "scan_chunk": f"lax.scan chunk, {st.steps_per_chunk} steps"}
    v = TableView(f"train step: {st.model}, {st.param_count:,} params, batch {st.batch_size} × seq {st.seq_len} ({st.compute_dtype}), "
                  f"K = {st.steps_per_chunk}, remat {st.remat}, accumulation {st.accumulation_steps}",
                  ["form", "call_ms", "tokens_per_s", "tokens_per_s_range", "steps_per_s", "first_call_s", "compile_s"],
                  notes=["compile s = first call − steady-state median (tracing + XLA compile, an estimate)"])
    for k, f in st.forms.items():
        v.rows.append({"form": names[k], "call_ms": f, "tokens_per_s": f.rates["tokens_per_s"],
                       "tokens_per_s_range": _range(f, "tokens_per_s"), "steps_per_s": f.rates["steps_per_s"],
                       "first_call_s": f.first_call_s, "compile_s": f.compile_s})
    return v


def _mfu(m) -> TableView:
    rows = [(f"FLOPs/token {x.name} ({x.param_count:,} params)", f"{x.flops_per_token:,} (attention {x.attention_flops_per_token:,})")
            for x in m.variants]
    rows += [("FLOPs/token, step total", f"{m.flops_per_token:,}"), ("tokens/s (scan chunk)", _n(m.tokens_per_s)),
             ("achieved", f"{m.achieved_flops_per_s / 1e9:,.2f} GFLOP/s"), ("peak", f"{m.peak.flops_per_s / 1e9:,.2f} GFLOP/s"),
             ("MFU", f"{100 * m.mfu:.2f}%")]
    return TableView("MFU", ["quantity", "value"], [{"quantity": q, "value": x} for q, x in rows],
                     notes=[m.formula, f"peak: {m.peak.source}"])


def _data(d) -> TableView:
    v = TableView(f"data path: batch {d.batch_size} × seq {d.seq_len}",
                  ["source", "batch_build_ms", "games_per_s", "tokens_per_s", "wall_s", "wait_s", "wait_frac", "train_tokens_per_s"])
    for name, b in d.batch_build.items():
        tr = d.training[name]
        label = "fresh engine games" if name == "engine" else f"on-disk corpus ({d.corpus['games']:,} games)"
        v.rows.append({"source": label, "batch_build_ms": b, "games_per_s": b.rates["games_per_s"],
                       "tokens_per_s": b.rates["tokens_per_s"], "wall_s": tr.wall_s, "wait_s": tr.wait_s,
                       "wait_frac": tr.wait_frac, "train_tokens_per_s": tr.tokens_per_s})
    return v


def _concurrency(c) -> TableView:
    v = TableView(f"concurrency: independent training processes (spawned), {c.tokens_per_chunk:,} tokens per chunk",
                  ["processes", "window_s", "aggregate_tokens_per_s", "per_process_tokens_per_s", "speedup_vs_1"],
                  notes=["aggregate = all processes' tokens / one wall window, first start (barrier) to last finish"])
    for r in c.rows:
        if r.error is not None:
            v.rows.append({"processes": str(r.processes), "window_s": "", "aggregate_tokens_per_s": "failed",
                           "per_process_tokens_per_s": r.error[:80], "speedup_vs_1": ""})
        else:
            v.rows.append({"processes": str(r.processes), "window_s": r.window_s, "aggregate_tokens_per_s": _n(r.aggregate_tokens_per_s),
                           "per_process_tokens_per_s": ", ".join(_n(x) for x in r.per_process_tokens_per_s),
                           "speedup_vs_1": f"{r.speedup_vs_1:.2f}×"})
    return v


def _eval(ev) -> TableView:
    t = ev.timing
    cols = ["positions", "time_ms", "positions_per_s", "positions_per_s_range", "eval_games_per_s", "first_call_s"]
    return TableView(f"eval (teacher-forced, as pawn eval): {ev.model} ({ev.config}), {ev.games} games × {ev.seq_len} positions, "
                     f"batch {ev.batch_size}", cols,
                     [{"positions": ev.positions, "time_ms": t, "positions_per_s": t.rates["positions_per_s"],
                       "positions_per_s_range": _range(t, "positions_per_s"), "eval_games_per_s": t.rates["games_per_s"],
                       "first_call_s": t.first_call_s}])


def _decode(d) -> TableView:
    v = TableView(f"decode: {d.model} ({d.config}), legal sampling; step = one jitted model step, engine excluded",
                  ["workload", "form", "time_ms", "tokens", "tokens_per_s", "tokens_per_s_range", "first_call_s"])
    for w in d.workloads:
        wl = f"{w.games} games × {w.seq_len}"
        for name, f in (("step, KV cache", w.step.kv_cache), ("step, recompute", w.step.recompute)):
            v.rows.append({"workload": wl, "form": name, "time_ms": f, "first_call_s": f.first_call_s})
        v.rows.append({"workload": wl, "form": "step speed-up", "time_ms": f"{w.step.step_speedup:.2f}×"})
        for k, f in w.forms.items():
            v.rows.append({"workload": wl, "form": "generate, KV cache" if k == "kv_cache" else "generate, recompute", "time_ms": f,
                           "tokens": str(f.work["tokens"]), "tokens_per_s": f.rates["tokens_per_s"],
                           "tokens_per_s_range": _range(f, "tokens_per_s"), "first_call_s": f.first_call_s})
        if w.kv_speedup is not None:
            v.rows.append({"workload": wl, "form": "generate speed-up", "time_ms": f"{w.kv_speedup:.2f}×"})
    return v


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
    """A rich ``Table`` of ``view``; each cell is written by its column's :class:`Metric`."""
    from rich.table import Table

    t = Table(title=view.title)
    cols = [(c, c) if isinstance(c, Metric) else (METRICS[c], c) for c in view.columns]
    for m, _ in cols:
        t.add_column(m.label, justify="left" if m.left else "right")
    for row in view.rows:
        cells = []
        for m, key in cols:
            k = m.label if isinstance(key, Metric) else key
            if k not in row:
                cells.append("")
            elif isinstance(row[k], str) and m.fmt is not str and not isinstance(key, Metric):
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
