"""Sync a training run's logs and checkpoints to a Hugging Face storage bucket in the background.

A storage bucket is a mutable, non-versioned file store on the Hub (no commits, no branches);
``huggingface_hub`` writes to it with :meth:`~huggingface_hub.HfApi.batch_bucket_files`, which
uploads the file contents through Xet storage (the ``hf_xet`` package) and then registers the
paths in one ``/batch`` call. :class:`BucketUploader` is a
:class:`~pawn.hub.push.CheckpointUploader` whose upload is that call, so the queue, the staging
of checkpoint files, the retry policy, the stop on permanent errors and the bounded exit wait are
the ones of ``--push-to-hub`` (see :mod:`pawn.hub.push`).

Layout in the bucket, under ``<prefix>/`` (default: the run directory's name, so one bucket holds
many runs): ``checkpoints/<name>/`` (every file of each complete checkpoint, its ``.complete``
manifest included; staged by hard links in ``<checkpoints>/.bucket-staging/`` until sent),
``metrics.jsonl`` (every complete line written so far) and ``config.json``;
the last two are re-sent with every checkpoint, and once more when the uploader closes. Files are
replaced in place: a reader can see a checkpoint folder while its files are being registered, so
trust a folder once its ``.complete`` manifest is there (the manifest lists every file's size and
checksum).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from pawn.hub.errors import classify_error, one_line
from pawn.hub.push import (
    METRICS_FILE,
    CheckpointUploader,
    HubPushError,
    HubPushHook,
    PushOutcome,
    _Job,
    check_can_push,
    metrics_prefix,
)

FLAG = "--push-to-bucket"
CONFIG_FILE = "config.json"
STAGING_DIR = ".bucket-staging"
"""The bucket uploader's staging folder inside the checkpoints folder (``--push-to-hub`` has its own)."""


@dataclass
class _LogsJob(_Job):
    """Only ``metrics.jsonl`` and ``config.json`` (the sync when the uploader closes)."""


def check_bucket_support() -> None:
    """The installed huggingface_hub has the bucket API and ``hf_xet`` (its Xet upload client) is
    importable.

    Raises:
        HubPushError: one line naming what to install.
    """
    from huggingface_hub import HfApi

    if not hasattr(HfApi, "batch_bucket_files"):
        import huggingface_hub

        raise HubPushError(f"{FLAG}: huggingface_hub {huggingface_hub.__version__} has no storage buckets "
                           "(HfApi.batch_bucket_files); upgrade it: pip install -U huggingface_hub")
    try:
        import hf_xet  # noqa: F401
    except ImportError:
        raise HubPushError(f"{FLAG}: bucket uploads go through Xet storage, which needs the hf_xet package: "
                           "pip install 'pawn[bucket]' (or hf-xet)") from None


def check_can_push_bucket(bucket_id: str, *, network: bool = True) -> None:
    """Before any work: :func:`pawn.hub.push.check_can_push` for ``bucket_id`` (``owner/name``,
    not offline, a token, the Hub answers) and :func:`check_bucket_support`.

    Raises:
        UsageError: not ``owner/name``. HubPushError: see both checks (one line).
    """
    check_can_push(bucket_id, FLAG, network=network)
    check_bucket_support()


