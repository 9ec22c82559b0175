"""Push checkpoints to the Hugging Face Hub in the background (spec ``training-and-adapters.md`` §1.11).

One :class:`CheckpointUploader` per destination (repo + branch) owns a worker thread and a FIFO
queue. The trainer calls :meth:`CheckpointUploader.submit` right after a checkpoint's atomic
rename; that call only hard-links the checkpoint's files into a private staging folder (a copy
where hard links are not possible) and enqueues it, so a training step never waits for the
network, and rotating the checkpoint away locally cannot pull files from under an upload.

Each checkpoint becomes **one commit** on the branch (``huggingface_hub``'s
:meth:`~huggingface_hub.HfApi.create_commit`): its files under ``checkpoints/<name>/`` (the
``.complete`` manifest included), the run's ``metrics.jsonl`` at the branch root cut after the
checkpoint's step (§1.11: up to the first ``train``/``val`` record with a larger step), and the
model card ``README.md`` (:mod:`pawn.hub.card`). The Hub applies a commit atomically: file
contents are uploaded first (content-addressed blobs that no revision refers to yet) and only the
final commit call moves the branch head, so an upload interrupted at any point (network loss,
SIGTERM, a killed process) leaves the branch at the previous whole checkpoint; a reader of the
branch sees a checkpoint with all its files and its manifest, or not at all. The default branch is
``run/<run directory name>``, created when missing.

Errors: connection errors, timeouts, HTTP 408/409/429 and 5xx are *transient* and retried with
exponential backoff (``backoff_s`` doubling up to ``max_backoff_s``, at most ``max_attempts``
tries per checkpoint); 401/403, 404 (no such repo), 402/413 and storage or quota messages are
*permanent*: pushing stops with one clear message and later checkpoints are reported as not
pushed, while training goes on. Every outcome is a :class:`PushOutcome`, which the trainer writes
to ``metrics.jsonl`` as a ``hub`` record (:meth:`PushOutcome.to_record`).

At exit (normal end, SIGTERM, NaN stop, exception) :meth:`CheckpointUploader.close` waits at most
``wait_s`` seconds: the worker goes on with the queue in order, and whatever has not been
pushed at the deadline is reported as ``not_pushed`` (never started) or ``unconfirmed`` (a commit
in flight at the deadline; by the atomicity above it lands whole or not at all). Each such
report names the local checkpoint and the ``hf upload`` command that pushes it by hand.

Offline mode (``HF_HUB_OFFLINE=1``) is refused before the run starts (:func:`check_can_push`).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import queue
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from pawn.errors import PawnError, UsageError
from pawn.hub.card import card_for_checkpoint, latest_eval_json, read_eval_report
from pawn.hub.errors import classify_error, is_offline, one_line
from pawn.runs import parse_bytes

STAGING_DIR = ".hub-staging"
"""Folder (inside the checkpoints folder) holding hard-linked snapshots of checkpoints waiting to
be pushed; removed when the uploader closes, or, with an upload still unconfirmed at close, when
that upload ends or the process exits (whichever is first). Leftovers of a killed process are
removed when the next uploader first stages there."""
METRICS_FILE = "metrics.jsonl"


class HubPushError(PawnError, RuntimeError):
    """Pushing cannot start (offline mode, bad repo id, no permission, Hub unreachable); one line."""


# ----------------------------------------------------------------------------- checks
def check_repo_id(repo_id: str, flag: str = "--push-to-hub") -> str:
    """Validate a Hub repo id (``owner/name``) with huggingface_hub's own rules.

    Raises:
        UsageError: not ``owner/name`` or an invalid name (one line naming the flag).
    """
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if repo_id.count("/") != 1:
        raise UsageError(f"{flag} {repo_id!r}: give the repository as owner/name")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise UsageError(f"{flag} {repo_id!r}: not a valid Hub repo id ({str(e).splitlines()[0]})") from None
    return repo_id


_REACHED: set[str] = set()


def check_can_push(repo_id: str, flag: str = "--push-to-hub", *, network: bool = True) -> None:
    """Before any work: the repo id is valid, huggingface_hub is not in offline mode, and (with
    ``network``) a Hugging Face token is configured (``HF_TOKEN`` or ``hf auth login``;
    ``huggingface_hub.get_token``) and the Hub endpoint answers one request (10 s, no retries;
    any HTTP answer counts, once per endpoint and process). Without these checks a run without
    network retried the DNS failure for about a minute and never said that no token was set.

    Raises:
        UsageError: invalid repo id. HubPushError (one line): ``HF_HUB_OFFLINE`` is set, no token,
            or the Hub cannot be reached.
    """
    check_repo_id(repo_id, flag)
    if is_offline():
        raise HubPushError(f"{flag} {repo_id}: HF_HUB_OFFLINE=1 is set, and pushing needs the network; "
                           "unset it, or drop the flag and upload later with `hf upload`")
    if not network:
        return
    from huggingface_hub import constants, get_token

    if not get_token():
        raise HubPushError(f"{flag} {repo_id}: no Hugging Face token is configured; log in with `hf auth login` "
                           "or set HF_TOKEN to a token with write access")
    endpoint = (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
    if endpoint in _REACHED:
        return
    from huggingface_hub.utils import get_session

    try:
        get_session().get(f"{endpoint}/api/models/{repo_id}", timeout=10)
    except Exception as e:
        raise HubPushError(f"{flag} {repo_id}: the Hub at {endpoint} cannot be reached ({one_line(e, 160)}); "
                           "check the network, or drop the flag and upload later with `hf upload`") from None
    _REACHED.add(endpoint)


def default_branch(run_dir: Path) -> str:
    """``run/<run directory name>`` (spec §1.11)."""
    return f"run/{Path(run_dir).resolve().name}"


# ----------------------------------------------------------------------------- outcomes
@dataclass
class PushOutcome:
    """What happened to one checkpoint.

    Attributes:
        step: the checkpoint's optimizer step. checkpoint: its local directory.
        status: ``pushed``, ``failed`` (retries exhausted or a permanent error), ``not_pushed``
            (never started: pushing had stopped, or the exit wait ran out) or ``unconfirmed``
            (in flight when the exit wait ran out).
        commit: the commit id (40 hex) when pushed. error: one line when not pushed.
        attempts: tries made. seconds: wall time of the upload (s). bytes: payload size (B).
        path_in_repo: where its files go (``checkpoints/<name>``).
    """

    step: int
    checkpoint: Path
    status: str
    path_in_repo: str
    commit: Optional[str] = None
    error: Optional[str] = None
    attempts: int = 0
    seconds: float = 0.0
    bytes: int = 0

    def to_record(self, repo_id: str, branch: str) -> dict:
        """The ``metrics.jsonl`` fields of a ``hub`` record (``step`` is the checkpoint's)."""
        rec: dict[str, Any] = {"step": self.step, "status": self.status, "repo": repo_id, "branch": branch,
                               "path_in_repo": self.path_in_repo, "checkpoint": str(self.checkpoint),
                               "attempts": self.attempts, "upload_s": round(self.seconds, 3), "upload_bytes": self.bytes}
        if self.commit:
            rec["commit"] = self.commit
        if self.error:
            rec["error"] = self.error
        return rec


@dataclass
class _Job:
    seq: int
    step: int
    source: Path
    staged: Path
    path_in_repo: str
    owns_staged: bool = True  # remove ``staged`` when done (False: it is the user's own directory)
    submitted: float = field(default_factory=time.monotonic)

    def cleanup(self) -> None:
        if self.owns_staged:
            shutil.rmtree(self.staged, ignore_errors=True)

    def repo_path(self, name: str) -> str:
        return f"{self.path_in_repo}/{name}" if self.path_in_repo else name

    @property
    def what(self) -> str:
        return self.path_in_repo or "the repo root"


def metrics_prefix(path: Path, step: int) -> bytes:
    """The part of ``metrics.jsonl`` a checkpoint at ``step`` pushes (spec §1.11): every complete
    line before the first ``train``/``val`` record with ``step`` larger than ``step``; untyped
    records and malformed lines before that point pass through, a torn last line is left out."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return b""
    out = []
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if isinstance(rec, dict) and rec.get("type") in ("train", "val") and isinstance(rec.get("step"), int) and rec["step"] > step:
            break
        out.append(line)
    return b"".join(out)


def _stage(src: Path, dst: Path) -> int:
    """Hard-link (else copy) the regular files of ``src`` into a new ``dst``; returns their size."""
    dst.mkdir(parents=True)
    total = 0
    for p in sorted(src.iterdir()):
        if not p.is_file() or p.is_symlink():
            continue
        try:
            os.link(p, dst / p.name)
        except OSError:
            shutil.copy2(p, dst / p.name)
        total += p.stat().st_size
    return total


class CheckpointUploader:
    """Background uploader of checkpoints to one Hub repo branch (see the module docstring).

    Args:
        repo_id: ``owner/name`` of a model repo (created, private when ``private``, if missing).
        branch: the branch commits go to (created from ``main`` if missing).
        private: create the repo private (an existing repo keeps its visibility).
        metrics_path: the run's ``metrics.jsonl`` (pushed cut at each checkpoint's step), or None.
        card: ``card(checkpoint_dir, step, metrics_bytes) -> str``, the model card pushed as
            ``README.md`` with each checkpoint (None: no card).
        token, endpoint: passed to :class:`huggingface_hub.HfApi` (default: the logged-in token
            and ``$HF_ENDPOINT``, read when the uploader is made).
        max_attempts: tries per checkpoint for transient errors. backoff_s, max_backoff_s: the
            first retry delay and its cap (seconds; doubling).
        log: one-line messages (from the worker thread too).
        api: an ``HfApi``-like object (tests).

    Raises:
        UsageError, HubPushError: from :func:`check_can_push`.
    """

    staging_dir: str = STAGING_DIR
    """Name of the staging folder inside the checkpoints folder (one per kind of uploader, so a Hub
    push and a bucket sync of the same run never clear each other's copies)."""

    def __init__(self, repo_id: str, *, branch: str, private: bool = False, metrics_path: Optional[Path] = None,
                 card: Optional[Callable[[Path, int, bytes], str]] = None, token: Optional[str] = None,
                 endpoint: Optional[str] = None, max_attempts: int = 6, backoff_s: float = 2.0, max_backoff_s: float = 60.0,
                 log: Callable[[str], None] = print, api: Any = None):
        check_can_push(repo_id, network=False)  # token and reachability: checked before the run (check_can_push)
        if api is None:
            from huggingface_hub import HfApi

            api = HfApi(endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None, token=token)
        self.api = api
        self.repo_id, self.branch, self.private = repo_id, branch, private
        self.metrics_path = Path(metrics_path) if metrics_path is not None else None
        self.card = card
        self.max_attempts, self.backoff_s, self.max_backoff_s = max(1, int(max_attempts)), float(backoff_s), float(max_backoff_s)
        self.log = log
        self._queue: "queue.Queue[Optional[_Job]]" = queue.Queue()
        self._done: "queue.Queue[PushOutcome]" = queue.Queue()
        self._seq = itertools.count()
        self._abandon = threading.Event()
        self._lock = threading.Lock()
        self._in_flight: Optional[_Job] = None
        self._stopped_reason: Optional[str] = None
        self._staging_roots: set[Path] = set()
        self._left_behind: Optional[_Job] = None
        self._released: set[Path] = set()
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    # ------------------------------------------------------------------ start
    def _retry(self, what: str, fn: Callable[[], Any]) -> Any:
        """Call ``fn`` with the transient-error policy; returns its result or raises the last error."""
        delay = self.backoff_s
        for attempt in range(1, self.max_attempts + 1):
            try:
                return fn()
            except Exception as e:
                if classify_error(e) != "transient" or attempt == self.max_attempts or self._abandon.is_set():
                    raise
                self.log(f"hub: {what} failed ({one_line(e, 160)}); retry {attempt}/{self.max_attempts - 1} in {delay:.3g} s")
                if self._abandon.wait(delay):
                    raise
                delay = min(self.max_backoff_s, delay * 2)

    def start(self) -> "CheckpointUploader":
        """Create the repo (``exist_ok``) and the branch if missing, then start the worker. Runs
        before training, so a bad token or repo fails at start, not at the first checkpoint.

        Raises:
            HubPushError: the repo or branch cannot be created or reached (one line).
        """
        try:
            self._retry("creating the repo", lambda: self.api.create_repo(self.repo_id, private=self.private, exist_ok=True, repo_type="model"))
            if self.branch != "main":
                self._retry("creating the branch", lambda: self.api.create_branch(self.repo_id, branch=self.branch, exist_ok=True, repo_type="model"))
        except Exception as e:
            hint = " (log in with `hf auth login` or set HF_TOKEN with write access)" if classify_error(e) == "permanent" else ""
            raise HubPushError(f"--push-to-hub {self.repo_id}: cannot create the repo or branch {self.branch!r}: {one_line(e)}{hint}") from None
        self._thread = threading.Thread(target=self._work, name=f"hub-push {self.repo_id}", daemon=True)
        self._thread.start()
        self.log(f"hub: pushing each checkpoint to {self.repo_id} (branch {self.branch}) in the background")
        return self

    # ------------------------------------------------------------------ submit (training thread)
    def submit(self, checkpoint: Path, step: int) -> None:
        """Queue a finished checkpoint (call after its atomic rename); returns at once.

        The files are hard-linked into ``<checkpoints>/.hub-staging/`` (:attr:`staging_dir`) first, so the upload sees
        this checkpoint even if it is rotated away or replaced (``best``) before its turn. A
        staging failure is reported as a ``failed`` outcome, never raised.
        """
        checkpoint = Path(checkpoint)
        seq = next(self._seq)
        name = checkpoint.name
        path_in_repo = self.checkpoint_path(name)
        root = checkpoint.parent / self.staging_dir
        staged = root / f"{seq:06d}-{name}"
        if self._closed:
            raise RuntimeError("submit() after close()")
        if self._stopped_reason is not None:
            if self._thread is not None and self._thread.is_alive():
                # through the queue, so its outcome follows those of the checkpoints queued before it
                # (the worker reports each as not pushed, in order); nothing is staged
                self._queue.put(_Job(seq, int(step), checkpoint, checkpoint, path_in_repo, owns_staged=False))
            else:
                self._done.put(PushOutcome(step, checkpoint, "not_pushed", path_in_repo, error=f"pushing stopped: {self._stopped_reason}"))
            return
        try:
            if root not in self._staging_roots:
                self._staging_roots.add(root)
                self._clear_stale(root)
            if staged.exists():
                shutil.rmtree(staged)
            _stage(checkpoint, staged)
        except OSError as e:
            shutil.rmtree(staged, ignore_errors=True)
            self._done.put(PushOutcome(step, checkpoint, "failed", path_in_repo, error=f"cannot stage {checkpoint}: {e.strerror or e}"))
            return
        self._queue.put(_Job(seq, int(step), checkpoint, staged, path_in_repo))

    def _clear_stale(self, root: Path) -> None:
        """Remove what an earlier (killed) process left in the staging folder ``root`` (reported)."""
        try:
            stale = sorted(p for p in root.iterdir())
        except OSError:
            return
        for p in stale:
            shutil.rmtree(p, ignore_errors=True)
        if stale:
            self.log(f"hub: removed {len(stale)} staging cop{'y' if len(stale) == 1 else 'ies'} left in {root} by an earlier run")

    def _remove_roots(self, keep: Optional[Path] = None) -> None:
        """Remove every staging folder this uploader made, except ``keep`` (an upload in flight)."""
        for root in self._staging_roots:
            if keep is None or keep.parent != root:
                shutil.rmtree(root, ignore_errors=True)
                continue
            for p in list(root.iterdir()) if root.is_dir() else []:
                if p != keep:
                    shutil.rmtree(p, ignore_errors=True)

    def _release_left_behind(self, job: _Job, why: str) -> None:
        """Remove the staging copy of ``job`` (unconfirmed at close) and its folder once empty; once."""
        with self._lock:
            if job.staged in self._released:
                return
            self._released.add(job.staged)
        job.cleanup()
        with contextlib.suppress(OSError):
            job.staged.parent.rmdir()  # only when empty
        self.log(f"hub: removed the staging copy of {job.what} ({why})")

    def poll(self) -> list[PushOutcome]:
        """Outcomes finished since the last call, in completion order (never blocks)."""
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    # ------------------------------------------------------------------ worker
    def _operations(self, job: _Job) -> tuple[list, int]:
        from huggingface_hub import CommitOperationAdd

        ops, size = [], 0
        for p in sorted(job.staged.iterdir()):
            ops.append(CommitOperationAdd(path_in_repo=job.repo_path(p.name), path_or_fileobj=str(p)))
            size += p.stat().st_size
        metrics = metrics_prefix(self.metrics_path, job.step) if self.metrics_path is not None else b""
        if metrics:
            ops.append(CommitOperationAdd(path_in_repo=METRICS_FILE, path_or_fileobj=metrics))
            size += len(metrics)
        if self.card is not None:
            text = self.card(job.staged, job.step, metrics).encode("utf-8")
            ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=text))
            size += len(text)
        return ops, size

    def _send(self, job: _Job) -> tuple[Optional[str], int]:
        """Upload ``job`` once: one commit on the branch. Returns ``(commit id, payload bytes)``;
        raises what huggingface_hub raises (classified by :func:`pawn.hub.errors.classify_error`)."""
        ops, size = self._operations(job)  # fresh operations per try (create_commit mutates them)
        info = self.api.create_commit(self.repo_id, ops, commit_message=f"{job.what} (step {job.step})" if job.step >= 0 else f"PAWN checkpoint in {job.what}",
                                      commit_description="Pushed by pawn: one commit per checkpoint.",
                                      revision=self.branch, repo_type="model")
        return getattr(info, "oid", None), size

    def checkpoint_path(self, name: str) -> str:
        """Where the checkpoint folder ``name`` goes: ``checkpoints/<name>``."""
        return f"checkpoints/{name}"

    @property
    def target(self) -> str:
        """Where pushes go, for messages: ``owner/name@branch``."""
        return f"{self.repo_id}@{self.branch}"

    def hand_push_hint(self) -> str:
        """The command that pushes a local checkpoint by hand (for messages)."""
        return f"`hf upload {self.repo_id} <checkpoint dir> checkpoints/<name> --revision {self.branch}`"

    def record(self, o: PushOutcome) -> dict:
        """The ``metrics.jsonl`` fields of the ``hub`` record of ``o`` (:meth:`PushOutcome.to_record`)."""
        return o.to_record(self.repo_id, self.branch)

    def _push(self, job: _Job) -> PushOutcome:
        t0 = time.monotonic()
        attempts, size = 0, 0
        delay = self.backoff_s
        while True:
            attempts += 1
            try:
                commit, size = self._send(job)
                return PushOutcome(job.step, job.source, "pushed", job.path_in_repo, commit=commit,
                                   attempts=attempts, seconds=time.monotonic() - t0, bytes=size)
            except Exception as e:
                kind = classify_error(e)
                msg = one_line(e)
                if kind == "transient" and attempts < self.max_attempts and not self._abandon.is_set():
                    self.log(f"hub: pushing {job.what} failed ({one_line(e, 160)}); retry {attempts}/{self.max_attempts - 1} in {delay:.3g} s")
                    if not self._abandon.wait(delay):
                        delay = min(self.max_backoff_s, delay * 2)
                        continue
                    msg += "; the exit wait ran out while retrying"
                elif kind == "transient":
                    msg += f" (gave up after {attempts} tries)"
                if kind == "permanent":
                    self._stop(f"{msg}")
                return PushOutcome(job.step, job.source, "failed", job.path_in_repo, error=msg, attempts=attempts,
                                   seconds=time.monotonic() - t0, bytes=size)

    def _stop(self, reason: str) -> None:
        with self._lock:
            if self._stopped_reason is not None:
                return
            self._stopped_reason = reason
        self.log(f"ERROR: hub: pushing to {self.repo_id} stopped: {reason}. Training goes on; later checkpoints stay local "
                 f"(push them with {self.hand_push_hint()})")

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if self._abandon.is_set() or self._stopped_reason is not None:
                why = "the exit wait ran out" if self._abandon.is_set() else f"pushing stopped: {self._stopped_reason}"
                self._done.put(PushOutcome(job.step, job.source, "not_pushed", job.path_in_repo, error=why))
                job.cleanup()
                continue
            with self._lock:
                self._in_flight = job
            try:
                outcome = self._push(job)
            except BaseException as e:  # never let the worker die silently
                outcome = PushOutcome(job.step, job.source, "failed", job.path_in_repo, error=one_line(e))
            with self._lock:
                self._in_flight = None
                abandoned = self._abandon.is_set()
            if not (abandoned and outcome.status == "failed" and "exit wait" in (outcome.error or "")):
                self._done.put(outcome)
            else:
                self._done.put(PushOutcome(job.step, job.source, "not_pushed", job.path_in_repo, error=outcome.error,
                                           attempts=outcome.attempts, seconds=outcome.seconds))
            if outcome.status == "pushed":
                self.log(f"hub: pushed {job.what}{f' (step {job.step})' if job.step >= 0 else ''} to {self.target}"
                         + (f", commit {outcome.commit}" if outcome.commit else ""))
            elif outcome.status == "failed" and outcome.error and self._stopped_reason is None:
                self.log(f"WARNING: hub: {job.what} was not pushed: {outcome.error}")
            if self._left_behind is job:  # unconfirmed at close, resolved now
                self._release_left_behind(job, f"its upload ended after the exit wait: {outcome.status}")
            else:
                job.cleanup()

    # ------------------------------------------------------------------ close
    def close(self, wait_s: float = 300.0) -> list[PushOutcome]:
        """Stop taking checkpoints, let the worker push what is queued for at most ``wait_s``
        seconds, and report the rest: ``not_pushed`` for checkpoints never started and
        ``unconfirmed`` for one still in flight at the deadline (its commit lands whole or not
        at all). Returns every outcome not yet taken by :meth:`poll`, in completion order.
        Staging folders are removed except one still being uploaded."""
        if self._closed:
            return self.poll()
        self._closed = True
        left_behind: Optional[_Job] = None
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(None if wait_s == float("inf") else max(0.0, wait_s))
            if self._thread.is_alive():
                self._abandon.set()  # queued jobs are reported, a retry backoff ends
                self._thread.join(1.0)
                with self._lock:
                    left_behind = self._in_flight
        # A thread that never started (start() not called) leaves jobs in the queue.
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                self._done.put(PushOutcome(job.step, job.source, "not_pushed", job.path_in_repo, error="the exit wait ran out"))
                job.cleanup()
        out = self.poll()
        if left_behind is not None and self._thread is not None and self._thread.is_alive():
            out.append(PushOutcome(left_behind.step, left_behind.source, "unconfirmed", left_behind.path_in_repo,
                                   error=f"still uploading after the {wait_s:.0f} s exit wait; the commit is atomic, so the branch "
                                         "holds this checkpoint whole or not at all"))
        still = left_behind if (left_behind is not None and self._thread is not None and self._thread.is_alive()) else None
        self._remove_roots(keep=None if still is None else still.staged)
        if still is not None:
            self._left_behind = still
            atexit.register(self._release_left_behind, still, "the process exited before its upload was confirmed")
            self.log(f"hub: the staging copy {still.staged} is removed when its upload ends or at exit")
        missing = [o for o in out if o.status in ("not_pushed", "unconfirmed", "failed")]
        if missing:
            names = ", ".join(f"{o.path_in_repo} ({o.status})" for o in missing)
            self.log(f"WARNING: hub: not pushed to {self.target}: {names}; push a local checkpoint with {self.hand_push_hint()}")
        return out


