"""``pawn dashboard``: parse → :func:`pawn.report.server.make_server` → serve until Ctrl-C (exit 0)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer


def command(
    root: Annotated[Path, typer.Argument(help="Folder whose runs (searched recursively), studies, PGNs and eval/bench "
                                              "reports are served; links to files or folders outside it are not followed.",
                                         metavar="ROOT")],
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0 for every interface).", envvar="PAWN_DASHBOARD_HOST",
                                      show_envvar=True)] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=0, max=65535, envvar="PAWN_DASHBOARD_PORT",
                                      show_envvar=True)] = 8050,
    sweep: Annotated[Optional[str], typer.Option(help="A pawn sweep --out, or the --storage URL its workers share "
                                                      "(postgresql://USER@HOST/DB; the password from PGPASSWORD or "
                                                      "~/.pgpass): also serve its study with optuna-dashboard (history, "
                                                      "parallel coordinates, importance; the dashboard extra), read-only, "
                                                      "under the same Host/Origin rule as this page.",
                                                 envvar="PAWN_DASHBOARD_SWEEP", show_envvar=True)] = None,
    sweep_writable: Annotated[bool, typer.Option("--sweep-writable", envvar="PAWN_DASHBOARD_SWEEP_WRITABLE",
                                                 show_envvar=True,
                                                 help="Let optuna-dashboard's page change the study (notes, renames, "
                                                      "deleting it); by default it only reads.")] = False,
    sweep_port: Annotated[Optional[int], typer.Option(help="optuna-dashboard's port (default: --port + 1).",
                                                      envvar="PAWN_DASHBOARD_SWEEP_PORT", show_envvar=True)] = None,
    refresh_s: Annotated[float, typer.Option(help="How often an open page checks for new records (s).", min=1.0,
                                             envvar="PAWN_DASHBOARD_REFRESH_S", show_envvar=True)] = 10.0,
    allow_host: Annotated[Optional[List[str]], typer.Option(
        "--allow-host", metavar="NAME", envvar="PAWN_DASHBOARD_ALLOW_HOST", show_envvar=True,
        help="Also answer requests whose Host (or Origin) is NAME, e.g. this machine's address or name as other "
             "machines reach it with --host 0.0.0.0 (repeatable; the variable takes names separated by spaces). By "
             "default only the bound address's names are answered (127.0.0.1: also localhost and ::1; 0.0.0.0: "
             "those and this machine's host name); any other Host gets 421.")] = None,
) -> None:
    """Serve the report of every run under ROOT on localhost (standard-library HTTP server): /
    shows every run, /run/PATH the runs under ROOT/PATH. A page is rebuilt when a metrics.jsonl
    (or study, PGN, eval report) is newer, and an open page reloads itself then. Only requests
    naming this server's own host names (and --allow-host names) are answered, so another web site
    cannot read the report through DNS rebinding. --sweep OUT (or a database URL) hands that
    sweep's study to optuna-dashboard, read-only unless --sweep-writable, under the same rule. Ctrl-C stops it (exit 0). Needs plotly (extras pawn\\[report];
    pawn\\[dashboard] adds optuna-dashboard)."""
    from pawn.report import require_plotly
    from pawn.report.server import make_server, serve, start_optuna_dashboard

    require_plotly()
    server = make_server(root, host, port, every_ms=int(refresh_s * 1000), log=lambda m: typer.echo(m, err=True),
                         allow_hosts=allow_host or ())
    bound = server.server_address[1]
    shown = "localhost" if host in ("127.0.0.1", "::1", "localhost") else host
    if sweep is not None:
        try:
            url, _ = start_optuna_dashboard(sweep, host, sweep_port if sweep_port is not None else bound + 1,
                                            allow_hosts=allow_host or (), writable=sweep_writable)
        except BaseException:
            server.server_close()
            raise
        typer.echo(f"optuna-dashboard: {url} on http://{shown}:{sweep_port if sweep_port is not None else bound + 1}/"
                   + ("" if sweep_writable else " (read-only)"))
    typer.echo(f"pawn dashboard: http://{shown}:{bound}/ (runs under {root}; Ctrl-C stops)", err=False)
    serve(server, log=lambda m: typer.echo(m, err=True))
