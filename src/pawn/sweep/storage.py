"""The study storage, safe for several workers at once.

Choice (issue 15): the default is a SQLite file ``<out>/study.db`` opened through Optuna's
``RDBStorage`` — the format ``optuna-dashboard sqlite:///…`` reads, and the only file storage
with Optuna's trial heartbeat. SQLite allows one writer at a time; a second writer waits on the
file lock instead of failing with ``database is locked`` because the connection's busy timeout
is raised (``connect_args={"timeout": 120}``). Creating the tables and the study are the two
steps that race when workers start at the same moment, so both run under an exclusive
``fcntl`` lock on ``<db>.create.lock`` (``load_if_exists=True`` makes the later workers load it).

Heartbeats: every running trial updates its heartbeat every ``heartbeat_s``; a trial whose
heartbeat is older than ``grace_s`` (a worker that was killed) is marked FAILED by the next
trial any worker claims, and re-queued once with the same parameters
(``RetryHeartbeatStaleTrialCallback(max_retry=1)``). ``grace_s`` must exceed the first chunk's compile
time, during which no heartbeat is missed (it runs in a thread) but a slow machine might stall.
A trial killed before its first heartbeat, which Optuna's check never sees, is failed and
retried too (:meth:`SharedStudy.fail_stale`). Claims and stale checks of several workers are
serialised by one file lock (:class:`SharedStudy`).

An Optuna journal file (``--storage study.log`` or ``journal:PATH``) uses
``JournalFileBackend`` with its own file lock; it has no heartbeat in Optuna, so a killed
worker's trial stays RUNNING there until :func:`fail_running_trials` is called by the
next ``pawn sweep`` start with ``--fail-running`` (documented).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import os
import socket
import threading
import time
import warnings
from pathlib import Path
from typing import Iterator, Optional

import optuna
import sqlalchemy.exc
from optuna.storages import BaseStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend, JournalStorage

from pawn.errors import UsageError

JOURNAL_SUFFIXES = (".log", ".journal", ".jsonl")


class StorageError(UsageError):
    """A ``--storage`` value that cannot be opened; the message names it."""


def storage_url(spec: Optional[str], out: Path) -> str:
    """The storage ``spec`` names: ``None`` → ``sqlite:///<out>/study.db``; a SQLAlchemy URL
    (``scheme://…``) as is; ``journal:PATH`` or a path ending in .log/.journal/.jsonl → that
    journal file; any other path → a SQLite file there."""
    if spec is None:
        return f"sqlite:///{(Path(out) / 'study.db').resolve()}"
    if "://" in spec:
        return spec
    if spec.startswith("journal:"):
        return spec
    p = Path(spec)
    if p.suffix in JOURNAL_SUFFIXES:
        return f"journal:{p.resolve()}"
    return f"sqlite:///{p.resolve()}"


def _lock_path(url: str, out: Path) -> Path:
    if url.startswith("sqlite:///"):
        return Path(url[len("sqlite:///"):] + ".create.lock")
    if url.startswith("journal:"):
        return Path(url[len("journal:"):] + ".create.lock")  # not .lock: the journal's own lock file
    return Path(out) / ".study.lock"


def creation_lock(url: str, out: Path):
    """An exclusive ``fcntl.flock`` held while the storage tables and the study are created, so
    workers started together neither race on the schema nor create the study twice; the same
    lock is :meth:`SharedStudy.lock` (a context manager)."""
    return _flock(_lock_path(url, out))


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``fcntl.flock`` on ``path`` (created if needed).

    Raises:
        StorageError: the lock file cannot be created (an unwritable storage directory).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a")
    except OSError as e:
        raise StorageError(f"--storage: cannot create the lock file {path} beside the study "
                           f"({e.strerror or e}); choose a writable --storage or --out") from None
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


SCHEMA_RETRIES = 8
"""How many times :func:`open_storage` reopens a storage whose schema another process was
creating at the same instant (waits 0.1 s, 0.2 s, … between tries: 3.6 s in all)."""


def _schema_race(e: Exception) -> bool:
    msg = str(e)
    return "already exists" in msg or "alembic_version" in msg or "database is locked" in msg


def open_storage(url: str, *, heartbeat_s: int = 60, grace_s: int = 900) -> BaseStorage:
    """Open the storage at ``url`` (see :func:`storage_url`); call under :func:`creation_lock`.

    Args:
        heartbeat_s: seconds between a running trial's heartbeats (RDB storages).
        grace_s: a trial without a heartbeat for this long is failed and retried once.

    Raises:
        StorageError: the URL cannot be opened (bad scheme, missing driver, unwritable file).

    A schema being created by another process at the same instant (one that does not take
    :func:`creation_lock`, e.g. ``optuna-dashboard`` or ``optuna.load_study`` on a fresh file)
    is waited for and reopened up to :data:`SCHEMA_RETRIES` times, not reported as an error.
    """
    try:
        if url.startswith("journal:"):
            path = Path(url[len("journal:"):])
            path.parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(str(path)))
        if url.startswith("sqlite:///"):
            Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        kwargs = {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else {"pool_pre_ping": True}
        for attempt in range(SCHEMA_RETRIES + 1):
            try:
                with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna's wording only
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    return RDBStorage(url, engine_kwargs=kwargs, heartbeat_interval=heartbeat_s, grace_period=grace_s,
                                      heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=1))
            except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError) as e:
                # Another process outside PAWN's lock (optuna-dashboard, a notebook's load_study)
                # created the same tables at this instant: "table … already exists" or a duplicate
                # alembic_version row. Its schema is complete a moment later; open it again.
                if attempt == SCHEMA_RETRIES or not _schema_race(e):
                    raise
                time.sleep(0.1 * (attempt + 1))
    except (ImportError, ValueError, OSError) as e:
        raise StorageError(f"--storage {url}: cannot open ({' '.join(str(e).split())[:200]})") from None
    except Exception as e:  # sqlalchemy's errors (bad URL, unreachable server): one line
        raise StorageError(f"--storage {url}: cannot open ({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None


WORKER_ATTR = "worker"
"""User attribute ``host:pid`` that a PAWN worker sets on each trial it claims, right after the
trial's first heartbeat (:meth:`SharedStudy.begin`)."""


def retry_parent(t: optuna.trial.FrozenTrial) -> Optional[int]:
    """The number of the trial ``t`` retries (Optuna's ``retry_history`` system attribute, last
    entry), or None when ``t`` is not a retry."""
    history = t.system_attrs.get("retry_history")
    return history[-1] if history else None


class SharedStudy:
    """One worker's handle on a study that several workers share.

    Claiming a trial (failing stale trials, counting, ``study.ask``, the first heartbeat) runs
    under one exclusive ``fcntl`` lock (:meth:`lock`, the file of :func:`creation_lock`), because
    SQLite, the default storage, serialises writes but not a read followed by a write: Optuna's
    stale check (``fail_stale_trials``) and its claim of a WAITING trial both read a state and then
    write it, so two processes doing either at the same instant each saw the trial unclaimed
    (one stale trial failed by 8 workers at once was retried 7 times; two workers trained the one
    WAITING trial). The lock is local to the machine (``flock``); a server database
    (PostgreSQL, MySQL) also locks the rows (``SELECT … FOR UPDATE``) for workers elsewhere.

    Only Optuna's public API is used (``BaseStorage`` methods, ``fail_stale_trials``,
    :class:`~optuna.storages.RetryHeartbeatStaleTrialCallback`), not its ORM tables.

    Args:
        study: the loaded study. storage: the storage it was opened on (:func:`open_storage`).
        url: its URL (:func:`storage_url`). out: the sweep directory (where the lock of a server
            database lives). grace_s: seconds without a heartbeat after which a trial is stale.
    """

    def __init__(self, study: optuna.Study, storage: BaseStorage, url: str, out: Path, grace_s: float):
        self.study, self.storage, self.url, self.grace_s = study, storage, url, grace_s
        self.lock_path = _lock_path(url, out)
        self.study_id = storage.get_study_id_from_name(study.study_name)

    def lock(self):
        """The exclusive lock under which trials are claimed and stale trials failed (a context manager)."""
        return _flock(self.lock_path)

    @property
    def heartbeats(self) -> bool:
        """Whether the storage records heartbeats (RDB storages; not journal files)."""
        return isinstance(self.storage, RDBStorage) and self.storage.get_heartbeat_interval() is not None

    def trial_id(self, number: int) -> int:
        """The storage's id of trial ``number`` of this study."""
        return self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)

    def trial(self, number: int) -> optuna.trial.FrozenTrial:
        """Trial ``number`` as stored now."""
        return self.storage.get_trial(self.trial_id(number))

    def begin(self, trial: optuna.Trial) -> None:
        """Mark ``trial`` (just claimed, under :meth:`lock`) as this worker's: its first heartbeat,
        then :data:`WORKER_ATTR`. A trial without the attribute whose start is older than
        ``grace_s`` therefore never beat (its worker died as it claimed it)."""
        if self.heartbeats:
            self.storage.record_heartbeat(self.trial_id(trial.number))
        trial.set_user_attr(WORKER_ATTR, f"{socket.gethostname()}:{os.getpid()}")

    def fail_stale(self) -> list[int]:
        """Fail the trials of killed workers and queue one retry of each; call under :meth:`lock`.

        Stale trials: a heartbeat older than ``grace_s`` (Optuna's ``fail_stale_trials``, whose
        callback queues the retry), or no :data:`WORKER_ATTR` and a start (``datetime_start``,
        this host's clock, as Optuna writes it) older than ``grace_s`` — a worker killed between
        ``study.ask`` and its first heartbeat, which Optuna's check skips (it compares existing
        heartbeats only): such a trial gets ``fail_reason``, is failed and retried here. No-op for
        storages without heartbeats (journal files: ``--fail-running``).

        Returns:
            the numbers of the trials failed, in order.
        """
        if not self.heartbeats:
            return []
        now = _dt.datetime.now()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            retry = RetryHeartbeatStaleTrialCallback(max_retry=1)
        failed = []
        for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if WORKER_ATTR in t.user_attrs or t.datetime_start is None:
                continue
            if (now - t.datetime_start).total_seconds() <= self.grace_s:
                continue
            tid = self.trial_id(t.number)
            try:
                self.storage.set_trial_user_attr(tid, "fail_reason", f"no heartbeat ever recorded, started over "
                                                 f"{self.grace_s:g} s ago (its worker was killed as it began)")
                if not self.storage.set_trial_state_values(tid, optuna.trial.TrialState.FAIL):
                    continue
            except optuna.exceptions.UpdateFinishedTrialError:
                continue
            retry(self.study, self.storage.get_trial(tid))
            failed.append(t.number)
        before = {t.number for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
        with warnings.catch_warnings():  # "experimental" in Optuna's wording only
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(self.study)
        if before:
            retried = {retry_parent(t) for t in self.study.get_trials(deepcopy=False)}
            failed += [t.number for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,))
                       if t.number in before and t.number in retried]
        return sorted(failed)

    @contextlib.contextmanager
    def beating(self, trials: list, interval: float) -> Iterator[None]:
        """Within the block, record a heartbeat for each of ``trials`` every ``interval`` seconds
        in a daemon thread (what ``study.optimize`` does for its trial), when the storage has
        heartbeats. A trial another worker has failed meanwhile keeps beating harmlessly."""
        if not self.heartbeats or not trials:
            yield
            return
        ids = [self.trial_id(t.number) for t in trials]
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(interval):
                for tid in ids:
                    try:
                        self.storage.record_heartbeat(tid)
                    except Exception:  # a locked database at this instant: the next beat comes
                        pass

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def fail_running_trials(shared: SharedStudy, reason: str) -> list[int]:
    """Mark every RUNNING trial of the study FAILED (with ``fail_reason``); for journal storages,
    which have no heartbeat, when the user knows no worker is running. Call under
    :meth:`SharedStudy.lock`. Returns their numbers."""
    done = []
    for t in shared.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        tid = shared.trial_id(t.number)
        try:
            shared.storage.set_trial_user_attr(tid, "fail_reason", reason)
            if shared.storage.set_trial_state_values(tid, optuna.trial.TrialState.FAIL):
                done.append(t.number)
        except optuna.exceptions.UpdateFinishedTrialError:  # finished by its worker meanwhile
            pass
    return done