class HubPushHook:
    """The trainer's side of a push: receives each checkpoint after its atomic rename and writes
    every push outcome to ``metrics.jsonl`` as a ``hub`` record.

    Call sites (``pawn pretrain``; ``pawn adapt`` later): ``on_checkpoint(path, step)`` after each
    checkpoint is written; ``close(wait_s)`` at exit **before** the metrics log closes (the
    remaining outcomes are written then). It is also a :class:`pawn.train.hooks.RunHook`: given
    the run's records (``on_record``), it queues a checkpoint of step s only once the ``train``
    record of step s is written (so the pushed ``metrics.jsonl`` always ends with the
    checkpoint's own step, spec §1.11) and writes finished outcomes as they come.

    Args:
        uploader: a started :class:`CheckpointUploader`.
        write: ``write(kind, **fields)``, e.g. ``MetricsLogger.write`` (records of kind ``hub``);
            None: outcomes are only logged.
        wait_s: the default exit wait of :meth:`close` (seconds).
        after_records: hold checkpoints until ``on_record`` sees their step (see above); False:
            queue at once.
    """

    def __init__(self, uploader: CheckpointUploader, write: Optional[Callable[..., Any]] = None, wait_s: float = 300.0,
                 after_records: bool = False):
        self.uploader = uploader
        self.write = write
        self.wait_s = wait_s
        self.after_records = after_records
        self.outcomes: list[PushOutcome] = []
        self._held: list[tuple[Path, int]] = []
        self._closed = False

    def _record(self, outcomes: list[PushOutcome]) -> None:
        self.outcomes.extend(outcomes)
        if self.write is None:
            return
        for o in outcomes:
            fields = self.uploader.record(o)
            step = fields.pop("step")
            with contextlib.suppress(ValueError):  # a closed metrics file: the outcome was logged
                self.write("hub", step=step, **fields)

    def _release(self, up_to: Optional[int]) -> None:
        keep = []
        for path, step in self._held:
            if up_to is None or step <= up_to:
                self.uploader.submit(path, step)
            else:
                keep.append((path, step))
        self._held = keep

    def on_checkpoint(self, path: Path, step: int) -> None:
        """Queue ``path`` (a complete checkpoint of optimizer step ``step``) for pushing (held
        until its step's ``train`` record when ``after_records``)."""
        self._held.append((Path(path), int(step)))
        if not self.after_records:
            self._release(None)
        self._record(self.uploader.poll())

    def on_record(self, kind: str, record: dict) -> None:
        """RunHook: a ``train`` record releases held checkpoints of its step or earlier."""
        if kind == "train" and isinstance(record.get("step"), int):
            self._release(record["step"])
            self._record(self.uploader.poll())

    def close(self, wait_s: Optional[float] = None) -> list[PushOutcome]:
        """Queue held checkpoints, wait (bounded) for the uploads and record every remaining
        outcome; returns all outcomes. A second call does nothing."""
        if self._closed:
            return self.outcomes
        self._closed = True
        self._release(None)
        self._record(self.uploader.close(self.wait_s if wait_s is None else wait_s))
        return self.outcomes


