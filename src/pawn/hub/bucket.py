"""Sync a training run's logs and checkpoints to a Hugging Face storage bucket in the background.

A storage bucket is a mutable, non-versioned file store on the Hub (no commits, no branches);
``huggingface_hub`` writes to it with :meth:`~huggingface_hub.HfApi.batch_bucket_files`, which
uploads the file contents through Xet storage (the ``hf_xet`` package) and then registers the
paths in one ``/batch`` call. :class:`BucketUploader` is a
:class:`~pawn.hub.push.CheckpointUploader` whose upload is that call, so the queue, the staging
of checkpoint files, the retry policy, the stop on permanent errors and the bounded exit wait are
the ones of ``--push-to-hub`` (see :mod:`pawn.hub.push`).

Layout in the bucket, under ``<prefix>/`` (the folder of ``--push-to-bucket owner/name/folder``,
default: the run directory's name, so one bucket holds many runs; a folder that holds another run's files is refused at start, before the run writes:
its ``metrics.jsonl`` names another run id (:data:`pawn.runs.RUN_ID_FIELD`), or it holds files
without one; a resumed run continues its own folder): ``checkpoints/<name>/`` (every file of each complete checkpoint, its ``.complete``
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
SWEEP_FILE = "sweep.json"
"""The file that claims a sweep study's folder in a bucket (:func:`claim_sweep_folder`): its
study name and sweep id."""
STAGING_DIR = ".bucket-staging"
"""The bucket uploader's staging folder inside the checkpoints folder (``--push-to-hub`` has its own)."""


@dataclass
class _LogsJob(_Job):
    """Only ``metrics.jsonl`` and ``config.json`` (the sync when the uploader closes)."""


def split_bucket_target(target: str, flag: str = FLAG) -> tuple[str, Optional[str]]:
    """``owner/name`` or ``owner/name/folder[/...]`` (a folder inside the bucket) → ``(bucket id,
    folder or None)``.

    Raises:
        UsageError: the bucket id is not ``owner/name`` (huggingface_hub's rules), or a folder part
            is empty, ``.`` or ``..`` (one line naming ``flag``).
    """
    from pawn.errors import UsageError
    from pawn.hub.push import check_repo_id

    parts = target.split("/")
    if len(parts) < 2:
        check_repo_id(target, flag)  # its one line: give the repository as owner/name
    bucket_id, folder = "/".join(parts[:2]), parts[2:]
    check_repo_id(bucket_id, flag)
    if folder and folder[-1] == "":
        folder = folder[:-1]  # owner/name/folder/ as owner/name/folder
    if any(p in ("", ".", "..") or "\\" in p for p in folder):
        raise UsageError(f"{flag} {target!r}: give a folder inside the bucket as owner/name/folder (no empty, '.' or '..' parts)")
    return bucket_id, "/".join(folder) or None


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


def check_can_push_bucket(target: str, *, network: bool = True) -> None:
    """Before any work: :func:`pawn.hub.push.check_can_push` for the bucket of ``target``
    (``owner/name[/folder]``, :func:`split_bucket_target`; not offline, a token, the Hub answers)
    and :func:`check_bucket_support`.

    Raises:
        UsageError: not ``owner/name[/folder]``. HubPushError: see both checks (one line).
    """
    check_can_push(split_bucket_target(target)[0], FLAG, network=network)
    check_bucket_support()


