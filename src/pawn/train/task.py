"""What a training task provides to the run spine (:func:`pawn.train.spine.run`).

The spine holds the one order of a run (resume rule, refusals of ``--out``, build, initial state,
run directory, start records, hooks, loop, result); a task (:class:`Task`) holds only what
differs between ``pawn pretrain`` (:class:`pawn.train.pretrain.PretrainTask`) and ``pawn adapt``
(:class:`pawn.train.adapt.AdaptTask`): its checkpoints, its model, data, program and validator,
when it validates and checkpoints, what a checkpoint holds, its ``train`` record fields, its start
records, its cost and its result. A third task is one new subclass.

A task object serves one run: :func:`pawn.train.spine.run` sets :attr:`Task.cfg` (the settings
after the resume rule), :attr:`Task.run_dir`, :attr:`Task.run`, :attr:`Task.es`,
:attr:`Task.checkpointer` and :attr:`Task.trainer` as the run gets them, so the task's methods
read them there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from pawn.train.clock import WallClockHook, checkpoint_seconds_guess


@dataclass
class TaskResult:
    """What every finished (or stopped) run produced; a task's result adds its own fields.

    Attributes:
        run_dir: the run directory. checkpoint: the last step checkpoint written (None if none).
        step: optimizer steps done. reason: ``reason_for_stop`` (spec §1.10).
        best_checkpoint: ``checkpoints/best``, the lowest-val-loss checkpoint (None without one).
        best_step: its step. last_train / last_val: the last metrics records written.
    """

    run_dir: Path
    checkpoint: Optional[Path]
    step: int
    reason: str
    best_checkpoint: Optional[Path] = None
    best_step: Optional[int] = None
    last_train: Optional[dict] = None
    last_val: Optional[dict] = None


@dataclass(frozen=True)
class TaskCost:
    """What one run of a task costs, for a wall-time plan (:func:`pawn.train.walltime.plan_sweep`).

    Attributes:
        model: the label the recorded MFU is looked up by (``supernet tiny``, ``variant toy``, ``adapter``).
        flops_per_token: model FLOPs of one token of a train step (:func:`pawn.config.flops_per_token`).
        tokens_per_step: batch size × sequence length.
        steps: the run's steps (for the RoSA family: warm-up steps and mask-scoring batches included).
        dtype: the compute dtype's name. note: what the steps are made of (empty: plain steps).
        shorter: how to make a run shorter, as a sweep plan's advice names it (in ``--base-config``).
        advice: what a run's own plan names as help when it is too long (flags), before the
            accelerator (:func:`pawn.train.walltime.accelerator_hint`).
        phase_steps: ``(RoSA warm-up steps, mask-scoring batches)`` counted in ``steps`` (spec §4.6).
        phase_advice: the run plan's help about those phases, named after the accelerator (empty: none).
    """

    model: str
    flops_per_token: float
    tokens_per_step: int
    steps: int
    dtype: str
    note: str = ""
    shorter: str = ""
    advice: tuple[str, ...] = ()
    phase_steps: tuple[int, int] = (0, 0)
    phase_advice: str = ""

    @property
    def flops_per_step(self) -> float:
        """Model FLOPs of one step."""
        return float(self.flops_per_token) * self.tokens_per_step


class Task:
    """One kind of training run, as the spine (:func:`pawn.train.spine.run`) asks it.

    Class attributes:
        name: the W&B job type and the prefix of the default run directory (``pretrain``,
            ``adapt``).
        completed_reason: the end record's reason of a run that reached its total
            (``completed`` or ``step_limit``, spec §1.10).
        loss_name: the progress bar's loss field.
        precompiled: the train chunk is compiled before the loop (so the first chunk is timed).
        not_reapplied: stored fields the resume rule does not re-apply (rebuilt from the
            checkpoint itself).

    Attributes set by the spine: ``cfg`` (the settings, after the resume rule), ``run_dir``
    (decided before any build), ``run`` (the :class:`~pawn.train.run.Run` once checked),
    ``es`` (early stopping), ``checkpointer``, ``trainer``; ``state`` and ``frozen`` (the
    trainable and frozen halves, on the devices) are the task's own.
    """

    name = "task"
    completed_reason = "completed"
    loss_name = "loss"
    precompiled = False
    not_reapplied: Iterable[str] = ()

    def __init__(self, cfg: Any, *, log: Callable[[str], None] = print):
        self.cfg, self.log = cfg, log
        self.run_dir: Optional[Path] = None
        self.run = self.es = self.checkpointer = self.trainer = None
        self.state = self.frozen = None
        self.wall = None  # the plan's WallTimeEstimate (pawn.train.walltime), set by build
        self.schedule = None  # the learning-rate schedule (step -> lr), set by build

    # ------------------------------------------------------------------ the resume rule
    def load_candidate(self, d: Path) -> Any:
        """One resume candidate ``d`` as a checkpoint (``path``, ``run_config``,
        ``training_state``, ``optimizer_state``).

        Raises:
            pawn.checkpoint.CheckpointError: ``d`` is damaged (skipped under ``--resume auto``).
            pawn.train.run.TrainingError: intact but unusable.
        """
        raise NotImplementedError

    def check_fresh(self, cfg: Any) -> None:
        """Raise when a ``--resume auto`` that found no checkpoint cannot start a new run from ``cfg``."""

    def extension(self, stored: dict, given: dict, ck: Any) -> Optional[dict]:
        """The settings that let a resumed run go past its stored plan, or None (no extension)."""
        return None

    # ------------------------------------------------------------------ before any build
    def prepare(self) -> None:
        """Checks of the settings alone, before the resume rule (cheap; raise one line)."""

    def run_name(self) -> str:
        """The prefix of the default run directory ``runs/<prefix>-<time>``."""
        return self.name

    def settle(self, ck: Any) -> None:
        """After the resume rule: decide what the run takes from the command and the resumed
        checkpoint ``ck`` alone (cheap), before the run directory is checked."""

    def finished(self, ck: Any) -> Optional[tuple[int, str]]:
        """``(step, why)`` when resuming ``ck`` has no step left to run (decided from its
        training state alone, before any compile); else None."""
        return None

    def no_op_result(self, ck: Any, step: int) -> Any:
        """The result of a resume with no step left (``reason = "resume_no_op"``)."""
        raise NotImplementedError

    def cost(self, **context: Any) -> Optional[TaskCost]:
        """What one run of these settings costs (None when it is not known before the data is
        loaded): a whole run, for a sweep's plan (:func:`pawn.train.walltime.plan_sweep`), or with
        ``start_step`` / ``end_step`` the steps of this invocation, for the run's own plan
        (:func:`pawn.train.walltime.plan_pretrain`, :func:`~pawn.train.walltime.plan_adapt`);
        ``context``: what a task needs besides its settings (an adapter's backbone config)."""
        return None

    def snapshot(self) -> dict:
        """``config.json``: the settings, re-feedable with ``--config`` (without the checkpoint
        resumed or the pause of this invocation)."""
        return {**self.cfg.model_dump(mode="json"), "resume": None, "pause_after_steps": None}

    # ------------------------------------------------------------------ build and start
    def build(self, ck: Any, stop: Any) -> None:
        """Build the model, data, program and validator (the slow part: loads, cache writes,
        compiles); ``ck`` the resumed checkpoint or None; ``stop`` the run's signal flag (its
        messages during the setup: :meth:`setup_messages`)."""
        raise NotImplementedError

    def setup_messages(self, stop: Any, start: int, end: int, n_params: int) -> None:
        """Rewrite ``stop``'s Ctrl-C messages for the setup (what a stop now would keep and lose),
        with the plan's wall time (:attr:`wall`) and a checkpoint of ``n_params`` parameters."""
        WallClockHook.setup_messages(stop, start_step=start, end_step=end, estimate=self.wall,
                                     checkpoint_s_guess=checkpoint_seconds_guess(n_params))

    def dry_run_result(self) -> Any:
        """The result of ``--dry-run`` after :meth:`build` (nothing trained or written)."""
        raise NotImplementedError(f"{self.name} has no dry run")

    def initial_state(self, ck: Any) -> Any:
        """The :class:`pawn.train.spine.InitialState` the run starts from."""
        raise NotImplementedError

    def open_data(self) -> None:
        """Open the training data that :meth:`build` did not need (before the run directory opens)."""

    def place(self, init: Any) -> None:
        """Put ``init``'s state (and frozen half) on the devices as :attr:`state` and :attr:`frozen`."""
        raise NotImplementedError

    def start_records(self, init: Any) -> None:
        """The records (and files) of an opened run before its first step: the ``config`` record,
        a step-0 validation, ... (``init``: the initial state)."""

    def before_loop(self, stop: Any, hooks: list) -> Optional[Any]:
        """A phase before the main loop (e.g. a warm-up); its result when the run ends there, else None."""
        return None

    # ------------------------------------------------------------------ the loop
    def end_step(self) -> int:
        """The step this invocation stops at (the total, or ``pause_after_steps`` when sooner)."""
        raise NotImplementedError

    total_steps: int
    """The run's planned length in steps (a property of the task, known after :meth:`build`)."""
    program: Any
    """The :class:`~pawn.train.loop.TrainProgram` that runs a chunk (after :meth:`build`)."""
    checkpoint_params: int
    """Parameters a checkpoint writes, for the first checkpoint-time guess (after :meth:`build`)."""

    def val_due(self, step: int) -> bool:
        """Validation after ``step``."""
        return False

    def validate(self, state: Any, step: int) -> Optional[dict]:
        """The ``val`` fields at ``step`` of the trained half ``state``."""
        return None

    @property
    def validates(self) -> bool:
        """Whether this run validates at all."""
        return False

    def checkpoint_due(self, step: int) -> bool:
        """A step checkpoint after ``step`` (besides the clock's and the end's)."""
        return False

    def keeps_best(self, best: Path) -> bool:
        """Whether the resumed ``checkpoints/best`` is this run's best so far."""
        return best.is_dir() and self.es is not None and self.es.best_loss_step is not None

    def train_fields(self, r: Any) -> dict:
        """The ``train`` record of chunk result ``r`` (:func:`pawn.train.spine.train_record`)."""
        raise NotImplementedError

    def validation_line(self, step: int, val: dict) -> Optional[str]:
        """The one line printed after a validation (None: no line)."""
        return None

    def after_validation(self) -> list:
        """The task's hooks between validation and step checkpoints (e.g. the ``best`` link)."""
        return []

    def write_checkpoint(self, path: Path, step: int) -> None:
        """Write the checkpoint of :attr:`trainer`'s state at ``step`` to ``path``."""
        raise NotImplementedError

    def chunks(self, start: int, end: int) -> Any:
        """The training chunks ``(first step, {name: [K, B, ...]})`` of steps ``[start, end)`` (closable)."""
        raise NotImplementedError

    def compute(self, step: int) -> Optional[dict]:
        """What the run spent up to ``step`` (the ``end`` record's ``compute``), or None."""
        return None

    def result(self, outcome: Any) -> Any:
        """The task's result of a finished loop (``outcome``: :class:`~pawn.train.run.TrainOutcome`)."""
        raise NotImplementedError


__all__ = ["Task", "TaskCost", "TaskResult"]
