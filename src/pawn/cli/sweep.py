"""``pawn sweep``: parse :class:`pawn.sweep.settings.SweepSettings` → :func:`pawn.sweep.study.run_sweep` → render."""

from __future__ import annotations

import json
import os

import typer

from pawn.cli._errors import fail
from pawn.cli._options import settings_command
from pawn.cli._output import Column, Output, TableReport, check_outputs, write_json
from pawn.sweep.settings import SweepSettings

DOC = (
    "Run an Optuna study whose trials are pawn adapt (or, with --run-type pretrain, pawn pretrain) runs, "
    "in this process on data loaded once, pruned on the val loss reported at each validation (global step).\n\n"
    "The study lives in --storage (default OUT/study.db, SQLite; any SQLAlchemy URL or an Optuna journal file): "
    "re-running the same command continues it to --trials finished trials; --workers W runs W processes on it "
    "(or start the command W times by hand); --trials counts finished (completed or pruned) trials, and each run of "
    "the command makes at most that many attempts, so a run of failed trials also ends it (re-run to continue). "
    "Each strategy has a built-in search space; --space FILE overrides fields; a field set in --base-config is "
    "fixed (not searched) unless --space names it. The base config, the space (at each range's ends and each "
    "choice), --checkpoint and a local --data path are checked before any trial. --population P trains P trials "
    "differing only in lr / weight decay / warm-up (and init_scale for adapters) as one vmapped program. "
    "Prints completed/pruned/failed trials (exit 1 when none completed) and writes OUT/best_config.json, a ready --config file for the trial "
    "command; --json writes every trial."
)


def _fmt_params(params: dict) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(params.items()))


def sweep(s: SweepSettings) -> None:
    from pawn.sweep.study import run_sweep
    from pawn.report.hook import report_sinks  # each trial's live report.html, with the report extra

    from pawn.sweep.trials import ctrl_c_latch

    check_outputs(json=s.json_out)
    try:
        with ctrl_c_latch():
            res = run_sweep(s, log=lambda msg: typer.echo(msg, err=True), sinks=report_sinks())
    except KeyboardInterrupt:
        raise fail("interrupted; the running trial is recorded as FAILED; re-run the same command to continue the study", 130)
    counts = {st: sum(1 for t in res.trials if t["state"] == st) for st in ("COMPLETE", "PRUNED", "FAIL", "RUNNING")}
    if "PAWN_SWEEP_WORKER" in os.environ:
        # a worker started by --workers: its parent prints the one summary once every worker has ended
        typer.echo(f"worker {os.environ['PAWN_SWEEP_WORKER']} done: the study holds {counts['COMPLETE']} completed, "
                   f"{counts['PRUNED']} pruned, {counts['FAIL']} failed trials", err=True)
        return
    rep = TableReport(
        f"study {res.study.study_name}: {counts['COMPLETE']} completed, {counts['PRUNED']} pruned, {counts['FAIL']} failed"
        + (f", {counts['RUNNING']} running" if counts["RUNNING"] else ""),
        [Column("trial", "d"), Column("state", justify="left"), Column("best val loss", ".4f", missing="-"),
         Column("steps", missing="-"), Column("params / reason", justify="left")],
    )
    for t in res.trials:
        note = _fmt_params(t["params"]) + (f"  [{t['fail_reason']}]" if t["fail_reason"] else "")
        rep.add(t["number"], t["state"], t["value"], t["steps"], note)
    Output().report(rep)
    if res.best is not None:
        typer.echo(f"best: trial {res.best['number']} val loss {res.best['value']:.4f} ({_fmt_params(res.best['params'])})")
    if res.best_config is not None:
        typer.echo(f"best config: {res.best_config} (pawn {res.command} --config {res.best_config} --out DIR)")
    from pawn.sweep.storage import shown_url

    shown = shown_url(res.storage)  # a database password is neither printed nor written
    settings = {**json.loads(s.model_dump_json()), **({"storage": shown_url(s.storage)} if s.storage else {})}
    typer.echo(f"storage: {shown} (study {res.study.study_name})")
    write_json(s.json_out, {"study": res.study.study_name, "storage": shown, "settings": settings,
                            "best": res.best, "best_config": str(res.best_config) if res.best_config else None,
                            "trials": res.trials})
    if counts["COMPLETE"] == 0:
        raise fail("no trial completed; see the table")


sweep_cmd = settings_command(SweepSettings, sweep, doc=DOC)
