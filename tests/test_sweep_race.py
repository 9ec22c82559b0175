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

from pawn.train.pretrain import PretrainTask
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from pawn.sweep.settings import SweepSettings

SPACE = {"lr": FloatDistribution(1e-4, 1e-2, log=True), "weight_decay": FloatDistribution(0.0, 0.1)}
N_PROC = 8


class _Runner:
    """Trials that take ``seconds``, score by their lr, and append ``pid trial_dir`` to ``log_file``."""

    command, objective_key = "pretrain", "val_loss"
    task = PretrainTask  # as the pretraining runner (its population trainer)

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


# ------------------------------------------------------------------ Optuna's public API only
def test_the_sweep_uses_only_optunas_public_api():
    # sweep/storage.py wrote Optuna's private ORM tables (optuna.storages._rdb.models) while
    # optuna>=4.0 had no upper bound; study._storage / trial._trial_id are private too.
    import ast

    import pawn.sweep

    private = []
    for path in sorted(Path(pawn.sweep.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("optuna"):
                mods = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                private += [f"{path.name}: from {m}" for m in mods if any(p.startswith("_") for p in m.split("."))]
            elif isinstance(node, ast.Import):
                private += [f"{path.name}: import {a.name}" for a in node.names
                            if a.name.startswith("optuna") and any(p.startswith("_") for p in a.name.split("."))]
            elif isinstance(node, ast.Attribute) and node.attr in ("_storage", "_trial_id", "_study_id", "_backend"):
                private.append(f"{path.name}:{node.lineno}: .{node.attr}")
    assert private == []


# ------------------------------------------------------------------ the real CLI
def _cli(out: Path, trials: int, *extra: str) -> list[str]:
    import sys

    toy = dict(variant="toy", batch_size=4, seq_len=32, val_games=8, steps_per_chunk=2, val_every=2,
               checkpoint_every=400, total_steps=4, warmup_steps=1)
    (out.parent / "base.json").write_text(json.dumps(toy))
    (out.parent / "space.json").write_text(json.dumps({
        "lr": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
        "weight_decay": {"type": "float", "low": 0.0, "high": 0.1}, "warmup_steps": 1}))
    return [sys.executable, "-m", "pawn.cli", "sweep", "--run-type", "pretrain", "--trials", str(trials),
            "--base-config", str(out.parent / "base.json"), "--space", str(out.parent / "space.json"),
            "--pruner", "none", "--out", str(out), *extra]


def _env():
    return {**os.environ, "JAX_PLATFORMS": "cpu"}


@pytest.mark.slow
def test_cli_continuing_a_seeded_sweep_draws_new_parameters(tmp_path):
    import subprocess

    out = tmp_path / "sw"
    for n in (1, 2):  # the README's way to continue: the same command with a larger --trials
        r = subprocess.run(_cli(out, n, "--seed", "3"), env=_env(), capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
    trials = optuna.load_study(study_name="pretrain", storage=_db(tmp_path)).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    assert trials[1].params["lr"] != trials[0].params["lr"]  # was equal: the sampler restarted from the seed


@pytest.mark.slow
def test_cli_worker_suspended_past_grace_goes_on_after_its_trial_is_failed(tmp_path):
    import signal
    import subprocess

    from pawn.sweep.study import open_shared

    out = tmp_path / "sw"
    cmd = _cli(out, 1, "--heartbeat-s", "1", "--grace-s", "3")
    base = json.loads((tmp_path / "base.json").read_text())
    (tmp_path / "base.json").write_text(json.dumps({**base, "total_steps": 40}))  # a trial long enough to stop
    p = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 400
    while time.time() < deadline:
        time.sleep(0.5)
        try:
            t = optuna.load_study(study_name="pretrain", storage=_db(tmp_path)).trials
            if t and t[0].intermediate_values:
                break  # training, past its first validation
        except Exception:  # no study yet
            pass
    p.send_signal(signal.SIGSTOP)
    try:
        time.sleep(4.5)  # past --grace-s
        other = open_shared(SweepSettings.load(run_type="pretrain", trials=1, heartbeat_s=1, grace_s=3, out=out))
        with other.lock():  # another worker's stale check
            assert other.fail_stale() == [0]
    finally:
        p.send_signal(signal.SIGCONT)
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "Cannot tell" not in err
    assert "trial 0 was marked failed while it ran" in err and "its retry is trial 1" in err
    trials = optuna.load_study(study_name="pretrain", storage=_db(tmp_path)).trials
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]  # the worker ran the retry
    assert trials[1].params == trials[0].params and max(trials[0].intermediate_values) < 40
    assert trials[0].user_attrs.get("reason") is None  # stopped early: nothing of the stopped run was told


# ------------------------------------------------------------------ the compilation cache
def test_a_damaged_compilation_cache_entry_is_replaced_once(tmp_path):
    # JAX warned about a damaged entry and recompiled on every later run, never rewriting it.
    import warnings

    import jax
    import jax.numpy as jnp

    from pawn.sweep.study import compilation_cache

    cache = tmp_path / "jax-cache"

    def compile_once():  # a new function object each time: no in-memory hit, the persistent cache is read
        return float(jax.jit(lambda x: jnp.sin(x) * 3.0 + 1.0)(jnp.float32(0.5)))

    logs = []
    with compilation_cache(cache, logs.append):
        expected = compile_once()
    entries = sorted(cache.glob("jit__lambda*-cache"))
    assert len(entries) == 1 and logs == []
    entries[0].write_bytes(b"not a zstd frame" * 8)  # damaged, e.g. by a torn write
    for _ in range(2):
        with warnings.catch_warnings(record=True) as seen, compilation_cache(cache, logs.append):
            warnings.simplefilter("always")
            assert compile_once() == expected
        assert not [w for w in seen if "persistent compilation cache" in str(w.message)]
    assert len(logs) == 1 and "could not be read" in logs[0] and "removed, compiled and written again" in logs[0]
    assert entries[0].exists() and entries[0].read_bytes() != b"not a zstd frame" * 8


# ------------------------------------------------------------------ workers on accelerators
def test_worker_env_gives_a_device_per_worker_and_splits_a_shared_one():
    from pawn.sweep.study import worker_env

    one_each = [worker_env(i, 2, {"A": "1"}, ["0", "1"]) for i in range(2)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in one_each] == ["0", "1"] and [e["PAWN_SWEEP_WORKER"] for e in one_each] == ["0", "1"]
    assert not any("XLA_PYTHON_CLIENT_MEM_FRACTION" in e or "XLA_PYTHON_CLIENT_PREALLOCATE" in e for e in one_each)
    three_on_two = [worker_env(i, 3, {}, ["3", "5"]) for i in range(3)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in three_on_two] == ["3", "5", "3"]
    assert [e.get("XLA_PYTHON_CLIENT_MEM_FRACTION") for e in three_on_two] == ["0.450", None, "0.450"]
    assert [e.get("XLA_PYTHON_CLIENT_PREALLOCATE") for e in three_on_two] == ["false", None, "false"]
    four_on_one = [worker_env(i, 4, {}, ["0"]) for i in range(4)]
    assert {e["XLA_PYTHON_CLIENT_MEM_FRACTION"] for e in four_on_one} == {"0.225"}
    mine = worker_env(0, 2, {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.3"}, ["0"])  # the user's setting wins
    assert mine["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.3" and "XLA_PYTHON_CLIENT_PREALLOCATE" not in mine
    assert worker_env(1, 2, {"B": "2"}, []) == {"B": "2", "PAWN_SWEEP_WORKER": "1"}  # CPU: nothing else


def test_visible_gpus_reads_cuda_visible_devices_and_respects_a_cpu_platform():
    from pawn.sweep.study import visible_gpus

    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 7"}) == ["2", "7"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == [] and visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert visible_gpus({"JAX_PLATFORMS": "cpu"}) == []


@pytest.mark.slow
def test_cli_workers_each_receive_their_device_settings(tmp_path):
    # --workers W started W processes that each let JAX preallocate most of one shared device.
    import re
    import subprocess

    from pawn.sweep.study import WORKER_ENV_KEYS

    out = tmp_path / "sw"
    r = subprocess.run(_cli(out, 1, "--seed", "1"), env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]  # the study holds its total: the workers below only start
    # the settings of the test process itself are not the user's (an in-process `pawn bench` test sets
    # XLA_PYTHON_CLIENT_PREALLOCATE in os.environ, and a user's own value would be kept, as designed)
    clean = {k: v for k, v in _env().items() if k not in WORKER_ENV_KEYS}
    r = subprocess.run(_cli(out, 1, "--workers", "3"), env={**clean, "CUDA_VISIBLE_DEVICES": "3,5"},
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "on devices 3, 5, 3" in r.stderr
    got = dict(re.findall(r"^worker (\d) \(pid \d+\): (.*)$", r.stderr, re.M))
    assert got == {"0": "CUDA_VISIBLE_DEVICES=3, XLA_PYTHON_CLIENT_PREALLOCATE=false, XLA_PYTHON_CLIENT_MEM_FRACTION=0.450",
                   "1": "CUDA_VISIBLE_DEVICES=5",
                   "2": "CUDA_VISIBLE_DEVICES=3, XLA_PYTHON_CLIENT_PREALLOCATE=false, XLA_PYTHON_CLIENT_MEM_FRACTION=0.450"}


# ------------------------------------------------------------------ leftovers of a new-user trial
def test_best_config_paths_are_relative_to_the_file_and_move_with_it(tmp_path, monkeypatch):
    # best_config.json kept relative corpus_dir / backbone paths and failed from another directory;
    # then it stored them absolute: not portable to another checkout, and the report's Compare listed
    # `/abs/runs/base` as differing from the same backbone given as `runs/base`.
    import shutil

    from pawn.sweep.study import open_study, run_worker, summarize
    from pawn.train.adapt_config import AdaptSettings

    class WithPaths(_Runner):
        def config(self, params, trial_dir):
            return {**params, "cache_dir": "cache", "backbone": "runs/base", "data": "owner/games", "out": str(trial_dir)}

    root = tmp_path / "checkout"
    monkeypatch.chdir(root.mkdir() or root)
    (root / "cache").mkdir()
    (root / "runs" / "base").mkdir(parents=True)
    s = SweepSettings.load(run_type="pretrain", trials=1, pruner="none", out="runs/sw", compilation_cache="none")
    run_worker(s, log=lambda m: None, runner=WithPaths(), space=dict(SPACE))
    res = summarize(s, *open_study(s), command=WithPaths.command)
    cfg = json.loads(res.best_config.read_text())
    assert cfg["cache_dir"] == "../../cache" and cfg["backbone"] == "../base"
    assert cfg["data"] == "owner/games"  # not a local path: a Hub id, left as it is
    # read back from where it was written: the same spelling as given
    ad = AdaptSettings.load(config_file=res.best_config)
    assert (ad.backbone, ad.cache_dir, ad.data) == ("runs/base", Path("cache"), "owner/games")
    # another checkout, read from another directory: the paths follow the file
    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(root, moved)
    monkeypatch.chdir(tmp_path)
    ad = AdaptSettings.load(config_file=moved / "runs" / "sw" / "best_config.json")
    assert (ad.backbone, ad.cache_dir) == ("elsewhere/copy/runs/base", Path("elsewhere/copy/cache"))
    # a file written before (absolute paths), and one whose relative paths are from the working directory, read as before
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"backbone": str(root / "runs" / "base"), "cache_dir": str(root / "cache")}))
    ad = AdaptSettings.load(config_file=old)
    assert (ad.backbone, ad.cache_dir) == (str(root / "runs" / "base"), root / "cache")
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "cwd.json").write_text(json.dumps({"backbone": "checkout/runs/base"}))
    assert AdaptSettings.load(config_file=tmp_path / "cfg" / "cwd.json").backbone == "checkout/runs/base"


def test_a_moved_config_file_names_the_file_its_missing_paths_were_read_relative_to(tmp_path):
    # pawn adapt --config /tmp/x/best_config.json (a best_config.json copied away from the runs it
    # names) said "BACKBONE ../tiny/variants/large: no such checkpoint directory", not that the
    # path is read relative to the file.
    import subprocess
    import sys

    (tmp_path / "x").mkdir()
    conf = tmp_path / "x" / "best_config.json"
    conf.write_text(json.dumps({"backbone": "../tiny/variants/large", "strategy": "lora", "data": "games.pgn"}))
    run = lambda *a: subprocess.run([sys.executable, "-m", "pawn.cli", "adapt", *a], cwd=tmp_path, capture_output=True,
                                    text=True, timeout=300)
    r = run("--config", str(conf))
    assert (r.returncode, r.stderr.strip()) == (1, (
        f"error: BACKBONE ../tiny/variants/large (read relative to {conf}, as {tmp_path / 'tiny' / 'variants' / 'large'}, "
        "nor found from the working directory): no such checkpoint directory, and not a Hugging Face Hub id (owner/name)"))
    (tmp_path / "tiny" / "variants" / "large").mkdir(parents=True)  # found beside the file: the next path, --data
    r = run("--config", str(conf))
    assert (r.returncode, r.stderr.strip()) == (1, (
        f"error: --data games.pgn (read relative to {conf}, as {tmp_path / 'x' / 'games.pgn'}, nor found from the "
        "working directory): no such file or folder, and not a Hugging Face Hub id (owner/name)"))
    r = run("../tiny/variants/large", "--config", str(conf))  # given on the command line: from the working directory
    assert (r.returncode, r.stderr.strip()) == (1, "error: BACKBONE ../tiny/variants/large: no such checkpoint directory, "
                                                   "and not a Hugging Face Hub id (owner/name)")


def test_cli_unwritable_or_garbage_storage_is_one_line(tmp_path):
    from typer.testing import CliRunner

    from pawn.cli import app

    (tmp_path / "garbage.log").write_bytes(bytes(range(256)) * 2)
    for storage in ("sqlite:////proc/pawn-nope/x.db", str(tmp_path / "garbage.log")):
        r = CliRunner().invoke(app, ["sweep", "--run-type", "pretrain", "--storage", storage, "--out", str(tmp_path / "o")])
        assert r.exit_code == 2 and "Traceback" not in r.output and r.output.count("\n") <= 2, r.output
        assert r.output.startswith("error: --storage") and "cannot" in r.output


def test_a_spawned_worker_leaves_best_config_to_its_parent(tmp_path, monkeypatch):
    # Each --workers process wrote a partial best_config.json before the parent's final one.
    from pawn.sweep.study import run_sweep

    s = _settings(tmp_path, 1)
    monkeypatch.setenv("PAWN_SWEEP_WORKER", "1")
    res = run_sweep(s, log=lambda m: None, runner=_Runner())
    assert res.best is not None and res.best_config is None and not (tmp_path / "sw" / "best_config.json").exists()
    monkeypatch.delenv("PAWN_SWEEP_WORKER")
    assert run_sweep(s, log=lambda m: None, runner=_Runner()).best_config == tmp_path / "sw" / "best_config.json"


def test_a_population_meeting_waiting_retries_leaves_no_trial_waiting(tmp_path, monkeypatch):
    # Its own enqueued member was not used (the older WAITING retry was asked instead) and stayed WAITING.
    import pawn.sweep.population as pop
    from pawn.sweep.study import open_study, run_worker
    from pawn.sweep.trials import TrialOutcome

    monkeypatch.setattr(pop, "run_pretrain_population", lambda configs, reporters, log: [
        TrialOutcome(best_val_loss=1.0, reason="completed", step=1, run_dir=None, config=c, val_losses={1: 1.0})
        for c in configs])
    s = _settings(tmp_path, 2, population=2)
    study, _ = open_study(s)
    for lr in (1e-3, 2e-3):  # two retries waiting
        study.enqueue_trial({"lr": lr, "weight_decay": 0.0})
    study = run_worker(s, log=lambda m: None, runner=_Runner(), space=dict(SPACE))
    assert [(t.state, t.params.get("lr")) for t in study.trials] == [(TrialState.COMPLETE, 1e-3), (TrialState.COMPLETE, 2e-3)]


# ------------------------------------------------------------------ a schema created by an outside process
def test_a_schema_created_by_optuna_dashboard_at_the_same_instant_is_opened_not_refused(tmp_path):
    """CI stop 31: the test's own ``optuna.load_study`` (as optuna-dashboard does, without PAWN's
    creation lock) created the tables of a fresh study.db while ``pawn sweep`` was creating them,
    and the sweep exited 2 with "UNIQUE constraint failed: alembic_version". Here a real second
    process creates Optuna's whole schema at the worst instant: after PAWN's existence check,
    before its first CREATE TABLE."""
    import subprocess
    import sys

    from optuna.storages._rdb import models
    from sqlalchemy import event

    from pawn.sweep.storage import open_storage

    url = _db(tmp_path)
    (tmp_path / "sw").mkdir()
    fired = []

    def outside_process_creates_the_schema(target, connection, **kw):
        if not fired:
            fired.append([t.name for t in kw.get("tables", [])])
            subprocess.run([sys.executable, "-c", f"from optuna.storages import RDBStorage; RDBStorage({url!r})"],
                           check=True, timeout=120)

    event.listen(models.BaseModel.metadata, "before_create", outside_process_creates_the_schema)
    try:
        storage = open_storage(url, heartbeat_s=1, grace_s=2)
    finally:
        event.remove(models.BaseModel.metadata, "before_create", outside_process_creates_the_schema)
    assert fired and "studies" in fired[0]  # the race really happened: PAWN was about to create the tables
    sid = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "pretrain")
    assert [s.study_name for s in storage.get_all_studies()] == ["pretrain"] and sid >= 1


def test_a_ctrl_c_python_drops_in_the_last_trials_final_moments_still_ends_the_sweep_with_it(tmp_path):
    # A slow-run failure: the SIGINT landed in a weakref callback after the last trial's last chunk
    # check; Python printed "Exception ignored … KeyboardInterrupt", the trial loop ended normally and
    # `pawn sweep` exited 0 instead of 130. Here the runner's trial ends with a real dropped SIGINT.
    import signal
    import weakref

    from pawn.sweep.study import run_worker
    from pawn.sweep.trials import CTRL_C, ctrl_c_latch

    class Dropping(_Runner):
        def run(self, config, hooks):
            out = super().run(config, hooks)

            class Obj:
                pass

            obj = Obj()
            ref = weakref.ref(obj, lambda _r: (os.kill(os.getpid(), signal.SIGINT), sum(range(10_000))))
            del obj  # the handler's KeyboardInterrupt is raised inside the callback and dropped
            assert ref() is None and CTRL_C.is_set()
            return out

    with ctrl_c_latch():
        with pytest.raises(KeyboardInterrupt):
            run_worker(_settings(tmp_path, 1), log=lambda m: None, runner=Dropping(), space=dict(SPACE))
    import optuna

    trials = optuna.load_study(study_name="pretrain", storage=_db(tmp_path)).trials
    assert [t.state for t in trials] == [TrialState.FAIL]  # interrupted, so re-run later, not counted done
