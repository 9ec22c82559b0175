"""``pawn pretrain``: parse :class:`pawn.settings.PretrainConfig` → :func:`pawn.train.pretrain.run_pretrain` → render."""

from __future__ import annotations

from typing import Any

import typer

from pawn.cli._options import flag, settings_command
from pawn.cli._output import Column, Output, TableReport, print_config, report_end, run_training
from pawn.metrics import METRICS, VALIDATION_COLUMNS
from pawn.settings import PretrainConfig

DOC = (
    "Pretrain a supernet (--supernet tiny|large) or one model (--variant) on random legal games.\n\n"
    "Every option can also come from a PAWN_<NAME> environment variable or a --config file; "
    "precedence: command line > environment > config file > defaults. An exported PAWN_<NAME> applies to every "
    "later command with that field (PAWN_SEED changes pretrain and adapt alike): set it for one command "
    "(PAWN_SEED=3 pawn pretrain …) or use the flag. "
    "Writes metrics.jsonl, config.json, schedule_health.json, curves.png (with matplotlib), checkpoints/step_NNNNNNNN and "
    "checkpoints/best (lowest val loss) under --out (a directory holding another run is refused unless "
    "--resume or --overwrite); --patience N stops early; SIGTERM/Ctrl-C checkpoints and stops (Ctrl-C twice "
    "stops at once); --resume DIR|auto continues exactly (skipping damaged checkpoints). "
    "In a log file (not a terminal) progress is a plain line every --log-every-s seconds. "
    "--tensorboard and --wandb also log every record (extras pawn[tensorboard], pawn[wandb])."
)



def validation_table(cfg: PretrainConfig, last_val: dict[str, Any]) -> TableReport:
    """The last validation's per-model table (a ``val`` record as written, :mod:`pawn.runs`
    schema), smallest model first, models named ``variant (config name)``."""
    from pawn.runs import parse_record

    rep = TableReport(f"validation at step {last_val['step']}",
                      [Column("model", justify="left"), *(Column(METRICS[k].short, "pct" if METRICS[k].unit == "fraction" else ".4f", missing="nan")
                                                    for k in VALIDATION_COLUMNS)])
    rec = parse_record(last_val)
    variants = cfg.model_configs()[1]
    rows = rec.variants or {next(iter(variants)) if len(variants) == 1 else "model": rec.values}
    for n in sorted(rows, key=lambda n: variants[n].d_model if n in variants else 0):
        label = f"{n} ({variants[n].name})" if n in variants else n
        rep.add(label, *(rows[n].get(k, float("nan")) for k in VALIDATION_COLUMNS))
    return rep


def pretrain(cfg: PretrainConfig, overwrite: bool = False, dry_run: bool = False, show_config: bool = False) -> None:
    if show_config:
        print_config(cfg)
        return
    from pawn.cli._paths import check_output_dir, init_from_checkpoint

    check_output_dir(cfg.out)  # before JAX is imported and the step compiled
    cfg = init_from_checkpoint(cfg, lambda line: typer.echo(line, err=True))
    from pawn.train.pretrain import PretrainTask
    from pawn.train import spine
    from pawn.report.hook import report_sinks  # the run's live report.html, with the report extra

    log = lambda msg: typer.echo(msg, err=True)  # noqa: E731
    task = PretrainTask(cfg, log=log)
    res = run_training(lambda: spine.run(task, log=log, overwrite=bool(overwrite), dry_run=bool(dry_run), sinks=report_sinks()),
                       lambda: task.run_dir)
    if report_end(res, "validation"):
        return
    if res.last_val:
        Output().report(validation_table(cfg, res.last_val))
    typer.echo(f"checkpoint: {res.checkpoint}")
    if res.best_checkpoint is not None:
        typer.echo(f"best checkpoint (lowest val loss, step {res.best_step}): {res.best_checkpoint}")
    for name, p in res.variant_checkpoints.items():
        typer.echo(f"variant {name}: {p}")


pretrain_cmd = settings_command(PretrainConfig, pretrain, doc=DOC, after=[flag(
    "overwrite", bool, False, "--overwrite",
    help="If --out holds another run, move it aside to OUT.old-<time> (never deleted) and start a new run there. "
         "Without it (or --resume), such a directory is refused."),
    flag("dry_run", bool, False, "--dry-run",
         help="Print the plan, run the memory check (compiles the step) and the run summary, then stop: nothing is trained or written."),
    flag("show_config", bool, False, "--print-config",
         help="Print the full resolved settings as JSON (flags, environment, config file and defaults merged) and exit; "
              "save it, edit it and pass it back with --config FILE."),
])
