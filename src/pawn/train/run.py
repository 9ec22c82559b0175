"""The trainer as a loop plus hooks (spec ``training-and-adapters.md`` §1.5–1.10, §5).

Three parts, shared by ``pawn pretrain`` and the trainers built on it (``pawn adapt``, sweeps):

- :class:`Run` — the run directory (one run per directory, :mod:`pawn.train.rundir`), picking the
  checkpoint to resume (damaged ones skipped and set aside, never deleted), the config snapshot
  (``config.json``), ``metrics.jsonl`` with its record sinks and ``schedule_health.json``.
- :func:`training_steps` — a generator over compiled K-step chunks: places each host chunk on the
  device mesh, runs :meth:`~pawn.train.loop.TrainProgram.run_chunk`, stops on a non-finite loss
  and yields a typed :class:`ChunkResult` (global step, per-step metrics, the chunk's own wall
  time, excluding whatever the consumer did between chunks).
- :class:`Trainer` — drives the generator and calls :class:`Hook` objects after every chunk
  (levanter's ``trainer.py`` hooks with an ``every`` cadence). Hooks share a :class:`ChunkContext`:
  validation results at the global step, the train record's timings, and
  :meth:`ChunkContext.request_stop` (a stop with a reason: patience, a signal, a sweep pruner).
  :class:`Checkpointer` saves through a caller-given payload writer, rotates, and announces every
  save as a :class:`CheckpointEvent` (after the atomic rename) to every hook's ``on_event``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

import jax
import numpy as np

from pawn.checkpoint import Checkpoint, CheckpointError, write_json
from pawn.errors import PawnError
from pawn.fileio import write_error
from pawn.train.hooks import RunHooks
from pawn.train.lifecycle import (
    BEST_DIR,
    resume_candidates,
    rotate_checkpoints,
    step_checkpoints,
    step_dir_name,
    write_schedule_health,
)
from pawn.train.memory import release_free_heap
from pawn.train.metrics import MetricsLogger, truncate_metrics
from pawn.train.rundir import RunDirError, RunDirLock, RunDirPlan, check_run_dir


class TrainingError(PawnError):
    """A run that cannot start or continue; the message is one line naming the cause."""


class NonFiniteLossError(TrainingError):
    """A chunk produced a NaN/Inf loss. Attributes: ``step`` (the global step of the first bad
    loss) and ``value``; no checkpoint is written from these weights."""

    def __init__(self, step: int, value: float):
        self.step, self.value = int(step), float(value)
        super().__init__(f"loss became {value} at step {step}; stopping without writing a checkpoint from these weights")


def to_host(tree):
    """Copy a pytree of replicated arrays to host NumPy. In a multi-process run a global array is
    not fully addressable from one process, but every process holds a full replica of the
    (replicated) model and optimizer state, so its first local shard is the whole value."""
    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(x.addressable_data(0))
        return np.asarray(x) if isinstance(x, jax.Array) else x

    return jax.tree_util.tree_map(one, tree)


# ============================================================================ the generator
@dataclass
class ChunkResult:
    """One compiled chunk of K optimizer steps, as :func:`training_steps` yields it.

    Attributes:
        state: the :class:`~pawn.train.loop.TrainState` after the chunk (on device; the next
            chunk donates it, so copy with :func:`to_host` what must outlive the hook pass).
        step_start: global optimizer step before the chunk. step: after it (``step_start + K``).
        metrics: per-step host arrays ``[K]`` (``loss``, ``grad_norm``, ``n_supervised``, ``lr``
            and the loss function's own metrics).
        chunk_wall_s: seconds for this chunk alone: waiting for data, the K compiled steps and
            copying the metrics back (not what the consumer did after the previous chunk).
        data_wait_s: of which waiting for the data source (its ``wait_s`` counter; 0 without).
        tokens: tokens in the chunk (``K·B·T``). games: sequences in it (``K·B``).
        includes_compile: the first chunk of this invocation (its time includes compilation).
    """

    state: Any
    step_start: int
    step: int
    metrics: dict[str, np.ndarray]
    chunk_wall_s: float
    data_wait_s: float
    tokens: int
    games: int
    includes_compile: bool

    @property
    def loss(self) -> float:
        """The last step's loss."""
        return float(self.metrics["loss"][-1])

    @property
    def tokens_per_s(self) -> float:
        """``tokens / chunk_wall_s``."""
        return self.tokens / self.chunk_wall_s


class StepChunks:
    """Chunks from a function of the global step: ``batch_at(step) -> {name: array [B, ...]}``
    stacked K at a time for steps ``[start_step, end_step)``, yielded as ``(first_step, chunk)``
    — the data source shape :func:`training_steps` takes; with ``short_last`` the last chunk
    holds the remainder when ``end_step − start_step`` is not a multiple of K (one more compile,
    of that length). Because each batch is a pure function
    of its step (e.g. an epoch permutation seeded by ``(data_seed, step // steps_per_epoch)``), a
    run resumed at any step sees exactly the batches of an uninterrupted one. Built on the
    consumer's thread (``wait_s`` counts the time; pretraining's
    :class:`~pawn.data.stream.ChunkStream` prefetches in the background instead).

    Raises:
        ValueError: ``k < 1``, or ``end_step − start_step`` not a multiple of ``k`` without ``short_last``.
    """

    def __init__(self, batch_at: Callable[[int], Mapping[str, np.ndarray]], *, start_step: int, end_step: int, k: int,
                 short_last: bool = False):
        if k < 1 or ((end_step - start_step) % k and not short_last):
            raise ValueError(f"steps [{start_step}, {end_step}) do not split into chunks of {k}")
        self.batch_at, self.start_step, self.end_step, self.k = batch_at, start_step, end_step, k
        self.wait_s = 0.0

    def __iter__(self) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        for s0 in range(self.start_step, self.end_step, self.k):
            t = time.perf_counter()
            batches = [self.batch_at(s) for s in range(s0, min(s0 + self.k, self.end_step))]
            chunk = {name: np.stack([b[name] for b in batches]) for name in batches[0]}
            self.wait_s += time.perf_counter() - t
            yield s0, chunk

    def close(self) -> None:
        """Nothing to release (the same call as :meth:`ChunkStream.close`)."""


def training_steps(program, state, chunks: Iterable[tuple[int, Mapping[str, np.ndarray]]], *, frozen=None,
                   start_step: int) -> Iterator[ChunkResult]:
    """Run ``program`` over ``chunks`` and yield one :class:`ChunkResult` per chunk.

    Args:
        program: a :class:`~pawn.train.loop.TrainProgram`.
        state: the placed :class:`~pawn.train.loop.TrainState` (donated to the first chunk).
        chunks: ``(step_start, {name: host array [K, B, ...]})`` pairs in step order — the batch
            at each global step must be a pure function of the step (so a resumed run sees
            exactly the batches of an uninterrupted one). An optional ``wait_s`` attribute
            (seconds spent waiting for data, cumulative) is read for ``data_wait_s``.
        frozen: the placed frozen half of a partitioned model (:meth:`TrainProgram.place_frozen`),
            or None.
        start_step: the global step the run (re)starts at.

    Raises:
        NonFiniteLossError: a chunk's loss is NaN or ±Inf (raised before the state is yielded).
    """
    t_prev = time.perf_counter()
    wait_prev = getattr(chunks, "wait_s", 0.0)
    for s0, host_chunk in chunks:
        release_free_heap()  # what compiling, validation and checkpoints freed, before the chunk's temp buffer
        chunk = program.place_chunk(host_chunk)
        first = next(iter(host_chunk.values()))
        k, games = int(first.shape[0]), int(first.shape[0] * first.shape[1])
        tokens = int(np.prod(first.shape[:3]))
        state, m = program.run_chunk(state, chunk, frozen)
        m = to_host(m)
        now = time.perf_counter()
        wait = getattr(chunks, "wait_s", 0.0) - wait_prev
        losses = np.asarray(m["loss"])
        if not np.all(np.isfinite(losses)):
            bad = int(np.argmax(~np.isfinite(losses)))
            raise NonFiniteLossError(s0 + bad, losses[bad])
        yield ChunkResult(state, s0, s0 + k, m, now - t_prev, wait, tokens, games, s0 == start_step)
        # The next chunk's time starts when the consumer (validation, checkpoints) is done.
        t_prev, wait_prev = time.perf_counter(), getattr(chunks, "wait_s", 0.0)


# ============================================================================ hooks
@dataclass(frozen=True)
class CheckpointEvent:
    """A checkpoint was written and renamed into place. ``kind``: ``"interval"``, ``"best"`` or
    ``"final"``; ``path``: its directory; ``step``: the global step it holds."""

    step: int
    path: Path
    kind: str


@dataclass(frozen=True)
class ValidationEvent:
    """Validation ran at global optimizer ``step``; ``metrics`` is the ``val`` record's fields."""

    step: int
    metrics: Mapping[str, Any]


@dataclass(frozen=True)
class StopRequest:
    """A hook's request to end the run after this chunk. ``reason`` becomes ``reason_for_stop``
    (spec §1.10); a request at or past ``before_step`` is ignored (the run ends there anyway)."""

    reason: str
    before_step: int
    by: str = ""


class ChunkContext:
    """What the hooks of one chunk see and share.

    Attributes:
        trainer: the :class:`Trainer`. result: the :class:`ChunkResult`. step: global step.
        val: the validation fields at this step (a dict hooks may extend), or None.
        val_wall_s, checkpoint_wall_s: seconds spent validating / saving after this chunk.
        stop: the first accepted :class:`StopRequest`, or None.
    """

    def __init__(self, trainer: "Trainer", result: ChunkResult):
        self.trainer, self.result, self.step = trainer, result, result.step
        self.val: Optional[dict] = None
        self.val_wall_s = 0.0
        self.checkpoint_wall_s = 0.0
        self.stop: Optional[StopRequest] = None

    def request_stop(self, reason: str, *, before_step: Optional[int] = None, by: str = "") -> bool:
        """Ask the run to stop after this chunk (a checkpoint of this step is written, and
        ``reason`` recorded). The first request wins; one at or past ``before_step`` (default:
        the run's end step) is ignored. Returns whether it was accepted."""
        before = self.trainer.end_step if before_step is None else before_step
        if self.stop is None and self.step < before:
            self.stop = StopRequest(reason, before, by)
            return True
        return False

    def emit(self, event: Any) -> None:
        """Announce ``event`` to every hook (:meth:`Hook.on_event`)."""
        self.trainer.emit(event)


class Hook:
    """A trainer hook. ``on_chunk(ctx)`` runs after every chunk whose global step is
    :meth:`due` (by default a multiple of ``every``); ``on_chunk_end(ctx)`` runs after every
    chunk even when an earlier hook raised (metrics writers); ``on_event`` receives
    :class:`CheckpointEvent` / :class:`ValidationEvent` and anything hooks emit; ``on_end(reason)``
    when the loop ends (always). Hooks run in list order, so a hook sees what earlier ones set in
    the context (validation before early stopping before checkpoints)."""

    every: int = 1

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def on_chunk(self, ctx: ChunkContext) -> None:
        pass

    def on_chunk_end(self, ctx: ChunkContext) -> None:
        pass

    def on_event(self, event: Any) -> None:
        pass

    def on_end(self, reason: str) -> None:
        pass


class Checkpointer:
    """Writes checkpoints through ``write(path, step)`` (the trainer's payload: weights,
    optimizer state, training state), times them into the chunk's ``checkpoint_wall_s``, rotates
    ``step_N`` directories (``keep``; ``checkpoints/best`` is never rotated) and emits a
    :class:`CheckpointEvent` after each save. Only the writing process (``is_main``) writes.

    Attributes:
        last: the last ``step_N`` checkpoint written (None yet). best: ``checkpoints/best`` once
            written (or found on resume).
    """

    def __init__(self, root: Path, write: Callable[[Path, int], Any], *, keep: int, is_main: bool = True,
                 best: Optional[Path] = None):
        self.root, self._write, self.keep, self.is_main = Path(root), write, keep, is_main
        self.last: Optional[Path] = None
        self.best = best
        self.trainer: Optional[Trainer] = None
        self.records: Optional[Callable[[ChunkContext], list[tuple[str, dict]]]] = None
        self._ctx: Optional[ChunkContext] = None

    def pending_records(self) -> list[tuple[str, dict]]:
        """``[(kind, fields)]``: the records of the chunk whose checkpoint is being written now
        (``records(ctx)``, set by the run's metrics hook), for the payload writer to keep in the
        checkpoint; ``[]`` outside a chunk (the end-of-run save) or with no metrics hook."""
        if self.records is None or self._ctx is None:
            return []
        return self.records(self._ctx)

    def save(self, step: int, *, kind: str = "interval", ctx: Optional[ChunkContext] = None) -> Path:
        """Write the checkpoint of ``step`` (``kind`` ``"best"`` → ``checkpoints/best``).

        Raises:
            TrainingError: the write failed (one line; the previous checkpoint is intact).
        """
        t = time.perf_counter()
        path = self.root / (BEST_DIR if kind == "best" else step_dir_name(step))
        if self.is_main:
            self._ctx = ctx if kind != "best" else None
            try:
                self._write(path, step)
                if kind != "best":
                    rotate_checkpoints(self.root, self.keep)
            except OSError as e:
                kept = f"the last complete checkpoint, {self.last}, is intact" if self.last else "earlier checkpoints are intact"
                raise TrainingError(f"cannot write checkpoint {path} ({write_error(e, self.root)}); {kept}") from None
            finally:
                self._ctx = None
        if kind == "best":
            self.best = path
        else:
            self.last = path
        if ctx is not None:
            ctx.checkpoint_wall_s += time.perf_counter() - t
        if self.is_main and self.trainer is not None:
            self.trainer.emit(CheckpointEvent(int(step), path, kind))
        return path


class EarlyStoppingHook(Hook):
    """The best checkpoint and patience (spec §1.8): after each validation, ``monitor(ctx.val)``
    (``{metric: value}`` for :class:`~pawn.train.lifecycle.EarlyStopping`) updates ``state``;
    the val record gains ``val/improved``, ``val/patience_counter``, ``val/best_loss`` and
    ``val/best_loss_step``; a new best val loss is saved to ``checkpoints/best``; once patience
    is exhausted the run stops (``patience``) unless it is at ``total_steps``.

    Args:
        state: the :class:`~pawn.train.lifecycle.EarlyStopping` (restored on resume).
        checkpointer: saves the best checkpoint. monitor: val fields → monitored metrics (default:
            the val record itself, read under the canonical :mod:`pawn.metrics` keys).
        total_steps: a stop at this step is a completion. validation_due: when validation runs
            (multi-process runs broadcast process 0's decision at those steps, or the other
            processes would wait forever in the next chunk's collectives).
        processes: ``jax.process_count()``. log: the one-line stop message (main process).
    """

    def __init__(self, state, checkpointer: Checkpointer, *, monitor: Optional[Callable[[dict], dict]] = None, total_steps: int,
                 validation_due: Callable[[int], bool], processes: int = 1, log: Optional[Callable[[str], None]] = print):
        self.es, self.checkpointer, self.monitor = state, checkpointer, monitor
        self.total_steps, self.validation_due, self.processes, self.log = total_steps, validation_due, processes, log

    def on_chunk(self, ctx: ChunkContext) -> None:
        es = self.es
        if ctx.val is not None:
            improved, new_best = es.update(ctx.step, ctx.val if self.monitor is None else self.monitor(ctx.val))
            ctx.val.update({"val/improved": improved, "val/patience_counter": es.counter,
                            "val/best_loss": es.best.get("loss"), "val/best_loss_step": es.best_loss_step})
            if new_best:
                self.checkpointer.save(ctx.step, kind="best", ctx=ctx)
        stop = es.exhausted
        if es.patience is not None and self.processes > 1 and self.validation_due(ctx.step):
            from jax.experimental import multihost_utils

            stop = bool(multihost_utils.broadcast_one_to_all(np.asarray(es.exhausted)))
        if stop and ctx.request_stop("patience", before_step=self.total_steps, by="early stopping") and self.log:
            self.log(f"early stopping at step {ctx.step}: {es.counter} validations without improvement (patience {es.patience}); "
                     f"best val loss {es.best.get('loss', float('nan')):.4f} at step {es.best_loss_step}")


class ProgressHook(Hook):
    """Moves a :class:`~pawn.progress.ProgressReporter` (loss and tokens/s) every chunk, and
    gives it each timed chunk's seconds per step, so the ETA appears after the first timed
    chunk. ``precompiled``: the program was compiled before the loop (pretrain's memory check),
    so the first chunk's time is compute, not compilation."""

    def __init__(self, bar, loss_name: str = "loss", precompiled: bool = False):
        self.bar, self.loss_name, self.precompiled = bar, loss_name, precompiled

    def on_chunk(self, ctx: ChunkContext) -> None:
        r = ctx.result
        steps = r.step - r.step_start
        timed = steps > 0 and (self.precompiled or not r.includes_compile)
        self.bar.update(ctx.step, unit_s=r.chunk_wall_s / steps if timed else None,
                        **{self.loss_name: f"{r.loss:.4f}", "tok/s": f"{r.tokens_per_s:,.0f}"})

    def on_end(self, reason: str) -> None:
        self.bar.stop()


class ValidationHook(Hook):
    """Every ``every`` steps and at ``final_step``: ``validate(state, step) -> fields``, timed
    into ``ctx.val_wall_s``, stored as ``ctx.val`` and emitted as a :class:`ValidationEvent`
    with the global step."""

    def __init__(self, validate: Callable[[Any, int], dict], *, every: int, final_step: int,
                 due: Optional[Callable[[int], bool]] = None):
        self.validate, self.every, self.final_step, self._due = validate, every, final_step, due

    def due(self, step: int) -> bool:
        """``due(step)`` when given, else every ``every`` steps and at ``final_step``."""
        if self._due is not None:
            return self._due(step)
        return step % self.every == 0 or step == self.final_step

    def on_chunk(self, ctx: ChunkContext) -> None:
        t = time.perf_counter()
        ctx.val = self.validate(ctx.result.state, ctx.step)
        ctx.val_wall_s = time.perf_counter() - t
        ctx.emit(ValidationEvent(ctx.step, ctx.val))


class CheckpointHook(Hook):
    """A step checkpoint every ``every`` steps (or after each step where ``due(step)``) before
    ``end_step`` (the end-of-run checkpoint is the :class:`Trainer`'s)."""

    def __init__(self, checkpointer: Checkpointer, *, every: int = 1, end_step: int,
                 due: Optional[Callable[[int], bool]] = None):
        self.checkpointer, self.every, self.end_step, self._due = checkpointer, every, end_step, due

    def due(self, step: int) -> bool:
        return self._due(step) if self._due is not None else super().due(step)

    def on_chunk(self, ctx: ChunkContext) -> None:
        if ctx.step < self.end_step:
            self.checkpointer.save(ctx.step, ctx=ctx)


class SignalStopHook(Hook):
    """Turns a SIGTERM/SIGINT caught by a :class:`~pawn.train.lifecycle.StopFlag` into a
    ``sigterm`` stop (spec §1.10's reason for either signal; the request's ``by`` names the
    signal received; a signal during the last chunk changes nothing); once the checkpoint after
    the signal is written, says on stderr how many seconds after the signal that was; restores
    the handlers at the end."""

    def __init__(self, flag):
        self.flag = flag
        self._said = False

    def on_chunk(self, ctx: ChunkContext) -> None:
        if self.flag.requested:
            ctx.request_stop("sigterm", by=self.flag.requested)

    def on_event(self, event: Any) -> None:
        if isinstance(event, CheckpointEvent) and event.kind != "best" and self.flag.requested and not self._said:
            dt = self.flag.since_signal_s() if hasattr(self.flag, "since_signal_s") else None
            if dt is not None:
                self._said = True
                self.flag.announce(f"{self.flag.requested}: checkpoint {event.path} written {dt:.1f} s after the signal")

    def on_end(self, reason: str) -> None:
        self.flag.restore()


class MetricsHook(Hook):
    """Writes the chunk's ``train`` record (``train_fields(result)`` plus ``val_wall_s`` and
    ``checkpoint_wall_s``) and, when validation ran, the ``val`` record (``ctx.val`` plus
    ``val_wall_s``) to ``metrics.jsonl`` — after every chunk, even if a later part failed.
    ``last_train`` / ``last_val``: the last records written."""

    def __init__(self, logger: MetricsLogger, train_fields: Callable[[ChunkResult], dict]):
        self.logger, self.train_fields = logger, train_fields
        self.last_train: Optional[dict] = None
        self.last_val: Optional[dict] = None

    def records(self, ctx: ChunkContext) -> list[tuple[str, dict]]:
        """``[(kind, fields)]`` of the chunk as they stand now: its ``train`` record and, when
        validation ran, its ``val`` record (each with ``step``)."""
        out = [("train", {"step": ctx.step, **self.train_fields(ctx.result), "val_wall_s": ctx.val_wall_s,
                          "checkpoint_wall_s": ctx.checkpoint_wall_s})]
        if ctx.val is not None:
            out.append(("val", {"step": ctx.step, **ctx.val, "val_wall_s": ctx.val_wall_s}))
        return out

    def on_chunk_end(self, ctx: ChunkContext) -> None:
        for kind, fields in self.records(ctx):
            rec = self.logger.write(kind, **fields)
            if kind == "train":
                self.last_train = rec
            else:
                self.last_val = rec


# ============================================================================ the loop
@dataclass
class TrainOutcome:
    """How :meth:`Trainer.run` ended: the final (device) state, global step, ``reason`` for the
    stop (spec §1.10) and the last ``step_N`` checkpoint."""

    state: Any
    step: int
    reason: str
    checkpoint: Optional[Path]


class Trainer:
    """The loop: :func:`training_steps` plus hooks, a stop rule and the end-of-run checkpoint.

    Args:
        program: the :class:`~pawn.train.loop.TrainProgram`.
        checkpointer: the :class:`Checkpointer` (its events reach the hooks).
        hooks: in call order.
        total_steps: the planned length; a run that ends before it without a stop request was
            ``paused``. end_step: where this invocation stops (``pause_after_steps``).
        completed_reason: the reason when the run reaches ``total_steps`` (``"completed"`` for
            pretraining, ``"step_limit"`` for adapters, spec §5).
    """

    def __init__(self, program, checkpointer: Checkpointer, hooks: Sequence[Hook], *, total_steps: int, end_step: int,
                 completed_reason: str = "completed"):
        self.program, self.checkpointer, self.hooks = program, checkpointer, list(hooks)
        self.total_steps, self.end_step, self.completed_reason = total_steps, end_step, completed_reason
        self.state = None
        self.step: Optional[int] = None
        self.reason: Optional[str] = None
        checkpointer.trainer = self

    def emit(self, event: Any) -> None:
        """Pass ``event`` to every hook's ``on_event``."""
        for h in self.hooks:
            h.on_event(event)

    def run(self, state, chunks, *, start_step: int, frozen=None, resumed: bool = False) -> TrainOutcome:
        """Train from ``start_step`` over ``chunks`` (see :func:`training_steps`), then write the
        checkpoint of the last step unless it exists (a resumed run with no step left records
        ``resume_no_op`` and writes nothing). ``self.state`` always holds the latest state, for
        the checkpoint payload.

        Raises:
            TrainingError: a non-finite loss (naming the last good checkpoint), a failed save.
            Anything a hook raises propagates after ``on_end("exception")``.
        """
        self.state, step, reason = state, start_step, self.completed_reason
        self.step, self.reason = step, None
        try:
            for result in training_steps(self.program, state, chunks, frozen=frozen, start_step=start_step):
                self.state, step = result.state, result.step
                self.step = step
                ctx = ChunkContext(self, result)
                try:
                    for h in self.hooks:
                        if h.due(step):
                            h.on_chunk(ctx)
                finally:
                    for h in self.hooks:
                        h.on_chunk_end(ctx)
                if ctx.stop is not None:
                    reason = ctx.stop.reason
                    break
            if reason == self.completed_reason and step < self.total_steps:
                reason = "paused"
            last = self.checkpointer.last
            if last is None or last.name != step_dir_name(step):
                if step > start_step or not resumed:
                    self.checkpointer.save(step, kind="final")
                else:
                    reason = "resume_no_op"
        except NonFiniteLossError as e:
            reason = "exception"
            last = self.checkpointer.last
            raise TrainingError(str(e) + (f" (last good checkpoint: {last})" if last else "")) from None
        except BaseException:
            reason = "exception"
            raise
        finally:
            self.reason = reason
            for h in self.hooks:
                h.on_end(reason)
        return TrainOutcome(self.state, step, reason, self.checkpointer.last)


# ============================================================================ the run directory
def check_out_path(run_dir: Path) -> None:
    """Refuse, before any work, a run directory that is (or lies under) a file.

    Raises:
        TrainingError: naming the file.
    """
    for p in (run_dir, *run_dir.parents):
        if p.exists():
            if not p.is_dir():
                raise TrainingError(f"--out {run_dir}: {p} is a file, not a directory")
            return


def pick_resume_checkpoint(spec: str, out: Optional[Path], load: Callable[[Path], Checkpoint],
                           log: Callable[[str], None] = print) -> tuple[Optional[Checkpoint], list[Path], bool]:
    """The checkpoint ``--resume spec`` continues: ``load(d)`` on each candidate, newest first
    (:func:`~pawn.train.lifecycle.resume_candidates`). With ``--resume auto`` or a run
    directory a damaged candidate (``load`` raises :class:`CheckpointError` or a pydantic
    ``ValidationError``) is skipped with a one-line warning and the next older one tried; a
    checkpoint named directly is used or refused. Nothing is deleted.

    Returns:
        ``(checkpoint or None when auto found none, skipped paths, whether any candidate existed)``.

    Raises:
        TrainingError: no such path, a named checkpoint unusable, or no intact candidate.
    """
    from pydantic import ValidationError

    from pawn.settings import format_validation_error

    try:
        candidates, fallback = resume_candidates(spec, out)
    except FileNotFoundError as e:
        raise TrainingError(str(e)) from None
    if not candidates:
        return None, [], False
    problems: list[Path] = []
    for d in candidates:
        try:
            return load(d), problems, True
        except (CheckpointError, ValidationError) as e:
            msg = format_validation_error(e) if isinstance(e, ValidationError) else str(e)
            if not fallback:
                raise TrainingError(f"--resume {d}: {msg}" if str(d) not in msg else msg) from None
            problems.append(d)
            log(f"WARNING: skipping damaged checkpoint {d}: {msg}" if str(d) not in msg else f"WARNING: skipping damaged checkpoint: {msg}")
    raise TrainingError(
        f"--resume {spec}: no intact checkpoint in {candidates[0].parent} "
        f"({len(problems)} damaged, newest {candidates[0].name}); nothing was deleted. To start over "
        f"there instead, drop --resume and add --overwrite (the old run is moved aside, not deleted)"
    )


def set_aside_newer(ckpt_root: Path, step: int, log: Callable[[str], None]) -> None:
    """Rename the step checkpoints newer than the one resumed (the damaged ones ``--resume``
    skipped) to ``step_N.damaged`` (``.damaged-2``, … if taken), so the resumed run neither
    overwrites nor rotates them away: nothing is deleted.

    Raises:
        TrainingError: a rename fails (the message names the folder).
    """
    for n, d in step_checkpoints(ckpt_root):
        if n <= step:
            continue
        target, k = d.with_name(f"{d.name}.damaged"), 1
        while target.exists():
            k += 1
            target = d.with_name(f"{d.name}.damaged-{k}")
        try:
            d.rename(target)
        except OSError as e:
            raise TrainingError(f"cannot set the damaged checkpoint {d} aside ({e.strerror or e}); nothing was changed") from None
        log(f"kept the damaged checkpoint {d.name} as {target.name} (the resumed run writes a new {d.name})")


def _run_id(run_dir: Path, plan: RunDirPlan) -> str:
    """The id of the run about to write ``run_dir``: the one its records already carry when
    ``plan`` continues that run (:attr:`pawn.runs.Run.identity`), else a new one (also for a
    run written before run ids: its resumed segments then carry the new id)."""
    from pawn.runs import RunError, new_run_id, open_run

    if plan.continues:
        try:
            found = open_run(run_dir).identity.run_id
        except RunError:
            found = None
        if found:
            return found
    return new_run_id()


@dataclass
class Run:
    """One run directory: ``config.json`` (the re-feedable config snapshot), ``metrics.jsonl``
    (with its record sinks: curves, TensorBoard, W&B), ``checkpoints/`` and
    ``schedule_health.json``. Build with :meth:`check` before any work; :meth:`open` writes.

    Attributes:
        run_dir: the directory. plan: the :class:`~pawn.train.rundir.RunDirPlan`. is_main: this
            process writes (process 0). logger: the metrics logger once open (None elsewhere).
    """

    run_dir: Path
    plan: RunDirPlan
    is_main: bool = True
    log: Callable[[str], None] = print
    logger: Optional[MetricsLogger] = None
    hooks: Optional[RunHooks] = field(default=None, repr=False)

    @property
    def checkpoints(self) -> Path:
        """``run_dir/checkpoints``."""
        return self.run_dir / "checkpoints"

    @property
    def metrics_path(self) -> Path:
        """``run_dir/metrics.jsonl``."""
        return self.run_dir / "metrics.jsonl"

    @classmethod
    def check(cls, run_dir: Path, *, resume: Optional[str], resume_from: Optional[Path], overwrite: bool,
              new_config: dict, ignored_fields: Iterable[str], is_main: bool = True,
              log: Callable[[str], None] = print) -> "Run":
        """Decide, before any work, whether this run may write ``run_dir``
        (:func:`~pawn.train.rundir.check_run_dir`).

        Raises:
            TrainingError: ``run_dir`` is a file, or holds another run and no flag allows it.
        """
        run_dir = Path(run_dir)
        check_out_path(run_dir)
        args = dict(resume=resume, resume_from=resume_from, overwrite=overwrite, new_config=new_config,
                    ignored_fields=frozenset(ignored_fields))
        try:
            plan = check_run_dir(run_dir, **args)
        except RunDirError as e:
            raise TrainingError(str(e)) from None
        run = cls(run_dir, plan, is_main, log)
        run._check_args = args
        run.run_id = _run_id(run_dir, plan)
        return run

    run_id: Optional[str] = None
    """The run's id (:data:`pawn.runs.RUN_ID_FIELD` of every ``config`` record it writes): the
    resumed run's own when it continues in place, else a new one (:meth:`check` sets it)."""
    _check_args: Optional[dict] = field(default=None, repr=False)
    _made_dir: bool = field(default=False, repr=False)
    lock: Optional[RunDirLock] = field(default=None, repr=False)
    """The ``flock`` on ``run_dir`` this (writing) process holds from :meth:`open` to :meth:`finish`."""

    def _lock(self) -> None:
        """Lock the run directory for this process, then decide again under the lock (another
        process may have written it since :meth:`check`) and move an old run aside when planned,
        locking the fresh directory that replaces it."""
        self._made_dir = not self.run_dir.exists()
        try:
            self.lock = RunDirLock.acquire(self.run_dir)
            if self._check_args is not None:
                self.plan = check_run_dir(self.run_dir, **self._check_args)
            moved = self.plan.prepare()
            if moved is not None:
                self._made_dir = True
                old, self.lock = self.lock, RunDirLock.acquire(self.run_dir)
                old.release()
        except RunDirError as e:
            self.release()
            raise TrainingError(str(e)) from None
        if moved is not None:
            self.log(f"moved the old run in {self.run_dir} aside to {moved}")

    def release(self) -> None:
        """Drop the run directory's lock (idempotent; :meth:`finish` calls it)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def open(self, *, snapshot: dict, open_sinks: Callable[[], RunHooks], start_step: int,
             resumed_from: Optional[Path], elapsed_offset: float = 0.0) -> None:
        """Create the directory (moving an old run aside when planned; setting aside damaged
        checkpoints newer than ``resumed_from``), open the record sinks (``open_sinks()``), write
        ``config.json`` atomically, trim ``metrics.jsonl`` to ``start_step`` on resume and open
        the metrics logger. Only the main process writes; the others keep ``logger = None``. When
        this fails before ``config.json`` is written, the directories this call created are
        removed again (when empty), so the re-run is not refused as "--out holds another run".

        Raises:
            TrainingError: a rename, mkdir or write fails, or a sink cannot be opened (one line).
        """
        from pawn.train.hooks import HookError

        if not self.is_main:
            return
        self._lock()
        if resumed_from is not None and resumed_from.parent.resolve() == self.checkpoints.resolve():
            set_aside_newer(self.checkpoints, start_step, self.log)
        created = ([self.run_dir] if self._made_dir else []) + ([self.checkpoints] if not self.checkpoints.exists() else [])
        tmp = self.run_dir / "config.json.tmp"
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.hooks = open_sinks()
            self.checkpoints.mkdir(parents=True, exist_ok=True)
            write_json(tmp, snapshot)
            tmp.replace(self.run_dir / "config.json")
        except BaseException as e:
            # Nothing of this run is on disk yet: remove what this call created (the temporary
            # config and the directories, when still empty) so the re-run is not refused as
            # "--out holds another run". Pre-existing files and directories are never touched.
            if self.hooks is not None:
                self.hooks.close()
            self.release()
            tmp.unlink(missing_ok=True)
            for d in reversed(created):
                try:
                    d.rmdir()
                except OSError:
                    pass  # not empty (a sink wrote there) or already gone: left as it is
            if isinstance(e, (OSError, HookError)):
                raise TrainingError(str(e) if isinstance(e, HookError) else
                                    f"--out {self.run_dir}: cannot write the run directory ({e.strerror or e})") from None
            raise
        try:
            if resumed_from is not None:
                truncate_metrics(self.metrics_path, start_step)
            self.logger = MetricsLogger(self.metrics_path, elapsed_offset=elapsed_offset, hooks=self.hooks, run_id=self.run_id)
        except OSError as e:
            self.release()
            raise TrainingError(f"{self.metrics_path}: cannot write metrics ({e.strerror or e})") from None

    @property
    def elapsed(self) -> float:
        """Seconds of the run so far, across resumed segments (0 on non-writing processes)."""
        return self.logger.elapsed if self.logger else 0.0

    def finish(self, schedule, step: int, reason: str, signal: Optional[str] = None,
               compute: Optional[dict] = None, pushes: Optional["Hook"] = None) -> None:
        """Write ``schedule_health.json``, the ``end`` record (``step``, ``reason``: spec §1.10
        stop reason, ``total_steps``, for a ``sigterm`` stop ``signal``: the signal really
        received, ``"SIGINT"`` or ``"SIGTERM"``, and ``compute``: what the run spent over all its
        segments, ``{"optimizer_steps": step}`` updated with ``compute`` —
        :attr:`pawn.runs.Run.compute`; :mod:`pawn.runs` reads a run's status from it) and close the
        metrics log and its sinks. ``pushes`` (the ``--push-to-hub`` / ``--push-to-bucket`` hook) is
        closed between the two: its bounded wait drains the uploads after the ``end`` record is
        written, so a bucket's closing sync of ``metrics.jsonl`` holds it, and the outcomes still
        go into the log (``hub`` records after ``end``). A failure here is a one-line warning: it
        never hides the run's own outcome."""
        try:
            if self.is_main:
                health = write_schedule_health(self.run_dir / "schedule_health.json", schedule, step, reason)
                if self.logger:
                    extra = {"signal": signal} if reason == "sigterm" and signal else {}
                    self.logger.write("end", step=step, reason=reason, total_steps=health.get("planned_total_steps"),
                                      completion_ratio=health.get("completion_ratio"),
                                      compute={"optimizer_steps": int(step), **(compute or {})}, **extra)
        except OSError as e:
            self.log(f"WARNING: could not write {self.run_dir / 'schedule_health.json'} or the end record ({e.strerror or e})")
        try:
            if pushes is not None:  # never raises (a push problem is one warning)
                pushes.close(self.log)
            if self.logger:
                self.logger.close()
        except OSError as e:
            self.log(f"WARNING: could not close the metrics log {self.metrics_path} ({e.strerror or e})")
        finally:
            self.release()


class HubHook(Hook):
    """Push each sealed checkpoint to the Hugging Face Hub (spec §1.11) through a
    :class:`pawn.hub.push.HubPushHook`: every :class:`CheckpointEvent` is queued with the
    background uploader (never blocking a step), which holds it until the ``train`` record of its
    step is written (it is also one of the run's record sinks) and writes each push outcome as a
    ``hub`` record. :meth:`close` waits (bounded) for in-flight uploads; :meth:`Run.finish`
    calls it (``pushes=``) after the ``end`` record and before it closes the metrics file.

    Used by ``pawn pretrain`` and ``pawn adapt`` (``--push-to-hub``).
    """

    def __init__(self, pusher: Any):
        self.pusher = pusher

    @classmethod
    def start(cls, repo_id: Optional[str], run_dir: Path, *, branch: Optional[str], private: bool, wait_s: float,
              is_main: bool, log: Callable[[str], None], recipe_fields: Optional[Sequence[str]] = None) -> Optional["HubHook"]:
        """Start the uploader (main process only; None when ``repo_id`` is None). Call before
        :meth:`Run.open`: the repo and branch are created now, so a refusal (403, offline) comes
        before the run writes anything; then :meth:`attach` once the run is open. The pushed
        model card shows the run config's ``recipe_fields`` as its training recipe (the run's
        settings fields tagged :data:`pawn.settings.RECIPE`; :func:`pawn.hub.card.model_card`).

        Raises:
            pawn.hub.push.HubPushError, pawn.errors.UsageError: the Hub refused (one line).
        """
        if repo_id is None or not is_main:
            return None
        from pawn.hub.push import open_run_push

        return cls(open_run_push(repo_id, run_dir, branch=branch, private=private, wait_s=wait_s, log=log,
                                 recipe_fields=recipe_fields))

    def attach(self, run: "Run") -> None:
        """Write push outcomes as ``hub`` records of ``run``'s metrics file and hold each
        checkpoint until its step's ``train`` record is written (spec §1.11)."""
        if run.logger is not None:
            self.pusher.write, self.pusher.after_records = run.logger.write, True
            run.hooks.hooks.append(self.pusher)

    def on_event(self, event: Any) -> None:
        if isinstance(event, CheckpointEvent):
            self.pusher.on_checkpoint(event.path, event.step)

    def close(self, log: Callable[[str], None] = print) -> None:
        """Drain the uploads (bounded wait); a failure here is one warning, never the run's error."""
        try:
            self.pusher.close()
        except Exception as e:  # never hide the run's own outcome behind a push problem
            log(f"WARNING: hub: closing the uploader failed ({type(e).__name__}: {e})")
