"""One trial's objective and verdict, and the counts and log lines of the trial loops: what the
one-at-a-time loop (:func:`pawn.sweep.study.run_trials`) and the population loop
(:func:`pawn.sweep.population.run_population_worker`) share.

Layer: below :mod:`pawn.sweep.study` (the driver) and :mod:`pawn.sweep.population`, above
:mod:`pawn.sweep.trials`, :mod:`pawn.sweep.space`, :mod:`pawn.sweep.storage` and
:mod:`pawn.sweep.settings`; it imports none of the modules above it (the ``pawn.sweep`` layers
contract of ``pyproject.toml``).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import optuna
from optuna.trial import TrialState
from pydantic import ValidationError

from pawn.errors import PawnError
from pawn.runs import SCHEMA_VERSION
from pawn.settings import format_validation_error
from pawn.sweep.settings import SweepSettings
from pawn.sweep.space import Space, derive, suggest
from pawn.sweep.storage import SharedStudy, retry_parent
from pawn.sweep.trials import PrunerHook, TrialOutcome, TrialRunner

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
COUNTED = FINISHED + (TrialState.RUNNING,)
"""The states that count toward ``--trials`` (:func:`n_counted`)."""
INTERRUPTED = "interrupted (Ctrl-C)"
"""``fail_reason`` of the trial(s) a Ctrl-C stopped."""


def _fail(trial: optuna.Trial, reason: str, log: Callable[[str], None]) -> float:
    """Record ``reason`` on ``trial`` and return NaN, which Optuna records as FAILED (without a
    traceback) before the study goes on."""
    trial.set_user_attr("fail_reason", reason)
    log(f"trial {trial.number} failed: {reason}")
    return float("nan")


def trial_data_seed(config: dict, seed: Optional[int], number: int) -> dict:
    """``config`` with its unset ``data_seed`` (an adapter trial's per-epoch shuffle seed, a
    random one in ``pawn adapt`` when none is given) drawn from the sweep's ``--seed`` and the
    trial number: ``numpy.random.SeedSequence([seed, 1, number])``'s first 32-bit word, halved
    into [0, 2³¹). So two fresh sweeps with the same ``--seed`` train each trial on the same
    games in the same order and reach the same losses, not only the same parameters. Unchanged
    without ``--seed``, when the base config or the space sets ``data_seed``, or for a config
    without that field (pretraining trials: their game stream is ``seed``, fixed by default)."""
    if seed is None or "data_seed" not in config or config["data_seed"] is not None:
        return config
    return {**config, "data_seed": int(np.random.SeedSequence([seed, 1, number]).generate_state(1)[0] >> 1)}


def trial_bucket(config: dict, runner: TrialRunner, trial_dir: Path) -> dict:
    """``config`` with ``push_to_bucket`` set to the sweep's claimed folder in the bucket plus the
    trial directory's name (``owner/name/<folder>/<study>/trial_NNNN``), once the sweep has claimed
    it (``runner.bucket_folder``, :func:`pawn.sweep.study.claim_bucket`), so no two trials of one
    bucket share a folder; unchanged otherwise."""
    folder = getattr(runner, "bucket_folder", None)
    if folder is None or not config.get("push_to_bucket"):
        return config
    return {**config, "push_to_bucket": f"{folder}/{trial_dir.name}"}


def make_objective(s: SweepSettings, runner: TrialRunner, space: Space, log: Callable[[str], None]):
    """The Optuna objective: sample → the trial's settings → run in process with a
    :class:`PrunerHook` → best val loss. Pruned → ``TrialPruned``; a refused config, an error
    or a non-finite loss → NaN with ``fail_reason`` (FAILED; the study goes on)."""

    def objective(trial: optuna.Trial) -> float:
        params = derive(s.space_name, suggest(trial, space))
        same = earlier_duplicate(trial)
        if same is not None:
            return _duplicate(trial, same, log)
        trial_dir = s.out / s.resolved_study_name / f"trial_{trial.number:04d}"
        try:
            config = trial_bucket(trial_data_seed(runner.config(params, trial_dir), s.seed, trial.number), runner, trial_dir)
        except ValidationError as e:
            return _fail(trial, f"settings refused: {format_validation_error(e)}", log)
        except PawnError as e:
            return _fail(trial, f"settings refused: {e}", log)
        trial.set_user_attr("run_dir", str(trial_dir))
        trial.set_user_attr("config", config)
        hook = PrunerHook(trial, lambda m: m[runner.objective_key], log=log)
        log(f"trial {trial.number}: {json.dumps(params, default=str)}")
        try:
            outcome = runner.run(config, [hook])
        except KeyboardInterrupt:  # Optuna records the trial FAILED and re-raises
            trial.set_user_attr("fail_reason", INTERRUPTED)
            raise
        return finish_trial(trial, outcome, log)

    return objective


def earlier_duplicate(trial: optuna.Trial) -> Optional[optuna.trial.FrozenTrial]:
    """An earlier trial (lower number; COMPLETE, PRUNED, RUNNING or WAITING) with the same
    parameters as ``trial``, when ``trial``'s parameters were drawn by the sampler; None for an
    enqueued trial (a retry, a population member, ``study.enqueue_trial``: asked for) and when
    no earlier trial has them."""
    trials = trial.study.get_trials(deepcopy=False)
    if any(t.number == trial.number and "fixed_params" in t.system_attrs for t in trials):
        return None
    params = trial.params
    for t in trials:
        if (t.number < trial.number and t.state in COUNTED + (TrialState.WAITING,)
                and (t.params or t.system_attrs.get("fixed_params")) == params):
            return t
    return None


def _duplicate(trial: optuna.Trial, same: optuna.trial.FrozenTrial, log: Callable[[str], None]) -> float:
    """A sampled trial with the parameters of the earlier trial ``same`` is not trained again
    (Optuna FAQ, "How can I ignore duplicated samples?"): a COMPLETE one's value is reused, a
    PRUNED one is pruned, a running or waiting one fails this trial; ``duplicate_of`` records it."""
    trial.set_user_attr("duplicate_of", same.number)
    if same.state == TrialState.COMPLETE:
        log(f"trial {trial.number}: the parameters of trial {same.number}; its value {same.value:.4f} is reused, "
            "not trained again")
        trial.set_user_attr("reason", f"duplicate of trial {same.number}")
        return float(same.value)
    if same.state == TrialState.PRUNED:
        log(f"trial {trial.number}: the parameters of trial {same.number}, which was pruned; pruned, not trained again")
        raise optuna.TrialPruned(f"duplicate of pruned trial {same.number}")
    return _fail(trial, f"the parameters of trial {same.number} ({same.state.name.lower()}); not trained twice", log)


def finish_trial(trial: optuna.Trial, outcome: TrialOutcome, log: Callable[[str], None]) -> float:
    """Turn a :class:`TrialOutcome` into Optuna's verdict: the best val loss, ``TrialPruned``,
    or NaN + ``fail_reason``. ``outcome.config`` replaces the trial's stored config: it holds
    what the run resolved (the ``data_seed`` of an adapter run), so :func:`best_config` repeats it."""
    if outcome.config:
        trial.set_user_attr("config", outcome.config)
    if outcome.run_dir is not None:
        trial.set_user_attr("run_dir", str(outcome.run_dir))
    trial.set_user_attr("reason", outcome.reason)
    trial.set_user_attr("steps", outcome.step)
    # which positions its val loss counts (pawn.runs.positions_of): a study resumed by a newer PAWN
    # holds trials of both definitions, and the report says so
    trial.set_user_attr("record_schema", SCHEMA_VERSION)
    if outcome.error is not None:
        return _fail(trial, outcome.error, log)
    if outcome.reason == "pruned":
        raise optuna.TrialPruned(f"pruned at step {max(outcome.val_losses, default=0)}")
    if not math.isfinite(outcome.best_val_loss):
        return _fail(trial, "no finite validation loss was reported", log)
    return outcome.best_val_loss


def n_finished(study: optuna.Study) -> int:
    """COMPLETE + PRUNED trials in the study."""
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def n_counted(study: optuna.Study) -> int:
    """COMPLETE + PRUNED + RUNNING trials: what counts toward ``--trials``. The RUNNING trials of
    other workers count, so that W workers on one study stop at the total together. Call
    :meth:`SharedStudy.fail_stale` first: a killed worker's trial stops counting once its
    heartbeat is stale (it is failed and its retry, WAITING, is run by whichever worker asks next)."""
    return len(study.get_trials(deepcopy=False, states=COUNTED))


def log_stale(failed: list[int], shared: SharedStudy, log: Callable[[str], None]) -> None:
    """One ``log`` line naming the trial numbers ``failed`` that a stale check (:meth:`SharedStudy.fail_stale`)
    just marked failed; nothing when the list is empty."""
    if failed:
        log(f"trials {failed} had no heartbeat for over --grace-s ({shared.grace_s:g} s; a killed or suspended "
            "worker): marked failed, each retried once")


def ask_quietly(study: optuna.Study) -> optuna.Trial:
    """``study.ask()`` without Optuna's warning that heartbeats belong to ``study.optimize``
    (PAWN's loops record them: :meth:`SharedStudy.beating`)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        return study.ask()


def failed_elsewhere(shared: SharedStudy, number: int) -> str:
    """The line a worker logs when its trial ``number`` was marked failed by another worker's stale
    check while it ran, naming the retry trial when the study holds one."""
    retry = next((t.number for t in shared.study.get_trials(deepcopy=False) if retry_parent(t) == number), None)
    return (f"trial {number} was marked failed while it ran: it had no heartbeat for over --grace-s "
            f"({shared.grace_s:g} s; this worker was suspended or stalled) and another check failed it"
            + (f"; its retry is trial {retry}" if retry is not None else "")
            + "; its run was stopped and this worker goes on")
