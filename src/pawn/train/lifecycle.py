"""Run lifecycle: signals, checkpoint rotation and lookup, ``schedule_health.json``
(spec ``training-and-adapters.md`` §1.9–1.10)."""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from pawn.checkpoint import MANIFEST, write_json
from pawn.schedules import SHOULD_REACH_ZERO, Schedule

STEP_DIR = re.compile(r"^step_(\d{8,})$")
"""Checkpoint directory names: ``step_`` and the step, zero-padded to at least 8 digits (steps
≥ 10^8 simply have more digits); always compared as numbers, never as strings."""
BEST_DIR = "best"
"""``checkpoints/best``: the best-validation checkpoint, which rotation never deletes."""


def step_dir_name(step: int) -> str:
    """``step_<step zero-padded to 8 digits>`` (more digits from step 10^8 on)."""
    return f"step_{step:08d}"


def step_checkpoints(checkpoints_dir: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``step_N`` directory, complete or not, oldest first (numeric
    order). Half-written ``.tmp``/``.bak`` siblings and ``best`` are not included."""
    if not checkpoints_dir.is_dir():
        return []
    out = []
    for p in checkpoints_dir.iterdir():
        m = STEP_DIR.match(p.name)
        if m and p.is_dir():
            out.append((int(m.group(1)), p))
    return sorted(out)


def complete_checkpoints(checkpoints_dir: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every checkpoint directory with a manifest, oldest first (numeric
    order). Half-written ``.tmp``/``.bak`` siblings and ``best`` are ignored."""
    return [(s, p) for s, p in step_checkpoints(checkpoints_dir) if (p / MANIFEST).is_file()]


def rotate_checkpoints(checkpoints_dir: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` complete step checkpoints (``keep = 0`` keeps all) and
    stale ``.tmp`` staging directories. ``checkpoints/best`` is never touched. Returns the
    removed paths."""
    removed = []
    for p in checkpoints_dir.glob("step_*.tmp"):
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    if keep > 0:
        for _, p in complete_checkpoints(checkpoints_dir)[:-keep]:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def resume_candidates(spec: str, run_dir: Optional[Path]) -> tuple[list[Path], bool]:
    """Resolve ``--resume`` to the checkpoints to try, newest first, and whether falling back
    to an older one is allowed.

    ``spec`` is a checkpoint directory (one candidate, no fallback: the user named it), a run
    directory or its ``checkpoints`` folder, or ``auto`` (the run directory ``run_dir``): every
    ``step_N`` directory there, newest first, with fallback. Directories without a manifest are
    included so that the caller can report them. ``([], True)`` for ``auto`` with none yet.

    Raises:
        FileNotFoundError: the path does not exist, or a named run directory has no checkpoint.
    """
    if spec == "auto":
        if run_dir is None:
            raise FileNotFoundError("--resume auto needs --out (the run directory to look in)")
        return [p for _, p in reversed(step_checkpoints(run_dir / "checkpoints"))], True
    p = Path(spec)
    if (p / MANIFEST).is_file() or (STEP_DIR.match(p.name) and p.is_dir()) or p.name == BEST_DIR:
        return [p], False
    if not p.exists():
        raise FileNotFoundError(f"--resume {spec}: no such checkpoint or run directory")
    found = step_checkpoints(p / "checkpoints") or step_checkpoints(p)
    if not found:
        raise FileNotFoundError(f"--resume {spec}: no checkpoint in it")
    return [q for _, q in reversed(found)], True


def find_resume_checkpoint(spec: str, run_dir: Optional[Path]) -> Optional[Path]:
    """The newest *complete* checkpoint ``--resume spec`` designates (see
    :func:`resume_candidates`; its hashes are not checked here); None for ``auto`` with none.

    Raises:
        FileNotFoundError: the path does not exist or holds no complete checkpoint.
    """
    found, _ = resume_candidates(spec, run_dir)
    complete = [p for p in found if (p / MANIFEST).is_file()]
    if not complete:
        if spec == "auto" and not found:
            return None
        raise FileNotFoundError(f"--resume {spec}: no complete checkpoint in it")
    return complete[0]


def write_schedule_health(path: Path, schedule: Schedule, actual_steps: int, reason: str) -> dict:
    """Write ``schedule_health.json`` (spec §1.10) atomically and return it.

    ``should_reach_zero`` is the spec's per-schedule flag (True for cosine, whose pretraining
    floor is 0.1 × peak); ``decays_to_ratio`` says where the planned schedule really ends,
    ``f(T)`` as a fraction of the peak (cosine: ``min_lr_ratio``; wsd, infinite: 0; constant: 1;
    one_cycle: its 1e-4 floor), so the file does not read as a schedule meant to reach 0."""
    planned = schedule.total_steps
    health = {
        "format_version": 1,
        "schedule": schedule.name,
        "should_reach_zero": SHOULD_REACH_ZERO[schedule.name],
        "decays_to_ratio": float(f"{float(schedule.factor(planned)):.6g}"),
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


BURST_WINDOW_S = 2.0
"""Seconds after a first stop signal within which more signals are copies of it, not a second
request: ``timeout -s INT``, ``kill -INT -PGID`` and some job schedulers signal the process and
its whole process group, so one request arrives twice within microseconds."""


class StopFlag:
    """SIGTERM/SIGINT set a flag that the loop checks between chunks; a later, second SIGINT
    stops at once.

    The first signal is acknowledged immediately on stderr ("stopping after this chunk; Ctrl-C
    again to stop now without a checkpoint"), even while the main thread waits inside a compiled
    chunk: a watcher thread reads the signal numbers from :func:`signal.set_wakeup_fd`, which the
    interpreter writes at once, whereas Python-level handlers only run once the main thread is
    back in Python. The watcher also times them: signals within ``burst_window_s`` seconds of
    the first (:data:`BURST_WINDOW_S`) are one request delivered twice (``timeout``, a
    process-group kill) and change nothing. A SIGINT after that window is a deliberate second
    Ctrl-C: it raises KeyboardInterrupt in the main thread; if the main thread is still inside
    XLA after ``hard_stop_after_s`` seconds, the watcher ends the process with exit code 130 (the
    last complete checkpoint stays loadable; checkpoints are written atomically). Restores the
    previous handlers on :meth:`restore`.

    Attributes:
        requested: the name of the first signal received (``"SIGINT"``, ``"SIGTERM"``), or None.
        signal_t: :func:`time.monotonic` seconds when it arrived (None before).
    """

    FIRST_SIGINT = "stopping after this chunk (a checkpoint is written); Ctrl-C again to stop now without a checkpoint"
    FIRST_SIGTERM = "SIGTERM: stopping after this chunk (a checkpoint is written)"
    BURST = ("{name} again {dt:.2f} s after the first: taken as the same request (a signal sent to the process and its "
             "group arrives twice); still stopping after this chunk with a checkpoint")
    SECOND_SIGINT = "second Ctrl-C: stopping now without a checkpoint (the last complete checkpoint is kept)"

    def __init__(self, install: bool = True, hard_stop_after_s: float = 2.0, burst_window_s: float = BURST_WINDOW_S):
        self.requested: Optional[str] = None
        self.signal_t: Optional[float] = None
        self._previous = {}
        self._wakeup = None
        self._hard_stop_after_s = hard_stop_after_s
        self._window = burst_window_s
        self._lock = threading.Lock()
        self._second = False  # a deliberate second SIGINT was received
        self._raised = False  # ... and turned into KeyboardInterrupt already
        self._burst_said = False
        if install:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    self._previous[sig] = signal.signal(sig, self._handle)
                except ValueError:  # not the main thread
                    pass
            if self._previous:
                self._start_watcher()

    def _classify(self, signum: int, now: float) -> str:
        """``"first"``, ``"burst"`` (within the window of the first), ``"second"`` (a SIGINT
        after it) or ``"again"`` (another SIGTERM after it); records the first and the second."""
        with self._lock:
            if self.signal_t is None:
                self.signal_t, self.requested = now, signal.Signals(signum).name
                return "first"
            if now - self.signal_t < self._window:
                return "burst"
            if signum == signal.SIGINT and not self._second:
                self._second = True
                return "second"
            return "again"

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

    def _say(self, msg: str) -> None:
        try:
            os.write(sys.stderr.fileno(), (msg + "\n").encode())
        except (OSError, ValueError, AttributeError):
            pass

    def _watch(self, fd: int) -> None:
        import _thread

        while True:
            try:
                data = os.read(fd, 64)
            except OSError:
                return
            if not data or 0 in data:  # EOF, or restore()'s wake-up byte (no signal is number 0)
                os.close(fd)
                return
            now = time.monotonic()
            for signum in data:
                if signum not in (signal.SIGINT, signal.SIGTERM):
                    continue
                kind = self._classify(signum, now)
                if kind == "first":
                    self._say(self.FIRST_SIGINT if signum == signal.SIGINT else self.FIRST_SIGTERM)
                elif kind == "burst" and not self._burst_said:
                    self._burst_said = True
                    self._say(self.BURST.format(name=signal.Signals(signum).name, dt=now - self.signal_t))
                elif kind == "second":
                    self._say(self.SECOND_SIGINT)
                    timer = threading.Timer(self._hard_stop_after_s, self._hard_exit)
                    timer.daemon = True
                    timer.start()
                    self._timer = timer
                    _thread.interrupt_main(signal.SIGINT)  # the handler raises KeyboardInterrupt now

    _timer = None
    before_hard_exit: Optional[Callable[[], None]] = None
    """Called (from the watcher's timer) just before the hard exit of a second Ctrl-C that found
    the main thread inside a compiled chunk: the run spine sets it to write the ``end`` record
    (:func:`pawn.train.spine.run_loop`), so the run reads as stopped by the user."""

    def _hard_exit(self) -> None:
        """End the process with exit code 130 after :attr:`before_hard_exit` (its failure is ignored)."""
        try:
            if self.before_hard_exit is not None:
                self.before_hard_exit()
        except BaseException:  # noqa: BLE001 - exiting regardless
            pass
        os._exit(130)

    def _handle(self, signum, frame):
        if self._wakeup is None:  # no watcher (it times and counts the signals): do it here
            self._classify(signum, time.monotonic())
        elif self.requested is None:  # the watcher has not read it yet (it times it)
            with self._lock:
                if self.requested is None:
                    self.requested = signal.Signals(signum).name
        if signum == signal.SIGINT and self._second and not self._raised:
            self._raised = True
            raise KeyboardInterrupt

    def announce(self, text: str) -> None:
        """Write one line to stderr at once (as the signal acknowledgements are)."""
        self._say(text)

    def since_signal_s(self) -> Optional[float]:
        """Seconds since the first signal (None before any)."""
        return None if self.signal_t is None else time.monotonic() - self.signal_t

    def restore(self) -> None:
        """Reinstall the signal handlers that were active before this flag (idempotent); within
        ``burst_window_s`` of a first signal, only once the window has passed (at most that long
        a wait), so a late copy of it is still one request."""
        if self._timer is not None:
            self._timer.cancel()
        left = 0.0 if self.signal_t is None else self._window - (time.monotonic() - self.signal_t)
        if left > 0 and self._previous and not self._second:
            # a burst copy can arrive after a quick stop has ended (its checkpoint written): within
            # the window it is still the same request, so this flag takes it, not the previous handler
            time.sleep(left)
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


ES_METRICS = ("loss", "late_legal_move_rate", "game_completion_rate", "avg_plies_completed")
"""The validation metrics of the compound improvement rule (spec §1.8); loss improves downward,
the others upward. These are the names :class:`EarlyStopping` stores them under
(``training_state.json``'s ``early_stopping.best``); it reads them from a val record under
their canonical :mod:`pawn.metrics` keys (:data:`ES_KEYS`)."""


def _es_keys() -> dict[str, str]:
    from pawn.metrics import V1_NAMES

    return {name: V1_NAMES.get(name, name) for name in ES_METRICS}


ES_KEYS: dict[str, str] = _es_keys()
""":data:`ES_METRICS` name → the canonical :mod:`pawn.metrics` key of the val record
(``late_legal_move_rate`` → ``late_legal_rate``, ``game_completion_rate`` → ``completion_rate``)."""


@dataclass
class EarlyStopping:
    """Best validation values, the patience counter and the best-val-loss step (spec §1.8).

    An evaluation is an improvement if **any** of: val loss strictly below its best, late legal
    rate, game completion rate or average plies completed strictly above theirs (each metric keeps
    its own best). Otherwise ``counter += 1``; with ``patience`` set the run stops once
    ``counter ≥ patience``. A missing or NaN metric never improves. The best-val-loss step names
    the checkpoint kept as ``checkpoints/best`` (the published weights are the best-val-loss
    checkpoint, spec §7.1), whether or not patience is set.

    Attributes:
        patience: evaluations without improvement before stopping; None = never stop.
        best: ``{metric: best value}`` for :data:`ES_METRICS` (absent until first seen).
        counter: evaluations in a row without improvement.
        best_loss_step: step of the lowest val loss so far (None before the first evaluation).
    """

    patience: Optional[int] = None
    best: dict[str, float] = field(default_factory=dict)
    counter: int = 0
    best_loss_step: Optional[int] = None

    def update(self, step: int, metrics: dict[str, Optional[float]]) -> tuple[bool, bool]:
        """Apply one evaluation: ``metrics`` is a val record, read under the canonical keys
        (:data:`ES_KEYS`; the stored names of :data:`ES_METRICS` are accepted too). Returns
        ``(improved, new_best_loss)``."""
        improved = new_best_loss = False
        for name in ES_METRICS:
            v = metrics.get(ES_KEYS[name], metrics.get(name))
            if v is None or not math.isfinite(float(v)):
                continue
            v = float(v)
            old = self.best.get(name)
            better = old is None or (v < old if name == "loss" else v > old)
            if better:
                self.best[name] = v
                improved = True
                if name == "loss":
                    new_best_loss = True
                    self.best_loss_step = int(step)
        self.counter = 0 if improved else self.counter + 1
        return improved, new_best_loss

    @property
    def exhausted(self) -> bool:
        """True when patience is set and the counter has reached it."""
        return self.patience is not None and self.counter >= self.patience

    def to_json(self) -> dict:
        """The state for ``training_state.json`` (``early_stopping``)."""
        return {"patience": self.patience, "patience_counter": self.counter, "best": dict(self.best),
                "best_loss_step": self.best_loss_step}

    @classmethod
    def from_json(cls, data: Optional[dict], patience: Optional[int]) -> "EarlyStopping":
        """Restore from :meth:`to_json` output (None → fresh), with this run's ``patience``.

        Raises:
            ValueError: a malformed record (named field).
        """
        if not data:
            return cls(patience)
        try:
            best = {k: float(v) for k, v in dict(data.get("best") or {}).items() if k in ES_METRICS and v is not None}
            counter = int(data.get("patience_counter", 0))
            step = data.get("best_loss_step")
            step = None if step is None else int(step)
        except (TypeError, ValueError) as e:
            raise ValueError(f"early_stopping record is malformed ({e})") from None
        if counter < 0:
            raise ValueError(f"early_stopping.patience_counter is negative ({counter})")
        return cls(patience, best, counter, step)
