"""Run lifecycle: signals, checkpoint rotation and lookup, ``schedule_health.json``
(spec ``training-and-adapters.md`` §1.9–1.10)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Optional

from pawn.checkpoint import MANIFEST, write_json
from pawn.train.schedules import SHOULD_REACH_ZERO, Schedule

STEP_DIR = re.compile(r"^step_(\d{8})$")
STOP_REASONS = ("completed", "step_limit", "patience", "paused", "sigterm", "resume_no_op", "loader_exhausted", "exception")


def step_dir_name(step: int) -> str:
    """``step_<8-digit step>``."""
    return f"step_{step:08d}"


def complete_checkpoints(checkpoints_dir: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every checkpoint directory with a manifest, oldest first. Half-written
    ``.tmp``/``.bak`` siblings are ignored."""
    if not checkpoints_dir.is_dir():
        return []
    out = []
    for p in checkpoints_dir.iterdir():
        m = STEP_DIR.match(p.name)
        if m and p.is_dir() and (p / MANIFEST).is_file():
            out.append((int(m.group(1)), p))
    return sorted(out)


def rotate_checkpoints(checkpoints_dir: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` complete checkpoints (``keep = 0`` keeps all) and stale
    ``.tmp`` staging directories. Returns the removed paths."""
    removed = []
    for p in checkpoints_dir.glob("step_*.tmp"):
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    if keep > 0:
        for _, p in complete_checkpoints(checkpoints_dir)[:-keep]:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def find_resume_checkpoint(spec: str, run_dir: Optional[Path]) -> Optional[Path]:
    """Resolve ``--resume``: a checkpoint directory (has ``.complete``), a run directory (its
    newest complete checkpoint) or ``auto`` (the newest in ``run_dir``; None when there is none).

    Raises:
        FileNotFoundError: the path does not exist or holds no complete checkpoint.
    """
    if spec == "auto":
        if run_dir is None:
            raise FileNotFoundError("--resume auto needs --out (the run directory to look in)")
        found = complete_checkpoints(run_dir / "checkpoints")
        return found[-1][1] if found else None
    p = Path(spec)
    if (p / MANIFEST).is_file():
        return p
    if not p.exists():
        raise FileNotFoundError(f"--resume {spec}: no such checkpoint or run directory")
    found = complete_checkpoints(p / "checkpoints") or complete_checkpoints(p)
    if not found:
        raise FileNotFoundError(f"--resume {spec}: no complete checkpoint in it")
    return found[-1][1]


def write_schedule_health(path: Path, schedule: Schedule, actual_steps: int, reason: str) -> dict:
    """Write ``schedule_health.json`` (spec §1.10) atomically and return it."""
    planned = schedule.total_steps
    health = {
        "format_version": 1,
        "schedule": schedule.name,
        "should_reach_zero": SHOULD_REACH_ZERO[schedule.name],
        "planned_total_steps": planned,
        "actual_total_steps": int(actual_steps),
        "completion_ratio": (actual_steps / planned) if planned > 0 else 0.0,
        "lr_peak": schedule.peak,
        "actual_final_lr": schedule.value(max(actual_steps - 1, 0)),
        "reason_for_stop": reason,
    }
    tmp = path.with_name(path.name + ".tmp")
    write_json(tmp, health)
    tmp.replace(path)
    return health


class StopFlag:
    """SIGTERM/SIGINT set a flag that the loop checks between chunks; a second SIGINT stops at once.

    The first signal is acknowledged immediately on stderr ("stopping after this chunk; Ctrl-C
    again to stop now without a checkpoint"), even while the main thread waits inside a compiled
    chunk: a watcher thread reads the signal numbers from :func:`signal.set_wakeup_fd`, which the
    interpreter writes at once, whereas Python-level handlers only run once the main thread is
    back in Python. A second SIGINT raises KeyboardInterrupt in the main thread; if the main
    thread is still inside XLA after ``hard_stop_after_s`` seconds, the watcher ends the process
    with exit code 130 (the last complete checkpoint stays loadable; checkpoints are written
    atomically). Restores the previous handlers on :meth:`restore`.
    """

    FIRST_SIGINT = "stopping after this chunk (a checkpoint is written); Ctrl-C again to stop now without a checkpoint"
    FIRST_SIGTERM = "SIGTERM: stopping after this chunk (a checkpoint is written)"
    SECOND_SIGINT = "second Ctrl-C: stopping now without a checkpoint (the last complete checkpoint is kept)"

    def __init__(self, install: bool = True, hard_stop_after_s: float = 2.0):
        self.requested: Optional[str] = None
        self._previous = {}
        self._wakeup = None
        self._hard_stop_after_s = hard_stop_after_s
        if install:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    self._previous[sig] = signal.signal(sig, self._handle)
                except ValueError:  # not the main thread
                    pass
            if self._previous:
                self._start_watcher()

    def _start_watcher(self) -> None:
        r, w = os.pipe()
        os.set_blocking(w, False)
        try:
            old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except ValueError:  # not the main thread
            os.close(r)
            os.close(w)
            return
        self._wakeup = (w, old)
        threading.Thread(target=self._watch, args=(r,), name="pawn-signal-watcher", daemon=True).start()

    def _watch(self, fd: int) -> None:
        sigints = 0
        while True:
            try:
                data = os.read(fd, 64)
            except OSError:
                return
            if not data or 0 in data:  # EOF, or restore()'s wake-up byte (no signal is number 0)
                os.close(fd)
                return
            for signum in data:
                if signum == signal.SIGINT:
                    sigints += 1
                    msg = self.FIRST_SIGINT if sigints == 1 else self.SECOND_SIGINT
                    if sigints == 2:
                        timer = threading.Timer(self._hard_stop_after_s, lambda: os._exit(130))
                        timer.daemon = True
                        timer.start()
                        self._timer = timer
                elif signum == signal.SIGTERM:
                    msg = self.FIRST_SIGTERM
                else:
                    continue
                if sigints <= 2:
                    try:
                        os.write(sys.stderr.fileno(), (msg + "\n").encode())
                    except (OSError, ValueError, AttributeError):
                        pass

    _timer = None

    def _handle(self, signum, frame):
        if self.requested is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name

    def restore(self) -> None:
        """Reinstall the signal handlers that were active before this flag (idempotent)."""
        if self._timer is not None:
            self._timer.cancel()
        for sig, h in self._previous.items():
            signal.signal(sig, h)
        self._previous = {}
        if self._wakeup is not None:
            w, old = self._wakeup
            self._wakeup = None
            try:
                signal.set_wakeup_fd(old)
            except ValueError:
                pass
            try:
                os.write(w, b"\0")  # wakes the watcher, which closes the read end itself
            except OSError:
                pass
            os.close(w)
