"""``pawn report``: parse the paths → :func:`pawn.report.write_report` → one line naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer


def command(
    paths: Annotated[List[Path], typer.Argument(help="Run directories, folders of runs (searched recursively), a sweep's "
                                                     "--out (study.db), PGN files, pawn eval/bench --json files.",
                                                metavar="PATH...")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The HTML file to write.")] = Path("report.html"),
    title: Annotated[Optional[str], typer.Option(help="Page title (default: the run's name or the number of runs).")] = None,
) -> None:
    """Write one self-contained HTML report (plotly embedded, opens offline) of runs, sweeps,
    games and eval/bench reports.

    Pages: Runs (sortable table; ticked runs go to Compare), Run (KPIs, loss, top-1 with the
    ceiling, game integrity, lr as run and as planned, gradient norm, throughput and data wait,
    memory, adapter weight norms, checkpoints, config), Compare (one metric across runs; x = step,
    tokens or wall time; log axes; TensorBoard's EMA smoothing; the config fields that differ),
    Sweep (trials of each study.db or journal found, objective history, Pareto front of trainable
    parameters vs best val loss), Games (PGN games on a board, ply by ply) and Eval / bench.
    Needs plotly (extras pawn\\[report])."""
    from pawn.report import write_report

    p = write_report(paths, out, title=title)
    typer.echo(f"wrote {p} ({p.stat().st_size / 2**20:.1f} MiB)")
