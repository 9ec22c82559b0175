"""The ``pawn lab`` tools as plain functions: each takes JSON values and returns a JSON-ready
dict, and raises a :class:`pawn.errors.PawnError` (one line naming the run or argument) for a
request it cannot do. :mod:`pawn.lab.server` registers them as MCP tools.

Runs are read only through :mod:`pawn.runs` (the one run reader); the lab's own state is the
``lab.json`` of each run it started (:mod:`pawn.lab.procs`). Paths given as arguments are taken
relative to the lab server's working directory, and each must resolve (symbolic links followed)
inside the lab's runs root (:func:`runs_root`: ``pawn lab --dir``, else the working directory);
one that does not is refused before anything is read, written or started. So must every
path-valued setting in a ``lab_start`` config (:func:`path_fields`: a corpus folder, a cache, a
study storage file, a JSON output, a compilation cache).
"""

from __future__ import annotations

import contextvars
import json
import math
import os
import statistics
import tempfile
from collections import deque
from pathlib import Path
from typing import Any, Optional, Sequence

from pydantic import ValidationError

from pawn.errors import PawnError
from pawn.lab import procs
from pawn.lab.procs import CONFIG_FILE, LAB_FILE, LOG_FILE, LabError
from pawn.metrics import METRICS

COMMANDS = ("pretrain", "adapt", "sweep")
"""The commands the lab starts (``lab_schema``, ``lab_start``)."""

STALL_CHUNKS = 5.0
"""A running run is *stalled* when no record came for this many median gaps between its train records."""
STALL_MIN_S = 60.0
"""...and for at least this many seconds (a validation or checkpoint between chunks takes time)."""

TAIL_LIMIT = 1000
"""The most records one ``lab_tail`` call returns (the cursor then points past the last one returned)."""


# ============================================================================ helpers
RUNS_ROOT: contextvars.ContextVar[Optional[Path]] = contextvars.ContextVar("pawn_lab_runs_root", default=None)
"""The runs root of the lab serving the current tool call (set by :mod:`pawn.lab.server` around
each call); None: the working directory."""

STRING_PATHS = {"sweep": ("storage", "compilation_cache")}
"""Config keys, per command, of string type that name a path (besides the fields
:func:`path_fields` finds): a sweep's study storage (a database URL such as ``postgresql://`` is
no path) and its JAX compilation cache (``none``: no cache)."""


def runs_root() -> Path:
    """The folder every path argument must resolve inside (absolute, symbolic links resolved)."""
    root = RUNS_ROOT.get()
    return Path(root if root is not None else os.getcwd()).resolve()


def within_root(value: Any, what: str) -> Path:
    """``value`` as a path, after checking that it resolves (relative to the working directory,
    symbolic links followed, ``..`` applied) to the runs root or inside it.

    Returns:
        ``Path(value)`` as given (results name runs as the caller did).

    Raises:
        LabError: not a path string, or one outside the runs root (names the argument and the root).
    """
    if not isinstance(value, (str, os.PathLike)) or not str(value) or "\0" in str(value):
        raise LabError(f"{what}: expected a path inside the lab's runs root, got {value!r}")
    p = Path(value)
    root = runs_root()
    where = p.resolve()  # os.path.realpath: each link resolved before a following ".." applies, as the OS does
    if where != root and root not in where.parents:
        raise LabError(f"{what} {str(value)!r}: resolves to {where}, outside the lab's runs root {root} "
                       "(pawn lab --dir sets it); nothing was done")
    return p


def path_fields(command: str) -> tuple[str, ...]:
    """The settings of ``command`` whose value is a path, each held to the runs root by
    :func:`lab_start`: the fields tagged :data:`pawn.settings.PATH` (:func:`pawn.settings.fields_with`),
    the fields typed ``Path``, and :data:`STRING_PATHS` (``out`` and ``resume`` are arguments of
    their own)."""
    import typing

    from pawn.settings import PATH, fields_with

    model = settings_model(command)
    typed = [n for n, f in model.model_fields.items()
             if f.annotation is Path or Path in typing.get_args(f.annotation)]
    return tuple(k for k in dict.fromkeys([*fields_with(model, PATH), *typed, *STRING_PATHS.get(command, ())])
                 if k not in ("out", "resume"))


def _config_path(key: str, value: str) -> Optional[str]:
    """The local path a config value names, or None when it names none (a database or web URL, a
    compilation cache of ``none``)."""
    if key == "compilation_cache" and value.strip().lower() == "none":
        return None
    for prefix in ("sqlite:///", "journal:"):
        if value.startswith(prefix):
            return value[len(prefix):]
    return None if "://" in value else value


