"""`pawn sweep` under races and restarts (issue 25): a continued seeded sweep draws new
parameters, stale-trial checks and claims by workers released at one instant (a
multiprocessing Barrier) fail a stale trial once and hand the one WAITING trial to one worker,
W workers stop at --trials, and a live trial failed by a false stale detection lets its worker
go on."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from pawn.sweep.settings import SweepSettings

SPACE = {"lr": FloatDistribution(1e-4, 1e-2, log=True), "weight_decay": FloatDistribution(0.0, 0.1)}
N_PROC = 8


class _Runner:
    """Trials that take ``seconds``, score by their lr, and append ``pid trial_dir`` to ``log_file``."""

    command, objective_key = "pretrain", "val_loss"

    def __init__(self, log_file: Path | None = None, seconds: float = 0.0):
        self.log_file, self.seconds, self.calls = log_file, seconds, 0

    def config(self, params, trial_dir):
        return {**params, "out": str(trial_dir)}

    def run(self, config, hooks):
        from pawn.sweep.trials import TrialOutcome

        self.calls += 1
        if self.log_file is not None:
            with open(self.log_file, "a") as fh:
                fh.write(f"{os.getpid()} {config['out']}\n")
        time.sleep(self.seconds)
        return TrialOutcome(best_val_loss=float(config["lr"]), reason="completed", step=1, run_dir=None, config=config,
                            val_losses={1: float(config["lr"])})


def _settings(tmp_path, trials, **kw):
    return SweepSettings.load(run_type="pretrain", trials=trials, pruner="none", out=tmp_path / "sw",
                              compilation_cache="none", **kw)


def _db(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'sw' / 'study.db'}"


# ------------------------------------------------------------------ seeds
def test_a_continued_seeded_sweep_draws_new_parameters(tmp_path):
    # The sampler's random state restarted from --seed, so a continued study re-drew trial 0, 1, ...
    from pawn.sweep.study import run_worker

    run_worker(_settings(tmp_path, 2, seed=0), log=lambda m: None, runner=_Runner(), space=dict(SPACE))
    study = run_worker(_settings(tmp_path, 4, seed=0), log=lambda m: None, runner=_Runner(), space=dict(SPACE))
    params = [t.params for t in study.trials]
    assert len(params) == 4 and [t.state for t in study.trials] == [TrialState.COMPLETE] * 4
    assert params[2] != params[0] and params[3] != params[1] and len({p["lr"] for p in params}) == 4
    # the same command on a fresh study still repeats its draws (reproducible)
    again = run_worker(SweepSettings.load(run_type="pretrain", trials=2, pruner="none", seed=0, compilation_cache="none",
                                          out=tmp_path / "fresh"), log=lambda m: None, runner=_Runner(), space=dict(SPACE))
    assert [t.params for t in again.trials] == params[:2]


def test_a_worker_restarted_after_a_kill_does_not_redraw_the_killed_trial(tmp_path):
    # Killed mid-trial and restarted at once: the new start re-drew the killed trial's parameters as a
    # new trial, and the killed trial's retry ran them a third time.
    from pawn.sweep.study import open_shared, run_worker
    from pawn.sweep.space import suggest

    s = _settings(tmp_path, 2, seed=7, heartbeat_s=1, grace_s=30)
    killed = open_shared(s)  # the first start of the same command
    t = killed.study.ask()
    killed.begin(t)
    suggest(t, SPACE)  # then SIGKILL: trial 0 stays RUNNING, its heartbeat not yet stale
    study = run_worker(s, log=lambda m: None, runner=_Runner(), space=dict(SPACE))
    assert study.trials[1].params != study.trials[0].params


def test_a_sampled_duplicate_is_not_trained_again(tmp_path):
    # "never run the same parameters twice unless asked": a one-point space draws the same params
    from optuna.distributions import CategoricalDistribution

    from pawn.sweep.study import run_worker

    logs = []
    runner = _Runner()
    study = run_worker(_settings(tmp_path, 3, seed=0), log=logs.append, runner=runner,
                       space={"lr": CategoricalDistribution([0.5])})
    assert runner.calls == 1 and [t.state for t in study.trials] == [TrialState.COMPLETE] * 3
    assert [t.user_attrs.get("duplicate_of") for t in study.trials] == [None, 0, 0]
    assert [t.value for t in study.trials] == [0.5] * 3
    assert any("the parameters of trial 0; its value 0.5000 is reused" in m for m in logs)
    study.enqueue_trial({"lr": 0.5})  # asked for: trained again
    run_worker(_settings(tmp_path, 4, seed=0), log=lambda m: None, runner=runner, space={"lr": CategoricalDistribution([0.5])})
    assert runner.calls == 2


# ------------------------------------------------------------------ races (processes released by a barrier)
def _race_worker(barrier, tmp_path, trials, log_file, grace_s, claim_only):
    from pawn.sweep.study import claim_trial, open_shared, run_worker

    s = _settings(tmp_path, trials, heartbeat_s=1, grace_s=grace_s)
    if not claim_only:  # whole workers
        barrier.wait()
        run_worker(s, log=lambda m: None, runner=_Runner(log_file, seconds=0.5), space=dict(SPACE))
        return
    shared = open_shared(s)  # opened first (serialised by the creation lock), then released at one instant
    barrier.wait()
    trial = claim_trial(s, shared, dict(SPACE), lambda m: None)
    if trial is not None:
        _Runner(log_file).run({**trial.params, "out": f"trial_{trial.number:04d}"}, [])
        shared.study.tell(trial, 1.0)


def _release_workers(tmp_path, trials, grace_s, claim_only=True):
    """N_PROC processes released by one Barrier: each claims a trial (``claim_only``; the step
    Optuna's ``study.optimize`` does as ``fail_stale_trials`` + ``study.ask``) or runs a worker."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(N_PROC)
    log_file = tmp_path / "runs.txt"
    procs = [ctx.Process(target=_race_worker, args=(barrier, tmp_path, trials, log_file, grace_s, claim_only))
             for _ in range(N_PROC)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * N_PROC
    runs = [line.split()[1] for line in log_file.read_text().splitlines()] if log_file.exists() else []
    return optuna.load_study(study_name="pretrain", storage=_db(tmp_path)), runs


def test_eight_workers_at_one_instant_fail_a_stale_trial_once_and_retry_it_once(tmp_path):
    # On SQLite, 8 simultaneous stale checks each failed the trial and each queued a retry (7 retries seen).
    from pawn.sweep.storage import open_storage

    (tmp_path / "sw").mkdir()
    storage = open_storage(_db(tmp_path), heartbeat_s=1, grace_s=2)
    study = optuna.create_study(study_name="pretrain", storage=storage)
    study.set_user_attr("run_type", "pretrain")
    study.set_user_attr("space", "pretrain")
    dead = study.ask(dict(SPACE))  # a killed worker's trial: one heartbeat, then nothing
    storage.record_heartbeat(storage.get_trial_id_from_study_id_trial_number(
        storage.get_study_id_from_name("pretrain"), dead.number))
    dead.set_user_attr("worker", "elsewhere:1")
    storage.engine.dispose()
    time.sleep(3)  # past the grace period
    study, runs = _release_workers(tmp_path, 1, grace_s=2)
    retries = [t for t in study.trials if t.system_attrs.get("failed_trial") == dead.number]
    assert len(retries) == 1, [(t.number, t.state.name) for t in study.trials]
    assert study.trials[0].state == TrialState.FAIL
    assert [t.state for t in retries] == [TrialState.COMPLETE] and retries[0].params == study.trials[0].params
    assert len(runs) == 1 and len(study.trials) == 2  # the retry, trained once; no trial past --trials 1


def test_two_workers_asking_at_once_do_not_both_get_the_one_waiting_trial(tmp_path):
    # Both read the WAITING trial before either wrote RUNNING, and trained into the same trial directory.
    from pawn.sweep.storage import open_storage

    (tmp_path / "sw").mkdir()
    storage = open_storage(_db(tmp_path), heartbeat_s=1, grace_s=60)
    study = optuna.create_study(study_name="pretrain", storage=storage)
    study.set_user_attr("run_type", "pretrain")
    study.set_user_attr("space", "pretrain")
    study.enqueue_trial({"lr": 1e-3, "weight_decay": 0.05})
    storage.engine.dispose()
    study, runs = _release_workers(tmp_path, 1, grace_s=60)
    assert len(runs) == len(set(runs)) == 1, runs
    assert [(t.state, t.params["lr"]) for t in study.trials] == [(TrialState.COMPLETE, 1e-3)]


def test_many_workers_with_short_trials_stop_at_the_total(tmp_path):
    # Counting and creating were separate steps: with many short trials W workers overshot by 1-2.
    study, runs = _release_workers(tmp_path, 5, grace_s=60, claim_only=False)
    assert len(runs) == len(set(runs)) == 5
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 5


# ------------------------------------------------------------------ a live trial failed by a false stale detection
def test_a_trial_failed_while_its_worker_was_suspended_lets_the_worker_go_on(tmp_path):
    # A worker suspended past --grace-s (SIGSTOP, a laptop lid) had its live trial failed by another
    # worker's stale check; on waking, its report raised and the worker died with "Cannot tell a FAIL trial".
    import signal

    ctx = mp.get_context("fork")
    started = ctx.Event()
    out_file = tmp_path / "worker.json"

    def worker():
        from pawn.sweep.study import run_worker

        logs = []

        class Slow(_Runner):
            def run(self, config, hooks):
                from pawn.sweep.trials import PrunerHook, TrialOutcome
                from pawn.train.run import ValidationEvent

                pruner = next(h for h in hooks if isinstance(h, PrunerHook))
                self.calls += 1
                for step in range(1, 40):
                    started.set()
                    time.sleep(0.2)
                    pruner.on_event(ValidationEvent(step, {"val_loss": 1.0 / step}))
                    if pruner.stop_reason is not None:
                        logs.append(f"run stopped: {pruner.stop_reason} at step {step}")
                        return TrialOutcome(pruner.best, pruner.stop_reason, step, None, config, dict(pruner.reported))
                return TrialOutcome(pruner.best, "completed", step, None, config, dict(pruner.reported))

        run_worker(_settings(tmp_path, 1, heartbeat_s=1, grace_s=2), log=logs.append, runner=Slow(), space=dict(SPACE))
        out_file.write_text(json.dumps(logs))

    p = ctx.Process(target=worker)
    p.start()
    assert started.wait(60)
    os.kill(p.pid, signal.SIGSTOP)
    try:
        time.sleep(3.5)  # past --grace-s: another worker's stale check fails the live trial
        from pawn.sweep.study import open_shared

        other = open_shared(_settings(tmp_path, 1, heartbeat_s=1, grace_s=2))
        with other.lock():
            assert other.fail_stale() == [0]
    finally:
        os.kill(p.pid, signal.SIGCONT)
    p.join(120)
    assert p.exitcode == 0
    logs = json.loads(out_file.read_text())
    assert any(m.startswith("run stopped: trial_failed_elsewhere") for m in logs), logs
    assert any("trial 0 was marked failed while it ran" in m and "its retry is trial 1" in m for m in logs), logs
    study = optuna.load_study(study_name="pretrain", storage=_db(tmp_path))
    assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.COMPLETE]  # the worker went on to the retry
    assert study.trials[1].params == study.trials[0].params
