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
trial any worker starts, and re-queued once with the same parameters
(``RetryHeartbeatStaleTrialCallback(max_retry=1)``). ``grace_s`` must exceed the first chunk's compile
time, during which no heartbeat is missed (it runs in a thread) but a slow machine might stall.
A trial killed before its first heartbeat, which Optuna's check never sees, is given a stale one
when a worker starts (:func:`expire_trials_without_heartbeat`) and then failed and retried too.

An Optuna journal file (``--storage study.log`` or ``journal:PATH``) uses
``JournalFileBackend`` with its own file lock; it has no heartbeat in Optuna, so a killed
worker's trial stays RUNNING there until :func:`fail_running_trials` is called by the
next ``pawn sweep`` start with ``--fail-running`` (documented).
"""

from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path
from typing import Iterator, Optional

import optuna
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


@contextlib.contextmanager
def creation_lock(url: str, out: Path) -> Iterator[None]:
    """An exclusive ``fcntl.flock`` held while the storage tables and the study are created, so
    workers started together neither race on the schema nor create the study twice."""
    path = _lock_path(url, out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def open_storage(url: str, *, heartbeat_s: int = 60, grace_s: int = 900) -> BaseStorage:
    """Open the storage at ``url`` (see :func:`storage_url`); call under :func:`creation_lock`.

    Args:
        heartbeat_s: seconds between a running trial's heartbeats (RDB storages).
        grace_s: a trial without a heartbeat for this long is failed and retried once.

    Raises:
        StorageError: the URL cannot be opened (bad scheme, missing driver, unwritable file).
    """
    try:
        if url.startswith("journal:"):
            path = Path(url[len("journal:"):])
            path.parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(str(path)))
        if url.startswith("sqlite:///"):
            Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        kwargs = {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else {"pool_pre_ping": True}
        import warnings

        with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna's wording only
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return RDBStorage(url, engine_kwargs=kwargs, heartbeat_interval=heartbeat_s, grace_period=grace_s,
                              heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=1))
    except (ImportError, ValueError, OSError) as e:
        raise StorageError(f"--storage {url}: cannot open ({' '.join(str(e).split())[:200]})") from None
    except Exception as e:  # sqlalchemy's errors (bad URL, unreachable server): one line
        raise StorageError(f"--storage {url}: cannot open ({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None


def expire_trials_without_heartbeat(study: optuna.Study, grace_s: float) -> list[int]:
    """Make Optuna's stale-trial check see the RUNNING trials that never recorded a heartbeat.

    A worker killed between Optuna creating its trial (``study.ask``) and the first heartbeat
    (a window of milliseconds for one trial; a population samples P trials first) leaves a
    trial that ``RDBStorage``'s stale check skips: it only compares existing heartbeats
    (``RDBStorage._get_stale_trial_ids``), so the trial stayed RUNNING for ever. Each such trial
    that started more than ``grace_s`` seconds ago (``datetime_start`` against this host's clock,
    which Optuna wrote it with) gets a heartbeat dated ``grace_s + 1`` seconds back on the
    database's clock; the next stale check (:func:`optuna.storages.fail_stale_trials`, run by
    every worker before each trial) then fails it and re-queues it once, as any killed worker's
    trial. A live worker records its heartbeat long before ``grace_s`` (which must exceed a
    compile; default 900 s). No-op for storages without heartbeats (journal files).

    Returns:
        the numbers of the trials given a heartbeat.
    """
    import datetime as _dt

    storage = getattr(study._storage, "_backend", study._storage)  # Optuna wraps an RDBStorage in _CachedStorage
    if not isinstance(storage, RDBStorage) or storage.heartbeat_interval is None:
        return []
    import sqlalchemy
    from optuna.storages._rdb import models

    now = _dt.datetime.now()
    late = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
            if t.datetime_start is not None and (now - t.datetime_start).total_seconds() > grace_s]
    done = []
    if not late:
        return done
    session = storage.scoped_session()
    try:
        db_now = session.execute(sqlalchemy.func.now()).scalar().replace(tzinfo=None)
        for t in late:
            if models.TrialHeartbeatModel.where_trial_id(t._trial_id, session) is None:
                session.add(models.TrialHeartbeatModel(trial_id=t._trial_id,
                                                       heartbeat=db_now - _dt.timedelta(seconds=grace_s + 1)))
                done.append(t.number)
        session.commit()
    except Exception:
        session.rollback()
        raise
    finally:
        session.close()
    return done


def fail_running_trials(study: optuna.Study, reason: str) -> list[int]:
    """Mark every RUNNING trial of ``study`` FAILED (with ``fail_reason``); for journal storages,
    which have no heartbeat, when the user knows no worker is running. Returns their numbers."""
    done = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study._storage.set_trial_user_attr(t._trial_id, "fail_reason", reason)
        study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        done.append(t.number)
    return done
