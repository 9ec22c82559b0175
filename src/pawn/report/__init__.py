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
import importlib.util
import json
import os
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from pawn.errors import PawnError
from pawn.report.suite import annotate
from pawn.runs import Run, RunError, discover_runs, open_run, read_file_within

REPORT_FILE = "report.html"
MAX_JSON_BYTES = 20 * 2**20
"""JSON files larger than this are not opened while looking for eval/bench reports."""
_NOT_REPORTS = frozenset({"config.json", "training_state.json", "schedule_health.json", "best_config.json", "lab.json"})
_SKIP_DIRS = frozenset({"checkpoints", "variants", "tensorboard", "wandb", "jax-cache"})


class ReportError(PawnError):
    """Nothing to report under the paths, a missing extra, or an output that cannot be written."""


def has_plotly() -> bool:
    """Whether plotly (the ``report`` extra) can be imported, without importing it."""

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
    """``"suite"`` for a ``pawn eval --suite`` file (:mod:`pawn.report.suite`), ``"eval"`` for a
    ``pawn eval --json`` report (``models`` list), ``"bench"`` for a ``pawn bench --json`` report
    (``header`` and ``sections``), else None."""
    from pawn.report.suite import is_suite

    if is_suite(d):
        return "suite"
    if isinstance(d, dict) and isinstance(d.get("models"), list) and "settings" in d:
        return "eval"
    if isinstance(d, dict) and "header" in d and isinstance(d.get("sections"), list):
        return "bench"
    return None


_EVAL_MODEL_FIELDS = ("name", "prepend_outcome", "random_games", "eval_wall_s", "lichess", "held_out")
_BENCH_FIELDS = ("header", "settings", "sections", "completed_sections", "interrupted", "wall_s")


def report_fields(kind: str, d: dict[str, Any]) -> dict[str, Any]:
    """The fields of a report of ``kind`` (:func:`report_kind`) that its card on the page shows,
    and nothing else of the file: an eval report's ``checkpoint``, ``hub``, ``settings`` and per
    model the fields ``pawn eval --json`` writes (:data:`_EVAL_MODEL_FIELDS`); a bench report's
    header, settings, section lists, ``interrupted``, ``wall_s`` and the record of each section it
    lists; a suite's ``kind``, ``suite_version``, ``checkpoint``, ``hub`` and ``settings`` (its
    models are drawn from :func:`pawn.report.suite.suite_view`)."""
    if kind == "eval":
        models = [{k: _without_per_game(m[k]) for k in _EVAL_MODEL_FIELDS if k in m} for m in d.get("models") or [] if isinstance(m, dict)]
        return {**{k: d[k] for k in ("checkpoint", "hub", "settings") if k in d}, "models": models}
    if kind == "bench":
        names = [x for x in d.get("sections") or [] if isinstance(x, str) and x not in _BENCH_FIELDS]
        return {k: d[k] for k in (*_BENCH_FIELDS, *names) if k in d}
    if kind == "suite":
        return {k: d[k] for k in ("kind", "suite_version", "checkpoint", "hub", "settings") if k in d}
    return {}


def _without_per_game(v: Any) -> Any:
    """A held-out block (``{…, "per_game": {…}}``) without its per-game lists; anything else as it is."""
    return {k: x for k, x in v.items() if k != "per_game"} if isinstance(v, dict) and "per_game" in v else v


def report_entry(path: Path, d: Any) -> Optional[dict[str, Any]]:
    """The page's entry of the JSON ``d`` read from ``path``: ``{"path", "kind", "report"}`` with
    only :func:`report_fields` (and ``suite``, the suite view), or None when ``d`` is no eval,
    suite or bench report."""
    kind = report_kind(d)
    if kind is None:
        return None
    entry = annotate({"path": str(path), "kind": kind, "report": d})
    entry["report"] = report_fields(kind, d)
    return entry


def inside(path: Path, boundary: Optional[Path]) -> bool:
    """Whether ``path`` resolves (symbolic links followed) to ``boundary`` or inside it; always
    True without a boundary. ``boundary`` must be resolved already."""
    if boundary is None:
        return True
    try:
        r = Path(path).resolve()
    except (OSError, ValueError, RuntimeError):  # RuntimeError: a symbolic link loop
        return False
    return r == boundary or boundary in r.parents


def _json_reports(paths: Iterable[Path], skip: set[Path], bounds: dict[Path, Optional[Path]]) -> list[dict[str, Any]]:
    out = []
    seen: set[Path] = set()
    for p in paths:
        files = [p] if p.is_file() else sorted(p.rglob("*.json")) if p.is_dir() else []
        for f in files:
            if not inside(f, bounds.get(p)):
                continue  # a link out of the folder searched (or a dangling link, a loop): not shown
            f = f.resolve()
            if (f in seen or f.suffix != ".json" or f.name in _NOT_REPORTS or any(s in f.parents for s in skip)
                    or any(part in _SKIP_DIRS for part in f.parts)):
                continue
            seen.add(f)
            try:  # a regular file only (a FIFO would be waited on for good, /dev/zero read without end)
                d = json.loads(read_file_within(f, bounds.get(p) or f.parent, MAX_JSON_BYTES))
            except (RunError, ValueError):
                continue
            entry = report_entry(f, d)
            if entry is not None:
                out.append(entry)
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


