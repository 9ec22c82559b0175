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

Storage buckets (``HfApi.create_bucket``, ``batch_bucket_files``, ``sync_bucket``, ``list_bucket_tree``,
``get_bucket_paths_info``, ``download_bucket_files``) with the Xet storage service they upload to,
both on this server: ``POST /api/buckets/{ns}/{name}`` (create; when it exists, 409 with the
bucket's ``url`` as the Hub answers, which ``create_bucket(exist_ok=True)`` reads; without it when
``hub.bucket_conflict_url`` is False), ``GET /api/buckets/{id}`` (``bucket_info``: id, private,
createdAt, size, totalFiles),
``GET /api/buckets/{id}/xet-{read,write}-token`` (the CAS URL ``{url}/cas`` and a token, as JSON
for ``hf_xet`` and in the ``X-Xet-*`` headers for huggingface_hub), ``POST /api/buckets/{id}/batch`` (ndjson ``addFile``/``deleteFile`` lines; an
``addFile`` whose ``xetHash`` no uploaded shard describes is listed as failed),
``GET /api/buckets/{id}/tree[/{prefix}]``, ``POST /api/buckets/{id}/paths-info`` and
``HEAD /buckets/{id}/resolve/{path}``. The CAS routes are the ones ``hf_xet`` calls
(xet-core's ``RemoteClient``): ``POST /cas/v1/xorbs/{prefix}/{hash}`` stores a serialized xorb,
``POST /cas/v1/shards`` stores a shard and reads its file-info section (each file's hash and its
terms: xorb hash, chunk range, unpacked bytes), ``GET /cas/v1/reconstructions/{file hash}`` answers
the terms with fetch URLs ``/cas/xorb/{hash}`` and byte ranges found by walking the xorb's 8-byte
chunk headers, served with ``Range``. The upload-grant route (``/cas/v1/xorb-grants``), the v2
shard and reconstruction routes and the global-dedup query (``/cas/v1/chunks``) answer 404, which
the client treats as "not offered" (direct xorb upload, v1 routes, no global dedup). Nothing is
deduplicated or decompressed here: files are read back through ``download_bucket_files``.
``hub.bucket_faults`` scripts the ``/batch`` calls like ``commit_faults``; ``hub.bucket_create_status``
answers bucket creation with that status; ``hub.bucket_batches`` lists each applied batch
``(bucket, [paths added])``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
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
class BucketEntry:
    xet_hash: str
    size: int
    mtime: Optional[int]
    uploaded: float


_SHARD_TAG = b"HFRepoMetaData\x00" + bytes([85, 105, 103, 69, 106, 123, 129, 87, 131, 165, 189, 217, 92, 205, 209, 74, 169])
_ENTRY = 48  # every shard file-info entry: 32-byte hash + 4 x u32 (xet-core metadata_shard)


def _hash_hex(raw: bytes) -> str:
    """A Xet hash's hex form: its four little-endian u64 words, each as 16 hex digits."""
    return "".join(f"{w:016x}" for w in struct.unpack("<4Q", raw))


def parse_shard_files(shard: bytes) -> dict[str, list[tuple[str, int, int, int]]]:
    """``{file hash: [(xorb hash, chunk start, chunk end, unpacked bytes), ...]}`` from a shard's
    file-info section: after the 48-byte header (tag, version, footer size; an uploaded shard has
    no footer), one 48-byte header per file (hash, flags, number of terms), its terms (xorb hash,
    flags, unpacked bytes, chunk start, chunk end), then optional verification and metadata
    entries; the section ends with an all-0xff hash (xet-core ``metadata_shard``)."""
    if shard[:32] != _SHARD_TAG:
        raise ValueError("not a Xet shard (wrong magic)")
    files: dict[str, list[tuple[str, int, int, int]]] = {}
    at = 48
    while True:
        raw = shard[at:at + 32]
        if len(raw) < 32:
            raise ValueError("the file-info section has no end marker")
        if raw == b"\xff" * 32:  # the section's bookend
            return files
        flags, n = struct.unpack_from("<II", shard, at + 32)
        at += _ENTRY
        terms = []
        for _ in range(n):
            _xflags, unpacked, c0, c1 = struct.unpack_from("<4I", shard, at + 32)
            terms.append((_hash_hex(shard[at:at + 32]), c0, c1, unpacked))
            at += _ENTRY
        if flags & (1 << 31):  # verification entries, one per term
            at += _ENTRY * n
        if flags & (1 << 30):  # metadata extension
            at += _ENTRY
        files[_hash_hex(raw)] = terms


def xorb_chunk_offsets(xorb: bytes, n: int) -> list[int]:
    """Byte offsets of the first ``n`` + 1 chunk boundaries of a serialized xorb (each chunk: an
    8-byte header whose bytes 1..3 are the compressed size, little-endian, then the data)."""
    offs, at = [0], 0
    for _ in range(n):
        size = int.from_bytes(xorb[at + 1:at + 4], "little")
        at += 8 + size
        offs.append(at)
    return offs


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
    buckets: dict[str, dict[str, BucketEntry]] = field(default_factory=dict)
    bucket_faults: list[Union[str, int, None]] = field(default_factory=list)
    bucket_calls: int = 0
    bucket_create_status: Optional[int] = None
    bucket_conflict_url: bool = True  # False: the 409 of an existing bucket carries no "url" (an answer PAWN must not rely on)
    bucket_created: dict[str, float] = field(default_factory=dict)
    bucket_private: dict[str, bool] = field(default_factory=dict)
    xet_token_status: Optional[int] = None  # answer the Xet token requests with this status (e.g. 401)
    bucket_batches: list[tuple[str, list[str]]] = field(default_factory=list)
    xorbs: dict[str, bytes] = field(default_factory=dict)
    xet_files: dict[str, list[tuple[str, int, int, int]]] = field(default_factory=dict)
    bad_shards: list[bytes] = field(default_factory=list)
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
                path = self.requests_log("HEAD")
                if path.startswith("/buckets/"):
                    return self._bucket_resolve(path)
                self._download(path, head=True)

            def do_GET(self):  # noqa: N802
                path = self.requests_log("GET")
                if path.startswith(("/api/buckets/", "/cas/")):
                    return self._bucket_get(path)
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
                if path.startswith(("/api/buckets/", "/cas/")):
                    return self._bucket_post(path, body)
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

            # ------------------------------------------------------------ buckets and Xet CAS
            def _bucket_files_json(self, bucket: str, prefix: str = "") -> list[dict]:
                out = []
                for name, e in sorted(hub.buckets[bucket].items()):
                    if prefix and not (name == prefix or name.startswith(prefix.rstrip("/") + "/")):
                        continue
                    item = {"type": "file", "path": name, "size": e.size, "xetHash": e.xet_hash,
                            "uploadedAt": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(e.uploaded))}
                    if e.mtime is not None:
                        item["mtime"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(e.mtime / 1000)) + f".{e.mtime % 1000:03d}Z"
                    out.append(item)
                return out

            def _bucket_resolve(self, path: str) -> None:
                parts = [unquote(p) for p in path.strip("/").split("/")]
                bucket, name = f"{parts[1]}/{parts[2]}", "/".join(parts[4:])
                e = hub.buckets.get(bucket, {}).get(name)
                if len(parts) < 5 or parts[3] != "resolve" or e is None:
                    return self._json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
                self.send_response(200)
                self.send_header("Content-Length", str(e.size))
                self.send_header("X-Linked-Size", str(e.size))
                self.send_header("X-Xet-Hash", e.xet_hash)
                self.send_header("X-Xet-Refresh-Route", f"{hub.url}/api/buckets/{bucket}/xet-read-token")
                self.end_headers()

            def _bucket_get(self, path: str) -> None:
                parts = [unquote(p) for p in path.strip("/").split("/")]
                if parts[0] == "cas":
                    return self._cas_get(parts[1:])
                bucket = f"{parts[2]}/{parts[3]}" if len(parts) >= 4 else ""
                if bucket not in hub.buckets:
                    return self._json(404, {"error": f"Bucket not found: {bucket}"}, {"X-Error-Code": "RepoNotFound"})
                rest = parts[4:]
                if not rest:  # bucket_info: the fields huggingface_hub's BucketInfo reads
                    files = hub.buckets[bucket].values()
                    created = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(hub.bucket_created.get(bucket, 0.0)))
                    return self._json(200, {"id": bucket, "private": hub.bucket_private.get(bucket, False), "createdAt": created,
                                            "size": sum(e.size for e in files), "totalFiles": len(files)})
                if rest[0] in ("xet-write-token", "xet-read-token") and hub.xet_token_status is not None:
                    return self._json(hub.xet_token_status, {"error": "Invalid credentials in Authorization header"})
                if rest[0] in ("xet-write-token", "xet-read-token"):
                    exp = int(time.time()) + 3600  # hf_xet reads the JSON body, huggingface_hub the headers
                    return self._json(200, {"casUrl": f"{hub.url}/cas", "exp": exp, "accessToken": "fake-xet-token"},
                                      {"X-Xet-Cas-Url": f"{hub.url}/cas", "X-Xet-Access-Token": "fake-xet-token",
                                       "X-Xet-Token-Expiration": str(exp)})
                if rest[0] == "tree":
                    return self._json(200, self._bucket_files_json(bucket, "/".join(rest[1:])))
                return self._json(404, {"error": f"fake hub: no endpoint {path}"})

            def _cas_get(self, parts: list[str]) -> None:
                if parts[:2] == ["v1", "reconstructions"] and len(parts) == 3 and parts[2] in hub.xet_files:
                    terms, fetch = [], {}
                    for xorb, c0, c1, unpacked in hub.xet_files[parts[2]]:
                        offs = xorb_chunk_offsets(hub.xorbs[xorb], c1)
                        terms.append({"hash": xorb, "unpacked_length": unpacked, "range": {"start": c0, "end": c1}})
                        fetch.setdefault(xorb, []).append({"range": {"start": c0, "end": c1}, "url": f"{hub.url}/cas/xorb/{xorb}",
                                                           "url_range": {"start": offs[c0], "end": offs[c1] - 1}})
                    return self._json(200, {"offset_into_first_range": 0, "terms": terms, "fetch_info": fetch})
                if parts[:1] == ["xorb"] and len(parts) == 2 and parts[1] in hub.xorbs:
                    data = hub.xorbs[parts[1]]
                    rng = self.headers.get("Range", "")
                    status = 200
                    if rng.startswith("bytes="):
                        a, b = rng[len("bytes="):].split("-")
                        data, status = data[int(a):int(b) + 1], 206
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                return self._json(404, {"error": f"fake CAS: not found /{'/'.join(parts)}"})

            def _bucket_post(self, path: str, body: bytes) -> None:
                parts = [unquote(p) for p in path.strip("/").split("/")]
                if parts[0] == "cas":
                    if parts[1:3] == ["v1", "xorbs"] and len(parts) == 5:
                        hub.xorbs[parts[4]] = body
                        return self._json(200, {"was_inserted": True})
                    if parts[1:3] == ["v1", "shards"]:
                        try:
                            hub.xet_files.update(parse_shard_files(body))
                        except (ValueError, struct.error) as e:
                            hub.bad_shards.append(body)
                            return self._json(400, {"error": f"fake CAS: bad shard ({e})"})
                        return self._json(200, {"result": 1})
                    if parts[1:3] == ["v1", "telemetry"]:
                        return self._json(200, {})
                    return self._json(404, {"error": f"fake CAS: no endpoint {path}"})
                bucket = f"{parts[2]}/{parts[3]}" if len(parts) >= 4 else ""
                rest = parts[4:]
                if not rest:  # create
                    if hub.bucket_create_status is not None:
                        return self._json(hub.bucket_create_status, {"error": "You don't have the rights to create a bucket under this namespace"})
                    url = f"{hub.url}/buckets/{bucket}"
                    if bucket in hub.buckets:  # as the Hub answers a second creation: 409 with the existing bucket's url
                        return self._json(409, {"error": "You already created this bucket",
                                                **({"url": url} if hub.bucket_conflict_url else {})})
                    hub.buckets[bucket] = {}
                    hub.bucket_created[bucket] = time.time()
                    hub.bucket_private[bucket] = json.loads(body or b"{}").get("visibility") == "private"
                    return self._json(200, {"url": url, "name": bucket, "id": bucket})
                if bucket not in hub.buckets:
                    return self._json(404, {"error": f"Bucket not found: {bucket}"}, {"X-Error-Code": "RepoNotFound"})
                if rest == ["paths-info"]:
                    want = set(json.loads(body)["paths"])
                    return self._json(200, [f for f in self._bucket_files_json(bucket) if f["path"] in want])
                if rest == ["batch"]:
                    return self._bucket_batch(bucket, body)
                return self._json(404, {"error": f"fake hub: no endpoint {path}"})

            def _injected_fault(self, fault) -> bool:
                """Answer a scripted fault (``"drop"``: close the connection; an int: that HTTP
                status); True when one was answered."""
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return True
                if isinstance(fault, int):
                    msg = hub.error_messages.get(fault, f"fake error {fault}")
                    self._json(fault, {"error": msg}, {"X-Error-Message": msg})
                    return True
                return False

            def _bucket_batch(self, bucket: str, body: bytes) -> None:
                call = hub.bucket_calls
                hub.bucket_calls += 1
                if self._injected_fault(hub.bucket_faults[call] if call < len(hub.bucket_faults) else None):
                    return
                ops = [json.loads(line) for line in body.splitlines() if line.strip()]
                failed = [{"path": op["path"], "error": f"unknown xet hash {op['xetHash']}"} for op in ops
                          if op["type"] == "addFile" and op["xetHash"] not in hub.xet_files]
                if failed:
                    return self._json(422, {"failed": failed})
                added = []
                for op in ops:
                    if op["type"] == "addFile":
                        size = sum(t[3] for t in hub.xet_files[op["xetHash"]])
                        hub.buckets[bucket][op["path"]] = BucketEntry(op["xetHash"], size, op.get("mtime"), time.time())
                        added.append(op["path"])
                    elif op["type"] == "deleteFile":
                        hub.buckets[bucket].pop(op["path"], None)
                hub.bucket_batches.append((bucket, added))
                return self._json(200, {"failed": []})

            def _commit(self, repo: str, rev: str, body: bytes) -> None:
                received = time.time()
                call = hub.commit_calls
                hub.commit_calls += 1
                if self._injected_fault(hub.commit_faults[call] if call < len(hub.commit_faults) else None):
                    return
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


def use_fake_hub(monkeypatch, tmp_path, *, token: Optional[str] = "hf_fake") -> FakeHub:
    """Start a :class:`FakeHub` and point huggingface_hub and PAWN at it for one test: ``HF_ENDPOINT``,
    a fresh ``HF_HOME`` and ``PAWN_CONVERTED_DIR`` under ``tmp_path``, ``HF_TOKEN`` (unset when
    ``token`` is None), online (also in huggingface_hub's constants, read at its first import, maybe
    under another test's ``HF_HUB_OFFLINE=1``), ``COLUMNS=250``. The caller stops the hub."""
    h = FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", h.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("PAWN_CONVERTED_DIR", str(tmp_path / "converted"))
    monkeypatch.setenv("COLUMNS", "250")
    if token is None:
        monkeypatch.delenv("HF_TOKEN", raising=False)
    else:
        monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return h
