"""Progress for long commands that works both in a terminal and in a log file.

In a terminal a rich bar redraws in place. When the output is not a terminal (``nohup``, Slurm,
``| tee``, a pipe) a bar would print once, at exit; instead :class:`ProgressReporter` writes one
plain line every ``every_s`` seconds, also while one long unit of work (a compiled chunk) runs,
and for the first and the last update::

    pretrain: step 120/300 (40.0%) loss 3.2104, 1,547 tok/s, elapsed 0:01:02, ETA 0:01:33

The interval comes from the caller (``pawn pretrain --log-every-s``), else the
``PAWN_LOG_EVERY_S`` environment variable, else :data:`DEFAULT_EVERY_S`.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable, Optional, TextIO

DEFAULT_EVERY_S = 30.0
"""Seconds between plain progress lines when neither the caller nor ``PAWN_LOG_EVERY_S`` sets it."""


def log_every_s(value: Optional[float] = None) -> float:
    """The plain-line interval in seconds: ``value``, else ``$PAWN_LOG_EVERY_S``, else
    :data:`DEFAULT_EVERY_S`.

    Raises:
        ValueError: a negative interval, or ``PAWN_LOG_EVERY_S`` that is not a number (one line
            naming the variable).
    """
    if value is None:
        env = os.environ.get("PAWN_LOG_EVERY_S")
        if env is None or not env.strip():
            return DEFAULT_EVERY_S
        try:
            value = float(env)
        except ValueError:
            raise ValueError(f"PAWN_LOG_EVERY_S must be a number of seconds, got {env!r}") from None
    if not value >= 0:
        raise ValueError(f"the progress interval must be ≥ 0 seconds, got {value}")
    return float(value)


def is_terminal(stream: TextIO) -> bool:
    """True if ``stream`` is an interactive terminal (rich's view, which honours
    ``FORCE_COLOR``/``TERM=dumb`` and Jupyter)."""
    from rich.console import Console

    return Console(file=stream).is_terminal


def counted(n: int, noun: str, plural: Optional[str] = None) -> str:
    """``n`` and the noun that agrees with it: ``1 epoch``, ``2 epochs``, ``1,024 steps``
    (``plural`` for an irregular one; default ``noun + "s"``)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def format_duration(seconds: Optional[float]) -> str:
    """``H:MM:SS`` (``?`` for None or a non-finite value)."""
    if seconds is None or seconds != seconds or seconds in (float("inf"), float("-inf")):
        return "?"
    s = int(round(max(0.0, seconds)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class ProgressReporter:
    """A progress display over ``total`` units (steps, games, sections).

    Use as a context manager or call :meth:`start` / :meth:`stop`; call :meth:`update` with the
    units completed so far and display fields (strings or numbers, shown as ``name value``).

    Args:
        label: what runs (``"pretrain"``), the start of every plain line.
        total: units to complete. start: units already done (a resumed run).
        unit: the unit's name in plain lines (``"step"``).
        fields: display fields in order, with their initial text.
        every_s: seconds between plain lines (see :func:`log_every_s`).
        stream: where to write (default ``sys.stdout``).
        plain: force plain lines (True) or the rich bar (False); default: plain unless
            ``stream`` is a terminal.
        clock: time source in seconds (tests inject a fake one).
        expected_unit_s: seconds per unit the caller expects before anything is measured (a
            run's plan), which gives the ETA until the first timed update.
        stop_at: where this command stops short of ``total`` (``--pause-after-steps``): the ETA
            counts to it, the lines say ``step 1/20 (5.0%, pause at 2)`` and, once there,
            ``step 2/20 (paused)``; None: it runs to ``total``.

    The ETA is extrapolated from the rate since the first update, so compile time (which the
    first update absorbs) does not inflate it; before a second update, from the seconds per unit
    the caller measured for the first timed piece of work (``update(unit_s=…)``), and before any,
    from ``expected_unit_s``. The terminal bar shows this same ETA (:meth:`eta_s`), counting down
    between updates; rich's own estimate (units over its last 30 s) has no figure while each
    update (a compiled chunk) takes longer than that.
    """

    def __init__(
        self,
        label: str,
        total: int,
        *,
        start: int = 0,
        unit: str = "step",
        fields: Optional[dict[str, str]] = None,
        every_s: Optional[float] = None,
        stream: Optional[TextIO] = None,
        plain: Optional[bool] = None,
        clock: Callable[[], float] = time.monotonic,
        expected_unit_s: Optional[float] = None,
        stop_at: Optional[int] = None,
    ):
        self.label, self.total, self.unit = label, int(total), unit
        self.stop_at = int(stop_at) if stop_at is not None and int(stop_at) < self.total else None
        self.end = self.stop_at if self.stop_at is not None else self.total
        """Where the updates end: :attr:`stop_at`, else :attr:`total`."""
        self._expected_unit_s = expected_unit_s if expected_unit_s and expected_unit_s > 0 else None
        self.completed = int(start)
        self.fields: dict[str, Any] = dict(fields or {})
        self.every_s = log_every_s(every_s)
        self.stream = stream if stream is not None else sys.stdout
        self.plain = (not is_terminal(self.stream)) if plain is None else plain
        self._clock = clock
        self._t0 = self._first_t = self._last_line_t = None
        self._first_done: Optional[int] = None
        self._bar = self._task = None
        self._chunk: Optional[int] = None  # units the latest update covered: the size of the chunk now running
        self.lines_written = 0
        self._lock = threading.Lock()
        self._stop_ticker = threading.Event()
        self._ticker: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "ProgressReporter":
        """Begin timing (and draw the bar in a terminal)."""
        self._t0 = self._clock()
        if not self.plain:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            cols = [TextColumn(f"{self.unit} {{task.completed:>7}}/{{task.total}}"), BarColumn()]
            cols += [TextColumn("{task.fields[f%d]} %s" % (i, name) if name.endswith("/s") else f"{name} " + "{task.fields[f%d]}" % i)
                     for i, name in enumerate(self.fields)]
            cols += [TimeElapsedColumn(), _EtaColumn(self)]
            self._bar = Progress(*cols, console=Console(file=self.stream))
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=self.total, completed=self.completed,
                                            **{f"f{i}": str(v) for i, v in enumerate(self.fields.values())})
            if self._clock is time.monotonic:  # the bar moves within a chunk (see in_flight)
                self._ticker = threading.Thread(target=self._tick_bar, name="pawn-progress", daemon=True)
                self._ticker.start()
        elif self.every_s > 0 and self._clock is time.monotonic:
            # Updates come once per unit of work (a compiled chunk can take minutes): a ticker keeps
            # the log's lines every ``every_s`` seconds in between, with the latest figures.
            self._ticker = threading.Thread(target=self._tick, name="pawn-progress", daemon=True)
            self._ticker.start()
        return self

    def _tick_bar(self) -> None:
        while not self._stop_ticker.wait(0.5):
            self.tick_bar()

    def tick_bar(self, now: Optional[float] = None) -> None:
        """Move the terminal bar to :meth:`in_flight` (called twice a second between updates)."""
        with self._lock:
            bar, task = self._bar, self._task
            if bar is not None and task is not None:
                bar.update(task, completed=self.in_flight(now))

    def _tick(self) -> None:
        while not self._stop_ticker.wait(self.every_s):
            now = self._clock()
            with self._lock:
                last = self._last_line_t if self._last_line_t is not None else self._t0
                if now - last >= self.every_s:
                    self._write_line(now)

    def stop(self) -> None:
        """Remove the bar, or write a last plain line if the last update was not written."""
        self._stop_ticker.set()
        if self._ticker is not None:
            self._ticker.join(timeout=1.0)
            self._ticker = None
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self.plain and self._first_done is not None and self._last_line_t is not None and self._pending:
            self._write_line(self._clock())

    def __enter__(self) -> "ProgressReporter":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ updates
    def update(self, completed: int, *, unit_s: Optional[float] = None, **fields: Any) -> None:
        """Record progress: ``completed`` units done in all, and new display field values.
        ``unit_s``: seconds per unit the caller measured for this update's work alone (a timed
        chunk), which gives the ETA until two updates give a rate of their own."""
        if self._t0 is None:
            self.start()
        now = self._clock()
        with self._lock:  # one consistent state for tick_bar's estimate (another thread)
            if unit_s is not None and unit_s > 0:
                self._unit_s = float(unit_s)
            before = self.completed
            self.completed = int(completed)
            if self.completed > before:
                self._chunk = self.completed - before
            self.fields.update(fields)
            self._last_update_t = now
            if self._first_done is None:
                self._first_done, self._first_t = self.completed, now
            if self._bar is not None:
                self._bar.update(self._task, completed=self.completed,
                                 **{f"f{i}": str(v) for i, v in enumerate(self.fields.values())})
                return
        with self._lock:
            self._pending = True
            due = self._last_line_t is None or now - self._last_line_t >= self.every_s or self.completed >= self.end
            if due:
                self._write_line(now)

    def note(self, text: str) -> None:
        """Print one line now (a validation result): above the bar in a terminal, as its own
        line between the progress lines in a log."""
        if self._bar is not None:
            self._bar.console.print(text, highlight=False, markup=False)
            return
        with self._lock:
            print(text, file=self.stream, flush=True)

    def unit_s(self) -> Optional[float]:
        """Seconds per unit: measured from the first to the latest update; before two updates,
        the caller's timed figure for the first chunk (``update(unit_s=…)``), else its
        expectation (``expected_unit_s``); None when there is none."""
        last = self._last_update_t
        if (self._first_done is not None and last is not None and self.completed > self._first_done
                and last > self._first_t):
            return (last - self._first_t) / (self.completed - self._first_done)
        return self._unit_s if self._unit_s is not None else self._expected_unit_s

    def eta_s(self, now: Optional[float] = None) -> Optional[float]:
        """Seconds left at :meth:`unit_s`, less the time since the latest update (so lines written
        between updates count down instead of treating the wait as a slowdown), but never below
        the time of the units after the chunk now running (the latest update's size): a chunk
        that runs late no longer shows ``ETA 0:00:00`` while work remains. None before a rate
        exists, and while the last chunk runs past its expected end (its end is unknown)."""
        now = self._clock() if now is None else now
        if self._first_done is None and self._expected_unit_s is not None and self._t0 is not None:
            # nothing measured yet: the caller's expectation, counting down from the start
            return max(0.0, max(0, self.end - self.completed) * self._expected_unit_s - (now - self._t0))
        unit_s = self.unit_s()
        if unit_s is None or self._first_done is None:
            return None
        last = self._last_update_t if self._last_update_t is not None else now
        left = max(0, self.end - self.completed)
        countdown = left * unit_s - (now - last)
        after_chunk = max(0, left - (self._chunk or 0)) * unit_s
        if countdown > after_chunk or left == 0:
            return max(0.0, countdown)
        return after_chunk if after_chunk > 0 else None

    def in_flight(self, now: Optional[float] = None) -> int:
        """Units done by now if the chunk in flight (the size of the latest update) runs at
        :meth:`unit_s`: the last update's count plus the units its time since allows, at most
        one short of that chunk's end (only an update says a chunk finished)."""
        now = self._clock() if now is None else now
        unit_s, last = self.unit_s(), self._last_update_t
        if unit_s is None or unit_s <= 0 or last is None or not self._chunk or self.completed >= self.end:
            return self.completed
        ahead = min(self._chunk, self.end - self.completed) - 1
        return self.completed + max(0, min(ahead, int((now - last) / unit_s)))

    def line(self, now: Optional[float] = None) -> str:
        """The plain progress line for the current state."""
        now = self._clock() if now is None else now
        pct = 100.0 * self.completed / self.total if self.total else 100.0
        est = self.in_flight(now)
        by_now = f"; ≈{est} by now" if est > self.completed else ""
        if self.stop_at is None:
            state = f"{pct:.1f}%{by_now}"
        else:
            state = "paused" if self.completed >= self.stop_at else f"{pct:.1f}%, pause at {self.stop_at}{by_now}"
        parts = [f"{self.label}: {self.unit} {self.completed}/{self.total} ({state})"]
        if self._last_update_t is None and self.completed < self.end:
            # nothing has finished yet: the first chunk is compiling or running (no "loss -, - tok/s")
            parts.append(f"compiling and running the first steps, elapsed {format_duration(now - self._t0)}")
            return " ".join(parts)
        shown = [f"{v} {k}" if k.endswith("/s") else f"{k} {v}" for k, v in self.fields.items()]
        parts.append(", ".join(shown + [f"elapsed {format_duration(now - self._t0)}", f"ETA {format_duration(self.eta_s(now))}"]))
        return " ".join(parts)

    def _write_line(self, now: float) -> None:
        print(self.line(now), file=self.stream, flush=True)
        self._last_line_t = now
        self._pending = False
        self.lines_written += 1

    _pending = False
    _last_update_t: Optional[float] = None
    _unit_s: Optional[float] = None


def _EtaColumn(reporter: ProgressReporter):
    """A rich column showing ``ETA H:MM:SS`` from ``reporter.eta_s()`` (``ETA ?`` before a rate)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class EtaColumn(ProgressColumn):
        def render(self, task) -> Text:
            return Text(f"ETA {format_duration(reporter.eta_s())}", style="progress.remaining")

    return EtaColumn()


class Heartbeat:
    """For work without a step counter (a bench section, an evaluation pass): when the output is
    not a terminal, a background thread writes ``<label>: still running, <status>, elapsed
    H:MM:SS`` every ``every_s`` seconds, so a log file shows the job is alive. In a terminal (or
    with ``every_s`` = 0) it writes nothing.

    Set :attr:`status` to say what runs now (e.g. ``"concurrency (roughly 0:02:00)"``).
    Use as a context manager, or :meth:`start` / :meth:`stop` (idempotent).
    """

    def __init__(self, label: str, *, every_s: Optional[float] = None, stream: Optional[TextIO] = None,
                 plain: Optional[bool] = None, clock: Callable[[], float] = time.monotonic):
        self.label, self.status = label, ""
        self.every_s = log_every_s(every_s)
        self.stream = stream if stream is not None else sys.stdout
        self.enabled = ((not is_terminal(self.stream)) if plain is None else plain) and self.every_s > 0
        self._clock = clock
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._t0 = clock()

    def line(self) -> str:
        """The heartbeat line for now."""
        status = f", {self.status}" if self.status else ""
        return f"{self.label}: still running{status}, elapsed {format_duration(self._clock() - self._t0)}"

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                print(self.line(), file=self.stream, flush=True)
            except (OSError, ValueError):  # the stream was closed under us
                return

    def start(self) -> "Heartbeat":
        """Start the thread (when enabled)."""
        self._t0 = self._clock()
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pawn-heartbeat", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "Heartbeat":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


LOG_WIDTH = 200
"""Columns of tables written to a file or pipe: rich assumes 80 there, which cut the figures of
wide tables (``pawn bench --only memory``) to ``244…``."""


def output_console(stderr: bool = False):
    """A rich ``Console`` for tables and messages: as usual in a terminal; :data:`LOG_WIDTH`
    columns (unless ``COLUMNS`` is set) when the output is a file or a pipe."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, width=LOG_WIDTH)
    return console