def ensure_bucket(api: Any, bucket_id: str, *, private: bool = False) -> bool:
    """Create the bucket ``bucket_id`` unless it exists; True when this call created it.

    The Hub answers the creation of an existing bucket with HTTP 409 (and 401/403 to a token
    that may write to the bucket but not create one in its namespace); each is taken as "it
    exists" once :meth:`~huggingface_hub.HfApi.bucket_info` finds the bucket, nothing is read
    from the error's body (``create_bucket(exist_ok=True)`` reads the 409's ``url``, which a
    server may leave out).

    Args:
        api: a ``huggingface_hub.HfApi``. private: create it private (an existing bucket keeps
            its visibility).

    Raises:
        huggingface_hub.errors.HfHubHTTPError: the creation failed otherwise, or the bucket is
            not found after the 401/403/409 (then that first error; a 409 is retried as
            transient by :meth:`~pawn.hub.push.CheckpointUploader._retry`).
    """
    from huggingface_hub.errors import HfHubHTTPError

    try:
        api.create_bucket(bucket_id, private=private or None, exist_ok=False)
        return True
    except HfHubHTTPError as e:
        if getattr(e.response, "status_code", None) not in (401, 403, 409):
            raise
        try:
            api.bucket_info(bucket_id)
        except HfHubHTTPError:
            raise e from None
        return False


class BucketUploader(CheckpointUploader):
    """Background uploader of a run's checkpoints and logs to one storage bucket (see the module
    docstring; the queue, retries and exit wait are :class:`~pawn.hub.push.CheckpointUploader`'s).

    Args:
        bucket_id: ``owner/name`` of the bucket (created if missing, private when ``private``), or
            ``owner/name/folder`` (:func:`split_bucket_target`): the folder in the bucket.
        run_dir: the run directory (its ``metrics.jsonl`` and ``config.json`` are sent).
        prefix: folder in the bucket (default: the folder of ``bucket_id``, else the run directory's name).
        private: create the bucket private (an existing bucket keeps its visibility).
        run_id: the run's id (:data:`pawn.runs.RUN_ID_FIELD`); :meth:`start` refuses a folder
            whose ``metrics.jsonl`` is another run's (None: compared by the first config
            record's time only).
        uploader_kwargs: ``token``, ``endpoint``, ``max_attempts``, ``backoff_s``,
            ``max_backoff_s``, ``log``, ``api`` as in :class:`~pawn.hub.push.CheckpointUploader`.

    Raises:
        UsageError, HubPushError: from :func:`check_can_push_bucket` (without the network check).
    """

    staging_dir = STAGING_DIR

    def __init__(self, bucket_id: str, *, run_dir: Path, prefix: Optional[str] = None, private: bool = False,
                 run_id: Optional[str] = None, **uploader_kwargs: Any):
        bucket_id, folder = split_bucket_target(bucket_id)
        check_can_push(bucket_id, FLAG, network=False)
        prefix = prefix if prefix is not None else folder
        super().__init__(bucket_id, branch="", private=private, metrics_path=Path(run_dir) / METRICS_FILE, card=None,
                         **uploader_kwargs)
        self.run_dir = Path(run_dir)
        self.prefix = (prefix if prefix is not None else self.run_dir.resolve().name).strip("/")
        self.run_id = run_id
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
        """Create the bucket unless it exists (:func:`ensure_bucket`), check that its folder
        holds no other run's files (:meth:`other_run`), then start the worker; runs before
        training, so a bad token, a refused bucket or a folder of another run fails at start.

        Raises:
            HubPushError: huggingface_hub without buckets or no ``hf_xet``, the bucket cannot be
                created or reached, or its folder holds another run (one line each).
        """
        import threading

        check_bucket_support()
        try:
            created = self._retry("creating the bucket", lambda: ensure_bucket(self.api, self.repo_id, private=self.private))
        except Exception as e:
            hint = " (log in with `hf auth login` or set HF_TOKEN with write access)" if classify_error(e) == "permanent" else ""
            raise HubPushError(f"{FLAG} {self.repo_id}: cannot create the bucket: {one_line(e)}{hint}") from None
        try:
            other = None if created else self._retry("reading the bucket folder", self.other_run)
        except Exception as e:
            raise HubPushError(f"{FLAG} {self.repo_id}: cannot read {self.target}: {one_line(e)}") from None
        if other is not None:
            raise HubPushError(f"{FLAG} {self.repo_id}: {self.target} holds {other}, and this run would mix its files "
                               f"into it; name another folder ({FLAG} {self.repo_id}/FOLDER), push to another bucket, or "
                               f"give this run an --out folder of another name (the default folder in the bucket is named after it)")
        self._thread = threading.Thread(target=self._work, name=f"bucket-push {self.repo_id}", daemon=True)
        self._thread.start()
        self.log(f"hub: syncing checkpoints and metrics.jsonl to {self.target} in the background")
        return self

    def other_run(self) -> Optional[str]:
        """What holds this uploader's folder in the bucket, when not this run: None for an empty
        folder or this run's own files (a resumed run: the folder's ``metrics.jsonl`` carries this
        run's id, or, for records written before run ids, the local log's first config record);
        else a phrase for the refusal ("another run's files (run id …, started …)", or "N files
        not written by a PAWN run", when the folder has no readable ``metrics.jsonl``).

        Raises:
            huggingface_hub.errors.HfHubHTTPError, OSError: listing or downloading failed.
        """
        import tempfile

        from pawn.runs import parse_bytes, read_records, run_identity

        folder = f"{self.prefix}/"
        files = [f for f in self.api.list_bucket_tree(self.repo_id, prefix=folder, recursive=True)
                 if getattr(f, "type", "file") == "file" and f.path.startswith(folder)]
        if not files:
            return None
        remote = next((f for f in files if f.path == folder + METRICS_FILE), None)
        theirs = None
        if remote is not None:
            with tempfile.TemporaryDirectory(prefix="pawn-bucket-") as tmp:
                dest = Path(tmp) / METRICS_FILE
                self.api.download_bucket_files(self.repo_id, [(remote, dest)], raise_on_missing_files=True)
                theirs = run_identity(parse_bytes(dest.read_bytes())[0])
        if remote is None:
            # <folder>/<study>/sweep.json: a sweep directory's folder; <folder>/sweep.json: a study's own
            studies = sorted({f.path[len(folder):-len(SWEEP_FILE) - 1] or self.prefix.rsplit("/", 1)[-1] for f in files
                              if f.path.endswith("/" + SWEEP_FILE) and f.path.count("/") - folder.count("/") in (0, 1)})
            if studies:
                return f"the trials of a sweep (study {', '.join(studies)})"
        if theirs is None or (theirs.run_id is None and theirs.started is None):
            return f"{len(files)} file{'s' if len(files) != 1 else ''} not written by a PAWN run (no readable {METRICS_FILE})"
        ours = run_identity(read_records(self.metrics_path)[0]) if self.metrics_path is not None and self.metrics_path.is_file() else None
        if theirs.same_run(self.run_id, ours.started if ours is not None else None):
            return None
        said = ", ".join(x for x in (f"run id {theirs.run_id}" if theirs.run_id else "", f"started {theirs.started}" if theirs.started else "") if x)
        return f"another run's files ({said})"

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


