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
serialised by one lock (:class:`SharedStudy`): a file lock for a SQLite file or journal, a lock the
server holds for PostgreSQL and MySQL (:func:`database_lock`), so workers on several machines
sharing one server database claim trials one at a time too.

A server database that stops answering after it once answered (a restart, a failover, a network
cut) is waited for, up to ``--db-retry-s`` (:class:`Patience`, :class:`PatientRDBStorage`), and
every URL PAWN prints hides its password (:func:`shown_url`).

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
from typing import Callable, Iterator, Optional

import optuna
import sqlalchemy.exc
from optuna.storages import BaseStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend, JournalStorage

from pawn.errors import UsageError

JOURNAL_SUFFIXES = (".log", ".journal", ".jsonl")


class StorageError(UsageError):
    """A ``--storage`` value that cannot be opened, or a database that stayed unreachable; the
    message names it (password hidden, :func:`shown_url`)."""


DB_RETRY_S = 300.0
"""How long (s) a worker waits for a server database (PostgreSQL, MySQL) that stopped answering
(a restart, a failover, a network cut) before it stops with one line; ``pawn sweep --db-retry-s``."""
CONNECT_TIMEOUT_S = 10
"""The connect timeout (s) given to a server database's driver, so an unreachable host is a
refused attempt after this long, not the operating system's minutes-long TCP timeout."""
_PERMANENT = ("password authentication failed", "no pg_hba.conf entry", "does not exist", "access denied",
              "unknown database", "could not translate host name", "name or service not known",
              "nodename nor servname", "authentication", "ssl", "invalid dsn", "invalid connection option")
"""Words of a server's refusal that waiting does not cure (credentials, a database or user that
does not exist, an unknown host name): one line at once, no retry."""


def shown_url(url: str) -> str:
    """A storage URL as PAWN prints it: a SQLAlchemy URL's password replaced by ``***``
    (``sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)``); other URLs
    (``journal:PATH``) as they are."""
    if "://" not in url:
        return url
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 -- not a SQLAlchemy URL: hide whatever sits before the last @
        head, _, rest = url.partition("://")
        return f"{head}://***@{rest.rsplit('@', 1)[1]}" if "@" in rest else url


def is_server_url(url: str) -> bool:
    """Whether ``url`` names a database server (any SQLAlchemy URL but ``sqlite``)."""
    return "://" in url and not url.split("://", 1)[0].startswith("sqlite")


def _database_error(e: BaseException) -> Optional[BaseException]:
    """The SQLAlchemy error behind ``e`` (itself, or its cause or context: Optuna re-raises one as
    ``StorageInternalError``), or None."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, sqlalchemy.exc.SQLAlchemyError):
            return e
        e = e.__cause__ or e.__context__
        seen += 1
    return None


def transient(e: BaseException) -> bool:
    """Whether ``e`` is a server database that did not answer for a while — a refused or dropped
    connection, a server shutting down or starting up — which a later try may get past; not a
    refusal that waiting does not cure (:data:`_PERMANENT`: a wrong password, a database or user
    that does not exist, an unknown host name), nor an error in what was sent."""
    db = _database_error(e)
    if db is None:
        return False
    if isinstance(db, sqlalchemy.exc.DBAPIError) and db.connection_invalidated:
        return True
    # a dropped connection surfaces as the driver's OperationalError / InterfaceError, or, for a
    # session that was in a transaction on it, as SQLAlchemy's own "roll back first" and
    # disconnection errors; a pool with no connection to give waits, then times out
    if not isinstance(db, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError, sqlalchemy.exc.DisconnectionError,
                           sqlalchemy.exc.PendingRollbackError, sqlalchemy.exc.TimeoutError)):
        return False
    msg = str(getattr(db, "orig", None) or db).lower()
    return not any(w in msg for w in _PERMANENT)


def one_line(e: BaseException, url: str) -> str:
    """``e`` (or the database error behind it) as one line without ``url``'s password."""
    db = _database_error(e) or e
    text = str(getattr(db, "orig", None) or db)
    try:
        from sqlalchemy.engine import make_url

        password = make_url(url).password if "://" in url else None
    except Exception:  # noqa: BLE001
        password = None
    text = text.replace(url, shown_url(url))
    if password:
        text = text.replace(str(password), "***")
    return f"{type(db).__name__}: {' '.join(text.split())[:240]}"


