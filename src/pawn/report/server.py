"""``pawn dashboard``: the report of every run under a folder, served on localhost by the standard
library's :class:`http.server.ThreadingHTTPServer`.

Routes: ``/`` the report of every run under the root; ``/run/<path>`` the report of the runs under
``root/<path>``; ``/stamp`` a fingerprint of the files the report reads (each ``metrics.jsonl``,
``study.db``, eval JSON and PGN: path, size, mtime). A page is rebuilt when the stamp changed
since it was built (a metrics.jsonl is newer), and the served page polls ``/stamp`` and reloads
itself when it changes, so a live run's charts follow it.

Only the host names of the bound address (and ``--allow-host`` names) are answered
(:mod:`pawn.report.hosts`): another ``Host`` gets 421, another ``Origin`` 403, so a page on another
site cannot read the report through DNS rebinding. Every spelling of a path (``/run/a``,
``/run/a/``, ``/run//a``, ``/run/./a``, ``/run/%61``) is one cached page, keyed by the folder it
resolves to, and at most :data:`MAX_PAGES` pages are kept.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import os
import socket
import threading
import urllib.parse
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Sequence

from pawn.report import ReportError, build_html, collect
from pawn.report.hosts import host_allowed, host_names, origin_allowed
from pawn.sweep.storage import shown_url

_WATCHED = ("metrics.jsonl", "study.db")
_WATCHED_SUFFIXES = (".pgn", ".journal")
_SKIP_DIRS = ("checkpoints", "tensorboard", "wandb", "jax-cache")
MAX_PAGES = 8
"""The most built pages the dashboard keeps (least recently served dropped first); a page is
several MiB (plotly.js is embedded)."""


def stamp(root: Path) -> str:
    """A fingerprint (16 hex digits) of every file under ``root`` the report reads: each
    ``metrics.jsonl``, ``study.db``, ``eval*.json``, ``*.pgn`` and journal, by path, size and
    modification time (ns). Checkpoint folders are not entered."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for f in sorted(filenames):
            if f in _WATCHED or f.endswith(_WATCHED_SUFFIXES) or (f.startswith(("eval", "bench")) and f.endswith(".json")):
                p = os.path.join(dirpath, f)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