def _check_config_paths(command: str, config: dict[str, Any], out: Path) -> None:
    """Hold every path-valued key of ``config`` (:func:`path_fields`) to the runs root, as the
    started command will read it: from the working directory, and — a relative value — also from
    ``out``, where its config file lies (:func:`pawn.settings.resolve_config_paths` reads a
    relative path that exists beside the file from there).

    Raises:
        LabError: ``config: KEY 'VALUE': resolves to …, outside the lab's runs root …``.
    """
    for key in path_fields(command):
        v = config.get(key)
        if not isinstance(v, (str, os.PathLike)) or not str(v):
            continue
        p = _config_path(key, str(v))
        if p is None:
            continue
        within_root(p, f"config: {key}")
        if not os.path.isabs(p):
            beside = Path(os.path.abspath(out)) / p
            root = runs_root()
            where = beside.resolve()
            if where != root and root not in where.parents:
                raise LabError(f"config: {key} {str(v)!r}: resolves to {where} from the run folder {out}, outside the "
                               f"lab's runs root {root} (pawn lab --dir sets it); nothing was done")


def settings_model(command: str) -> type:
    """The pydantic-settings model of ``command`` (the one its flags are generated from).

    Raises:
        LabError: not one of :data:`COMMANDS`.
    """
    if command == "pretrain":
        from pawn.settings import PretrainConfig

        return PretrainConfig
    if command == "adapt":
        from pawn.train.adapt_config import AdaptSettings

        return AdaptSettings
    if command == "sweep":
        from pawn.sweep.settings import SweepSettings

        return SweepSettings
    raise LabError(f"command: {command!r} is not one of {', '.join(COMMANDS)}")


def _open(run: str):
    from pawn.runs import open_run

    return open_run(within_root(run, "run"))