_ANSWERED: set[str] = set()
"""The database URLs that have answered a call of this process (:class:`Patience`)."""


class Patience:
    """Calls that wait for a server database which stopped answering: a call that fails with a
    :func:`transient` error is tried again after 0.5 s, 1 s, 2 s, … (at most 10 s apart) until it
    succeeds or ``retry_s`` seconds have passed since its first failure; then :class:`StorageError`
    names the URL (password hidden) and the last error. The first wait of a call is one ``log``
    line, and its success after waiting another. Nested calls wait once, in the outermost.

    Only a database that has answered this process once is waited for: one that never did (a
    wrong host or port, a server not started) fails the call at once, which the caller reports as
    one line.

    Args:
        url: the storage URL (for messages). retry_s: the bound (s); 0 tries once.
        log: receives the lines.
    """

    def __init__(self, url: str, retry_s: float = DB_RETRY_S, log: Callable[[str], None] = print):
        self.url, self.retry_s, self.log = url, float(retry_s), log
        self._depth = threading.local()

    def call(self, fn: Callable, *args, **kwargs):
        if getattr(self._depth, "n", 0):
            return fn(*args, **kwargs)
        self._depth.n = 1
        try:
            t0, wait, said = None, 0.5, False
            while True:
                try:
                    out = fn(*args, **kwargs)
                    _ANSWERED.add(self.url)
                    if said:
                        self.log(f"database {shown_url(self.url)} answers again after {time.monotonic() - t0:.0f} s")
                    return out
                except Exception as e:  # noqa: BLE001 -- transient ones are retried, the rest re-raised
                    if not transient(e) or self.url not in _ANSWERED:
                        raise
                    now = time.monotonic()
                    t0 = now if t0 is None else t0
                    if now - t0 + wait > self.retry_s:
                        raise StorageError(f"database {shown_url(self.url)} did not answer for {now - t0:.0f} s "
                                           f"(--db-retry-s {self.retry_s:g}): {one_line(e, self.url)}") from None
                    if not said:
                        said = True
                        self.log(f"database {shown_url(self.url)} does not answer ({one_line(e, self.url)}); "
                                 f"retrying for up to {self.retry_s:g} s")
                    time.sleep(wait)
                    wait = min(10.0, wait * 2)
        finally:
            self._depth.n = 0


_PATIENT_METHODS = (
    "create_new_study", "delete_study", "set_study_user_attr", "set_study_system_attr", "get_study_id_from_name",
    "get_study_name_from_id", "get_study_directions", "get_study_user_attrs", "get_study_system_attrs",
    "get_trial_user_attrs", "get_trial_system_attrs", "get_all_studies", "create_new_trial", "set_trial_param",
    "get_trial_param", "set_trial_state_values", "set_trial_intermediate_value", "set_trial_user_attr",
    "set_trial_system_attr", "get_trial_id_from_study_id_trial_number", "get_trial", "get_all_trials",
    "get_best_trial", "record_heartbeat", "_get_stale_trial_ids", "_create_new_trial", "_get_best_trial_id",
    "_get_trials", "_set_trial_param")
"""The :class:`~optuna.storages.RDBStorage` methods that reach the database, each of which
:class:`PatientRDBStorage` retries: the public ones, and the private ones Optuna's own callers use
(``_get_stale_trial_ids``: its stale-heartbeat check; the other four: its ``_CachedStorage``, which
wraps an ``RDBStorage`` in every study)."""


class PatientRDBStorage(RDBStorage):
    """Optuna's ``RDBStorage`` whose database calls (:data:`_PATIENT_METHODS`) wait for a server
    database that stopped answering (:class:`Patience`), so workers outlive a database restart.
    A write whose reply was lost may be applied twice; Optuna's writes either refuse the second
    (a finished trial) or add a RUNNING trial that no worker beats for, which the stale check fails.

    Args:
        url: the SQLAlchemy URL. patience: the :class:`Patience` to call through.
        kwargs: ``RDBStorage``'s.
    """

    def __init__(self, url: str, patience: Patience, **kwargs):
        self._patience = patience
        patience.call(RDBStorage.__init__, self, url, **kwargs)

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_patience", None)
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self._patience = Patience(state.get("url", ""), 0.0, lambda m: None)


