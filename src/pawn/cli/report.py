"""``pawn report``: parse the paths → :func:`pawn.report.write_report` → one line naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer


def command(
    paths: Annotated[List[str], typer.Argument(help="Run directories, folders of runs (searched recursively), a sweep's "
                                                    "--out (study.db), PGN files, pawn eval/bench --json files, or the "
                                                    "database URL a sweep's workers share (postgresql://USER@HOST/DB).",
                                               metavar="PATH...")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The HTML file to write.")] = Path("report.html"),
    title: Annotated[Optional[str], typer.Option(help="Page title (default: the run's name or the number of runs).")] = None,
    checkpoint: Annotated[Optional[str], typer.Option(
        help="Show this model's top moves and their probabilities at each position of the Games page (teacher-forced, "
             "legal moves only, at its trained context; where its own argmax was illegal is marked): a checkpoint "
             "directory, a run directory (its best checkpoint), 'best' (the best checkpoint of the one run among PATH) "
             "or a Hub id. Loads JAX.", metavar="CKPT")] = None,
    variant: Annotated[Optional[str], typer.Option(help="With a supernet --checkpoint: the variant (default: its largest).")] = None,
    top_k: Annotated[int, typer.Option(min=1, max=20, help="Moves shown per position with --checkpoint.")] = 5,
) -> None:
    """Write one self-contained HTML report (plotly embedded, opens offline) of runs, sweeps,
    games and eval/bench reports.

    Pages: Runs (sortable table; ticked runs go to Compare), Run (KPIs, loss, top-1 with the
    ceiling, game integrity, lr as run and as planned, gradient norm, throughput and data wait,
    memory, adapter weight norms, checkpoints, config), Compare (one metric across runs; x = step,
    tokens or wall time; log axes; TensorBoard's EMA smoothing; the config fields that differ),
    Sweep (trials of each study.db or journal found, objective history, Pareto front of trainable
    parameters vs best val loss), Games (PGN games on a board, ply by ply; with --checkpoint the
    model's top moves at each ply) and Eval / bench (with the Suite section of pawn eval --suite).
    Needs plotly (extras pawn\\[report])."""
    from pawn.report import write_report

    if checkpoint is not None and checkpoint != "best":
        from pawn.cli._paths import check_input

        check_input(checkpoint, "--checkpoint", what="checkpoint directory")
    p = write_report(paths, out, title=title, checkpoint=checkpoint, variant=variant, top_k=top_k,
                     log=lambda m: typer.echo(f"pawn report: {m}", err=True))
    typer.echo(f"wrote {p} ({p.stat().st_size / 2**20:.1f} MiB)")
