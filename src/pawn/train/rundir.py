"""One run per directory: the rule every command that writes a run directory follows
(``pawn pretrain`` now; ``pawn adapt`` and sweeps use the same functions).

A directory that holds another run is never written to, unless the user resumes that run
(``--resume``) or asks to start over (``--overwrite``), which moves the old run aside to a sibling
``DIR.old-YYYYmmdd-HHMMSS`` and never deletes it. The check (:func:`check_run_dir`) runs before
any work; the move (:meth:`RunDirPlan.prepare`) happens only when the new run is about to write,
so a command that fails its other checks leaves the old run where it was.

The writing process holds an exclusive ``flock`` on the run directory itself for the whole run
(:class:`RunDirLock`, taken just before the first write and checked again under the lock), so two
commands started on one ``--out`` at the same instant cannot both write it: the second stops
with one line. The lock is the kernel's: it goes when the process ends, however it ends.

A sweep's ``--out`` (:func:`open_sweep_dir`) is a run directory for this rule: it holds one study
(its storage, ``best_config.json``, the trials' runs under ``<study>/trial_NNNN``), never beside a
run. Each sweep process holds a *shared* lock on it, so the workers of one study (``--workers``,
or the same command started by hand) share it while a run's exclusive lock excludes them all; a
run is refused a directory that holds a study (:func:`sweep_markers`), ``--overwrite`` included
(it moves runs aside, never a study), and a sweep one that holds a run.
"""

from __future__ import annotations

from pawn.errors import PawnError
import datetime as _dt
import errno
import fcntl
import json
import os
import re
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from pawn.checkpoint import RUN_MARKERS  # the checkpoint layer (below this one) also refuses run dirs as outputs

class RunDirError(PawnError, ValueError):
    """A run directory that this command must not write; the message is one line naming the
    directory and the flag that would allow it."""


def run_markers(run_dir: Path) -> list[str]:
    """Names from :data:`RUN_MARKERS` present in ``run_dir`` (empty when it holds no run)."""
    if not run_dir.is_dir():
        return []
    return [m for m in RUN_MARKERS if (run_dir / m).exists()]


SWEEP_FILES: tuple[str, ...] = ("study.db", "best_config.json", "worker_config.json")
"""Files ``pawn sweep`` writes at the top of its ``--out`` (the default storage, the best trial's
config, the spawned workers' settings)."""
TRIAL_DIR = re.compile(r"^trial_\d{4,}$")


def sweep_markers(run_dir: Path) -> list[str]:
    """What in ``run_dir`` shows a sweep's study: the names of :data:`SWEEP_FILES` there and each
    ``<study>/`` folder holding ``trial_NNNN`` runs, or ``trial_*`` when ``run_dir`` is such a
    folder itself (empty when it holds no study)."""
    if not run_dir.is_dir():
        return []
    found = [m for m in SWEEP_FILES if (run_dir / m).exists()]
    try:
        children = sorted(c for c in run_dir.iterdir() if c.is_dir() and not c.is_symlink())
    except OSError:
        return found
    if any(TRIAL_DIR.match(c.name) for c in children):
        found.append("trial_*")
    for c in children:
        try:
            if any(TRIAL_DIR.match(t.name) and t.is_dir() for t in c.iterdir()):
                found.append(f"{c.name}/trial_*")
        except OSError:
            continue
    return found


def _newest_step(run_dir: Path) -> Optional[int]:
    from pawn.train.lifecycle import complete_checkpoints

    found = complete_checkpoints(run_dir / "checkpoints")
    return found[-1][0] if found else None