def claim_sweep_folder(target: str, folder: str, study_name: str, sweep_id: str, *, private: bool = False,
                       api: Any = None, log: Callable[[str], None] = print) -> str:
    """Before a sweep's first trial: make the bucket of ``target`` (``owner/name[/folder]``; its
    folder, when given, replaces ``folder``) unless it exists, and claim
    ``<folder>/<study_name>/`` for the sweep ``sweep_id`` by writing :data:`SWEEP_FILE` there;
    returns ``owner/name/<folder>/<study_name>``, under which each trial syncs to its own
    ``trial_NNNN/`` (each trial is a run, refused as usual when its folder holds another run).

    The same sweep (its study re-opened: the same ``sweep_id``) continues its folder. Refused: a
    ``<folder>/`` that is a run's (its ``metrics.jsonl``), a ``<folder>/<study_name>/`` claimed by
    another sweep or holding files without :data:`SWEEP_FILE`, and a claim that another sweep
    overwrote at the same instant (read back after writing).

    Args:
        folder: the default folder (the sweep directory's name). ``api``: a
            ``huggingface_hub.HfApi`` (default: ``HF_ENDPOINT`` and the configured token).
        log: the one line saying where the trials sync.

    Raises:
        UsageError: ``target`` is not ``owner/name[/folder]``.
        HubPushError: offline, no token, the Hub unreachable, no bucket support, the bucket cannot
            be made or read, or the folder belongs to another run or sweep (one line each).
    """
    import json
    import tempfile

    from pawn.runs import parse_bytes, run_identity

    check_can_push_bucket(target)
    bucket_id, given = split_bucket_target(target)
    folder = (given or folder).strip("/")
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)
    where = f"hf://buckets/{bucket_id}/{folder}"
    try:
        ensure_bucket(api, bucket_id, private=private)
    except Exception as e:
        raise HubPushError(f"{FLAG} {bucket_id}: cannot create the bucket: {one_line(e)}") from None

    def read(remote: Any) -> bytes:
        with tempfile.TemporaryDirectory(prefix="pawn-bucket-") as tmp:
            dest = Path(tmp) / "f"
            api.download_bucket_files(bucket_id, [(remote, dest)], raise_on_missing_files=True)
            return dest.read_bytes()

    def claim() -> Optional[dict]:
        """The claim of ``<folder>/<study>/`` (None: nothing there), or raise for a folder that is not a sweep's."""
        files = {f.path: f for f in api.list_bucket_tree(bucket_id, prefix=folder + "/", recursive=True)
                 if getattr(f, "type", "file") == "file" and f.path.startswith(folder + "/")}
        if f"{folder}/{METRICS_FILE}" in files:
            ident = run_identity(parse_bytes(read(files[f"{folder}/{METRICS_FILE}"]))[0])
            said = f" (run id {ident.run_id})" if ident is not None and ident.run_id else ""
            raise HubPushError(f"{FLAG} {bucket_id}: {where} holds a run's files{said}, and this sweep would mix its "
                               f"trials into it; name another folder ({FLAG} {bucket_id}/FOLDER in --base-config), "
                               "or give the sweep an --out folder of another name")
        mine = [p for p in files if p.startswith(f"{folder}/{study_name}/")]
        if not mine:
            return None
        if f"{folder}/{study_name}/{SWEEP_FILE}" not in files:
            raise HubPushError(f"{FLAG} {bucket_id}: {where}/{study_name} holds {len(mine)} file{'s' if len(mine) != 1 else ''} "
                               f"not written by a PAWN sweep, and this sweep would mix its trials into it; name another "
                               f"folder ({FLAG} {bucket_id}/FOLDER in --base-config) or give the study another --study-name")
        return json.loads(read(files[f"{folder}/{study_name}/{SWEEP_FILE}"]))

    def check(found: Optional[dict]) -> None:
        if found is not None and found.get("sweep_id") != sweep_id:
            raise HubPushError(f"{FLAG} {bucket_id}: {where}/{study_name} holds the trials of another sweep (study "
                               f"{found.get('study_name')}, sweep id {found.get('sweep_id')}), and this sweep would mix "
                               f"its trials into them; name another folder ({FLAG} {bucket_id}/FOLDER in --base-config), "
                               "give the study another --study-name, or the sweep an --out folder of another name")

    try:
        found = claim()
        check(found)
        if found is None:
            body = json.dumps({"study_name": study_name, "sweep_id": sweep_id}, sort_keys=True).encode() + b"\n"
            api.batch_bucket_files(bucket_id, add=[(body, f"{folder}/{study_name}/{SWEEP_FILE}")])
            check(claim())  # another sweep that claimed it at the same instant: the last writer keeps it
    except HubPushError:
        raise
    except Exception as e:
        raise HubPushError(f"{FLAG} {bucket_id}: cannot read or claim {where}/{study_name}: {one_line(e)}") from None
    log(f"hub: each trial syncs to {where}/{study_name}/trial_NNNN ({'continuing this sweep' if found else 'claimed for this sweep'})")
    return f"{bucket_id}/{folder}/{study_name}"


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
