"""A loopback fake of the Hugging Face Hub endpoints that ``HfApi.create_repo``, ``create_branch``
and ``create_commit`` use (no network): point ``HF_ENDPOINT`` (or ``HfApi(endpoint=...)``) at
:attr:`FakeHub.url`.

Endpoints: ``POST /api/repos/create``, ``POST /api/models/{repo}/branch/{branch}``,
``POST /api/validate-yaml``, ``POST /api/models/{repo}/preupload/{rev}`` (every file "regular",
so contents travel base64 in the commit payload) and ``POST /api/models/{repo}/commit/{rev}``
(ndjson: a header and one ``file`` line per file), which stores the commit: its branch, id, files
(decoded bytes) and the wall-clock times it arrived and was answered.

Faults are scripted per commit call, in order: ``hub.commit_faults = ["drop", 503, 403, ...]``:
``"drop"`` closes the connection without answering, an int answers that status (with an
``X-Error-Message``), ``None`` answers normally. ``hub.commit_delay_s`` holds each commit before
answering (an upload in flight).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional, Union
from urllib.parse import unquote, urlparse


@dataclass
class Commit:
    repo: str
    branch: str
    oid: str
    summary: str
    files: dict[str, bytes]
    received: float
    answered: float = 0.0


@dataclass
class FakeHub:
    commit_faults: list[Union[str, int, None]] = field(default_factory=list)
    commit_delay_s: float = 0.0
    commit_delays: dict[int, float] = field(default_factory=dict)
    create_status: Optional[int] = None  # answer repo creation with this status (e.g. 403)
    error_messages: dict[int, str] = field(default_factory=lambda: {403: "You have exceeded your storage quota (fake)"})
    repos: dict[str, dict] = field(default_factory=dict)
    branches: dict[str, set] = field(default_factory=dict)
    commits: list[Commit] = field(default_factory=list)
    commit_calls: int = 0
    requests: list[tuple[str, str]] = field(default_factory=list)
    _server: Optional[ThreadingHTTPServer] = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def files_at(self, branch: str) -> dict[str, bytes]:
        """The branch's tree after all its commits (later commits overwrite paths)."""
        tree: dict[str, bytes] = {}
        for c in self.commits:
            if c.branch == branch:
                tree.update(c.files)
        return tree

    def start(self) -> "FakeHub":
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _json(self, status: int, obj, headers: Optional[dict] = None) -> None:
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                self.requests_log("GET")
                self._json(404, {"error": "not implemented in the fake hub"})

            def requests_log(self, method: str) -> str:
                path = urlparse(self.path).path
                hub.requests.append((method, path))
                return path

            def do_POST(self):  # noqa: N802
                path = self.requests_log("POST")
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                parts = [unquote(p) for p in path.strip("/").split("/")]
                if path == "/api/repos/create" and hub.create_status is not None:
                    return self._json(hub.create_status, {"error": "You don't have the rights to create a model under this namespace"})
                if path == "/api/repos/create":
                    payload = json.loads(body or b"{}")
                    repo = f"{payload.get('organization')}/{payload['name']}"
                    hub.repos.setdefault(repo, {"private": payload.get("visibility") == "private"})
                    hub.branches.setdefault(repo, {"main"})
                    return self._json(200, {"url": f"{hub.url}/{repo}"})
                if path == "/api/validate-yaml":
                    return self._json(200, {"errors": [], "warnings": []})
                if len(parts) >= 6 and parts[:2] == ["api", "models"]:
                    repo, action, rev = f"{parts[2]}/{parts[3]}", parts[4], "/".join(parts[5:])
                    if repo not in hub.repos:
                        return self._json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                    if action == "branch":
                        hub.branches[repo].add(rev)
                        return self._json(200, {})
                    if action == "preupload":
                        files = json.loads(body)["files"]
                        return self._json(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                                          for f in files]})
                    if action == "commit":
                        return self._commit(repo, rev, body)
                return self._json(404, {"error": f"fake hub: no endpoint {path}"})

            def _commit(self, repo: str, rev: str, body: bytes) -> None:
                received = time.time()
                call = hub.commit_calls
                fault = hub.commit_faults[call] if call < len(hub.commit_faults) else None
                hub.commit_calls += 1
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if isinstance(fault, int):
                    msg = hub.error_messages.get(fault, f"fake error {fault}")
                    return self._json(fault, {"error": msg}, {"X-Error-Message": msg})
                if rev not in hub.branches[repo]:
                    return self._json(404, {"error": f"Revision not found: {rev}"}, {"X-Error-Code": "RevisionNotFound"})
                summary, files = "", {}
                for line in body.splitlines():
                    item = json.loads(line)
                    if item["key"] == "header":
                        summary = item["value"]["summary"]
                    elif item["key"] == "file":
                        v = item["value"]
                        files[v["path"]] = base64.b64decode(v["content"]) if v.get("encoding") == "base64" else v["content"].encode()
                    else:
                        return self._json(400, {"error": f"fake hub: unsupported commit line {item['key']}"})
                delay = hub.commit_delays.get(call, hub.commit_delay_s)
                if delay:
                    time.sleep(delay)
                oid = hashlib.sha1(f"{repo}{rev}{len(hub.commits)}{summary}".encode()).hexdigest()
                hub.commits.append(Commit(repo, rev, oid, summary, files, received, time.time()))
                self._json(200, {"commitUrl": f"{hub.url}/{repo}/commit/{oid}", "commitOid": oid, "pullRequestUrl": None})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