def _finite(v: Any) -> Optional[float]:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _record_json(r, fields: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """A :class:`pawn.runs.Record` as JSON: ``type``, ``step``, ``offset``, the metric values
    (all, or those named in ``fields``, which may also name other fields such as ``elapsed``),
    ``variants`` when present (filtered the same way)."""
    out: dict[str, Any] = {"type": r.type, "step": r.step, "offset": r.offset}
    if fields is None:
        out.update(r.values)
        if r.variants:
            out["variants"] = r.variants
        out.update({k: v for k, v in r.fields.items() if k not in ("run_config", "model_config")})
        return out
    want = list(fields)
    for k in want:
        if k in r.values:
            out[k] = r.values[k]
        elif k in r.fields:
            out[k] = r.fields[k]
    if r.variants:
        vs = {n: {k: v[k] for k in want if k in v} for n, v in r.variants.items()}
        if any(vs.values()):
            out["variants"] = vs
    return out


def _seconds_per_step(train: list) -> Optional[float]:
    """Seconds per optimizer step over the last (up to 10) gaps between train records of the
    current segment (``elapsed`` and ``step`` both increasing; chunks that include the compile
    left out), or the last chunk's ``chunk_wall_s`` / its steps."""
    pairs = []
    for a, b in zip(train, train[1:]):
        ea, eb = _finite(a.fields.get("elapsed")), _finite(b.fields.get("elapsed"))
        if ea is None or eb is None or b.step is None or a.step is None or b.step <= a.step or eb <= ea:
            continue
        if b.fields.get("includes_compile"):
            continue
        pairs.append((eb - ea, b.step - a.step))
    pairs = pairs[-10:]
    if pairs:
        return sum(p[0] for p in pairs) / sum(p[1] for p in pairs)
    if train:
        last = train[-1]
        wall, start = _finite(last.values.get("chunk_wall_s")), last.fields.get("step_start")
        if wall is not None and isinstance(start, int) and last.step and last.step > start:
            return wall / (last.step - start)
    return None


def _median_gap_s(train: list) -> Optional[float]:
    """The median time between consecutive train records (``elapsed``), compile chunks left out;
    the reader's median chunk wall time when there are fewer than two such records."""
    gaps = []
    for a, b in zip(train, train[1:]):
        ea, eb = _finite(a.fields.get("elapsed")), _finite(b.fields.get("elapsed"))
        if ea is not None and eb is not None and eb > ea and not b.fields.get("includes_compile"):
            gaps.append(eb - ea)
    return statistics.median(gaps) if gaps else None


def _lab_dirs(root: Path) -> list[Path]:
    """The folders under ``root`` holding a ``lab.json`` (not a link to one outside the runs root)."""
    top = runs_root()
    return sorted(p.parent for p in root.rglob(LAB_FILE)
                  if "checkpoints" not in p.parts and (p.resolve() == top or top in p.resolve().parents))


def _last_log_line(run_dir: Path) -> Optional[str]:
    lines = _tail_lines(run_dir / LOG_FILE, 20)
    for line in reversed(lines):
        if line.strip() and not line.startswith("--- pawn lab "):
            return line.strip()
    return None


def _tail_lines(path: Path, n: int) -> list[str]:
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            return [line.rstrip("\n") for line in deque(f, maxlen=max(0, n))]
    except OSError:
        return []


def _state(run, lab: Optional[dict]) -> dict[str, Any]:
    """Where a run stands: the reader's :class:`pawn.runs.RunStatus`, corrected by the lab's
    knowledge of the process (alive: not ``unknown``; gone without an end reason: ``failed``)."""
    st = run.status
    state, reason = st.state, st.reason
    live = procs.alive(lab)
    if live is True and (state == "unknown" or (state != "running" and _started_after_last_write(run))):
        state, reason = "running", None  # alive; or resumed and not written yet (the old end reason is stale)
    elif live is False and st.reason is None:
        code = (procs.read_lab(run.path) or lab or {}).get("exit_code")
        state = "failed"
        reason = "process gone without an end record" + (f" (exit code {code})" if code is not None else "")
    return {"state": state, "reason": reason, "step": st.step, "total_steps": st.total_steps,
            "last_write_age_s": st.last_write_age_s, "process": {True: "alive", False: "gone", None: "not started by the lab"}[live]}


def _started_after_last_write(run) -> bool:
    """The lab's latest start of ``run`` (``lab.json`` written at the spawn) is newer than the
    run's last write (``metrics.jsonl``, ``schedule_health.json``)."""
    def mtime(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return 0.0

    return mtime(run.path / LAB_FILE) > max(mtime(run.metrics_path), mtime(run.path / "schedule_health.json"))


def _no_run_yet(run_dir: Path, lab: dict) -> dict[str, Any]:
    """The state of a directory the lab started a command in that has not written a run yet."""
    live = procs.alive(lab)
    if live:
        return {"state": "starting", "reason": None, "process": "alive"}
    code = (procs.read_lab(run_dir) or lab).get("exit_code")
    last = _last_log_line(run_dir)
    reason = "exited before writing a run" + (f" (exit code {code})" if code is not None else "") + (f": {last}" if last else "")
    return {"state": "failed", "reason": reason, "process": "gone"}


# ============================================================================ tools
def lab_schema(command: str) -> dict[str, Any]:
    """The JSON schema of ``command``'s settings (``pretrain``, ``adapt``, ``sweep``), generated
    from the pydantic-settings model its flags come from (``model_json_schema()``), so it cannot
    drift from the CLI. Every property is also a ``--config`` key of ``lab_start``."""
    model = settings_model(command)
    return {"command": command, "model": f"{model.__module__}.{model.__qualname__}", "schema": model.model_json_schema()}


def validate_config(command: str, config: dict[str, Any], out: str) -> Any:
    """The settings ``pawn COMMAND --config FILE --out OUT`` would build from ``config``.

    Returns:
        The settings object.

    Raises:
        pawn.settings.SettingsError: the settings do not validate; the one line is the CLI's own
            (:func:`pawn.settings.format_validation_error`), each field named by its environment
            variable, or as ``config: FIELD`` for a key of ``config``.
        LabError: ``config`` is not an object, or sets ``out`` / ``resume`` (arguments of their own).
    """

    from pawn.settings import SettingsError, format_validation_error

    model = settings_model(command)
    if not isinstance(config, dict):
        raise LabError("config: expected an object of setting = value (see lab_schema)")
    for k in ("out", "resume"):
        if k in config:
            raise LabError(f"config: {k!r} is not a config key here; use the {'out argument' if k == 'out' else 'lab_resume tool'}")
    given = {"out": out}
    with tempfile.TemporaryDirectory(prefix="pawn-lab-") as tmp:
        path = Path(tmp) / "config.json"
        import json

        path.write_text(json.dumps(config), encoding="utf-8")
        try:
            return model.load(path, **given)
        except ValidationError as e:
            sources = {k: (kind, "config" if kind == "file" else name)
                       for k, (kind, name) in model.field_sources(path, given).items()}
            raise SettingsError(format_validation_error(e, sources)) from None


def _check_out(command: str, out: Path, settings: Any) -> None:
    """Refuse an ``out`` the command itself would refuse (:func:`pawn.train.rundir.check_run_dir`,
    the CLI's run-directory rule, with the fields its settings tag as not making two runs different), or one where a
    process the lab started still runs."""
    from pawn.train.rundir import check_run_dir

    if out.exists() and not out.is_dir():
        raise LabError(f"--out {out}: is a file, not a directory")
    lab = procs.read_lab(out)
    if procs.alive(lab):
        raise LabError(f"--out {out}: pawn lab already runs process {lab['pid']} there (lab_stop it first)")
    if command == "sweep":
        return  # a sweep directory is continued by re-running the same sweep (pawn sweep's own rule)
    from pawn.train.spine import run_identity_ignored

    check_run_dir(out, new_config=settings.model_dump(mode="json"), ignored_fields=run_identity_ignored(settings))


def lab_start(command: str, config: dict[str, Any], out: str, tags: Sequence[str] = (), devices: Any = None) -> dict[str, Any]:
    """Validate ``config`` (the CLI's one-line messages), refuse an occupied ``out`` (the CLI's
    run-directory rule), then start ``pawn COMMAND --config OUT/lab-config.json --out OUT`` in its
    own process group, its output in ``OUT/lab.log`` and ``OUT/lab.json`` beside it.

    Args:
        command: ``pretrain``, ``adapt`` or ``sweep``. config: settings by field name
            (``lab_schema``); not ``out`` or ``resume``. out: the run (or sweep) directory.
        tags: labels kept in ``lab.json``. devices: accelerator indices to make visible
            (``[0]``, ``"0,1"``) or ``"cpu"`` (:func:`pawn.lab.procs.device_env`).

    Returns:
        ``{"run", "command", "pid", "argv", "log", "lab"}``.

    Raises:
        pawn.settings.SettingsError, LabError, pawn.train.rundir.RunDirError: nothing is started
            (LabError also for a path-valued setting outside the runs root, :func:`_check_config_paths`).
    """
    out_p = within_root(out, "out")
    settings = validate_config(command, config, str(out_p))
    _check_config_paths(command, config, out_p)
    procs.device_env(devices)  # a bad devices value fails before anything is written
    _check_out(command, out_p, settings)
    from pawn.fileio import write_json

    write_json(out_p / CONFIG_FILE, config, what="lab config")
    where = out_p.resolve()  # the process's argv does not depend on the lab's working directory
    argv = procs.pawn_argv(command, "--config", str(where / CONFIG_FILE), "--out", str(where))
    info = procs.spawn(out_p, command, argv, tags=[str(t) for t in tags or ()], devices=devices)
    return {"run": str(out_p), "command": command, "pid": info["pid"], "argv": argv, "log": str(out_p / LOG_FILE), "lab": info}


def lab_runs(root: str = "runs", kind: Optional[str] = None, status: Optional[str] = None, tag: Optional[str] = None) -> dict[str, Any]:
    """Every run under ``root`` (:func:`pawn.runs.discover_runs`) plus the directories the lab
    started a command in that have not written a run yet, one row each: ``run``, ``kind``
    (``pretrain``/``adapt``/``sweep``), ``strategy``, ``state``, ``step``, ``total_steps``,
    ``best_val_loss``, ``trainable_params``, ``tags``. Filters: ``kind``, ``status`` (a state:
    running, complete, stopped, failed, unknown, starting), ``tag``."""
    from pawn.runs import discover_runs

    r = within_root(root, "root")
    rows = []
    seen = set()
    for run in discover_runs(r):
        lab = run.lab
        st = _state(run, lab)
        seen.add(run.path.resolve())
        rows.append({"run": str(run.path), "kind": run.kind, "strategy": run.strategy, "state": st["state"],
                     "reason": st["reason"], "step": st["step"], "total_steps": st["total_steps"],
                     "best_val_loss": run.best_val_loss, "trainable_params": run.trainable_params,
                     "tags": (lab or {}).get("tags", [])})
    for d in _lab_dirs(r):
        if d.resolve() in seen:
            continue
        lab = procs.read_lab(d) or {}
        if lab.get("command") == "sweep" or not (d / "metrics.jsonl").exists():
            st = _no_run_yet(d, lab) if lab.get("command") != "sweep" else {
                "state": "running" if procs.alive(lab) else "ended", "reason": None}
            rows.append({"run": str(d), "kind": lab.get("command"), "strategy": None, "state": st["state"],
                         "reason": st["reason"], "step": None, "total_steps": None, "best_val_loss": None,
                         "trainable_params": None, "tags": lab.get("tags", [])})
    rows.sort(key=lambda x: x["run"])
    if kind is not None:
        rows = [x for x in rows if x["kind"] == kind]
    if status is not None:
        rows = [x for x in rows if x["state"] == status]
    if tag is not None:
        rows = [x for x in rows if tag in (x["tags"] or [])]
    return {"root": str(r), "runs": rows}


def lab_status(run: str) -> dict[str, Any]:
    """Where a run stands: ``state`` (running, complete, stopped, failed, unknown; ``starting``
    before it has written anything), ``step``/``total_steps``, ``progress`` (fraction),
    ``eta_s`` (seconds at the recent steps/s), the last train and val records, ``health`` and
    the checkpoints.

    Health: ``nonfinite`` lists the steps whose train or val loss was NaN/Inf; ``stalled`` is
    true when a running run wrote no record for max(:data:`STALL_CHUNKS` median gaps between its
    train records, :data:`STALL_MIN_S`); ``process`` is ``alive``/``gone`` for runs the lab
    started (gone without an end record makes the state ``failed``).
    """
    run_dir = within_root(run, "run")
    lab = procs.read_lab(run_dir)
    if lab is not None and not (run_dir / "metrics.jsonl").exists():
        st = _no_run_yet(run_dir, lab)
        return {"run": str(run_dir), **st, "step": None, "total_steps": None, "lab": lab,
                "health": {"ok": st["state"] != "failed", "problems": [st["reason"]] if st["reason"] else []}}
    r = _open(run)
    st = _state(r, lab)
    train, val = r.train, r.val
    step, total = st["step"], st["total_steps"]
    segment = [t for t in train if t.step is not None]
    sps = _seconds_per_step(segment)
    eta = None
    if st["state"] == "running" and sps is not None and step is not None and total is not None:
        eta = max(0.0, (total - step) * sps)
    nonfinite = sorted({x.step for x in (*train, *val) if "loss" in x.values and x.values["loss"] is None and x.step is not None})
    gap = _median_gap_s(segment) or r.median_chunk_s()
    age = st["last_write_age_s"]
    stall_after = max(STALL_CHUNKS * gap, STALL_MIN_S) if gap is not None else None
    stalled = bool(st["state"] == "running" and age is not None and stall_after is not None and age > stall_after)
    problems = []
    if nonfinite:
        problems.append(f"non-finite loss at step(s) {', '.join(map(str, nonfinite[:10]))}")
    if stalled:
        problems.append(f"stalled: no record for {age:.0f} s (> {stall_after:.0f} s, {STALL_CHUNKS:g} median chunk gaps)")
    if st["state"] == "failed" and st["reason"]:
        problems.append(st["reason"])
    ckpts = [{"step": c.step, "path": str(c.path), "verified": c.verified, "is_best": c.is_best, "pushed": c.pushed}
             for c in r.checkpoints()]
    return {
        "run": str(r.path), "kind": r.kind, "strategy": r.strategy, "state": st["state"], "reason": st["reason"],
        "step": step, "total_steps": total,
        "progress": (step / total) if (step is not None and total) else None,
        "seconds_per_step": sps, "eta_s": eta, "last_write_age_s": age,
        "last_train": _record_json(train[-1], list(train[-1].values)) if train else None,
        "last_val": _record_json(val[-1], list(val[-1].values)) if val else None,
        "best_val_loss": r.best_val_loss, "best": str(r.best) if r.best else None,
        "health": {"ok": not problems, "problems": problems, "nonfinite_steps": nonfinite, "stalled": stalled,
                   "stall_after_s": stall_after, "process": st["process"]},
        "checkpoints": ckpts, "tags": (lab or {}).get("tags", []), "lab": lab,
    }


def lab_tail(run: str, since: int = 0, kinds: Optional[Sequence[str]] = None, fields: Optional[Sequence[str]] = None,
             limit: int = TAIL_LIMIT) -> dict[str, Any]:
    """The records of ``run`` whose line starts at byte ``since`` or later, and ``next``, the
    cursor for the next call: polling with it never returns a record twice nor skips one (a line
    still being written is left for the next call; :meth:`pawn.runs.Run.records`). A run the lab
    started that has not written yet gives no records, the same cursor and state ``starting``.

    Args:
        since: a byte cursor (0: from the start; a previous call's ``next``).
        kinds: record types to return (train, val, eval, hub, end, config); all when None.
            ``next`` still moves past the others.
        fields: metric keys (and other fields, e.g. ``elapsed``) to keep per record; all when None.
        limit: at most this many records (then ``next`` is just past the last one returned and
            ``more`` is true).
    """
    if not isinstance(since, int) or since < 0:
        raise LabError(f"since: expected a byte cursor ≥ 0 (a previous call's 'next'), got {since!r}")
    lab = procs.read_lab(within_root(run, "run"))
    if lab is not None and not (Path(run) / "metrics.jsonl").exists():  # started, nothing written yet
        return {"run": str(run), "since": since, "next": since, "more": False, "records": [],
                "state": _no_run_yet(Path(run), lab)["state"]}
    r = _open(run)
    recs, cursor = r.records(since)
    more = False
    want = set(kinds) if kinds is not None else None
    chosen = []
    for rec in recs:
        if want is not None and rec.type not in want:
            continue
        if len(chosen) >= max(1, int(limit)):
            more, cursor = True, chosen[-1].end
            break
        chosen.append(rec)
    return {"run": str(r.path), "since": since, "next": cursor, "more": more,
            "records": [_record_json(x, fields) for x in chosen], "state": _state(r, lab)["state"]}


def _best_step(run) -> Optional[int]:
    """The step ``checkpoints/best`` holds (its ``training_state.json``), else that of the lowest
    val loss, else None."""
    if run.best is not None:
        st = _read_json(run.best / "training_state.json") or {}
        if isinstance(st.get("step"), int):
            return st["step"]
    losses = [(v.step, _finite(v.values.get("loss"))) for v in run.val]
    losses = [(s, x) for s, x in losses if x is not None and s is not None]
    return min(losses, key=lambda p: p[1])[0] if losses else None


def _metric_value(run, metric: str, at: Optional[int]) -> tuple[Optional[int], Optional[float], str]:
    """(step, value, which) of val ``metric``: with ``at``, the last val record at or before step
    ``at``; else the val record of the run's kept model (``checkpoints/best``, the lowest val
    loss), else its last val record."""
    pts = [(v.step, _finite(v.values.get(metric))) for v in run.val]
    pts = [(s, x) for s, x in pts if x is not None and s is not None]
    if at is not None:
        pts = [(s, x) for s, x in pts if s <= at]
        return (*pts[-1], f"last validation at or before step {at}") if pts else (None, None, "no validation")
    if not pts:
        return None, None, "no validation"
    best = _best_step(run)
    for s, x in pts:
        if s == best:
            return s, x, "best checkpoint"
    return (*pts[-1], "last validation")


def pareto_front(points: Sequence[tuple[str, float, float]], better: str = "min") -> list[str]:
    """Names of the points not dominated on (parameters: fewer is better, value: ``better``).

    A point is dominated when another has no more parameters and a value at least as good, and
    is strictly better in one of the two. ``points``: ``(name, params, value)``. Returned in
    increasing parameter count.
    """
    sign = 1.0 if better != "max" else -1.0
    front = []
    for n, p, v in points:
        dominated = any(q <= p and sign * w <= sign * v and (q < p or sign * w < sign * v) for _, q, w in points)
        if not dominated:
            front.append((p, n))
    return [n for _, n in sorted(front)]


def lab_compare(runs: Sequence[str], metric: str = "loss", at: Optional[int] = None) -> dict[str, Any]:
    """One row per run (``run``, ``kind``, ``strategy``, ``trainable_params``, ``step``,
    ``value``, ``of``, ``state``) of validation ``metric`` (a key of :data:`pawn.metrics.METRICS`;
    val loss by default) — of the model the run keeps (``checkpoints/best``, lowest val loss; the
    last validation when there is none), or with ``at`` of the last validation at or before step
    ``at`` — and ``pareto``, the runs on the front of (trainable parameters: fewer is better,
    metric: in its direction, lower when it has none)."""
    if metric not in METRICS:
        raise LabError(f"metric: unknown {metric!r}; known: {', '.join(METRICS)}")
    if isinstance(runs, str):
        runs = [runs]
    if not runs:
        raise LabError("runs: give at least one run directory")
    for path in runs:  # every path is checked before any run is read
        within_root(path, "runs")
    m = METRICS[metric]
    rows = []
    for path in runs:
        r = _open(path)
        step, value, which = _metric_value(r, metric, at)
        rows.append({"run": str(r.path), "kind": r.kind, "strategy": r.strategy, "trainable_params": r.trainable_params,
                     "step": step, "value": value, "of": which, "state": r.status.state})
    pts = [(x["run"], float(x["trainable_params"]), x["value"]) for x in rows
           if x["trainable_params"] is not None and x["value"] is not None]
    return {"metric": metric, "label": m.label, "better": m.better, "at": at, "rows": rows,
            "pareto": pareto_front(pts, m.better or "min")}


def lab_stop(run: str, wait_s: float = 0.0) -> dict[str, Any]:
    """SIGTERM to the process group of a run the lab started: the trainer writes a checkpoint
    and exits (``lab_resume`` continues it). With ``wait_s`` > 0, wait that long for it to end.

    Returns:
        ``{"run", "pid", "signal": "SIGTERM", "ended"}``.

    Raises:
        LabError: not started by the lab, or its process has already ended.
    """
    run_dir = within_root(run, "run")
    lab = procs.read_lab(run_dir)
    pid = procs.stop(run_dir, lab)
    ended = procs.wait(lab, float(wait_s)) if wait_s and wait_s > 0 else not procs.alive(lab)
    return {"run": str(run_dir), "pid": pid, "signal": "SIGTERM", "ended": ended}


def lab_resume(run: str, devices: Any = None) -> dict[str, Any]:
    """Continue a stopped (or failed) run: ``pawn COMMAND --resume RUN --out RUN`` in a new
    process group, output appended to ``RUN/lab.log``, ``lab.json`` updated (the earlier start
    kept under ``history``). ``devices`` defaults to the ones it last ran on.

    Raises:
        LabError: the process still runs, the run is complete, or nothing is known of its command.
        pawn.runs.RunError: not a run directory.
    """
    run_dir = within_root(run, "run")
    lab = procs.read_lab(run_dir)
    if procs.alive(lab):
        raise LabError(f"{run_dir}: still running (process {lab['pid']}); lab_stop it first")
    r = _open(run)
    if r.status.state == "complete":
        raise LabError(f"{run_dir}: already complete ({r.status.reason}, step {r.status.step}); nothing to resume")
    if not r.checkpoints():
        raise LabError(f"{run_dir}: no step checkpoint to resume from")
    command = (lab or {}).get("command") or r.kind
    if command not in ("pretrain", "adapt"):
        raise LabError(f"{run_dir}: cannot resume a {command!r} run (resume a sweep by lab_sweep with the same out)")
    devices = devices if devices is not None else (lab or {}).get("devices")
    procs.device_env(devices)
    argv = procs.pawn_argv(command, "--resume", str(run_dir.resolve()), "--out", str(run_dir.resolve()))
    info = procs.spawn(run_dir, command, argv, tags=(lab or {}).get("tags", []), devices=devices, previous=lab)
    return {"run": str(run_dir), "command": command, "pid": info["pid"], "argv": argv, "log": str(run_dir / LOG_FILE),
            "from_step": r.checkpoints()[-1].step}


def lab_sweep(config: dict[str, Any], out: str, tags: Sequence[str] = (), devices: Any = None) -> dict[str, Any]:
    """Start ``pawn sweep`` (an Optuna study of adapter or pretraining trials; ``lab_schema("sweep")``
    gives its settings) in ``out``, like :func:`lab_start`. Re-starting the same sweep in the same
    ``out`` continues its study; ``lab_sweep_status`` reads it."""
    return lab_start("sweep", config, out, tags, devices)


def lab_sweep_status(out: str, storage: Optional[str] = None, study: Optional[str] = None) -> dict[str, Any]:
    """A sweep's study, read with Optuna's public API: trial counts by state, the best trial's
    value and parameters, and the top 5 completed trials (by value in the study's direction).

    Args:
        out: the sweep directory. storage / study: as given to ``pawn sweep`` (default: those of
            the sweep the lab started there, else ``OUT/study.db`` and its one study).

    Returns:
        ``state``: ``running`` / ``ended`` (the sweep process), ``starting`` or ``failed`` (with
        ``reason``, the log's last line) before its study exists; ``counts`` by trial state,
        ``best`` and ``top`` (number, value, params, run_dir, steps).

    Raises:
        LabError: no study storage there and no sweep started by the lab, or several studies and
            no ``study`` given.
    """
    import optuna
    from optuna.trial import TrialState

    from pawn.sweep.storage import open_storage, shown_url, storage_url

    out_p = within_root(out, "out")
    lab = procs.read_lab(out_p) or {}
    cfg = _read_json(out_p / CONFIG_FILE) or {}
    spec = storage or cfg.get("storage")
    url = storage_url(spec, out_p)
    for prefix in ("sqlite:///", "journal:"):  # a file storage is read (and opened) only inside the root
        if url.startswith(prefix):
            within_root(url[len(prefix):], "storage")
    process = {True: "alive", False: "gone", None: "not started by the lab"}[procs.alive(lab or None)]
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).is_file():
        if not lab:
            raise LabError(f"{out_p}: no study yet ({url[len('sqlite:///'):]} does not exist)")
        st = _no_run_yet(out_p, lab)  # started by the lab: starting, or failed before its first trial
        return {"out": str(out_p), "storage": shown_url(url), "study": None, "state": st["state"], "reason": st["reason"],
                "direction": None, "counts": {}, "trials": 0, "best": None, "top": [], "process": process}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store = open_storage(url, heartbeat_s=None, retry_s=0)  # a reader: no heartbeat thread, no waiting
    names = [s.study_name for s in optuna.study.get_all_study_summaries(store, include_best_trial=False)]
    name = study or cfg.get("study_name")
    if name is None:
        if len(names) != 1:
            raise LabError(f"{out_p}: {len(names)} studies in {shown_url(url)} ({', '.join(names) or 'none'}); give study")
        name = names[0]
    if name not in names:
        raise LabError(f"{out_p}: no study {name!r} in {shown_url(url)} (has {', '.join(names) or 'none'})")
    s = optuna.load_study(study_name=name, storage=store)
    trials = s.get_trials(deepcopy=False)
    counts = {state.name: 0 for state in TrialState}
    for t in trials:
        counts[t.state.name] += 1
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    maximize = s.direction == optuna.study.StudyDirection.MAXIMIZE
    done.sort(key=lambda t: t.value, reverse=maximize)

    def row(t):
        return {"number": t.number, "value": t.value, "params": t.params, "run_dir": t.user_attrs.get("run_dir"),
                "steps": t.user_attrs.get("steps")}

    state = {"alive": "running", "gone": "ended"}.get(process, "unknown")
    return {"out": str(out_p), "storage": shown_url(url), "study": name, "state": state, "reason": None,
            "direction": s.direction.name.lower(), "counts": counts, "trials": len(trials),
            "best": row(done[0]) if done else None, "top": [row(t) for t in done[:5]], "process": process}


def _read_json(path: Path) -> Optional[dict]:

    try:
        d = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def lab_audit(run: str) -> dict[str, Any]:
    """Check a finished run: the schedule ran to its planned length (``schedule_health.json``
    or the end record), the newest step checkpoint's manifest verifies, ``checkpoints/best``
    exists, verifies and holds the step of the lowest val loss, and every Hub push record is ok
    (each check ``ok`` true/false, or None when it does not apply). ``ok``: no check false."""
    from pawn.checkpoint import CheckpointError, verify_manifest

    r = _open(run)
    checks = []
    st = r.status
    h = r.health or {}
    planned, actual = h.get("planned_total_steps", r.total_steps), h.get("actual_total_steps", st.step)
    done = st.state == "complete" or (planned is not None and actual == planned and h.get("reason_for_stop") in ("completed", "step_limit"))
    checks.append({"check": "schedule complete", "ok": bool(done),
                   "detail": f"step {actual} of {planned}, {st.state}" + (f" ({st.reason})" if st.reason else "")})
    ck = r.checkpoints()
    if ck:
        last = ck[-1]
        checks.append({"check": "newest checkpoint verifies", "ok": last.verified,
                       "detail": f"{last.path} {'verifies' if last.verified else 'does NOT verify'}"})
    else:
        checks.append({"check": "newest checkpoint verifies", "ok": False, "detail": "no step checkpoint"})
    best = r.best
    val_losses = [(v.step, _finite(v.values.get("loss"))) for v in r.val]
    val_losses = [(s, x) for s, x in val_losses if x is not None and s is not None]
    if best is None:
        checks.append({"check": "best resolves", "ok": False if val_losses else None,
                       "detail": "no checkpoints/best" + ("" if val_losses else " (no validation)")})
    else:
        try:
            verify_manifest(best)
            ok, detail = True, f"{best} verifies"
        except CheckpointError as e:
            ok, detail = False, str(e)
        best_step = _read_json(best / "training_state.json") or {}
        bstep = best_step.get("step")
        if ok and val_losses:
            low = min(x for _, x in val_losses)
            steps = [s for s, x in val_losses if x == low]
            if bstep not in steps:
                ok, detail = False, f"{best} holds step {bstep}, the lowest val loss {low:.4f} is at step {steps[0]}"
            else:
                detail += f", step {bstep} (val loss {low:.4f})"
        checks.append({"check": "best resolves", "ok": ok, "detail": detail})
    hub = r.hub
    if not hub:
        checks.append({"check": "hub pushes ok", "ok": None, "detail": "no hub records (not pushed)"})
    else:
        bad = [x for x in hub if not (x.fields.get("ok") is True or x.fields.get("status") in ("pushed", "ok", "success"))]
        checks.append({"check": "hub pushes ok", "ok": not bad,
                       "detail": f"{len(hub) - len(bad)} of {len(hub)} pushes ok"
                                 + (": " + "; ".join(f"step {x.step}: {x.fields.get('status')} {x.fields.get('error') or ''}".strip()
                                                      for x in bad[:5]) if bad else "")})
    return {"run": str(r.path), "ok": all(c["ok"] is not False for c in checks), "checks": checks}


def lab_log(run: str, lines: int = 50) -> dict[str, Any]:
    """The last ``lines`` lines of ``RUN/lab.log`` (the started command's stdout and stderr)."""
    run_dir = within_root(run, "run")
    path = run_dir / LOG_FILE
    if not path.is_file():
        if not run_dir.is_dir():
            raise LabError(f"{run_dir}: no such run directory")
        raise LabError(f"{run_dir}: no {LOG_FILE} (not started by pawn lab)")
    n = max(1, min(int(lines), 10000))
    return {"run": str(run_dir), "log": str(path), "lines": _tail_lines(path, n)}


TOOLS = (lab_schema, lab_start, lab_runs, lab_status, lab_tail, lab_compare, lab_stop, lab_resume, lab_sweep,
         lab_sweep_status, lab_audit, lab_log)
"""Every tool, in the order ``pawn lab`` lists them."""


def one_line(e: BaseException) -> Optional[str]:
    """The one-line message of an error a caller caused (:class:`PawnError`, a settings
    :class:`pydantic.ValidationError`), else None (a bug)."""
    if isinstance(e, PawnError):
        return " ".join(str(e).split())
    if isinstance(e, ValidationError):
        from pawn.settings import format_validation_error

        return format_validation_error(e)
    return None
