"""Trials: the runner interface (settings → run → best val loss), the pruner hook, and the
pretraining runner.

A :class:`TrialRunner` turns one trial's parameters into a run of the trainer *in this process*
(data and backbone loaded once by the runner, shared across trials) with a :class:`PrunerHook`
among its hooks, and returns a :class:`TrialOutcome`. ``pawn adapt`` trials plug in as another
runner with the same two methods.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from pawn.errors import PawnError
from pawn.settings import PretrainConfig
from pawn.train.pretrain import PretrainReuse, PretrainTask, run_pretrain
from pawn.train.run import ChunkContext, Hook, ValidationEvent


class SweepError(PawnError):
    """A sweep that cannot start or whose workers failed; one line naming the cause."""


FAILED_ELSEWHERE = "trial_failed_elsewhere"
"""Run stop reason: the Optuna trial was marked FAIL by another worker's stale-trial check
(no heartbeat for over ``--grace-s``: this worker was suspended) while the run trained."""


@dataclass
class TrialOutcome:
    """How one trial's run ended.

    Attributes:
        best_val_loss: the lowest validation loss reported (the objective; ``nan`` if none).
        reason: the run's ``reason_for_stop`` (``"pruned"`` when the pruner stopped it).
        step: global optimizer steps done. run_dir: the trial's run directory.
        config: the trial's complete settings (a ready ``--config`` file for the trial command).
        val_losses: ``{global step: val loss}`` reported to Optuna.
        error: the failure's one-line reason (non-finite loss, a refused config, ...), or None.
        train_losses: ``{global step: train loss}`` at chunk ends (population runs).
    """

    best_val_loss: float
    reason: str
    step: int
    run_dir: Optional[Path]
    config: dict[str, Any]
    val_losses: dict[int, float] = field(default_factory=dict)
    error: Optional[str] = None
    train_losses: dict[int, float] = field(default_factory=dict)


class TrialRunner(Protocol):
    """What :func:`pawn.sweep.study.run_sweep` needs from a run type.

    ``config(params, trial_dir)`` → the trial's settings as a JSON-able dict (the fixed base
    settings with ``params`` applied, ``out = trial_dir``), raising ``pydantic.ValidationError``
    or :class:`~pawn.errors.PawnError` for a combination the trial command refuses.
    ``run(config, hooks)`` → :class:`TrialOutcome`, running in process with ``hooks`` (the
    :class:`PrunerHook`) added to the trainer's.
    ``command`` names the CLI command the config file feeds (``"pretrain"``, ``"adapt"``).
    Optional, used by :func:`pawn.sweep.study.prepare_space` before any trial: ``base`` (the
    ``--base-config`` dict), ``settings_fields`` (the trial command's field names),
    ``setting_names(name)`` (the fields a space parameter sets) and ``check()`` (raises
    :class:`~pawn.errors.PawnError` for inputs every trial would fail on).
    """

    command: str
    objective_key: str

    def config(self, params: dict[str, Any], trial_dir: Path) -> dict[str, Any]: ...

    def run(self, config: dict[str, Any], hooks: Sequence[Hook]) -> TrialOutcome: ...


CTRL_C = threading.Event()
"""Set by the SIGINT handler of :func:`ctrl_c_latch`. Python drops a KeyboardInterrupt raised
while a weakref or ``__del__`` callback runs (it prints "Exception ignored … KeyboardInterrupt"
and goes on), so a Ctrl-C landing there was lost and the sweep ran its next trial; the latch
raises it again at the next chunk boundary (:class:`PrunerHook`) or trial (:func:`raise_if_interrupted`)."""


@contextlib.contextmanager
def ctrl_c_latch():
    """While open, SIGINT sets :data:`CTRL_C` and raises KeyboardInterrupt (as Python's default
    handler does). Nothing changes outside the main thread or when SIGINT is ignored (a job
    started with SIGINT ignored keeps ignoring it); the previous handler is restored and the latch
    cleared on exit."""
    def handler(signum, frame):
        CTRL_C.set()
        raise KeyboardInterrupt

    CTRL_C.clear()
    try:
        old = signal.getsignal(signal.SIGINT)
        if old is signal.SIG_IGN:
            old = None
        else:
            signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        old = None
    try:
        yield
    finally:
        CTRL_C.clear()  # a later sweep in this process (the lab, a notebook, a test run) starts clean
        if old is not None:
            signal.signal(signal.SIGINT, old)


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C reached :func:`ctrl_c_latch` (even one Python dropped)."""
    if CTRL_C.is_set():
        raise KeyboardInterrupt


class PrunerHook(Hook):
    """Reports each validation's loss to Optuna at the GLOBAL optimizer step
    (``trial.report(val_loss, step)``; a step already reported — a resumed trial — is not
    reported again) and, when ``trial.should_prune()``, asks the trainer to stop
    (``ctx.request_stop("pruned")``: the run saves this step and records the reason).
    A non-finite val loss stops the run with reason ``"nonfinite_val"``; a trial that is no
    longer running (failed by another worker's stale-trial check while this worker was
    suspended) stops it with reason :data:`FAILED_ELSEWHERE`.

    With ``log``, each validation is one line while the trial runs (:meth:`progress_line`):
    ``trial 3 step 16: val loss 3.4012 (trial best 3.4012; study best 3.3652, trial 1)``.

    Args:
        trial: the Optuna trial (or anything with ``report``/``should_prune``).
        value: ``ValidationEvent.metrics`` → the val loss (float).
        log: one-line messages (None: silent).
    """

    def __init__(self, trial: Any, value: Callable[[dict], float], log: Optional[Callable[[str], None]] = None):
        self.trial, self.value, self.log = trial, value, log
        self.reported: dict[int, float] = {}
        self._stop: Optional[str] = None

    @property
    def stop_reason(self) -> Optional[str]:
        """``"pruned"``, ``"nonfinite_val"`` or :data:`FAILED_ELSEWHERE` once the hook wants the run stopped, else None."""
        return self._stop

    @property
    def best(self) -> float:
        """The lowest finite val loss reported (``nan`` before any)."""
        finite = [v for v in self.reported.values() if math.isfinite(v)]
        return min(finite) if finite else float("nan")

    def on_event(self, event: Any) -> None:
        if not isinstance(event, ValidationEvent):
            return
        v = float(self.value(dict(event.metrics)))
        if not math.isfinite(v):
            self._stop = "nonfinite_val"
            self.reported[int(event.step)] = v
            if self.log is not None:
                self.log(self.progress_line(int(event.step), v) + "; stopping the trial")
            return
        if int(event.step) in self.reported or int(event.step) in getattr(self.trial, "intermediate_values", {}):
            return
        self.reported[int(event.step)] = v
        if self.log is not None:
            self.log(self.progress_line(int(event.step), v))
        try:
            self.trial.report(v, int(event.step))
        except UpdateFinishedTrialError:  # another worker's stale check failed this trial while it ran
            self._stop = FAILED_ELSEWHERE
            return
        if self.trial.should_prune():
            self._stop = "pruned"

    def progress_line(self, step: int, v: float) -> str:
        """The line of one validation: trial number, global step, val loss, the trial's best so
        far and the study's best COMPLETE trial (when the trial has a study that has one)."""
        line = f"trial {getattr(self.trial, 'number', '?')} step {step}: val loss {v:.4f} (trial best {self.best:.4f}"
        study = getattr(self.trial, "study", None)
        if study is not None:
            done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None]
            if done:
                b = min(done, key=lambda t: t.value)
                line += f"; study best {b.value:.4f}, trial {b.number}"
        return line + ")"

    def on_chunk(self, ctx: ChunkContext) -> None:
        raise_if_interrupted()  # a Ctrl-C Python dropped inside a callback: stop now (see CTRL_C)
        if self._stop is not None:
            ctx.request_stop(self._stop, by="sweep")