class ReportCache:
    """Built pages by the folder they report, rebuilt when :func:`stamp` of the root changed (one
    build at a time); at most ``max_pages`` kept, least recently served dropped first, and pages
    of an older stamp dropped when the stamp changes.

    Args:
        root: the folder served. every_ms: how often the page polls ``/stamp``.
        log: receives one line per rebuild. max_pages: see :data:`MAX_PAGES`.
    """

    def __init__(self, root: Path, every_ms: int = 10_000, log: Callable[[str], None] = print,
                 max_pages: int = MAX_PAGES):
        self.root = Path(root).resolve()
        self.every_ms = every_ms
        self.log = log
        self.max_pages = max(1, int(max_pages))
        self._pages: OrderedDict[Path, tuple[str, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """The number of pages kept."""
        return len(self._pages)

    def target(self, rel: str) -> Path:
        """The folder (or file) ``root/rel`` resolves to.

        Raises:
            ReportError: ``rel`` resolves outside the root (symbolic links followed), or holds a
                NUL byte or is otherwise not a path.
        """
        try:
            target = (self.root / rel).resolve()
        except (ValueError, OSError):
            raise ReportError(f"{rel!r}: not a path under {self.root}") from None
        if target != self.root and self.root not in target.parents:
            raise ReportError(f"{rel}: outside {self.root}")
        return target

    def page(self, rel: str) -> bytes:
        """The HTML of the report of ``root/rel`` (``""``: every run).

        Raises:
            ReportError: ``rel`` leaves the root or holds nothing to report.
        """
        target = self.target(rel)
        with self._lock:
            s = stamp(self.root)
            for key in [k for k, (old, _) in self._pages.items() if old != s]:
                del self._pages[key]  # built from older files: never served again
            hit = self._pages.get(target)
            if hit is not None:
                self._pages.move_to_end(target)
                return hit[1]
            shown = target.relative_to(self.root).as_posix()
            self.log(f"pawn dashboard: building /{('run/' + shown) if shown != '.' else ''} for its first request")
            html = build_html(collect([target], within=self.root, log=lambda m: self.log(f"pawn dashboard: {m}")),
                              live={"stamp_url": "/stamp", "stamp": s, "every_ms": self.every_ms})
            body = html.encode("utf-8")
            self._pages[target] = (s, body)
            while len(self._pages) > self.max_pages:
                self._pages.popitem(last=False)
            self.log(f"pawn dashboard: built /{('run/' + shown) if shown != '.' else ''} "
                     f"({len(body) / 2**20:.1f} MiB, stamp {s})")
            return body


def make_server(root: Path, host: str = "127.0.0.1", port: int = 8050, every_ms: int = 10_000,
                log: Callable[[str], None] = print, allow_hosts: Sequence[str] = ()) -> ThreadingHTTPServer:
    """The dashboard's HTTP server, bound (not yet serving). Its ``report_cache`` is the
    :class:`ReportCache`; its ``host_names`` the Host names it answers
    (:func:`pawn.report.hosts.host_names` of ``host`` and ``allow_hosts``).

    Raises:
        ReportError: ``root`` is not a directory, or the port is taken / cannot be bound (one line).
        UsageError: a bad ``allow_hosts`` name.
    """
    root = Path(root)
    if not root.is_dir():
        raise ReportError(f"{root}: not a directory")
    names = host_names(host, allow_hosts)
    cache = ReportCache(root, every_ms, log)

    class Handler(BaseHTTPRequestHandler):
        server_version = "pawn-dashboard"

        def log_message(self, fmt: str, *args) -> None:  # quiet: one line per rebuild only
            pass

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            text = "text/plain; charset=utf-8"
            host = self.headers.get("Host")
            if not host_allowed(host, names):
                return self._send(421, f"pawn dashboard answers the host names {', '.join(names)}, not {host!r} "
                                       "(pawn dashboard --allow-host NAME adds one)\n".encode(), text)
            origin = self.headers.get("Origin")
            if not origin_allowed(origin, names):
                return self._send(403, f"pawn dashboard: requests from the page origin {origin!r} are refused\n".encode(), text)
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            if "\0" in path:
                return self._send(404, b"not found\n", text)
            try:
                if path == "/stamp":
                    return self._send(200, stamp(cache.root).encode(), "text/plain; charset=utf-8")
                if path in ("/", "/index.html"):
                    return self._send(200, cache.page(""), "text/html; charset=utf-8")
                if path.startswith("/run/"):
                    return self._send(200, cache.page(path[len("/run/"):].strip("/")), "text/html; charset=utf-8")
                return self._send(404, b"not found\n", "text/plain; charset=utf-8")
            except ReportError as e:
                return self._send(404, f"{e}\n".encode(), "text/plain; charset=utf-8")
            except (BrokenPipeError, ConnectionResetError):
                return None
            except Exception as e:  # noqa: BLE001 -- one odd file must not drop the connection: one line, 500
                cache.log(f"pawn dashboard: {path}: {type(e).__name__}: {' '.join(str(e).split())[:300]}")
                return self._send(500, f"pawn dashboard could not build {path}: {type(e).__name__}: "
                                       f"{' '.join(str(e).split())[:300]}\n".encode(), text)

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise ReportError(f"port {port} on {host} is taken (another dashboard or server?); "
                              "choose another with --port") from None
        raise ReportError(f"cannot listen on {host}:{port} ({e.strerror or e})") from None
    server.daemon_threads = True
    server.report_cache = cache  # type: ignore[attr-defined]
    server.host_names = names  # type: ignore[attr-defined]
    return server


READ_METHODS = ("GET", "HEAD")
"""The HTTP methods a read-only optuna-dashboard (the default of ``pawn dashboard --sweep``) answers;
optuna-dashboard changes a study (renames, deletes, notes, tells a trial) only through others."""


def guarded_wsgi(app: Callable, names: Sequence[str], writable: bool = False, label: str = "optuna-dashboard") -> Callable:
    """A WSGI application that passes to ``app`` only what PAWN's own page answers: a ``Host``
    among ``names`` (else 421) and no foreign ``Origin`` (else 403) (:mod:`pawn.report.hosts`),
    and, unless ``writable``, only :data:`READ_METHODS` (else 405), so a page on another site can
    neither read nor change the study, and a served study is read-only unless the user asks."""

    def refuse(start_response, status: str, text: str, extra=()):
        body = (text + "\n").encode()
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))),
                                ("Cache-Control", "no-store"), *extra])
        return [body]

    def guarded(environ, start_response):
        host = environ.get("HTTP_HOST")
        if not host_allowed(host, names):
            return refuse(start_response, "421 Misdirected Request", f"{label} (pawn dashboard --sweep) answers the host "
                          f"names {', '.join(names)}, not {host!r} (pawn dashboard --allow-host NAME adds one)")
        origin = environ.get("HTTP_ORIGIN")
        if not origin_allowed(origin, names):
            return refuse(start_response, "403 Forbidden", f"{label}: requests from the page origin {origin!r} are refused")
        method = environ.get("REQUEST_METHOD", "GET").upper()
        if not writable and method not in READ_METHODS:
            return refuse(start_response, "405 Method Not Allowed", f"{label}: the study is served read-only ({method} "
                          "refused); pawn dashboard --sweep-writable lets this page change it", [("Allow", ", ".join(READ_METHODS))])
        return app(environ, start_response)

    return guarded


