"""``pawn lab``: parse ``--http`` / ``--dir`` → :func:`pawn.lab.server.serve`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from pawn.errors import UsageError


def command(
    http: Annotated[Optional[str], typer.Option("--http", metavar="HOST:PORT",
                                                help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio.")] = None,
    directory: Annotated[Optional[Path], typer.Option("--dir", help="Take relative run paths from this directory "
                                                      "(default: the current one; MCP clients often start servers elsewhere).")] = None,
) -> None:
    """Run the PAWN lab MCP server: tools to start, watch, stop, resume, audit and compare pawn pretrain / pawn adapt
    runs and pawn sweep studies (lab_schema, lab_start, lab_runs, lab_status, lab_tail, lab_compare, lab_stop,
    lab_resume, lab_sweep, lab_sweep_status, lab_audit, lab_log).

    Speaks MCP over stdin/stdout (an MCP client starts it: claude mcp add pawn-lab -- pawn lab --dir DIR), or with
    --http HOST:PORT over streamable HTTP. All state lives in the run directories (lab.json, lab.log). Needs the lab
    extra: pip install 'pawn\\[lab]'.
    """  # (\\[lab]: Typer renders help as rich markup, where a bare [lab] would vanish)
    from pawn.lab.server import parse_http, serve

    if http is not None:
        parse_http(http)  # a bad value fails before the directory changes
    if directory is not None:
        try:
            os.chdir(directory.expanduser())
        except OSError as e:
            raise UsageError(f"--dir {directory}: cannot use it ({e.strerror or e})") from None
    serve(http)
