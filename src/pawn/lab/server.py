"""The ``pawn lab`` MCP server: the tools of :mod:`pawn.lab.tools` on the official ``mcp``
Python SDK (``mcp.server.mcpserver.MCPServer``, the v2 name of FastMCP), over stdio or
streamable HTTP.

A tool's result is its JSON dict (structured content, also sent as JSON text). A request the
tool cannot do is a tool error (``isError``) whose text is PAWN's one-line message, never a
traceback.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from pawn.errors import UsageError
from pawn.lab.tools import TOOLS, one_line

INSTRUCTIONS = (
    "PAWN lab: start, watch, stop, resume and compare PAWN training runs (pawn pretrain, pawn adapt) and sweeps. "
    "lab_schema(command) gives the settings a config may set; lab_start validates a config and starts the run in "
    "its own run directory; lab_status / lab_tail (byte cursor: pass back 'next') watch it; lab_compare ranks runs "
    "and gives the Pareto front of trainable parameters vs a metric. Every run directory holds all state (lab.json)."
)


class LabExtraMissing(UsageError):
    """The ``mcp`` package (the ``lab`` extra) is not installed."""


def _mcp():
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:
        raise LabExtraMissing("pawn lab needs the MCP SDK: pip install 'pawn[lab]'") from None
    return MCPServer, ToolError


def _one_line_errors(fn: Callable[..., Any], tool_error: type) -> Callable[..., Any]:
    """``fn`` with PAWN's errors (and settings validation errors) raised as the SDK's tool error
    carrying the one-line message; anything else (a bug) is left to the SDK."""

    @functools.wraps(fn)
    def tool(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            msg = one_line(e)
            if msg is None:
                raise
            raise tool_error(msg) from None

    return tool


def build_server(name: str = "pawn-lab"):
    """The MCP server with every lab tool registered (``await server.call_tool(name, args)``
    calls one in process, without a transport).

    Raises:
        LabExtraMissing: the ``mcp`` package is not installed (``pip install 'pawn[lab]'``).
    """
    MCPServer, ToolError = _mcp()
    from pawn import __version__

    server = MCPServer(name, instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    for fn in TOOLS:
        server.add_tool(_one_line_errors(fn, ToolError), name=fn.__name__, description=fn.__doc__,
                        structured_output=True)
    return server


def parse_http(spec: str) -> tuple[str, int]:
    """``HOST:PORT`` (``127.0.0.1:8765``, ``[::1]:8765``, ``:8765`` = localhost) → (host, port).

    Raises:
        UsageError: not HOST:PORT with a port in 1..65535 (names ``--http``).
    """
    host, sep, port = spec.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--http {spec!r}: expected HOST:PORT, e.g. 127.0.0.1:8765")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def serve(http: Optional[str] = None) -> None:
    """Run the lab server: over stdio (the default: an MCP client starts ``pawn lab``), or with
    ``http="HOST:PORT"`` as a streamable-HTTP server at ``http://HOST:PORT/mcp``.

    Raises:
        LabExtraMissing: the ``mcp`` package is not installed. UsageError: a bad ``http``.
    """
    hostport = parse_http(http) if http is not None else None
    server = build_server()
    if hostport is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host=hostport[0], port=hostport[1])
