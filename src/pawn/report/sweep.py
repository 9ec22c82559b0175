"""The Sweep page: the studies of ``pawn sweep`` found next to the runs (``study.db`` or a journal
file), read through Optuna's public API (``optuna.get_all_study_names``, ``optuna.load_study``,
``Study.get_trials``), with each trial linked to its run directory.

The Pareto front is of (trainable parameters, best val loss), both minimised: a trial is on it when
no other trial has at most as many parameters and at most its loss with one of the two strictly
smaller.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Optional

from pawn.errors import PawnError
from pawn.report import ReportError
from pawn.runs import RunError, open_run
from pawn.sweep.storage import one_line, shown_url

JOURNAL_SUFFIXES = (".log", ".journal", ".jsonl")
"""Journal-storage file endings (as ``pawn sweep --storage`` reads them; ``metrics.jsonl`` is not
one)."""


def find_storages(roots: Iterable[Path]) -> list[str]:
    """Optuna storage URLs of the studies under ``roots`` (files or directories): every
    ``study.db`` and every ``*.journal``/``*.log`` journal file (a path given directly with
    one of those endings, or a ``.db`` file, counts too), sorted, without duplicates."""
    found: set[Path] = set()
    for root in roots:
        root = Path(root)
        if root.is_file():
            if root.suffix == ".db" or (root.suffix in JOURNAL_SUFFIXES and root.name != "metrics.jsonl"):
                found.add(root.resolve())
            continue
        if not root.is_dir():
            continue
        found.update(p.resolve() for p in root.rglob("study.db") if p.is_file())  # not a FIFO, a loop
        for suf in (".journal", ".log"):
            for p in root.rglob(f"*{suf}"):
                if p.is_file() and _is_journal(p):
                    found.add(p.resolve())
    return [(f"sqlite:///{p}" if p.suffix == ".db" else f"journal:{p}") for p in sorted(found)]


def _is_journal(p: Path) -> bool:
    """An Optuna journal file: its first line is a JSON object with an ``op_code``."""
    try:
        with open(p, "rb") as f:
            head = f.readline(4096)
    except OSError:
        return False
    return b'"op_code"' in head


def storage_file(url: str) -> Path:
    """The file of a storage URL :func:`find_storages` returns (``sqlite:///PATH``, ``journal:PATH``)."""
    return Path(url[len("sqlite:///"):] if url.startswith("sqlite:///") else url.split(":", 1)[1])


def _storage(url: str):
    """The storage to read ``url`` through: a journal file's ``JournalStorage``, a database
    server's storage opened without creating anything (:func:`open_study_storage`), or the URL of
    a SQLite file as it is."""
    from pawn.sweep.storage import is_server_url

    if url.startswith("journal:"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        return JournalStorage(JournalFileBackend(url[len("journal:"):]))
    if is_server_url(url):
        return open_study_storage(url)
    return url


def open_study_storage(url: str):
    """The Optuna storage of a database URL (``postgresql://…``, ``mysql://…``, ``sqlite:///…``),
    opened to read it (no heartbeat thread, no schema created: a URL naming no study yet is refused).

    Raises:
        ReportError: one line naming the URL with its password hidden (:func:`shown_url`): a
            missing driver, a wrong password, an unreachable host, no Optuna study there.
    """
    import optuna

    from pawn.sweep.storage import one_line, open_storage

    try:
        storage = open_storage(url, heartbeat_s=None, retry_s=0, create=False)
        names = optuna.get_all_study_names(storage)
    except PawnError as e:
        raise ReportError(str(e).replace("--storage ", "", 1)) from None
    except Exception as e:  # noqa: BLE001 -- sqlalchemy's errors: one line
        raise ReportError(f"{shown_url(url)}: cannot read it ({one_line(e, url)})") from None
    if not names:
        raise ReportError(f"{shown_url(url)}: no Optuna study there")
    return storage


def pareto(points: list[tuple[int, float, float]]) -> list[int]:
    """The ids of the non-dominated ``(id, params, loss)`` points (both minimised), sorted by
    params."""
    front = []
    for i, p, v in points:
        if not any((q <= p and w <= v) and (q < p or w < v) for _, q, w in points):
            front.append((p, v, i))
    return [i for _, _, i in sorted(front)]


def read_studies(urls: Iterable[str], run_ids: Optional[dict[str, str]] = None) -> list[dict[str, Any]]:
    """Every study of every storage in ``urls`` as JSON-ready dicts: name, storage, direction,
    user attributes, and its trials (number, state, value = best val loss, params, reason,
    run_dir, the report's run id when that run is in the report, trainable params read from the
    trial's run, ``record_schema``: the run-record schema it finished under, start/end), the
    Pareto front (trial numbers), the best trial number and ``objective_note`` (:func:`_objective_note`:
    which trials' objective counts other positions, or None).

    Args:
        urls: storage URLs (:func:`find_storages`).
        run_ids: resolved run directory → the report's run id, for the trial → run link.

    Raises:
        ImportError: Optuna is missing (it is a core dependency).
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    run_ids = run_ids or {}
    out: list[dict[str, Any]] = []
    for url in urls:
        try:
            storage = _storage(url)
            names = optuna.get_all_study_names(storage)
        except Exception as e:  # a locked or damaged file: the page says so, the report goes on
            out.append({"name": None, "storage": shown_url(url), "trials": [],
                        "error": str(e) if isinstance(e, PawnError) else one_line(e, url)})
            continue
        for name in names:
            study = optuna.load_study(study_name=name, storage=storage)
            trials = []
            for t in study.get_trials(deepcopy=False):
                run_dir = t.user_attrs.get("run_dir")
                params_n = t.user_attrs.get("trainable_params")
                rid = None
                if run_dir:
                    rid = run_ids.get(str(Path(run_dir).resolve()))
                    if params_n is None:
                        try:
                            params_n = open_run(run_dir).trainable_params
                        except (RunError, OSError):
                            params_n = None
                value = t.value if t.value is not None and math.isfinite(t.value) else None
                trials.append({"number": t.number, "state": t.state.name, "value": value, "params": t.params,
                               "reason": t.user_attrs.get("reason") or t.user_attrs.get("fail_reason"),
                               "steps": t.user_attrs.get("steps"), "run_dir": run_dir, "run_id": rid,
                               "trainable_params": params_n, "record_schema": t.user_attrs.get("record_schema"),
                               "intermediate": {str(k): v for k, v in sorted(t.intermediate_values.items())},
                               "started": t.datetime_start.isoformat(timespec="seconds") if t.datetime_start else None,
                               "finished": t.datetime_complete.isoformat(timespec="seconds") if t.datetime_complete else None})
            done = [t for t in trials if t["state"] == "COMPLETE" and t["value"] is not None]
            best = min(done, key=lambda t: t["value"])["number"] if done else None
            front = pareto([(t["number"], t["trainable_params"], t["value"]) for t in done
                            if isinstance(t["trainable_params"], int)])
            out.append({"name": name, "storage": shown_url(url), "direction": study.direction.name,
                        "user_attrs": dict(study.user_attrs), "trials": trials, "best": best, "pareto": front,
                        "objective_note": _objective_note(study.user_attrs, done)})
    return out


def _objective_note(attrs: dict, done: list[dict[str, Any]]) -> Optional[str]:
    """What the page says when an adapter study's complete trials count different positions in
    their objective (:func:`pawn.runs.positions_of`): trials finished before record schema
    :data:`pawn.runs.MOVE_DECISIONS_SCHEMA` (no ``record_schema``) counted each game's end-of-game
    slot in their legal-masked val loss. None when they all count the same."""
    from pawn.runs import MOVE_DECISIONS_SCHEMA

    if attrs.get("run_type") != "adapter":
        return None
    old = [t["number"] for t in done if (t.get("record_schema") or 2) < MOVE_DECISIONS_SCHEMA]
    if not old or len(old) == len(done):
        return None
    return (f"Trials {', '.join(map(str, old))} finished before record schema {MOVE_DECISIONS_SCHEMA}: their val loss counts each "
            "game's end-of-game slot (zero loss under the legal mask), so their objective is not comparable with the other trials'.")


def figures(study: dict[str, Any]) -> list[dict[str, Any]]:
    """The Sweep page's charts of one study: the objective by trial number with the best so far,
    and trainable parameters vs best val loss with the Pareto front."""
    done = [t for t in study["trials"] if t["state"] == "COMPLETE" and t["value"] is not None]
    figs = []
    if done:
        best, best_y = float("inf"), []
        for t in done:
            best = min(best, t["value"])
            best_y.append(best)
        figs.append({"id": "objective-history", "data": [
            {"type": "scatter", "mode": "markers", "name": "trial", "x": [t["number"] for t in done],
             "y": [t["value"] for t in done], "text": [f"trial {t['number']}" for t in done], "meta": {"key": "value"}},
            {"type": "scatter", "mode": "lines", "name": "best so far", "x": [t["number"] for t in done], "y": best_y,
             "line": {"shape": "hv"}, "meta": {"key": "best"}}],
            "layout": {"title": {"text": "Objective history (best val loss)", "x": 0.02, "font": {"size": 15}},
                       "xaxis": {"title": {"text": "trial"}, "tickformat": "d", **({"dtick": 1} if len(done) <= 20 else {})},
                       "yaxis": {"title": {"text": "best val loss (nats)"}},
                       "height": 320, "margin": {"l": 60, "r": 20, "t": 40, "b": 45}}})
        with_p = [t for t in done if isinstance(t["trainable_params"], int)]
        if with_p:
            front = set(study["pareto"])
            fr = sorted((t for t in with_p if t["number"] in front), key=lambda t: t["trainable_params"])
            figs.append({"id": "pareto", "data": [
                {"type": "scatter", "mode": "markers", "name": "trial", "x": [t["trainable_params"] for t in with_p],
                 "y": [t["value"] for t in with_p], "text": [f"trial {t['number']}" for t in with_p],
                 "meta": {"key": "trials"}},
                {"type": "scatter", "mode": "lines+markers", "name": "Pareto front", "x": [t["trainable_params"] for t in fr],
                 "y": [t["value"] for t in fr], "line": {"shape": "hv"}, "marker": {"size": 10, "symbol": "diamond"},
                 "meta": {"key": "pareto"}}],
                "layout": {"title": {"text": "Trainable parameters vs best val loss", "x": 0.02, "font": {"size": 15}},
                           "xaxis": {"title": {"text": "trainable parameters"}, "type": "log"},
                           "yaxis": {"title": {"text": "best val loss (nats)"}}, "height": 320,
                           "margin": {"l": 60, "r": 20, "t": 40, "b": 45}}})
    return figs
