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

Downloads (``HfApi.model_info``, ``list_repo_tree``, ``list_repo_refs``, ``hf_hub_download``,
``snapshot_download``): ``GET /api/models/{repo}[/revision/{rev}]``, ``GET /api/models/{repo}/tree/{rev}``
(always the whole tree, recursively), ``GET /api/models/{repo}/refs`` (every branch with a commit; no
tags), ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``; a revision is a branch name or a commit id. :meth:`FakeHub.publish`
adds a commit directly. ``hub.truncate = {path: nbytes}`` sends only the first ``nbytes`` of that
file's body (with the full ``Content-Length``) and closes the connection: an interrupted download.
``hub.downloads`` lists the paths whose bodies were served.
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
    truncate: dict[str, int] = field(default_factory=dict)
    downloads: list[str] = field(default_factory=list)
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

    def publish(self, repo: str, files: dict[str, bytes], branch: str = "main", summary: str = "publish") -> str:
        """Commit ``files`` to ``repo`` (created if missing) on ``branch``; returns the commit id."""
        self.repos.setdefault(repo, {"private": False})
        self.branches.setdefault(repo, {"main"}).add(branch)
        oid = hashlib.sha1(f"{repo}{branch}{len(self.commits)}{summary}".encode()).hexdigest()
        self.commits.append(Commit(repo, branch, oid, summary, dict(files), time.time(), time.time()))
        return oid

    def tree(self, repo: str, rev: str) -> Optional[tuple[str, dict[str, bytes]]]:
        """``(commit id, files)`` of ``repo`` at ``rev`` (branch or commit id), or None."""
        mine = [c for c in self.commits if c.repo == repo]
        at = next((c for c in mine if c.oid == rev), None)
        branch = at.branch if at is not None else rev
        files: dict[str, bytes] = {}
        head = None
        for c in mine:
            if c.branch == branch:
                files.update(c.files)
                head = c.oid
                if c is at:
                    break
        return None if head is None else (head, files)

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

            def do_HEAD(self):  # noqa: N802
                self._download(self.requests_log("HEAD"), head=True)

            def do_GET(self):  # noqa: N802
                path = self.requests_log("GET")
                parts = [unquote(p) for p in path.strip("/").split("/")]
                if parts[:2] == ["api", "models"] and len(parts) == 5 and parts[4] == "refs":
                    repo = f"{parts[2]}/{parts[3]}"
                    if repo not in hub.repos:
                        return self._json(404, {"error": f"RepoNotFound: {repo}"}, {"X-Error-Code": "RepoNotFound"})
                    heads = {c.branch: c.oid for c in hub.commits if c.repo == repo}
                    return self._json(200, {"branches": [{"name": b, "ref": f"refs/heads/{b}", "targetCommit": oid}
                                                         for b, oid in sorted(heads.items())],
                                            "tags": [], "converts": []})
                if parts[:2] == ["api", "models"] and len(parts) >= 4:
                    repo = f"{parts[2]}/{parts[3]}"
                    rev = "main"
                    if len(parts) >= 6 and parts[4] in ("revision", "tree"):
                        rev = parts[5]
                    found = hub.tree(repo, rev) if repo in hub.repos else None
                    if found is None:
                        code = "RepoNotFound" if repo not in hub.repos else "RevisionNotFound"
                        return self._json(404, {"error": f"{code}: {repo}@{rev}"}, {"X-Error-Code": code})
                    oid, files = found
                    if len(parts) >= 6 and parts[4] == "tree":
                        return self._json(200, [{"type": "file", "path": n, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                                                for n, b in sorted(files.items())])
                    return self._json(200, {"id": repo, "sha": oid, "private": False,
                                            "siblings": [{"rfilename": n} for n in sorted(files)]})
                return self._download(path, head=False)

            def _download(self, path: str, head: bool) -> None:
                parts = [unquote(p) for p in path.strip("/").split("/")]
                if len(parts) < 5 or parts[2] != "resolve":
                    return self._json(404, {"error": f"fake hub: no endpoint {path}"})
                repo, rev, name = f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])
                found = hub.tree(repo, rev) if repo in hub.repos else None
                if found is None or name not in found[1]:
                    return self._json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
                oid, data = found[0], found[1][name]
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Repo-Commit", oid)
                self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
                self.end_headers()
                if head:
                    return
                hub.downloads.append(name)
                if name in hub.truncate:
                    self.wfile.write(data[: hub.truncate[name]])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(data)

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
