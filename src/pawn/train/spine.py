"""The run spine of ``pawn pretrain`` and ``pawn adapt``: what every training run does the same
way, written once (levanter's ``Trainer`` + ``initial_state`` shape). The task modules
(:mod:`pawn.train.pretrain`, :mod:`pawn.train.adapt`) keep only what differs: the model, the
data, the loss, the validation and their own checkpoint payload.

- the default run directory (:func:`default_run_dir`) and the checks before any work
  (:func:`check_outputs`);
- one resume rule (:func:`resolve_resume`): the checkpoint ``--resume`` names (damaged ones
  skipped, :func:`pawn.train.run.pick_resume_checkpoint`), reconciled with the command: the
  fields tagged :data:`pawn.settings.MUTABLE_ON_RESUME` may differ, every other given field must
  equal the stored one; a task may extend the run (:class:`Task.extension`);
- one :func:`initial_state`: fresh, from ``--init-from`` weights (a fresh optimizer and step 0),
  or restored from the resumed checkpoint (weights, Adam moments, step, elapsed time, bests and
  patience counter);
- opening and finishing the run (:func:`check_run`, :func:`start_hub`, :func:`open_run`,
  :func:`run_loop`): ``config.json``, the metrics log and its sinks (the sinks a command passes,
  e.g. the live ``report.html``), the Hub push, ``schedule_health.json`` and the ``end`` record;
- one default hook order (:func:`default_hooks`): progress, validation, best checkpoint and
  patience, the validation line, the task's after-validation hooks, step checkpoints, signal
  stop, the caller's hooks, and the metrics records last;
- the shared fields of a ``train`` record (:func:`train_record`);
- the records of a chunk inside its own checkpoint (:func:`chunk_records`,
  :func:`restore_chunk_records`): a run killed after a checkpoint completed but before that
  chunk's ``train``/``val`` records reached ``metrics.jsonl`` gets them back on ``--resume``.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import equinox as eqx
from pydantic import ValidationError

from pawn.checkpoint import CheckpointError
from pawn.errors import PawnError
from pawn.progress import ProgressReporter
from pawn.settings import MUTABLE_ON_RESUME, NOT_RUN_IDENTITY, RECIPE, fields_with, format_validation_error
from pawn.train.hooks import HookError, RunHook, check_extras, open_run_hooks
from pawn.train.lifecycle import BEST_DIR, EarlyStopping, StopFlag, complete_checkpoints
from pawn.train.loop import TrainState, init_partitioned_state, optimizer_from_arrays, partition_model, step_counter, with_count
from pawn.fileio import json_safe
from pawn.train.run import (
    CheckpointHook,
    Checkpointer,
    ChunkResult,
    EarlyStoppingHook,
    Hook,
    HubHook,
    MetricsHook,
    ProgressHook,
    Run,
    SignalStopHook,
    Trainer,
    TrainingError,
    TrainOutcome,
    ValidationHook,
    check_out_path,
    pick_resume_checkpoint,
)
from pawn.train.validation_lines import ValidationLineHook

if TYPE_CHECKING:
    from pawn.train.task import Task

CHUNK_RECORDS = "chunk_records"
"""``training_state.json`` key: the ``train``/``val`` records of the chunk a step checkpoint
closes, as they stood when it was saved (:func:`chunk_records`)."""


# ============================================================================ settings facts
def resume_mutable(settings: Any) -> frozenset[str]:
    """The fields of ``settings`` (a class or instance) that may differ between a checkpoint's
    run and the command resuming it: those tagged :data:`pawn.settings.MUTABLE_ON_RESUME`."""
    return frozenset(fields_with(settings, MUTABLE_ON_RESUME))


def run_identity_ignored(settings: Any) -> frozenset[str]:
    """The fields that do not make two runs of ``settings`` different (``--out`` holding "this
    run" or "another run", :func:`pawn.train.rundir.check_run_dir`): the mutable-on-resume
    ones and those the run resolves itself (:data:`pawn.settings.NOT_RUN_IDENTITY`)."""
    return frozenset(fields_with(settings, MUTABLE_ON_RESUME, NOT_RUN_IDENTITY))


def default_run_dir(name: str) -> Path:
    """``runs/<name>-YYYYmmdd-HHMMSS`` (local time): where a run without ``--out`` writes."""
    return Path("runs") / (f"{name}-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S"))


# ============================================================================ resume
def checked_step(d: Path, training_state: Optional[dict]) -> int:
    """The step of the checkpoint ``d`` (``training_state.json``'s ``step``).

    Raises:
        CheckpointError: no training state, or a step that is not a non-negative integer.
    """
    step = (training_state or {}).get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError(f"{d / 'training_state.json'}: no valid step ({step!r})")
    return step


def resolve_resume(cfg: Any, task: "Task", log: Callable[[str], None] = print) -> tuple[Any, Optional[Any]]:
    """``(config, checkpoint or None)``: the checkpoint ``cfg.resume`` names and the run config it
    continues: the stored fields, plus the :func:`resume_mutable` fields this command gives.

    With ``--resume auto`` or a run directory a damaged checkpoint is skipped with a one-line
    warning naming it and the next older one tried (nothing is deleted); one named directly is
    used or refused. ``--resume auto`` with no checkpoint yet starts a new run (``resume`` None).

    Raises:
        TrainingError: no usable checkpoint, settings that differ from the stored run (one line
            naming them), a stored run config that no longer validates.
    """
    if cfg.resume is None:
        return cfg, None
    ck, problems, found = pick_resume_checkpoint(cfg.resume, cfg.out, task.load_candidate, log)
    if not found:  # --resume auto with nothing yet: a new run
        task.check_fresh(cfg)
        return cfg.model_copy(update={"resume": None}), None
    if problems:
        log(f"WARNING: resuming from {ck.path.name}, the newest intact checkpoint (skipped {', '.join(p.name for p in problems)})")
    mutable = resume_mutable(cfg)
    stored = {k: v for k, v in dict(ck.run_config).items() if k != "pause_after_steps"}  # a pause applies to one invocation
    given = {k: v for k, v in cfg.model_dump(mode="json").items() if k in cfg.user_set_fields}
    extend = task.extension(stored, given, ck) if task.extension is not None else None
    if extend:  # the run goes past its stored plan: the total is the one setting that changes
        given = {k: v for k, v in given.items() if k != "total_steps"}
    conflicts = sorted(k for k, v in given.items() if k not in mutable and stored.get(k) != v)
    if "total_steps" in conflicts:
        raise TrainingError(
            f"--resume {ck.path}: --total-steps {given['total_steps']} differs from the run's {stored.get('total_steps')}; "
            f"only a constant-schedule run (--lr-schedule constant) can be extended, since its learning rate so far does "
            f"not depend on the total; for this {stored.get('lr_schedule')} run, start a new one from its weights with "
            f"--init-from {ck.path} (a fresh optimizer and schedule)")
    if conflicts:
        raise TrainingError(f"--resume {ck.path}: settings differ from the checkpoint's run ({', '.join(conflicts)}); "
                            "resume continues the stored run exactly, so drop those settings (flags, PAWN_ variables, config-file keys)")
    skip = set(task.not_reapplied)
    merged = {**{k: v for k, v in stored.items() if k not in skip}, **{k: v for k, v in given.items() if k in mutable}}
    merged["out"] = str(cfg.out) if cfg.out is not None else str(ck.path.parent.parent)
    merged["resume"] = str(ck.path)
    if extend:
        merged.update(extend)
        log(f"extending the run from {stored['total_steps']:,} to {extend['total_steps']:,} steps (constant schedule: "
            f"warm-up {extend['warmup_steps']} and {extend['steps_per_chunk']} steps per chunk kept)")
    try:
        return type(cfg).load(**merged), ck
    except ValidationError as e:  # e.g. --patience on a run without validation
        raise TrainingError(f"--resume {ck.path}: its stored run config is not usable ({format_validation_error(e)})") from None


# ============================================================================ the initial state
@dataclass
class InitialState:
    """Where a run starts (:func:`initial_state`).

    Attributes:
        state: the :class:`~pawn.train.loop.TrainState` over the trainable half (host arrays).
        frozen: the frozen half of a partitioned model (None when everything is trained).
        start: the global step. elapsed0: seconds trained in earlier segments.
        es: early stopping (restored on resume). fresh: no checkpoint was resumed.
    """

    state: TrainState
    frozen: Any
    start: int
    elapsed0: float
    es: EarlyStopping
    fresh: bool


def initial_state(model: Any, optimizer: Any, *, patience: Optional[int], resume: Any = None, trainable: Any = None,
                  init_from: Any = None, missing_optimizer: str = "restart", where: str = "",
                  log: Callable[[str], None] = print) -> InitialState:
    """The state a run starts from: fresh at step 0 (``model`` as built, or as loaded from the
    ``--init-from`` checkpoint ``init_from``: its weights, a fresh optimizer, schedule and step
    counter), or restored from ``resume`` (a loaded checkpoint whose weights ``model`` holds:
    the optimizer arrays, step, elapsed time and early stopping of its ``training_state.json``).

    Args:
        model: the model to train (an equinox module). optimizer: the optax transformation.
        patience: this run's ``--patience`` (early stopping keeps the stored bests and counter).
        resume: the resumed checkpoint (``path``, ``training_state``, ``optimizer_state``) or None.
        trainable: the filter of the trained half (:func:`~pawn.train.loop.partition_model`).
        init_from: the ``--init-from`` checkpoint (``path``, ``training_state``), for the log line.
        missing_optimizer: a resumed checkpoint without optimizer state: ``"restart"`` (Adam
            moments from zero at the stored step, a warning) or ``"refuse"``.
        where: appended to the "resuming from" line (the epoch and batch of an adapter run).

    Raises:
        TrainingError: a malformed early-stopping record, an optimizer state that does not fit,
            or a missing one with ``missing_optimizer="refuse"``.
    """
    if resume is None:
        if init_from is not None:
            ts = init_from.training_state or {}
            log(f"weights from {init_from.path}" + (f" (its step {ts['step']})" if "step" in ts else "")
                + "; optimizer, schedule and step counter start fresh")
        state, frozen = init_partitioned_state(model, optimizer, trainable=trainable, step=0)
        return InitialState(state, frozen, 0, 0.0, EarlyStopping(patience), True)
    ts, path = resume.training_state, resume.path
    start = int(ts["step"])
    elapsed0 = float(ts.get("elapsed", 0.0) or 0.0)
    try:
        es = EarlyStopping.from_json(ts.get("early_stopping"), patience)
    except ValueError as e:
        raise TrainingError(f"{path / 'training_state.json'}: {e}") from None
    train_half, frozen = partition_model(model, trainable)
    template = optimizer.init(eqx.filter(train_half, eqx.is_array))
    if resume.optimizer_state is None:
        if missing_optimizer == "refuse":
            raise TrainingError(f"{path}: no optimizer state; cannot resume exactly")
        log(f"WARNING: {path} has no optimizer state: Adam moments restart from zero at step {start}")
        opt = with_count(template, start)
    else:
        try:
            opt = optimizer_from_arrays(template, resume.optimizer_state)
        except ValueError as e:
            raise TrainingError(f"{path}: {e}") from None
    log(f"resuming from {path} at step {start}{where}")
    return InitialState(TrainState(train_half, opt, step_counter(start)), frozen, start, elapsed0, es, False)


# ============================================================================ opening and finishing
def check_outputs(cfg: Any, out: Path) -> None:
    """The checks that need nothing built: ``out`` is no file, the logging extras are installed,
    the Hub push may start (offline mode or a bad repo id is refused before any work).

    Raises:
        TrainingError: one line naming the problem.
    """
    check_out_path(out)
    try:
        check_extras(tensorboard=cfg.tensorboard, wandb=cfg.wandb)
        if cfg.push_to_hub is not None:
            from pawn.hub.push import check_can_push

            check_can_push(cfg.push_to_hub)
        if cfg.push_to_bucket is not None:
            from pawn.hub.bucket import check_can_push_bucket

            check_can_push_bucket(cfg.push_to_bucket)
    except (HookError, PawnError) as e:
        raise TrainingError(str(e)) from None


def check_run(cfg: Any, out: Path, *, given_resume: Optional[str], resume_from: Optional[Path], overwrite: bool,
              snapshot: dict, is_main: bool, log: Callable[[str], None]) -> Run:
    """:meth:`Run.check` of ``out`` with the run's identity read from the settings' tags
    (:func:`run_identity_ignored`).

    Raises:
        TrainingError: ``out`` is a file, or holds another run and no flag allows it.
    """
    return Run.check(out, resume=given_resume, resume_from=resume_from, overwrite=overwrite, new_config=snapshot,
                     ignored_fields=run_identity_ignored(cfg), is_main=is_main, log=log)


def start_hub(cfg: Any, run_dir: Path, is_main: bool, log: Callable[[str], None], run_id: Optional[str] = None) -> Optional[HubHook]:
    """The Hub push hook (None without ``--push-to-hub`` or ``--push-to-bucket``;
    :func:`pawn.train.pushes.with_bucket`): the repo, branch and bucket are created before the
    run writes, so a 403, offline mode or a bucket folder holding another run (not ``run_id``,
    :attr:`pawn.train.run.Run.run_id`) fails here. The pushed model card's training recipe is
    ``cfg``'s fields tagged :data:`pawn.settings.RECIPE`.

    Raises:
        TrainingError: the push cannot start (one line).
    """
    try:
        from pawn.train.pushes import with_bucket

        return with_bucket(HubHook.start(cfg.push_to_hub, run_dir, branch=cfg.hub_branch, private=cfg.hub_private,
                                         wait_s=cfg.hub_exit_wait_s, is_main=is_main, log=log, recipe_fields=fields_with(cfg, RECIPE)),
                           cfg.push_to_bucket, run_dir, private=cfg.hub_private, wait_s=cfg.hub_exit_wait_s, is_main=is_main, log=log,
                           run_id=run_id)
    except PawnError as e:
        raise TrainingError(str(e)) from None


def open_run(run: Run, cfg: Any, job_type: str, *, snapshot: dict, hub: Optional[HubHook], start_step: int,
             resume: Any, elapsed0: float, sinks: Sequence[Callable[[Path], RunHook]] = (),
             log: Callable[[str], None]) -> None:
    """Open the run directory (``config.json`` = ``snapshot``, ``metrics.jsonl`` and its sinks:
    curves, TensorBoard, W&B and the ``sinks`` the command passes), attach the Hub push and, on
    resume, put back the records of the resumed chunk that never reached the log
    (:func:`restore_chunk_records`). ``job_type``: ``pretrain`` or ``adapt`` (W&B).

    Raises:
        TrainingError: the directory or a sink cannot be opened, the metrics log cannot be written.
    """
    resume_dir = resume.path if resume is not None else None
    run.open(snapshot=snapshot,
             open_sinks=lambda: open_run_hooks(run.run_dir, config=snapshot, tensorboard=cfg.tensorboard, wandb=cfg.wandb,
                                               wandb_project=cfg.wandb_project, wandb_mode=cfg.wandb_mode,
                                               start_step=start_step, job_type=job_type, sinks=sinks, log=log),
             start_step=start_step, resumed_from=resume_dir, elapsed_offset=elapsed0)
    if hub is not None:
        hub.attach(run)
    if resume is not None and run.logger is not None:
        restore_chunk_records(run, start_step, (resume.training_state or {}).get(CHUNK_RECORDS))


def write_record(run: Run, kind: str, **fields: Any) -> Optional[dict]:
    """Write one record of ``run`` (main process; None elsewhere).

    Raises:
        TrainingError: the metrics log cannot be written (one line).
    """
    if run.logger is None:
        return None
    try:
        return run.logger.write(kind, **fields)
    except OSError as e:
        raise TrainingError(f"{run.metrics_path}: cannot write metrics ({e.strerror or e})") from None


def run_loop(trainer: Trainer, run: Run, state: Any, chunks: Any, *, hub: Optional[HubHook], schedule: Any, start_step: int,
             resumed: bool, frozen: Any = None, stop: Optional[StopFlag] = None,
             compute: Optional[Callable[[int], Optional[dict]]] = None, log: Callable[[str], None] = print) -> TrainOutcome:
    """Run ``trainer`` over ``chunks``, then (always) close the data source, drain the Hub push
    (bounded wait) and finish the run (``schedule_health.json``, the ``end`` record; ``stop``:
    the signal flag, whether a signal ended it; ``compute``: ``end step -> what the run spent``
    or None, the ``end`` record's ``compute``). A second Ctrl-C (KeyboardInterrupt) still writes
    the ``end`` record, as a stop by the user (``reason = "sigterm"``, ``signal = "SIGINT"``);
    so does the stop flag's hard exit when the process is inside a compiled chunk
    (:attr:`pawn.train.lifecycle.StopFlag.before_hard_exit`).

    Raises:
        TrainingError: an I/O error (one line naming the last complete checkpoint), a non-finite loss.
    """
    def end_fields(reason: str) -> dict:
        end_step = trainer.step if trainer.step is not None else start_step
        spent = compute(end_step) if compute is not None else None
        return dict(step=end_step, reason=reason, signal=stop.requested if stop is not None else None,
                    **({"compute": spent} if spent is not None else {}))

    if stop is not None:
        stop.before_hard_exit = lambda: run.finish(schedule, **end_fields("sigterm"))
    by_user = False
    try:
        return trainer.run(state, chunks, frozen=frozen, start_step=start_step, resumed=resumed)
    except KeyboardInterrupt:
        by_user = True  # the second Ctrl-C: stopped by the user, without a checkpoint
        raise
    except OSError as e:  # e.g. a metrics write on a full disk: one line, not a traceback
        raise TrainingError(f"I/O error on {e.filename or run.metrics_path} ({e.strerror or e}); "
                            f"last complete checkpoint: {trainer.checkpointer.last}") from None
    finally:
        if stop is not None:
            stop.before_hard_exit = None
        chunks.close()
        # the pushes drain (bounded wait) after the end record and before the metrics log closes
        fields = end_fields("sigterm" if by_user else (trainer.reason or "exception"))
        if by_user:
            fields["signal"] = "SIGINT"
        run.finish(schedule, pushes=hub, **fields)


# ============================================================================ records
def train_record(r: ChunkResult, **task_fields: Any) -> dict:
    """The ``train`` record of one chunk result ``r``: the last and mean loss, the task's own
    fields (``task_fields``: top-1, epoch, per-variant values), the learning rate and gradient
    norm, and the chunk's timing (``chunk_wall_s``: waiting for data + the K steps; the token,
    game and data-wait rates from it; ``includes_compile``)."""
    m, dt = r.metrics, r.chunk_wall_s
    losses = m["loss"]
    return {"loss": float(losses[-1]), "loss_mean": float(losses.mean()), **task_fields,
            "lr": float(m["lr"][-1]), "grad_norm": float(m["grad_norm"][-1]), "grad_norm_mean": float(m["grad_norm"].mean()),
            "chunk_wall_s": dt, "tokens_per_s": r.tokens / dt, "games_per_s": r.games / dt,
            "data_wait_s": r.data_wait_s, "data_wait_frac": r.data_wait_s / dt if dt > 0 else 0.0,
            "step_start": r.step_start, "includes_compile": r.includes_compile}


def chunk_records(checkpointer: Checkpointer) -> list[dict]:
    """The ``train`` (and ``val``) record of the chunk whose checkpoint ``checkpointer`` is saving
    now, as JSON-ready dicts (``type``, ``step`` and the record's fields; ``checkpoint_wall_s`` as
    it stood before this save), for the checkpoint's ``training_state.json``
    (:data:`CHUNK_RECORDS`); ``[]`` outside a chunk (the end-of-run checkpoint, written after its
    records) or without a metrics hook."""
    records = checkpointer.pending_records()
    return [json_safe({"type": kind, **fields}) for kind, fields in records]


def restore_chunk_records(run: Run, step: int, records: Optional[list]) -> int:
    """Append to ``run``'s metrics the records of the resumed checkpoint's chunk (``records``,
    :func:`chunk_records`) that ``metrics.jsonl`` lacks: a run killed after the checkpoint of
    step ``step`` completed but before that chunk's records were written. Returns how many were
    written (a record of the same type at ``step`` already there is kept as it is). Metric keys
    this PAWN does not register (a checkpoint of a newer PAWN, a plugin metric not loaded now) are
    left out with one warning line (:func:`pawn.runs.writable_fields`), never refusing the resume."""
    if not records or run.logger is None:
        return 0
    from pawn.runs import read_records, writable_fields  # the one reader of metrics.jsonl

    try:
        have = {(r.type, r.step) for r in read_records(run.metrics_path)[0] if r.step is not None}
    except OSError:
        return 0
    n, unknown = 0, set()
    for rec in records:
        if not isinstance(rec, dict) or rec.get("step") != step or rec.get("type") not in ("train", "val"):
            continue
        if (rec["type"], step) in have:
            continue
        fields, dropped = writable_fields(rec["type"], {k: v for k, v in rec.items() if k not in ("type", "step")})
        unknown.update(dropped)
        write_record(run, rec["type"], step=step, **fields)
        n += 1
    if unknown:
        run.log(f"WARNING: the checkpoint's records of step {step} carry metrics this PAWN does not register "
                f"({', '.join(sorted(unknown))}: a newer PAWN or a plugin metric not loaded now); restored without them")
    if n:
        run.log(f"restored {n} record(s) of step {step} from its checkpoint (the run stopped before writing them)")
    return n


# ============================================================================ the hooks
def default_hooks(*, run: Run, checkpointer: Checkpointer, es: EarlyStopping, stop: StopFlag,
                  bar: Optional[ProgressReporter], progress_hook: Optional[ProgressHook],
                  validation: Optional[ValidationHook], validation_due: Callable[[int], bool],
                  validation_line: Optional[Callable[[int, dict], str]], checkpoint_due: Callable[[int], bool],
                  end_step: int, total_steps: int, train_fields: Callable[[ChunkResult], dict],
                  after_validation: Sequence[Hook] = (), wall_clock: Optional[Hook] = None, extra: Sequence[Hook] = (),
                  processes: int = 1, log: Callable[[str], None] = print) -> list[Hook]:
    """Every run's hooks, in order: progress, validation, best checkpoint and patience
    (:class:`~pawn.train.run.EarlyStoppingHook`, watching the canonical metric keys of the val
    record), the validation line, the task's ``after_validation`` hooks, step checkpoints (after
    steps where ``checkpoint_due``, before ``end_step``), the wall clock (``wall_clock``:
    checkpoints by the clock, the measured step time, the Ctrl-C messages;
    :class:`~pawn.train.walltime.WallClockHook`), signal stop, the caller's ``extra`` hooks, and
    the metrics records (:class:`~pawn.train.run.MetricsHook`) last. The
    checkpointer learns the metrics hook, so a step checkpoint carries its chunk's records
    (:func:`chunk_records`)."""
    is_main = run.logger is not None
    hooks: list[Hook] = []
    if progress_hook is not None:
        hooks.append(progress_hook)
    if validation is not None:
        hooks.append(validation)
    hooks.append(EarlyStoppingHook(es, checkpointer, total_steps=total_steps, validation_due=validation_due,
                                   processes=processes, log=log if is_main else None))
    if validation is not None and bar is not None and validation_line is not None:  # one line per validation (not sweep trials)
        hooks.append(ValidationLineHook(validation_line, bar.note))
    hooks.extend(after_validation)
    hooks.append(CheckpointHook(checkpointer, every=1, end_step=end_step, due=checkpoint_due))
    if wall_clock is not None:
        if bar is not None and getattr(wall_clock, "log", None) is not None:
            wall_clock.log = bar.note  # its "measured" line goes above the bar in a terminal, not into it
        hooks.append(wall_clock)
    hooks.append(SignalStopHook(stop))
    hooks.extend(extra)
    if run.logger is not None:
        metrics = MetricsHook(run.logger, train_fields)
        checkpointer.records = metrics.records
        hooks.append(metrics)
    return hooks


def metrics_hook(trainer: Trainer) -> Optional[MetricsHook]:
    """The trainer's :class:`~pawn.train.run.MetricsHook` (None on non-writing processes)."""
    return next((h for h in trainer.hooks if isinstance(h, MetricsHook)), None)


# ============================================================================ the one order of a run
def refuse_live_writer(cfg: Any) -> None:
    """Refuse, before anything is read or built, a run whose ``--out`` (or the run directory
    ``--resume DIR`` names) another process is writing now: one line naming that process
    (:func:`pawn.train.rundir.writer_now`), whatever ``--overwrite`` or ``--resume`` says.

    Raises:
        TrainingError: a live writer holds the directory.
    """
    from pawn.train.rundir import writer_now

    dirs: list[tuple[str, Path]] = []
    if cfg.out is not None:
        dirs.append(("--out", Path(cfg.out)))
    if cfg.resume is not None and cfg.resume != "auto":
        r = Path(cfg.resume)
        dirs.append(("--resume", r.parent.parent if r.parent.name == "checkpoints" else r))
    for flag, d in dirs:
        who = writer_now(d)
        if who is not None:
            yet = "" if complete_checkpoints(d / "checkpoints") else " (no checkpoint yet)"
            raise TrainingError(f"{flag} {d}: {who} is writing this run directory now{yet}; wait for it to end, "
                                "or choose another --out")


def run(task: "Task", *, log: Callable[[str], None] = print, progress: bool = True, install_signal_handlers: bool = True,
        overwrite: bool = False, hooks: Sequence[Hook] = (), sinks: Sequence[Callable[[Path], Any]] = (),
        dry_run: bool = False) -> Any:
    """Run (or resume) ``task`` (a :class:`pawn.train.task.Task` holding its settings): the one
    order of every training run.

    1. the stop flag (SIGTERM/SIGINT) goes in first, so a signal during the setup stops after
       the first chunk with a checkpoint;
    2. the task's own checks of its settings (:meth:`Task.prepare`), then every refusal of
       ``--out`` that needs nothing built: a live writer (:func:`refuse_live_writer`), the resume
       rule (:func:`resolve_resume`), a resume with no step left (:meth:`Task.finished`), a file
       or missing extra (:func:`check_outputs`) and a folder holding another run
       (:func:`check_run`) — before any load, cache write or compile;
    3. :meth:`Task.build` (model, data, program, memory check); ``dry_run`` returns here;
    4. :meth:`Task.initial_state`, :meth:`Task.open_data`, the Hub push (:func:`start_hub`), the
       run directory (:func:`open_run`), :meth:`Task.place` and :meth:`Task.start_records`;
    5. the checkpointer, :meth:`Task.before_loop`, the default hooks (:func:`default_hooks`) and
       the loop (:func:`run_loop`); :meth:`Task.result` of its outcome.

    Args:
        task: the task (its ``cfg`` is replaced by the resolved settings).
        log: one-line status messages. progress: a progress bar / plain progress lines.
        install_signal_handlers: install the :class:`~pawn.train.lifecycle.StopFlag`.
        overwrite: ``--out`` may hold another run, which is moved aside (never deleted).
        hooks: extra hooks, after the built-in ones and before the metrics records.
        sinks: further record sinks of ``metrics.jsonl`` (``factory(run_dir)``).
        dry_run: stop after the build (the plan and the memory check); nothing is written.

    Raises:
        TrainingError: one line naming the problem (see the task's own errors too).
    """
    import jax

    stop = StopFlag(install_signal_handlers)
    try:
        task.prepare()
        cfg = task.cfg
        given_resume = cfg.resume
        refuse_live_writer(cfg)
        cfg, ck = resolve_resume(cfg, task, log)
        task.cfg = cfg
        done = task.finished(ck)
        if done is not None:  # before anything is built: there is no step to run
            log(done[1])
            return task.no_op_result(ck, done[0])
        task.settle(ck)
        is_main = jax.process_index() == 0
        out = Path(cfg.out) if cfg.out is not None else default_run_dir(task.run_name())
        task.run_dir = out
        check_outputs(cfg, out)
        r = check_run(cfg, out, given_resume=given_resume, resume_from=ck.path if ck is not None else None,
                      overwrite=overwrite, snapshot=task.snapshot(), is_main=is_main, log=log)
        task.run = r
        task.build(ck, stop)
        if dry_run:
            return task.dry_run_result()
        init = task.initial_state(ck)
        task.es = es = init.es
        task.open_data()
        hub = start_hub(task.cfg, r.run_dir, is_main, log, run_id=r.run_id)
        open_run(r, task.cfg, task.name, snapshot=task.snapshot(), hub=hub, start_step=init.start, resume=ck,
                 elapsed0=init.elapsed0, sinks=sinks, log=log)
        resumed = ck is not None
        del ck  # the host copy of the checkpoint's weights is no longer needed
        task.place(init)
        task.start_records(init)
        best = r.checkpoints / BEST_DIR
        task.checkpointer = checkpointer = Checkpointer(r.checkpoints, task.write_checkpoint, keep=task.cfg.keep_checkpoints,
                                                        is_main=is_main, best=best if task.keeps_best(best) else None)
        extra = [*hooks, *([hub] if hub is not None else [])]
        early = task.before_loop(stop, extra)
        if early is not None:
            return early
        start, end = init.start, max(task.end_step(), init.start)
        if es.exhausted:  # resuming a run that early stopping already ended
            log(f"early stopping already ended this run ({es.counter} validations without improvement, "
                f"patience {es.patience}); raise --patience to continue it")
            end = start
        task.trainer = trainer = Trainer(task.program, checkpointer, _task_hooks(task, stop, progress, start, end, extra, log),
                                         total_steps=task.total_steps, end_step=end, completed_reason=task.completed_reason)
        outcome = run_loop(trainer, r, task.state, task.chunks(start, end), hub=hub, schedule=task.schedule,
                           start_step=start, resumed=resumed, frozen=task.frozen, stop=stop, compute=task.compute, log=log)
        return task.result(outcome)
    finally:
        stop.restore()


def _task_hooks(task: "Task", stop: StopFlag, progress: bool, start: int, end: int, extra: Sequence[Hook],
                log: Callable[[str], None]) -> list[Hook]:
    """:func:`default_hooks` of ``task``: its progress bar, validation, validation line,
    checkpoint rule, ``train`` fields and after-validation hooks, and the wall clock."""
    from pawn.train.clock import WallClockHook, checkpoint_seconds_guess

    r, cfg = task.run, task.cfg
    is_main = r.logger is not None
    bar = progress_hook = None
    wall = task.wall
    if progress and is_main:
        bar = ProgressReporter(task.name, task.total_steps, stop_at=end, start=start, fields={task.loss_name: "-", "tok/s": "-"},
                               every_s=cfg.log_every_s, expected_unit_s=wall.step_s if wall else None).start()
        progress_hook = ProgressHook(bar, task.loss_name, precompiled=task.precompiled)
    validation = (ValidationHook(task.validate, every=1, final_step=task.total_steps, due=task.val_due)
                  if task.validates and is_main else None)
    import jax

    return default_hooks(
        run=r, checkpointer=task.checkpointer, es=task.es, stop=stop, bar=bar, progress_hook=progress_hook,
        validation=validation, validation_due=lambda s: task.validates and task.val_due(s),
        validation_line=task.validation_line, checkpoint_due=task.checkpoint_due, end_step=end,
        total_steps=task.total_steps, train_fields=task.train_fields, after_validation=task.after_validation(),
        extra=extra, processes=jax.process_count(), log=log,
        wall_clock=WallClockHook(task.checkpointer, stop, start_step=start, end_step=end, estimate=wall,
                                 every_s=60.0 * cfg.checkpoint_every_minutes, precompiled=task.precompiled,
                                 checkpoint_s_guess=checkpoint_seconds_guess(task.checkpoint_params),
                                 resumed_step=start or None, log=log if is_main else None))


__all__ = ["CHUNK_RECORDS", "InitialState", "check_outputs", "check_run", "checked_step", "chunk_records",
           "default_hooks", "default_run_dir", "initial_state", "metrics_hook", "open_run", "refuse_live_writer", "resolve_resume", "run",
           "restore_chunk_records", "resume_mutable", "run_identity_ignored", "run_loop", "start_hub", "train_record",
           "write_record"]