def run_card(run_dir: Path, repo_id: str, branch: str,
             recipe_fields: Optional[Sequence[str]] = None) -> Callable[[Path, int, bytes], str]:
    """The model card of a pushed run checkpoint: :func:`pawn.hub.card.card_for_checkpoint` with the
    latest ``val`` record of the pushed ``metrics.jsonl``, the newest ``eval*.json`` of the run
    directory (``pawn eval --json`` reports), if any, and the run's ``recipe_fields`` (its settings
    class's fields tagged as recipe, ``pawn.settings.fields_with``; see :func:`pawn.hub.card.model_card`)."""
    def card(checkpoint: Path, step: int, metrics: bytes) -> str:
        vals = [r for r in parse_bytes(metrics if metrics.endswith(b"\n") else metrics + b"\n")[0] if r.type == "val"]
        last_val = vals[-1].to_json() if vals else None
        report, source = None, "eval.json"
        ev = latest_eval_json(run_dir)
        if ev is not None:
            with contextlib.suppress(PawnError):
                report, source = read_eval_report(ev), ev.name
        name = checkpoint.name.split("-", 1)[-1]  # staged as NNNNNN-<name>
        return card_for_checkpoint(checkpoint, title=f"PAWN run {Path(run_dir).resolve().name}", step=step, last_val=last_val,
                                   eval_report=report, eval_source=source, repo_id=repo_id, branch=branch,
                                   checkpoint_path=f"checkpoints/{name}", recipe_fields=recipe_fields)

    return card