def error_line(e: BaseException) -> str:
    """A trial's error ``e`` as its outcome records it: one line, at most 300 characters (the
    exception's type name when its message is empty)."""
    return " ".join(str(e).split())[:300] or type(e).__name__


class PretrainTrialRunner:
    """Pretraining trials: :func:`pawn.train.pretrain.run_pretrain` in process, one run
    directory per trial. The objective is the val record's ``loss`` (:mod:`pawn.metrics`; the stored model's).

    Trials share compiled programs (:class:`~pawn.train.pretrain.PretrainReuse`): a trial whose
    model, batch shape and optimizer structure match an earlier one's takes its learning rates
    and weight decay as data of the same compiled chunk.

    Args:
        base: fixed :class:`~pawn.settings.PretrainConfig` fields (e.g. from ``--base-config``);
            validation must be on (``val_games > 0``).
        log: one-line messages.
    """

    command = PretrainTask.name
    task = PretrainTask  # the task its trials run (its cost, its population trainer)

    def __init__(self, base: dict[str, Any], log: Callable[[str], None] = print, sinks: Sequence[Callable[[Path], Any]] = ()):
        self.base, self.log, self.sinks = dict(base), log, tuple(sinks)
        self.reuse = PretrainReuse()
        self.settings_fields = frozenset(PretrainConfig.model_fields)
        probe = PretrainConfig.load(**{"total_steps": 1, **self.base, "resume": None, "out": None})
        self.objective_key = "loss"  # pawn.metrics key: the val record's (monitored) model

    def setting_names(self, name: str) -> tuple[str, ...]:
        """The settings fields a space parameter sets: itself (the pretraining space uses
        :class:`~pawn.settings.PretrainConfig`'s names)."""
        return (name,)

    def plan_cost(self):
        """One trial's cost from the fixed settings (:meth:`pawn.train.pretrain.PretrainTask.cost`).

        Raises:
            pydantic.ValidationError: the fixed settings do not validate without the searched ones.
        """
        return self.task(PretrainConfig.load(**{**self.base, "out": None, "resume": None})).cost()

    def config(self, params: dict[str, Any], trial_dir: Path) -> dict[str, Any]:
        cfg = PretrainConfig.load(**{**self.base, **params, "out": str(trial_dir), "resume": None})
        if cfg.val_games <= 0:
            raise PawnError("a pretraining sweep needs validation (val_games > 0): the objective is the val loss")
        return cfg.model_dump(mode="json")

    def run(self, config: dict[str, Any], hooks: Sequence[Hook]) -> TrialOutcome:
        cfg = PretrainConfig.load(**config)
        pruner = next((h for h in hooks if isinstance(h, PrunerHook)), None)
        try:
            res = run_pretrain(cfg, log=self.log, progress=False, install_signal_handlers=False, hooks=hooks,
                               reuse=self.reuse, sinks=self.sinks)
        except PawnError as e:
            return TrialOutcome(pruner.best if pruner else float("nan"), "exception", 0, Path(cfg.out), config,
                                dict(pruner.reported) if pruner else {}, error_line(e))
        best = pruner.best if pruner else float("nan")
        err = "validation loss was not finite" if res.reason == "nonfinite_val" else None
        return TrialOutcome(best, res.reason, res.step, res.run_dir, config, dict(pruner.reported) if pruner else {}, err)