def start_optuna_dashboard(sweep: str | Path, host: str, port: int, allow_hosts: Sequence[str] = (),
                           writable: bool = False) -> tuple[str, threading.Thread]:
    """Serve a study with optuna-dashboard (its WSGI application, ``optuna_dashboard.wsgi``) on
    ``host:port`` in a daemon thread (the standard library's ``wsgiref`` server, one thread per
    request), behind :func:`guarded_wsgi`: the Host/Origin rule of PAWN's page
    (:func:`pawn.report.hosts.host_names` of ``host`` and ``allow_hosts``) and, unless
    ``writable``, read-only.

    Args:
        sweep: a ``pawn sweep --out`` folder (its ``study.db`` or journal), or a storage URL
            (``postgresql://…``, ``mysql://…``, ``sqlite:///…``) several workers share.

    Returns:
        (the storage URL, password hidden (:func:`shown_url`); the thread).

    Raises:
        ReportError: optuna-dashboard is not installed (names the extra), no study under
            ``sweep``, a storage URL that cannot be opened (one line naming it, password hidden),
            or the port is taken.
        UsageError: a bad ``allow_hosts`` name.
    """
    import wsgiref.simple_server
    from socketserver import ThreadingMixIn

    from pawn.report.sweep import _storage, find_storages, open_study_storage

    if importlib.util.find_spec("optuna_dashboard") is None:
        raise ReportError("--sweep needs optuna-dashboard, which is not installed: pip install 'pawn[dashboard]' "
                          "(or pip install optuna-dashboard)")
    names = host_names(host, allow_hosts)
    if "://" in str(sweep):
        url = str(sweep)
        storage = open_study_storage(url)
    else:
        urls = find_storages([Path(sweep)])
        if not urls:
            raise ReportError(f"--sweep {sweep}: no study.db or journal file there")
        url, storage = urls[0], _storage(urls[0])
    import optuna_dashboard

    class Server(ThreadingMixIn, wsgiref.simple_server.WSGIServer):
        daemon_threads = True

    class Quiet(wsgiref.simple_server.WSGIRequestHandler):
        def log_message(self, fmt: str, *args) -> None:  # no line per request
            pass

    try:
        server = wsgiref.simple_server.make_server(host, port, guarded_wsgi(optuna_dashboard.wsgi(storage), names, writable),
                                                   server_class=Server, handler_class=Quiet)
    except OSError:
        raise ReportError(f"--sweep: port {port} on {host} is taken; choose another with --sweep-port") from None
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True, name="optuna-dashboard")
    t.start()
    return shown_url(url), t


def serve(server: ThreadingHTTPServer, log: Callable[[str], None] = print) -> None:
    """Serve until Ctrl-C (SIGINT) or SIGTERM, then close the socket and return."""
    import signal

    def _term(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, _term) if threading.current_thread() is threading.main_thread() else None
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        log("pawn dashboard: stopped")
    finally:
        server.server_close()
        if old is not None:
            signal.signal(signal.SIGTERM, old)


__all__ = ["stamp", "ReportCache", "make_server", "serve", "READ_METHODS", "guarded_wsgi", "start_optuna_dashboard"]