def open_run_push(repo_id: str, run_dir: Path, *, branch: Optional[str] = None, private: bool = False,
                  write: Optional[Callable[..., Any]] = None, wait_s: float = 300.0, log: Callable[[str], None] = print,
                  recipe_fields: Optional[Sequence[str]] = None, **uploader_kwargs: Any) -> HubPushHook:
    """Start pushing a run's checkpoints: a :class:`CheckpointUploader` for ``repo_id`` on
    ``branch`` (default ``run/<run dir name>``) with the run's ``metrics.jsonl`` and model card
    (its training recipe: the run config's ``recipe_fields``, :func:`run_card`), wrapped in a
    :class:`HubPushHook`.

    Raises:
        UsageError, HubPushError: see :func:`check_can_push` and :meth:`CheckpointUploader.start`.
    """
    branch = branch or default_branch(run_dir)
    up = CheckpointUploader(repo_id, branch=branch, private=private, metrics_path=Path(run_dir) / METRICS_FILE,
                            card=run_card(run_dir, repo_id, branch, recipe_fields), log=log, **uploader_kwargs)
    return HubPushHook(up.start(), write, wait_s)


def push_checkpoint(checkpoint: Path, repo_id: str, *, branch: str = "main", private: bool = False,
                    path_in_repo: str = "", log: Callable[[str], None] = print, **uploader_kwargs: Any) -> PushOutcome:
    """Push one finished checkpoint directory (e.g. a ``pawn convert`` result, its ``README.md``
    card included) as one commit and wait for it (same retry policy as training pushes).

    Args:
        checkpoint: the directory; every regular file in it is pushed.
        repo_id, branch, private: the destination (repo and branch created if missing).
        path_in_repo: folder in the repo ("" = the repo root, so the card is the repo's card).

    Returns:
        The :class:`PushOutcome` (``pushed`` with the commit id).

    Raises:
        UsageError, HubPushError: offline mode, bad repo id, repo not creatable, or the push
            failed (one line with the Hub's reason).
    """
    checkpoint = Path(checkpoint)
    up = CheckpointUploader(repo_id, branch=branch, private=private, log=log, **uploader_kwargs).start()
    try:
        job = _Job(0, -1, checkpoint, checkpoint, path_in_repo.strip("/"), owns_staged=False)
        up._queue.put(job)
    finally:
        outs = up.close(wait_s=float("inf"))
    o = outs[0]
    if o.status != "pushed":
        raise HubPushError(f"--push-to-hub {repo_id}: {checkpoint} was not pushed: {o.error}")
    return o
