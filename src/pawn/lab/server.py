"""The ``pawn lab`` MCP server: the tools of :mod:`pawn.lab.tools` on the official ``mcp``
Python SDK (``mcp.server.mcpserver.MCPServer``, the v2 name of FastMCP), over stdio or
streamable HTTP.

A tool's result is its JSON dict (structured content, also sent as JSON text). A request the
tool cannot do is a tool error (``isError``) whose text is PAWN's one-line message, never a
traceback. Every path a tool is given must resolve inside the server's runs root
(:func:`pawn.lab.tools.within_root`).

Over HTTP, the SDK's transport security (``TransportSecuritySettings``: DNS-rebinding protection)
is always on, with the host names of the bound address plus ``--allow-host`` names
(:func:`pawn.report.hosts.host_names`): another ``Host`` header gets 421, another ``Origin`` 403.
The lab has no authentication: served beyond loopback, anyone who can reach the port can start
and stop runs, and :func:`serve` says so on stderr.
"""

from __future__ import annotations

import errno
import functools
import os
import socket
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from pawn.errors import UsageError
from pawn.lab.tools import RUNS_ROOT, TOOLS, one_line
from pawn.report.hosts import host_names, is_loopback, url_host

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


def _one_line_errors(fn: Callable[..., Any], tool_error: type, root: Path) -> Callable[..., Any]:
    """``fn`` called with ``root`` as the runs root (:data:`pawn.lab.tools.RUNS_ROOT`), and with
    PAWN's errors (and settings validation errors) raised as the SDK's tool error carrying the
    one-line message; anything else (a bug) is left to the SDK."""

    @functools.wraps(fn)
    def tool(*args: Any, **kwargs: Any) -> Any:
        token = RUNS_ROOT.set(root)
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            msg = one_line(e)
            if msg is None:
                raise
            raise tool_error(msg) from None
        finally:
            RUNS_ROOT.reset(token)

    return tool


def build_server(name: str = "pawn-lab", root: Optional[os.PathLike | str] = None):
    """The MCP server with every lab tool registered (``await server.call_tool(name, args)``
    calls one in process, without a transport).

    Args:
        root: the runs root: every path a tool is given must resolve inside it (default: the
            working directory when the server is built).

    Raises:
        LabExtraMissing: the ``mcp`` package is not installed (``pip install 'pawn[lab]'``).
    """
    MCPServer, ToolError = _mcp()
    from pawn import __version__

    where = Path(root if root is not None else os.getcwd()).resolve()
    server = MCPServer(name, instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    for fn in TOOLS:
        server.add_tool(_one_line_errors(fn, ToolError, where), name=fn.__name__, description=fn.__doc__,
                        structured_output=True)
    return server


def transport_security(host: str, allow_hosts: Sequence[str] = ()):
    """The SDK's ``TransportSecuritySettings`` for a server bound to ``host``: DNS-rebinding
    protection on, Host headers of :func:`pawn.report.hosts.host_names` (any port), Origins
    ``http(s)://`` on those names (any port).

    Raises:
        UsageError: a bad ``allow_hosts`` name. LabExtraMissing: no ``mcp`` package.
    """
    _mcp()
    from mcp.server.transport_security import TransportSecuritySettings

    names = [url_host(n) for n in host_names(host, allow_hosts)]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[h for n in names for h in (n, f"{n}:*")],
        allowed_origins=[o for n in names for scheme in ("http", "https") for o in (f"{scheme}://{n}", f"{scheme}://{n}:*")])


def parse_http(spec: str) -> tuple[str, int]:
    """``HOST:PORT`` (``127.0.0.1:8765``, ``[::1]:8765``, ``:8765`` = localhost; port 0 = a free
    port the system picks) → (host, port).

    Raises:
        UsageError: not HOST:PORT with a port in 0..65535 (names ``--http``).
    """
    host, sep, port = spec.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"--http {spec!r}: expected HOST:PORT with a port in 0..65535 (0 = any free port), "
                         "e.g. 127.0.0.1:8765")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: a free port the system picks) and listening.

    Raises:
        UsageError: the address cannot be bound (the port is taken, the host is not this machine's),
            naming ``--http``.
    """
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise UsageError(f"--http {url_host(host)}:{port}: cannot listen there ({e.strerror or e})") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)  # uvicorn's default backlog
    except OSError as e:
        sock.close()
        taken = "; the port is taken (another server?), choose another or 0 for any free port" if e.errno == errno.EADDRINUSE else ""
        raise UsageError(f"--http {url_host(host)}:{port}: cannot listen there ({e.strerror or e}){taken}") from None
    return sock


def serve(http: Optional[str] = None, root: Optional[os.PathLike | str] = None, allow_hosts: Sequence[str] = ()) -> None:
    """Run the lab server: over stdio (the default: an MCP client starts ``pawn lab``), or with
    ``http="HOST:PORT"`` as a streamable-HTTP server at ``http://HOST:PORT/mcp`` answering the
    host names of :func:`transport_security` (``allow_hosts`` adds names). Over HTTP, once it
    listens, one line on stderr gives the address served (``pawn lab: MCP over HTTP at
    http://127.0.0.1:40123/mcp``; with port 0 the port the system picked); served beyond loopback,
    a warning on stderr says that the lab has no authentication.

    Args:
        root: the runs root (:func:`build_server`).

    Raises:
        LabExtraMissing: the ``mcp`` package is not installed. UsageError: a bad ``http`` or
            ``allow_hosts`` name, or an address that cannot be bound (:func:`listen`).
    """
    hostport = parse_http(http) if http is not None else None
    security = transport_security(hostport[0], allow_hosts) if hostport is not None else None
    server = build_server(root=root)
    if hostport is None:
        server.run("stdio")
        return
    import anyio
    import uvicorn

    host, port = hostport
    sock = listen(host, port)
    bound, port = sock.getsockname()[:2]
    url = f"http://{url_host(bound)}:{port}/mcp"
    if not is_loopback(host):
        print(f"warning: pawn lab serves {url} without authentication: anyone who can "
              f"reach this port can start, stop and read runs under {Path(root or os.getcwd()).resolve()}; serve it on "
              "127.0.0.1 (behind an authenticating proxy or an SSH tunnel) to keep it to this machine",
              file=sys.stderr, flush=True)
    print(f"pawn lab: MCP over HTTP at {url} (runs under {Path(root or os.getcwd()).resolve()}; Ctrl-C stops)",
          file=sys.stderr, flush=True)
    # what server.run("streamable-http") does, on the socket bound above (its port known before serving)
    app = server.streamable_http_app(transport_security=security, host=host)
    config = uvicorn.Config(app, log_level=server.settings.log_level.lower())
    anyio.run(lambda: uvicorn.Server(config).serve(sockets=[sock]))