def checkpoint_for_top_moves(spec: str, runs: Sequence[Run]) -> str:
    """The checkpoint ``--checkpoint`` names: ``best`` = the best checkpoint of the one run among
    the paths (``checkpoints/best``, else its newest verified checkpoint); a run directory = its
    best checkpoint likewise; anything else (a checkpoint directory, a Hub id) as given.

    Raises:
        ReportError: ``best`` with no run or several runs, or a run without a checkpoint.
    """
    if spec == "best":
        if len(runs) != 1:
            raise ReportError(f"--checkpoint best needs exactly one run among the paths (found {len(runs)}); "
                              "give the checkpoint directory instead")
        run = runs[0]
    elif (Path(spec) / "metrics.jsonl").is_file() and (Path(spec) / "checkpoints").is_dir():
        run = open_run(spec)
    else:
        return spec
    if run.best is not None:
        return str(run.best)
    done = [c for c in run.checkpoints() if c.verified]
    if not done:
        raise ReportError(f"--checkpoint {spec}: the run {run.path} has no complete checkpoint yet")
    return str(done[-1].path)


def top_moves(game_list: list[dict[str, Any]], checkpoint: str, *, variant: Optional[str] = None, k: int = 5,
              log: Any = lambda _m: None) -> dict[str, Any]:
    """Load ``checkpoint`` (:func:`pawn.evaluate.runs.load`; a supernet: ``variant``, else its
    largest variant) and add its top-``k`` moves at every position of the games
    (:func:`pawn.report.games.add_predictions`), at the context it was trained at. Returns
    ``{"model", "source", "k", "seq_len", "layout"}``.

    Raises:
        ReportError: the games hold a move the engine refuses. The loading errors of
            :func:`pawn.evaluate.runs.load` (PawnError, one line each).
    """
    from pawn.data.layout import Layout
    from pawn.evaluate import runs as eruns
    from pawn.report.games import add_predictions

    models = eruns.load(checkpoint, variant)
    lm = models[-1]
    if len(models) > 1:
        log(f"{checkpoint} is a supernet: top moves of its largest variant {lm.name} (--variant to choose)")
    layout = Layout.resolve(None, lm.layout)
    ctx = lm.config.max_seq_len
    seq_len = min(lm.trained_seq_len or ctx, ctx)
    try:
        add_predictions(game_list, lm.model, name=lm.name, source=checkpoint, seq_len=seq_len,
                        prepend_outcome=layout.prepend_outcome, k=k)
    except ValueError as e:
        raise ReportError(f"top moves of {checkpoint}: {e}") from None
    return {"model": lm.name, "source": checkpoint, "k": k, "seq_len": seq_len, "layout": layout.name}