def _patient(name: str):
    base = getattr(RDBStorage, name)

    def method(self, *args, **kwargs):
        return self._patience.call(base, self, *args, **kwargs)

    method.__name__, method.__qualname__, method.__doc__ = name, f"PatientRDBStorage.{name}", base.__doc__
    return method


for _name in _PATIENT_METHODS:
    setattr(PatientRDBStorage, _name, _patient(_name))


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


def creation_lock(url: str, out: Path, retry_s: float = DB_RETRY_S, log: Callable[[str], None] = print):
    """An exclusive lock held while the storage tables and the study are created, so workers
    started together neither race on the schema nor create the study twice; the same lock is
    :meth:`SharedStudy.lock` (a context manager). A file storage: an ``fcntl.flock`` beside it. A
    server database: a lock in the database itself (:func:`database_lock`), which holds for
    workers on every machine (PostgreSQL, MySQL/MariaDB; another server's workers are serialised
    on this machine only, by a file lock in ``out``)."""
    if has_database_lock(url):
        return database_lock(url, retry_s, log)
    return _flock(_lock_path(url, out))


def has_database_lock(url: str) -> bool:
    """Whether the server of ``url`` has the lock :func:`database_lock` takes (PostgreSQL, MySQL/MariaDB)."""
    return url.split("://", 1)[0].split("+", 1)[0] in ("postgresql", "mysql", "mariadb") and "://" in url


DB_LOCK_NAME = "pawn-sweep"
"""The name of the database lock of :func:`database_lock` (PostgreSQL: its 64-bit key is the first
8 bytes of this name's SHA-256, signed)."""


@contextlib.contextmanager
def database_lock(url: str, retry_s: float = DB_RETRY_S, log: Callable[[str], None] = print) -> Iterator[None]:
    """Hold a lock of the database server at ``url`` for the block: PostgreSQL's session advisory
    lock (``pg_advisory_lock``), MySQL's named lock (``GET_LOCK``), on a connection of its own that
    is closed at the end. Workers on several machines claim trials one at a time through it, as
    the ``flock`` of a file storage serialises the workers of one machine. A server restart drops
    the lock with its connection; the block has then lost nothing but its exclusivity for the
    moment of the restart.

    Raises:
        StorageError: the database did not answer for ``retry_s`` seconds (one line), or its
            dialect has no such lock (only PostgreSQL and MySQL/MariaDB are supported).
    """
    import hashlib

    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    dialect = url.split("://", 1)[0].split("+", 1)[0]
    if dialect == "postgresql":
        key = int.from_bytes(hashlib.sha256(DB_LOCK_NAME.encode()).digest()[:8], "big", signed=True)
        take, give, params = "SELECT pg_advisory_lock(:k)", "SELECT pg_advisory_unlock(:k)", {"k": key}
        connect_args: dict = {"connect_timeout": CONNECT_TIMEOUT_S}
    elif dialect in ("mysql", "mariadb"):
        take, give, params = "SELECT GET_LOCK(:k, -1)", "SELECT RELEASE_LOCK(:k)", {"k": DB_LOCK_NAME}
        connect_args = {}
    else:
        raise StorageError(f"--storage {shown_url(url)}: PAWN's sweep workers need PostgreSQL or MySQL/MariaDB "
                           f"(a lock held by the database server), not {dialect}")
    engine = create_engine(url, poolclass=NullPool, connect_args=connect_args)
    patience = Patience(url, retry_s, log)

    def lock():
        c = engine.connect()
        try:
            c.execute(text(take), params)
            c.commit()
        except BaseException:
            c.close()
            raise
        return c

    try:
        conn = patience.call(lock)
    except StorageError:
        engine.dispose()
        raise
    except Exception as e:  # a refused login, a missing driver: one line
        engine.dispose()
        raise StorageError(f"--storage {shown_url(url)}: cannot open ({one_line(e, url)})") from None
    try:
        yield
    finally:
        try:
            conn.execute(text(give), params)
            conn.commit()
        except Exception:  # noqa: BLE001 -- a dropped connection released the lock already
            pass
        finally:
            conn.close()
            engine.dispose()


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


