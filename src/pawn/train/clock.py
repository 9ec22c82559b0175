"""The run's wall clock while it trains (:class:`WallClockHook`, a hook of the run spine): the
measured step time against the plan, checkpoints by the clock (``--checkpoint-every-minutes``)
and the Ctrl-C messages of :class:`~pawn.train.lifecycle.StopFlag` kept true (when the chunk
under way should end, how long its checkpoint takes, what a second Ctrl-C loses), from the setup
(:meth:`WallClockHook.setup_messages`) to the end.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from pawn.train.run import Hook
from pawn.train.walltime import format_span

if TYPE_CHECKING:
    from pawn.train.walltime import WallTimeEstimate


def _clock(t: float) -> str:
    return time.strftime("%H:%M", time.localtime(t))


class WallClockHook(Hook):
    """The :class:`~pawn.train.run.Hook` of the run's wall clock:

    - once timed chunks add up to 5 s (or three are done), one line with their measured time and
      the run's remaining time at that pace, against the plan's ``estimate``;
    - a checkpoint at the end of a chunk when the next chunk's end (at the latest measured chunk
      time) would be more than ``every_s`` seconds after the last checkpoint (or the start), so
      checkpoints are at most about ``every_s`` apart, unless the run is at ``end_step``
      (``--checkpoint-every-minutes``; 0 = off);
    - before each chunk, the :class:`~pawn.train.lifecycle.StopFlag`'s messages (instance
      attributes ``FIRST_SIGINT``, ``FIRST_SIGTERM``, ``SECOND_SIGINT``) rewritten with when the
      chunk under way should end, how long the checkpoint after it takes (the last one's time, else
      ``checkpoint_s_guess``) and what a second Ctrl-C loses (the steps and minutes since the last
      complete checkpoint, or everything when there is none).

    Args:
        checkpointer: the run's :class:`~pawn.train.run.Checkpointer`.
        stop: the run's StopFlag (None: no messages to keep).
        start_step, end_step: this invocation's steps. estimate: the plan's
            :class:`WallTimeEstimate` (None: no comparison line). every_s: the clock interval.
        checkpoint_s_guess: seconds a checkpoint is expected to take before one is timed.
        log: where the lines go (None: no lines). precompiled: the chunk was compiled before the
            loop (pretraining's memory check), so the first chunk's time is compute, else the first
            timed chunk is the second. clock: ``time.time``-like seconds.
    """

    every = 1

    def __init__(self, checkpointer, stop, *, start_step: int, end_step: int, estimate: Optional[WallTimeEstimate],
                 every_s: float, checkpoint_s_guess: float, log: Optional[Callable[[str], None]] = None,
                 precompiled: bool = False, resumed_step: Optional[int] = None, setup: bool = False,
                 clock: Callable[[], float] = time.time):
        self.precompiled, self.setup = precompiled, setup
        self.checkpointer, self.stop, self.estimate, self.every_s = checkpointer, stop, estimate, float(every_s)
        self.start_step, self.end_step, self.log, self.clock = start_step, end_step, log, clock
        self.checkpoint_s = float(checkpoint_s_guess)
        self.checkpoint_timed = False
        self.t_start = self.last_ck_t = clock()
        self.last_ck_step: Optional[int] = resumed_step
        self.last_ck_path = None
        self.step = start_step
        self.step_s: Optional[float] = estimate.step_s if estimate is not None else None
        self.measured = self._reported = False
        self._timed: list[tuple[int, float]] = []
        self.chunk_steps = estimate.chunk_steps if estimate is not None else None
        self.update_messages(first_chunk=True)

    @classmethod
    def setup_messages(cls, stop: Any, *, start_step: int, end_step: int, estimate: Optional["WallTimeEstimate"],
                       checkpoint_s_guess: float) -> None:
        """Rewrite ``stop``'s Ctrl-C messages for the setup, before the loop: a stop now waits for
        the first chunk (after its compile) and its checkpoint; a second Ctrl-C loses what the
        messages name."""
        cls(None, stop, start_step=start_step, end_step=end_step, estimate=estimate, every_s=0, setup=True,
            checkpoint_s_guess=checkpoint_s_guess, resumed_step=start_step or None)

    def due(self, step: int) -> bool:
        return True

    # ------------------------------------------------------------------ messages
    def _chunk_end_text(self) -> str:
        if self.step_s is None or self.chunk_steps is None:
            return "this chunk"
        n = min(self.chunk_steps, max(0, self.end_step - self.step))
        end = self.clock() + n * self.step_s
        return (f"this chunk (steps {self.step:,} → {self.step + n:,}; it should end at ≈ {_clock(end)}, "
                f"in ≈ {format_span(n * self.step_s)}{'' if self.measured else ', estimated'})")

    def _loss_text(self) -> str:
        now = self.clock()
        if self.last_ck_step is None:
            done = max(0, self.step - self.start_step)
            return (f"no checkpoint of this run exists yet, so there is nothing to resume: "
                    + (f"the {done:,} steps done so far ({format_span(now - self.t_start)} of training up to {_clock(now)}) and "
                       "the chunk under way are lost" if done else "the chunk under way is lost"))
        n = max(0, self.step - self.last_ck_step)
        when = f"written {_clock(self.last_ck_t)}" if self.last_ck_path is not None else "the one this run resumed"
        return (f"the last complete checkpoint, step {self.last_ck_step:,} ({when}), is kept; "
                + (f"the {n:,} steps after it (≈ {format_span(now - self.last_ck_t)} of work up to {_clock(now)}) and "
                   "the chunk under way are lost" if n else "the chunk under way is lost"))

    def update_messages(self, first_chunk: bool = False) -> None:
        """Rewrite the stop flag's messages for the chunk starting now."""
        if self.stop is None:
            return
        ck = f"then a checkpoint (≈ {format_span(self.checkpoint_s)}{'' if self.checkpoint_timed else ', estimated'})"
        chunk = self._chunk_end_text()
        if self.setup:
            chunk = ("the first chunk, once the train step has compiled (seconds for small models, minutes for the large "
                     "supernet on a CPU) and " + chunk.replace("this chunk (", "(", 1) + " has run")
        elif first_chunk and not self.precompiled:
            chunk += " once it has compiled"
        self.stop.FIRST_SIGINT = (f"stopping after {chunk}, {ck}; Ctrl-C again to stop now without a checkpoint: "
                                  + self._loss_text())
        self.stop.FIRST_SIGTERM = f"SIGTERM: stopping after {chunk}, {ck}"
        self.stop.SECOND_SIGINT = "second Ctrl-C: stopping now without a checkpoint; " + self._loss_text()

    # ------------------------------------------------------------------ hook
    def on_chunk(self, ctx) -> None:
        r = ctx.result
        self.step = ctx.step
        steps = r.step - r.step_start
        timed = steps > 0 and (self.precompiled or not r.includes_compile)
        if timed:
            # the messages use the latest chunk; the one "measured" line waits for 5 s of chunks (or
            # three), leaving out the first when there are more (its first executions are slower)
            self.measured, self.step_s, self.chunk_steps = True, r.chunk_wall_s / steps, steps
            self._timed.append((steps, r.chunk_wall_s))
        if timed and not self._reported and (sum(t for _, t in self._timed) >= 5.0 or len(self._timed) >= 3):
            self._reported = True
            sample = self._timed[1:] if len(self._timed) > 1 else self._timed
            steps, wall = sum(n for n, _ in sample), sum(t for _, t in sample)
            left = max(0, self.end_step - ctx.step) * wall / steps
            if self.log is not None and ctx.step < self.end_step:
                was = (f"; the plan said ≈ {format_span(self.estimate.chunk_steps * self.estimate.step_s)} a chunk, "
                       f"{format_span(self.estimate.total_s)} in all" if self.estimate is not None else "")
                self.log(f"measured: {steps} steps in {format_span(wall)} ({r.tokens * steps / (r.step - r.step_start) / wall:,.0f} "
                         f"tokens/s); the {max(0, self.end_step - ctx.step):,} steps left take "
                         f"≈ {format_span(left)} (ending ≈ {time.strftime('%Y-%m-%d %H:%M', time.localtime(self.clock() + left))}){was}")
        # checkpoint now when waiting for the next chunk's end would pass the interval, so no two
        # checkpoints are further apart than the interval (when chunks take about the same time)
        next_chunk_s = self.step_s * self.chunk_steps if self.measured and self.step_s and self.chunk_steps else 0.0
        if self.every_s > 0 and ctx.step < self.end_step and self.clock() - self.last_ck_t + next_chunk_s > self.every_s:
            if self.last_ck_step != ctx.step:
                self.checkpointer.save(ctx.step, ctx=ctx)

    def on_chunk_end(self, ctx) -> None:
        if ctx.checkpoint_wall_s > 0:
            self.checkpoint_s, self.checkpoint_timed = ctx.checkpoint_wall_s, True
        self.step = ctx.step
        self.update_messages()

    def on_event(self, event: Any) -> None:
        kind = getattr(event, "kind", None)
        if kind in ("interval", "final"):
            self.last_ck_step, self.last_ck_t, self.last_ck_path = int(event.step), self.clock(), event.path

    def on_end(self, reason: str) -> None:
        pass


def checkpoint_seconds_guess(n_params: int, *, with_optimizer: bool = True, bytes_per_s: float = 200e6) -> float:
    """Seconds to write a checkpoint of ``n_params`` fp32 parameters (with the two AdamW moments
    when ``with_optimizer``) at ``bytes_per_s`` (200 MB/s: a local disk with hashing), at least 1 s."""
    return max(1.0, 4.0 * n_params * (3 if with_optimizer else 1) / bytes_per_s)


__all__ = ["WallClockHook", "checkpoint_seconds_guess"]