def collect(paths: Sequence[str | os.PathLike], *, games: bool = True, checkpoint: Optional[str] = None,
            variant: Optional[str] = None, top_k: int = 5, log: Any = lambda _m: None,
            within: Optional[str | os.PathLike] = None, verify_checkpoints: bool = True) -> dict[str, Any]:
    """What the report shows of ``paths`` (run directories, folders holding runs, studies, PGN
    files, eval/bench JSON files, and database URLs (``postgresql://…``) of studies that several
    machines' workers share), as the JSON-ready dict the page embeds: ``runs`` (one
    :func:`pawn.report.data.run_data` each), ``studies``, ``games``, ``evals`` (files outside the
    runs; only the fields their cards show, :func:`report_fields`), ``labels`` (metric key →
    label), ``compare_default`` (the runs ticked at first: all when at most 6), ``top_moves``
    (with ``checkpoint``: the model whose top-``top_k`` moves the Games page shows at each
    position, :func:`top_moves`; else None). ``verify_checkpoints`` False leaves every
    checkpoint manifest unchecked (``verified`` None; nothing is hashed). ``log`` gets one line
    per run read (``reading run 3/6: PATH (12 s so far)``), then for the studies and PGN files.

    What is found by searching a folder among ``paths`` must resolve inside it (or inside
    ``within``, the dashboard's root, when given): a symbolic link to a file or folder outside is
    skipped, as the run search skips linked folders. A file named directly in ``paths`` is read
    as given.

    Raises:
        ReportError: a path that does not exist, or nothing to report under any path; ``checkpoint``
            as :func:`checkpoint_for_top_moves` and :func:`top_moves`.
    """

    from pawn.metrics import METRICS

    try:
        __version__ = version("pawn")
    except PackageNotFoundError:
        __version__ = "0.0.0+unknown"
    from pawn.report import data as rdata
    from pawn.report import games as rgames
    from pawn.report import sweep as rsweep

    urls = [str(p) for p in paths if "://" in str(p)]  # a database several machines' sweep workers share
    roots = [Path(p) for p in paths if "://" not in str(p)]
    for p in roots:
        if not p.exists():
            raise ReportError(f"{p}: no such file or directory")
    limit = Path(within).resolve() if within is not None else None
    bounds = {p: (limit or p.resolve()) if p.is_dir() else limit for p in roots}
    runs: list[Run] = []
    seen: set[Path] = set()
    for p in roots:
        if p.is_dir():
            try:
                found = [open_run(p)] if (p / "metrics.jsonl").is_file() else discover_runs(p)
            except RunError as e:
                raise ReportError(str(e)) from None
            for r in found:
                if not all(inside(r.path / f, bounds[p]) for f in ("metrics.jsonl", "config.json")):
                    continue  # its record is a link out of the folder searched
                if r.path.resolve() not in seen:
                    seen.add(r.path.resolve())
                    runs.append(r)
    labels = _labels(runs)
    ids = {str(r.path.resolve()): f"r{i}" for i, r in enumerate(runs)}
    run_items = []
    t0 = time.monotonic()
    for i, r in enumerate(runs):  # the slow part (records, checkpoint hashes): one line per run
        log(f"reading run {i + 1}/{len(runs)}: {r.path} ({time.monotonic() - t0:.0f} s so far)")
        d = rdata.run_data(r, f"r{i}", verify_checkpoints)
        d["label"] = labels[i]
        run_items.append(d)
    def found_inside(find, file_of=lambda x: x) -> list:
        """What ``find`` finds under each root whose file resolves inside that root's boundary."""
        out: list = []
        for p in roots:
            out += [x for x in find([p]) if x not in out and inside(file_of(x), bounds[p])]
        return out

    storages = found_inside(rsweep.find_storages, rsweep.storage_file)
    for url in urls:
        rsweep.open_study_storage(url)  # one line naming it (password hidden) when it cannot be read
    if storages or urls:
        log(f"reading {len(storages) + len(urls)} sweep stud{'y' if len(storages) + len(urls) == 1 else 'ies'}")
    studies = rsweep.read_studies(storages + urls, ids)
    for s in studies:
        s["figures"] = rsweep.figures(s) if s.get("trials") else []
    pgns = sorted(found_inside(rgames.find_pgns)) if games else []
    if pgns:
        log(f"reading {len(pgns)} PGN file{'s' if len(pgns) != 1 else ''}")
    game_list = rgames.read_games(pgns) if games else []
    moves_info = None
    if checkpoint is not None and game_list:
        moves_info = top_moves(game_list, checkpoint_for_top_moves(checkpoint, runs), variant=variant, k=top_k, log=log)
    rgames.pack_boards(game_list)  # after the top moves redrew them
    evals = _json_reports(roots, skip={r.path.resolve() for r in runs}, bounds=bounds)
    if not (run_items or studies or game_list or evals):
        raise ReportError(f"nothing to report under {', '.join(map(str, roots))}: no PAWN run directory "
                          "(config.json + metrics.jsonl), study.db, PGN or eval/bench JSON")
    return {"generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "pawn_version": __version__,
            "runs": run_items, "studies": studies, "games": game_list, "evals": evals, "top_moves": moves_info,
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


def write_report(paths: Sequence[str | os.PathLike], out: str | os.PathLike, *, title: Optional[str] = None,
                 checkpoint: Optional[str] = None, variant: Optional[str] = None, top_k: int = 5,
                 log: Any = lambda _m: None, verify_checkpoints: bool = True) -> Path:
    """:func:`collect` (with ``checkpoint``: the model's top moves on the Games page;
    ``verify_checkpoints`` False: no checkpoint is hashed) + :func:`build_html`, written to
    ``out`` atomically (temp file, rename). ``log`` is told what is being read (one line per
    run, then the studies, the PGN files) and when the page is built.

    Raises:
        ReportError: nothing to report, plotly missing. OutputPathError: ``out`` cannot be written.
    """
    from pawn.fileio import atomic_output, check_output_file

    out = check_output_file(out, "--out")
    require_plotly()
    data = collect(paths, checkpoint=checkpoint, variant=variant, top_k=top_k, log=log,
                   verify_checkpoints=verify_checkpoints)
    log("building the page")
    html = build_html(data, title)
    with atomic_output(out) as tmp:
        Path(tmp).write_text(html, "utf-8")
    return out


__all__ = ["REPORT_FILE", "ReportError", "collect", "top_moves", "checkpoint_for_top_moves", "build_html", "write_report", "has_plotly", "require_plotly"]
