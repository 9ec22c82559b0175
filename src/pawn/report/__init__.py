"""``pawn report`` and ``pawn dashboard``: runs, comparisons, sweeps, games and eval/bench reports
as one self-contained HTML page (plotly with its JavaScript embedded, so it opens offline).

- :func:`collect` finds what the report shows under the given paths: run directories (through
  the run record, :mod:`pawn.runs`), Optuna studies (:mod:`pawn.report.sweep`), PGN files
  (:mod:`pawn.report.games`) and ``pawn eval --json`` / ``pawn bench --json`` reports;
- :func:`build_html` turns that into the page (:mod:`pawn.report.page`); :func:`write_report`
  writes it atomically.

plotly is the ``report`` extra (``pip install 'pawn[report]'``); without it :func:`require_plotly`
raises :class:`ReportError` naming the extra.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from pawn.errors import PawnError
from pawn.runs import Run, RunError, discover_runs, open_run

REPORT_FILE = "report.html"
MAX_JSON_BYTES = 20 * 2**20
"""JSON files larger than this are not opened while looking for eval/bench reports."""
_NOT_REPORTS = frozenset({"config.json", "training_state.json", "schedule_health.json", "best_config.json", "lab.json"})
_SKIP_DIRS = frozenset({"checkpoints", "variants", "tensorboard", "wandb", "jax-cache"})


class ReportError(PawnError):
    """Nothing to report under the paths, a missing extra, or an output that cannot be written."""


def has_plotly() -> bool:
    """Whether plotly (the ``report`` extra) can be imported, without importing it."""
    import importlib.util

    return importlib.util.find_spec("plotly") is not None


def require_plotly() -> str:
    """plotly.js's source (``plotly.offline.get_plotlyjs()``, ~4.7 MB) to embed in the page.

    Raises:
        ReportError: plotly is not installed (one line naming the extra).
    """
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise ReportError("pawn report needs plotly, which is not installed: pip install 'pawn[report]' "
                          "(or pip install plotly)") from None
    return get_plotlyjs()


def report_kind(d: Any) -> Optional[str]:
    """``"eval"`` for a ``pawn eval --json`` report (``models`` list), ``"bench"`` for a
    ``pawn bench --json`` report (``header`` and ``sections``), else None."""
    if isinstance(d, dict) and isinstance(d.get("models"), list) and "settings" in d:
        return "eval"
    if isinstance(d, dict) and "header" in d and isinstance(d.get("sections"), list):
        return "bench"
    return None


def _json_reports(paths: Iterable[Path], skip: set[Path]) -> list[dict[str, Any]]:
    out = []
    seen: set[Path] = set()
    for p in paths:
        files = [p] if p.is_file() else sorted(p.rglob("*.json")) if p.is_dir() else []
        for f in files:
            f = f.resolve()
            if (f in seen or f.suffix != ".json" or f.name in _NOT_REPORTS or any(s in f.parents for s in skip)
                    or any(part in _SKIP_DIRS for part in f.parts)):
                continue
            seen.add(f)
            try:
                if f.stat().st_size > MAX_JSON_BYTES:
                    continue
                d = json.loads(f.read_text("utf-8"))
            except (OSError, ValueError):
                continue
            kind = report_kind(d)
            if kind:
                out.append({"path": str(f), "kind": kind, "report": d})
    return out


def _labels(runs: Sequence[Run]) -> list[str]:
    """Short unique names: the run paths relative to their common parent."""
    if not runs:
        return []
    paths = [r.path.resolve() for r in runs]
    if len(paths) == 1:
        return [paths[0].name]
    common = Path(os.path.commonpath([str(p) for p in paths]))
    return [str(p.relative_to(common)) if p != common else p.name for p in paths]


def collect(paths: Sequence[str | os.PathLike], *, games: bool = True) -> dict[str, Any]:
    """What the report shows of ``paths`` (run directories, folders holding runs, studies, PGN
    files, eval/bench JSON files), as the JSON-ready dict the page embeds: ``runs`` (one
    :func:`pawn.report.data.run_data` each), ``studies``, ``games``, ``evals`` (files outside the
    runs), ``labels`` (metric key → label), ``compare_default`` (the runs ticked at first: all
    when at most 6).

    Raises:
        ReportError: a path that does not exist, or nothing to report under any path.
    """
    from importlib.metadata import PackageNotFoundError, version

    from pawn.metrics import METRICS

    try:
        __version__ = version("pawn")
    except PackageNotFoundError:
        __version__ = "0.0.0+unknown"
    from pawn.report import data as rdata
    from pawn.report import games as rgames
    from pawn.report import sweep as rsweep

    roots = [Path(p) for p in paths]
    for p in roots:
        if not p.exists():
            raise ReportError(f"{p}: no such file or directory")
    runs: list[Run] = []
    seen: set[Path] = set()
    for p in roots:
        if p.is_dir():
            try:
                found = [open_run(p)] if (p / "metrics.jsonl").is_file() else discover_runs(p)
            except RunError as e:
                raise ReportError(str(e)) from None
            for r in found:
                if r.path.resolve() not in seen:
                    seen.add(r.path.resolve())
                    runs.append(r)
    labels = _labels(runs)
    ids = {str(r.path.resolve()): f"r{i}" for i, r in enumerate(runs)}
    run_items = []
    for i, r in enumerate(runs):
        d = rdata.run_data(r, f"r{i}")
        d["label"] = labels[i]
        run_items.append(d)
    studies = rsweep.read_studies(rsweep.find_storages(roots), ids)
    for s in studies:
        s["figures"] = rsweep.figures(s) if s.get("trials") else []
    game_list = rgames.read_games(rgames.find_pgns(roots)) if games else []
    evals = _json_reports(roots, skip={r.path.resolve() for r in runs})
    if not (run_items or studies or game_list or evals):
        raise ReportError(f"nothing to report under {', '.join(map(str, roots))}: no PAWN run directory "
                          "(config.json + metrics.jsonl), study.db, PGN or eval/bench JSON")
    return {"generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "pawn_version": __version__,
            "runs": run_items, "studies": studies, "games": game_list, "evals": evals,
            "labels": {k: m.label for k, m in METRICS.items()},
            "compare_default": [d["id"] for d in run_items] if len(run_items) <= 6 else []}


def build_html(data: dict[str, Any], title: Optional[str] = None, live: Optional[dict[str, Any]] = None) -> str:
    """The page of :func:`collect`'s ``data``. ``live`` (the dashboard): ``{"stamp_url", "stamp",
    "every_ms"}``; the page reloads when the stamp the URL answers changes.

    Raises:
        ReportError: plotly is missing.
    """
    from pawn.report.page import render

    js = require_plotly()
    if live:
        data = {**data, "live": live}
    if title is None:
        runs = data.get("runs") or []
        title = f"PAWN · {runs[0]['label']}" if len(runs) == 1 else f"PAWN report · {len(runs)} runs"
    return render(data, js, title)


def write_report(paths: Sequence[str | os.PathLike], out: str | os.PathLike, *, title: Optional[str] = None) -> Path:
    """:func:`collect` + :func:`build_html`, written to ``out`` atomically (temp file, rename).

    Raises:
        ReportError: nothing to report, plotly missing. OutputPathError: ``out`` cannot be written.
    """
    from pawn.fileio import atomic_output, check_output_file

    out = check_output_file(out, "--out")
    require_plotly()
    html = build_html(collect(paths), title)
    with atomic_output(out) as tmp:
        Path(tmp).write_text(html, "utf-8")
    return out


__all__ = ["REPORT_FILE", "ReportError", "collect", "build_html", "write_report", "has_plotly", "require_plotly"]