def open_storage(url: str, *, heartbeat_s: Optional[int] = 60, grace_s: int = 900, retry_s: float = DB_RETRY_S,
                 log: Callable[[str], None] = print, create: bool = True) -> BaseStorage:
    """Open the storage at ``url`` (see :func:`storage_url`); call under :func:`creation_lock`.

    Args:
        heartbeat_s: seconds between a running trial's heartbeats (RDB storages); None: no
            heartbeat (a reader's storage). grace_s: a trial without a heartbeat for this long is
            failed and retried once.
        retry_s: how long a server database (PostgreSQL, MySQL) that does not answer is waited
            for, at this opening and at every later call (:class:`PatientRDBStorage`).
        log: receives the one-line notes of that waiting.
        create: create the tables when they are missing (False: a reader's storage, which must
            find Optuna's schema there).

    Raises:
        StorageError: one line naming the URL (password hidden): a bad scheme, a missing driver,
            an unwritable file, a refused login, a database that stayed unreachable for ``retry_s``.

    A schema being created by another process at the same instant (one that does not take
    :func:`creation_lock`, e.g. ``optuna-dashboard`` or ``optuna.load_study`` on a fresh file)
    is waited for and reopened up to :data:`SCHEMA_RETRIES` times, not reported as an error.
    """
    shown = shown_url(url)
    try:
        if url.startswith("journal:"):
            path = Path(url[len("journal:"):])
            path.parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(str(path)))
        if url.startswith("sqlite:///"):
            Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        server = is_server_url(url)
        kwargs: dict = {"connect_args": {"timeout": 120}} if not server else {"pool_pre_ping": True}
        if url.split("://", 1)[0].startswith("postgresql"):
            kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
        with warnings.catch_warnings():  # "experimental" in Optuna's wording only: no warning line in the user's output
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            hb = {} if heartbeat_s is None else {
                "heartbeat_interval": heartbeat_s, "grace_period": grace_s,
                "heartbeat_stale_trial_callback": RetryHeartbeatStaleTrialCallback(max_retry=1)}
        for attempt in range(SCHEMA_RETRIES + 1):
            try:
                with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna's wording only
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    if server:
                        return PatientRDBStorage(url, Patience(url, retry_s, log), engine_kwargs=kwargs,
                                                 skip_table_creation=not create, **hb)
                    return RDBStorage(url, engine_kwargs=kwargs, skip_table_creation=not create, **hb)
            except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError) as e:
                # Another process outside PAWN's lock (optuna-dashboard, a notebook's load_study)
                # created the same tables at this instant: "table … already exists" or a duplicate
                # alembic_version row. Its schema is complete a moment later; open it again.
                if attempt == SCHEMA_RETRIES or not _schema_race(e):
                    raise
                time.sleep(0.1 * (attempt + 1))
    except StorageError:
        raise
    except (ImportError, ValueError, OSError) as e:
        raise StorageError(f"--storage {shown}: cannot open ({one_line(e, url).split(': ', 1)[1]})") from None
    except Exception as e:  # sqlalchemy's errors (bad URL, unreachable server, refused login): one line
        raise StorageError(f"--storage {shown}: cannot open ({one_line(e, url)})") from None
    raise AssertionError("unreachable")


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
    WAITING trial). For a file storage the lock is a ``flock``, local to the machine; for a
    PostgreSQL or MySQL server it is held by the server (:func:`database_lock`), so it also holds
    for workers on other machines.

    Only Optuna's public API is used (``BaseStorage`` methods, ``fail_stale_trials``,
    :class:`~optuna.storages.RetryHeartbeatStaleTrialCallback`), not its ORM tables.

    Args:
        study: the loaded study. storage: the storage it was opened on (:func:`open_storage`).
        url: its URL (:func:`storage_url`). out: the sweep directory (where the file lock of a
            server database other than PostgreSQL and MySQL lives). grace_s: seconds without a
            heartbeat after which a trial is stale. retry_s, log: :class:`Patience`'s, for the lock.
    """

    def __init__(self, study: optuna.Study, storage: BaseStorage, url: str, out: Path, grace_s: float,
                 retry_s: float = DB_RETRY_S, log: Callable[[str], None] = print):
        self.study, self.storage, self.url, self.grace_s = study, storage, url, grace_s
        self.retry_s, self.log = retry_s, log
        self.lock_path = _lock_path(url, out)
        self.study_id = storage.get_study_id_from_name(study.study_name)

    def lock(self):
        """The exclusive lock under which trials are claimed and stale trials failed (a context
        manager): :func:`creation_lock`'s."""
        if has_database_lock(self.url):
            return database_lock(self.url, self.retry_s, self.log)
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
