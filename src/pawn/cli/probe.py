"""``pawn probe``: parse :class:`pawn.evaluate.settings.ProbeSettings` → :func:`pawn.evaluate.runs.probe_models` → render."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from pawn.cli._options import argument, settings_command
from pawn.cli._output import Column, Output, Progress, TableReport, check_outputs, heartbeat, interrupted, write_json
from pawn.evaluate.settings import ProbeSettings

if TYPE_CHECKING:  # imported where the command runs: help and argument errors must not import JAX
    from pawn.evaluate import runs

DOC = """Train the nine linear probes on the embedding output and every layer; report the
best layer per probe (accuracy, or R² and MAE) and the whole per-layer table in --json.

Defaults are v2's: 4,096/1,024 games, 20 epochs, lr 1e-3, weight decay 1e-4,
max_ply min(context, 256). The published v1.0.0 probe table used weight decay 0.01 (see
--weight-decay and --max-ply). The frozen backbone's hidden states are computed once per
corpus; progress with ETA goes to stderr."""


def best_table(r: runs.ModelProbes, s: ProbeSettings) -> TableReport:
    """Best layer per probe: accuracy, or R² and MAE for the regression probes."""
    from pawn.evaluate.probes import REGRESSION

    t = TableReport(f"{r.name}: linear probes ({s.games}/{r.val_games} games, {s.epochs} epochs, max_ply {r.max_ply}, "
                    f"weight decay {s.weight_decay:g})", [Column("Probe", justify="left"), Column("Best layer", justify="left"), Column("Best")])
    for k, b in r.result["best"].items():
        t.add(k, b["layer"], f"R² {b['best_accuracy']:.2f} (MAE {b['mae']:.1f})" if k in REGRESSION else f"{100 * b['best_accuracy']:.1f}%")
    return t


def probe_cmd(s: ProbeSettings, checkpoint: str) -> None:
    from pawn.evaluate import runs

    runs.probe_names(s)
    check_outputs(json=s.json_out, plot=s.plot)
    heartbeat("pawn probe")
    from pawn.cli._paths import resolve_checkpoint_arg

    checkpoint = resolve_checkpoint_arg(checkpoint, lambda m: typer.echo(m, err=True))  # a run directory: its best checkpoint
    models = runs.load(checkpoint, s.variant)
    out = Output()
    record: dict = {"checkpoint": checkpoint, "hub": models[0].hub, "models": []}
    done: list[str] = []
    try:
        with Progress() as prog:
            for r in runs.probe_models(models, s, log=lambda m: out.line(m, highlight=False), progress=prog.task):
                record["models"].append(r.record())
                out.report(best_table(r, s))
                cached = r.result["settings"]["features_cached"]
                if not (cached["train"] and cached["val"]):
                    out.line(f"  note: hidden states recomputed every epoch for {', '.join(k for k in ('train', 'val') if not cached[k])} "
                             "(over --feature-cache-gb)")
                if r.plot is not None:
                    typer.echo(f"wrote {r.plot}")
                done.append(r.name)
    except KeyboardInterrupt:
        raise interrupted(done, [lm.name for lm in models], s.json_out, record)
    write_json(s.json_out, record)


command = settings_command(ProbeSettings, probe_cmd, doc=DOC, before=[argument(
    "checkpoint", str, "v2 checkpoint directory (a supernet probes every nested variant) or a Hub id.")])
