"""``pawn lab``: parse ``--http`` / ``--dir`` / ``--allow-host`` → :func:`pawn.lab.server.serve`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from pawn.errors import UsageError


def command(
    http: Annotated[Optional[str], typer.Option("--http", metavar="HOST:PORT", envvar="PAWN_LAB_HTTP", show_envvar=True,
                                                help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (port 0: a free "
                                                     "port; the address served is printed on stderr).")] = None,
    directory: Annotated[Optional[Path], typer.Option("--dir", envvar="PAWN_LAB_DIR", show_envvar=True,
                                                      help="The runs root: relative run paths are taken from it, and "
                                                      "every path a tool is given must resolve inside it (default: the "
                                                      "current directory; MCP clients often start servers elsewhere).")] = None,
    allow_host: Annotated[Optional[List[str]], typer.Option(
        "--allow-host", metavar="NAME", envvar="PAWN_LAB_ALLOW_HOST", show_envvar=True,
        help="With --http: also answer requests whose Host (or Origin) is NAME, e.g. the name a proxy forwards "
             "(repeatable; the variable takes names separated by spaces). By default only the bound address's names "
             "are answered (127.0.0.1: also localhost and ::1).")] = None,
) -> None:
    """Run the PAWN lab MCP server: tools to start, watch, stop, resume, audit and compare pawn pretrain / pawn adapt
    runs and pawn sweep studies (lab_schema, lab_start, lab_runs, lab_status, lab_tail, lab_compare, lab_stop,
    lab_resume, lab_sweep, lab_sweep_status, lab_audit, lab_log).

    Speaks MCP over stdin/stdout (an MCP client starts it: claude mcp add pawn-lab -- pawn lab --dir DIR), or with
    --http HOST:PORT over streamable HTTP, which has no authentication (a warning says so when HOST is not a loopback
    address). All state lives in the run directories (lab.json, lab.log), all of them under --dir. Needs the lab
    extra: pip install 'pawn\\[lab]'.
    """  # (\\[lab]: Typer renders help as rich markup, where a bare [lab] would vanish)
    from pawn.lab.server import parse_http, serve
    from pawn.report.hosts import check_allow_host

    if http is not None:
        parse_http(http)  # a bad value fails before the directory changes
    names = [check_allow_host(n) for n in allow_host or ()]
    if directory is not None:
        try:
            os.chdir(directory.expanduser())
        except OSError as e:
            raise UsageError(f"--dir {directory}: cannot use it ({e.strerror or e})") from None
    serve(http, root=os.getcwd(), allow_hosts=names)
