"""Which ``Host`` and ``Origin`` request headers PAWN's local HTTP servers answer (``pawn
dashboard``, ``pawn lab --http``).

A server answers only the names of the address it is bound to, plus the names the user adds
(``--allow-host NAME``): bound to a loopback address (``127.0.0.1``, ``::1``, ``localhost``) or to
every interface (``0.0.0.0``, ``::``), the loopback names; to every interface, also this machine's
host name; to any other address or name, that one. A web page that makes its own domain resolve to
this machine (DNS rebinding) still sends its own domain as ``Host`` (and as ``Origin``), so it is
refused: ``421 Misdirected Request`` for a Host, ``403 Forbidden`` for an Origin (the status codes
of the MCP Python SDK's transport security, which ``pawn lab --http`` uses with these names). A
request without an ``Origin`` (a command-line client, a same-origin page load) is judged by its
Host alone. The port is not compared: a reverse proxy may forward another one.
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse
from typing import Iterable, Optional, Sequence

from pawn.errors import UsageError

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
"""The names a loopback-bound server answers."""
WILDCARD_ADDRESSES = ("", "0.0.0.0", "::")
"""Bind addresses that mean every interface."""


def _norm(name: str) -> str:
    return name.strip().strip("[]").rstrip(".").lower()


def is_loopback(host: str) -> bool:
    """Whether a bind address or name (``127.0.0.2``, ``[::1]``, ``localhost``) is this machine only."""
    h = _norm(host)
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def check_allow_host(name: str, flag: str = "--allow-host") -> str:
    """One ``--allow-host`` value, normalised (lower case, IPv6 brackets removed).

    Raises:
        UsageError: empty, or not a bare host name or address (a scheme, port, path or space).
    """
    n = _norm(name or "")
    bad = not n or any(c in n for c in "/@?# \t") or ("://" in name)
    if not bad and ":" in n:  # only an IPv6 address may hold a colon (a port is not part of the name)
        try:
            ipaddress.IPv6Address(n)
        except ValueError:
            bad = True
    if bad:
        raise UsageError(f"{flag} {name!r}: expected a host name or address (e.g. pawn.example.org, 192.168.1.5), "
                         "without scheme or port")
    return n


def host_names(bind: str, extra: Iterable[str] = ()) -> list[str]:
    """The host names a server bound to ``bind`` answers (see the module's note), then ``extra``
    (each checked by :func:`check_allow_host`), without repeats.

    Raises:
        UsageError: a bad ``extra`` name.
    """
    out: list[str] = []
    b = _norm(bind)
    if b in WILDCARD_ADDRESSES:
        names = [*LOOPBACK_NAMES, socket.gethostname(), socket.getfqdn()]
    elif is_loopback(b):
        names = [b, *LOOPBACK_NAMES]
    else:
        names = [b]
    names += [check_allow_host(x) for x in extra]
    for n in names:
        n = _norm(n)
        if n and n not in out:
            out.append(n)
    return out


def _host_of(netloc: str) -> Optional[str]:
    """The host name of a ``Host`` header value or URL authority (``name``, ``name:port``,
    ``[v6]:port``), normalised; None when it cannot be parsed."""
    netloc = netloc.strip()
    if not netloc or any(c in netloc for c in "@/\\?# \t"):
        return None
    try:
        h = urllib.parse.urlsplit("//" + netloc).hostname
    except ValueError:
        return None
    return _norm(h) if h else None


def host_allowed(header: Optional[str], names: Sequence[str]) -> bool:
    """Whether a ``Host`` header names one of ``names`` (any port). A missing one is refused."""
    h = _host_of(header) if header else None
    return h is not None and h in names


def origin_allowed(origin: Optional[str], names: Sequence[str]) -> bool:
    """Whether an ``Origin`` header is absent or an ``http(s)`` origin on one of ``names``."""
    if origin is None:
        return True
    try:
        u = urllib.parse.urlsplit(origin.strip())
    except ValueError:
        return False
    return u.scheme in ("http", "https") and _host_of(u.netloc) in names


def url_host(name: str) -> str:
    """``name`` as it appears in a Host header or URL (an IPv6 address in brackets)."""
    return f"[{name}]" if ":" in name else name


__all__ = ["LOOPBACK_NAMES", "is_loopback", "check_allow_host", "host_names", "host_allowed", "origin_allowed", "url_host"]