class BucketUploader(CheckpointUploader):
    """Background uploader of a run's checkpoints and logs to one storage bucket (see the module
    docstring; the queue, retries and exit wait are :class:`~pawn.hub.push.CheckpointUploader`'s).

    Args:
        bucket_id: ``owner/name`` of the bucket (created if missing, private when ``private``).
        run_dir: the run directory (its ``metrics.jsonl`` and ``config.json`` are sent).
        prefix: folder in the bucket (default: the run directory's name).
        private: create the bucket private (an existing bucket keeps its visibility).
        uploader_kwargs: ``token``, ``endpoint``, ``max_attempts``, ``backoff_s``,
            ``max_backoff_s``, ``log``, ``api`` as in :class:`~pawn.hub.push.CheckpointUploader`.

    Raises:
        UsageError, HubPushError: from :func:`check_can_push_bucket` (without the network check).
    """

    staging_dir = STAGING_DIR

    def __init__(self, bucket_id: str, *, run_dir: Path, prefix: Optional[str] = None, private: bool = False,
                 **uploader_kwargs: Any):
        check_can_push(bucket_id, FLAG, network=False)
        super().__init__(bucket_id, branch="", private=private, metrics_path=Path(run_dir) / METRICS_FILE, card=None,
                         **uploader_kwargs)
        self.run_dir = Path(run_dir)
        self.prefix = (prefix if prefix is not None else self.run_dir.resolve().name).strip("/")
        self._last_step = 0

    # ------------------------------------------------------------------ naming (messages, records)
    def checkpoint_path(self, name: str) -> str:
        """``<prefix>/checkpoints/<name>``."""
        return f"{self.prefix}/checkpoints/{name}"

    @property
    def target(self) -> str:
        """``hf://buckets/<owner>/<name>/<prefix>``."""
        return f"hf://buckets/{self.repo_id}/{self.prefix}"

    def hand_push_hint(self) -> str:
        return f"`hf buckets sync {self.run_dir} {self.target}`"

    def record(self, o: PushOutcome) -> dict:
        """The ``hub`` record fields of ``o``: ``bucket`` and ``path_in_bucket`` in place of a
        model repo's ``repo``, ``branch`` and ``path_in_repo``."""
        rec: dict[str, Any] = {"step": o.step, "status": o.status, "bucket": self.repo_id, "path_in_bucket": o.path_in_repo,
                               "checkpoint": str(o.checkpoint), "attempts": o.attempts, "upload_s": round(o.seconds, 3),
                               "upload_bytes": o.bytes}
        if o.error:
            rec["error"] = o.error
        return rec

    # ------------------------------------------------------------------ start, upload, close
    def start(self) -> "BucketUploader":
        """Create the bucket (``exist_ok``), then start the worker; runs before training, so a bad
        token or a refused bucket fails at start.

        Raises:
            HubPushError: huggingface_hub without buckets or no ``hf_xet``, or the bucket cannot be
                created or reached (one line).
        """
        import threading

        check_bucket_support()
        try:
            self._retry("creating the bucket", lambda: self.api.create_bucket(self.repo_id, private=self.private or None, exist_ok=True))
        except Exception as e:
            hint = " (log in with `hf auth login` or set HF_TOKEN with write access)" if classify_error(e) == "permanent" else ""
            raise HubPushError(f"{FLAG} {self.repo_id}: cannot create the bucket: {one_line(e)}{hint}") from None
        self._thread = threading.Thread(target=self._work, name=f"bucket-push {self.repo_id}", daemon=True)
        self._thread.start()
        self.log(f"hub: syncing checkpoints and metrics.jsonl to {self.target} in the background")
        return self

    def submit(self, checkpoint: Path, step: int) -> None:
        self._last_step = max(self._last_step, int(step))
        super().submit(checkpoint, step)

    def _send(self, job: _Job) -> tuple[Optional[str], int]:
        """One ``batch_bucket_files`` call: the checkpoint's staged files (none for the closing
        sync), then ``metrics.jsonl`` (complete lines) and ``config.json``."""
        add: list[tuple[Any, str]] = []
        size = 0
        if not isinstance(job, _LogsJob):
            for p in sorted(job.staged.iterdir()):
                add.append((str(p), f"{job.path_in_repo}/{p.name}"))
                size += p.stat().st_size
        metrics = metrics_prefix(self.metrics_path, 2**62) if self.metrics_path is not None else b""
        if metrics:
            add.append((metrics, f"{self.prefix}/{METRICS_FILE}"))
            size += len(metrics)
        config = self.run_dir / CONFIG_FILE
        if config.is_file():
            add.append((config.read_bytes(), f"{self.prefix}/{CONFIG_FILE}"))
            size += config.stat().st_size
        if add:
            from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

            quiet = are_progress_bars_disabled()
            disable_progress_bars()  # no upload bars from this thread over the training display
            try:
                self.api.batch_bucket_files(self.repo_id, add=add)
            finally:
                if not quiet:
                    enable_progress_bars()
        return None, size

    def close(self, wait_s: float = 300.0) -> list[PushOutcome]:
        """Queue a last sync of ``metrics.jsonl`` and ``config.json``, then
        :meth:`CheckpointUploader.close` (the same bounded wait and reports)."""
        if not self._closed and self._thread is not None and self._stopped_reason is None:
            self._queue.put(_LogsJob(next(self._seq), self._last_step, self.metrics_path, self.metrics_path,
                                     f"{self.prefix}/{METRICS_FILE}", owns_staged=False))
        return super().close(wait_s)


def open_bucket_push(bucket_id: str, run_dir: Path, *, private: bool = False, write: Optional[Callable[..., Any]] = None,
                     wait_s: float = 300.0, log: Callable[[str], None] = print, **uploader_kwargs: Any) -> HubPushHook:
    """Start syncing a run to a bucket: a started :class:`BucketUploader` wrapped in a
    :class:`~pawn.hub.push.HubPushHook` (checkpoints held until their step's ``train`` record,
    outcomes written as ``hub`` records).

    Raises:
        UsageError, HubPushError: see :class:`BucketUploader` and :meth:`BucketUploader.start`.
    """
    up = BucketUploader(bucket_id, run_dir=run_dir, private=private, log=log,
                        endpoint=uploader_kwargs.pop("endpoint", None) or os.environ.get("HF_ENDPOINT") or None, **uploader_kwargs)
    return HubPushHook(up.start(), write, wait_s)