def _stored_run_config(run_dir: Path) -> Optional[dict]:
    try:
        data = json.loads((run_dir / "config.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _same_run(stored: Optional[dict], new: Optional[dict], ignored: Iterable[str]) -> bool:
    if stored is None or new is None:
        return False
    keys = (set(stored) | set(new)) - set(ignored)
    return all(stored.get(k) == new.get(k) for k in keys)


def aside_name(run_dir: Path, now: Optional[_dt.datetime] = None) -> Path:
    """The sibling an overwritten run is moved to: ``DIR.old-YYYYmmdd-HHMMSS`` (``-2``, ``-3`` …
    appended if that exists already)."""
    stamp = (now or _dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    base = run_dir.with_name(f"{run_dir.name}.old-{stamp}")
    target, i = base, 2
    while target.exists():
        target, i = base.with_name(f"{base.name}-{i}"), i + 1
    return target


@dataclass
class RunDirPlan:
    """What a command may do with its run directory, decided by :func:`check_run_dir`.

    Attributes:
        run_dir: the directory. move_aside: an old run is there and is moved to a sibling by
            :meth:`prepare` (``--overwrite``, or ``--resume auto`` over a run that never wrote
            a checkpoint). continues: the directory holds the run being resumed.
    """

    run_dir: Path
    move_aside: bool = False
    continues: bool = False

    def prepare(self) -> Optional[Path]:
        """Move the old run aside when planned (rename, never delete). Call on the writing
        process only, just before the new run writes. Returns the new place of the old run, or
        None.

        Raises:
            RunDirError: the rename failed (the message names both paths and the reason).
        """
        if not self.move_aside or not run_markers(self.run_dir):
            return None
        target = aside_name(self.run_dir)
        try:
            self.run_dir.rename(target)
        except OSError as e:
            raise RunDirError(f"--overwrite: cannot move {self.run_dir} aside to {target} ({e.strerror or e})") from None
        return target


def check_run_dir(
    run_dir: Path,
    *,
    resume: Optional[str] = None,
    resume_from: Optional[Path] = None,
    overwrite: bool = False,
    new_config: Optional[dict] = None,
    ignored_fields: Optional[Iterable[str]] = None,
) -> RunDirPlan:
    """Decide, before any work, whether a run may write ``run_dir``.

    Args:
        run_dir: the ``--out`` directory.
        resume: the ``--resume`` value given (None when not resuming).
        resume_from: the checkpoint directory it resolved to (None: nothing to resume yet,
            e.g. ``--resume auto`` in a directory without a complete checkpoint).
        overwrite: ``--overwrite`` was given: an old run there is moved aside.
        new_config: the new run's config (JSON form), to tell "the same run re-fed with
            ``--config``" from "another run" in the message.
        ignored_fields: config fields that may differ within one run (the trainers and the lab
            pass :func:`pawn.train.spine.run_identity_ignored` of their settings); None: those
            :class:`pawn.settings.PretrainConfig` tags (``out``, ``resume``, logging, ...).

    Returns:
        A :class:`RunDirPlan`.

    Raises:
        RunDirError: ``run_dir`` holds another run and neither flag allows writing it, or both
            flags were given. A directory with other files but no run (a Slurm log written
            there before the job started) is fine: the run writes beside them.
    """
    if overwrite and resume is not None:
        raise RunDirError("give either --resume (continue a run) or --overwrite (start over), not both")
    if ignored_fields is None:
        from pawn.settings import MUTABLE_ON_RESUME, NOT_RUN_IDENTITY, PretrainConfig, fields_with

        ignored_fields = fields_with(PretrainConfig, MUTABLE_ON_RESUME, NOT_RUN_IDENTITY)
    markers = run_markers(run_dir)
    study = sweep_markers(run_dir)
    continuing = (resume is not None and resume_from is not None and bool(markers)
                  and run_dir.resolve() in (resume_from.resolve().parent.parent, resume_from.resolve().parent))
    if study and not continuing:  # a study is never moved aside (--overwrite) nor written beside (one run per directory)
        writer = _writer_now(run_dir)
        now = f"; {writer} is running it now" if writer is not None else ""
        raise RunDirError(f"--out {run_dir} holds a sweep ({', '.join(study)}){now}; a run needs a directory of its own "
                          "(--overwrite moves a run aside, never a study): choose another --out")
    if not markers:  # new, empty, or only other files (e.g. a Slurm log written there first): left alone
        return RunDirPlan(run_dir)
    if overwrite:
        return RunDirPlan(run_dir, move_aside=True)
    if resume is not None:
        if resume_from is None:  # --resume auto, but the old run never wrote a checkpoint
            return RunDirPlan(run_dir, move_aside=True)
        if run_dir.resolve() in (resume_from.resolve().parent.parent, resume_from.resolve().parent):
            return RunDirPlan(run_dir, continues=True)
        raise RunDirError(
            f"--out {run_dir} holds another run than {resume_from}; resume into that checkpoint's own run "
            "directory or into a new --out"
        )
    step = _newest_step(run_dir)
    what = f"checkpoints up to step {step}" if step is not None else ", ".join(markers)
    if step is None:  # running, or stopped (a double Ctrl-C, a kill) before its first checkpoint
        writer = _writer_now(run_dir)
        if writer is not None:
            raise RunDirError(f"--out {run_dir}: {writer} is writing this run directory now (no checkpoint yet); wait for "
                              "it to end, or choose another --out")
        raise RunDirError(
            f"--out {run_dir} holds a run that wrote no complete checkpoint ({what}), so there is nothing to resume; "
            "add --overwrite to start it over (the old run is moved aside, not deleted), or choose another --out"
        )
    if _same_run(_stored_run_config(run_dir), new_config, ignored_fields):
        raise RunDirError(
            f"--out {run_dir} already holds this run ({what}), e.g. its config.json re-fed with --config; "
            f"add --resume {run_dir} to continue it, or --overwrite to start it over (the old run is moved aside, not deleted)"
        )
    raise RunDirError(
        f"--out {run_dir} holds another run ({what}); add --resume {run_dir} to continue it, "
        "--overwrite to move it aside and start a new one, or choose another --out"
    )


_HELD: "weakref.WeakValueDictionary[tuple[int, int], RunDirLock]" = weakref.WeakValueDictionary()
"""The run directories this process holds, by (device, inode)."""


class RunDirLock:
    """An exclusive, non-blocking ``fcntl.flock`` on a run directory, held until :meth:`release`
    (or until the process ends: the kernel drops it with the descriptor).

    The lock is taken on the directory itself (no lock file is left in it). A directory renamed
    away while we waited (``--overwrite`` moving an old run aside) is not the one at ``run_dir``
    any more: the lock is retaken on the directory now there. It keeps other processes out; a
    later run in this same process (a sweep retrying a trial whose run failed before releasing
    it) takes it over.

    Attributes:
        run_dir: the locked directory.
    """

    def __init__(self, run_dir: Path, fd: int):
        self.run_dir, self._fd = run_dir, fd
        self._finalizer = weakref.finalize(self, os.close, fd)

    @classmethod
    def acquire(cls, run_dir: Path, what: str = "--out", *, shared: bool = False) -> "RunDirLock":
        """Create ``run_dir`` if needed and lock it: exclusively (a run), or ``shared`` (a sweep:
        the processes of one study hold it together, and exclude a run).

        Raises:
            RunDirError: another process holds a lock that excludes this one (one line naming the
                directory and, where ``/proc/locks`` tells it, that process: a pawn sweep when it
                holds a shared lock), or the directory cannot be created/opened.
        """
        run_dir = Path(run_dir)
        for _ in range(100):
            try:
                run_dir.mkdir(parents=True, exist_ok=True)
                fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
            except OSError as e:
                raise RunDirError(f"{what} {run_dir}: cannot create or open the run directory ({e.strerror or e})") from None
            st = os.fstat(fd)
            earlier = _HELD.get((st.st_dev, st.st_ino))
            if earlier is not None:  # this process's own earlier run there, which failed before release()
                earlier.release()
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            except OSError as e:
                who = _holder_phrase(fd)
                os.close(fd)
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise RunDirError(f"{what} {run_dir}: cannot lock the run directory ({e.strerror or e})") from None
                raise RunDirError(f"{what} {run_dir}: {who} is writing this run directory now; wait for it to end, "
                                  "or choose another --out") from None
            try:
                same = os.stat(run_dir).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                lock = cls(run_dir, fd)
                _HELD[(st.st_dev, st.st_ino)] = lock
                return lock
            os.close(fd)  # renamed away under us: lock the directory that is there now
        raise RunDirError(f"{what} {run_dir}: the directory keeps being replaced; cannot lock it")

    @property
    def held(self) -> bool:
        """Whether the lock is still held by this object."""
        return self._finalizer.alive

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        self._finalizer()


def _writer_now(run_dir: Path) -> Optional[str]:
    """``"another pawn process (pid N)"`` when another process holds the run directory's lock
    (:class:`RunDirLock`) at this moment, else None (no holder, this process's own lock, or the
    directory cannot be opened). The probe lock is dropped at once."""
    try:
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) in _HELD:  # this process's own run
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            return _holder_phrase(fd) if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES) else None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def writer_now(run_dir: Path) -> Optional[str]:
    """``"another pawn process (pid N)"`` when another process is writing the run directory
    ``run_dir`` now (holds its :class:`RunDirLock`), else None (also when there is no such
    directory): the check every refusal of a live ``--out`` makes before any work."""
    return _writer_now(Path(run_dir)) if Path(run_dir).is_dir() else None


def _holder_phrase(fd: int) -> str:
    """``"another pawn process (pid N)"`` for the holder of the lock on ``fd``'s directory (the pid
    when ``/proc/locks`` tells it), ``"a pawn sweep (pid N)"`` when it holds a shared lock
    (:func:`open_sweep_dir`), as the refusals name it."""
    holder, mode = _lock_holder(fd)
    who = "a pawn sweep" if mode == "READ" else "another pawn process"
    return f"{who} (pid {holder})" if holder else who


def _lock_holder(fd: int) -> tuple[Optional[int], Optional[str]]:
    """The pid holding a ``flock`` on the file of ``fd`` and its mode (``READ``: shared, ``WRITE``:
    exclusive), from ``/proc/locks`` (Linux), else ``(None, None)``."""
    try:
        st = os.fstat(fd)
        dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        with open("/proc/locks") as f:
            for line in f:
                parts = line.split()
                if "->" in parts:  # a waiter, not the holder
                    continue
                if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == dev:
                    pid = int(parts[4])
                    return (pid if pid > 0 else None), parts[3]
    except (OSError, ValueError):
        pass
    return None, None


def check_sweep_dir(out: Path) -> None:
    """A sweep may use ``out``: it holds no run (:func:`run_markers`) and is not the ``<study>/``
    folder of another sweep's trials (``trial_NNNN`` runs directly in it; a sweep writes them one
    level down, in ``out/<study>/``); one study, the sweep's own or one it continues, is fine.

    Raises:
        RunDirError: ``out`` holds a run (one line naming it, its newest checkpoint and, when it is
            being written now, the process writing it), or another sweep's trials.
    """
    markers = run_markers(out)
    if not markers:
        if "trial_*" in sweep_markers(out):
            raise RunDirError(f"--out {out} holds the trials (trial_*) of the sweep in {out.parent}; a sweep needs a "
                              "directory of its own: choose another --out (or give that sweep's --out to continue it)")
        return
    step = _newest_step(out)
    what = f"checkpoints up to step {step}" if step is not None else ", ".join(markers)
    writer = _writer_now(out)
    now = f"; {writer} is writing it now" if writer is not None else ""
    raise RunDirError(f"--out {out} holds a run ({what}){now}; a sweep needs a directory of its own: choose another --out")


def open_sweep_dir(out: Path) -> RunDirLock:
    """Create the sweep's ``out`` if needed and hold a shared lock on it for the sweep
    (:meth:`RunDirLock.acquire` with ``shared``), then check under the lock that it holds no run
    (:func:`check_sweep_dir`). Release the lock when the sweep ends (or let the process end).

    Raises:
        RunDirError: a run holds or is writing ``out`` (one line naming it or its process).
    """
    out = Path(out)
    check_sweep_dir(out)  # before creating anything
    lock = RunDirLock.acquire(out, shared=True)
    try:
        check_sweep_dir(out)
    except RunDirError:
        lock.release()
        raise
    return lock
