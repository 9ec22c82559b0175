"""``pawn lab``: parse ``--http`` → :func:`pawn.lab.server.serve`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer


def command(
    http: Annotated[Optional[str], typer.Option("--http", metavar="HOST:PORT",
                                                help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio.")] = None,
) -> None:
    """Run the PAWN lab MCP server: tools to start, watch, stop, resume, audit and compare pawn pretrain / pawn adapt
    runs and pawn sweep studies (lab_schema, lab_start, lab_runs, lab_status, lab_tail, lab_compare, lab_stop,
    lab_resume, lab_sweep, lab_sweep_status, lab_audit, lab_log).

    Speaks MCP over stdin/stdout (an MCP client starts it: claude mcp add pawn-lab -- pawn lab), or with --http
    HOST:PORT over streamable HTTP. All state lives in the run directories (lab.json, lab.log). Needs the lab
    extra: pip install 'pawn[lab]'.
    """
    from pawn.lab.server import serve

    serve(http)
