"""`pawn sweep` (issue 15): search spaces and --space files, the pruner hook's global-step
reports, storage URLs, populations reproducing sequential runs, and end-to-end studies (pruning a
bad trial, the best config reproducing its val loss, Ctrl-C + re-run, two workers at once)."""

from __future__ import annotations

import json
import os
import signal
import re
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from pawn.settings import PretrainConfig
from pawn.sweep.settings import SweepSettings
from pawn.sweep.space import SPACES, SpaceError, derive, load_space, suggest
from pawn.sweep.storage import storage_url
from pawn.sweep.trials import PrunerHook, PretrainTrialRunner
from pawn.train.run import ValidationEvent

TOY = dict(variant="toy", batch_size=4, seq_len=32, val_games=8, steps_per_chunk=2, val_every=2, checkpoint_every=8,
           total_steps=8, warmup_steps=1)
KEY = PretrainTrialRunner(TOY).objective_key


def _env():
    # The package under test as installed (a clean `pip install .` has no compiled engine in src/).
    return {**os.environ, "JAX_PLATFORMS": "cpu"}


def _sweep_cmd(out: Path, trials: int, *extra: str, steps: int = 8) -> list[str]:
    """A pretraining sweep of the toy model; ``steps`` > 8 makes each trial long (validation every 20
    steps, one checkpoint at the end) so a test can signal it mid-trial with seconds to spare."""
    base = TOY if steps == 8 else {**TOY, "total_steps": steps, "val_every": 20, "checkpoint_every": steps}
    (out.parent / "base.json").write_text(json.dumps(base))
    (out.parent / "space.json").write_text(json.dumps({
        "lr": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
        "weight_decay": {"type": "float", "low": 0.0, "high": 0.1}, "batch_size": 4, "warmup_steps": 1,
        "total_steps": steps}))
    return [sys.executable, "-m", "pawn.cli", "sweep", "--run-type", "pretrain", "--trials", str(trials),
            "--base-config", str(out.parent / "base.json"), "--space", str(out.parent / "space.json"),
            "--pruner", "median", "--out", str(out), *extra]


# ------------------------------------------------------------------ spaces
def test_spaces_follow_spec_6_1():
    lora = SPACES["lora"]
    assert lora["lr"] == FloatDistribution(1e-5, 1e-2, log=True)
    assert lora["batch_size"] == CategoricalDistribution([32, 64, 128, 256])
    assert lora["rank"] == CategoricalDistribution([2, 4, 8, 16, 32])
    assert lora["patience"] == IntDistribution(5, 20)
    assert SPACES["rosa"]["rosa_warmup_steps"] == IntDistribution(32, 256, step=32)
    assert SPACES["pretrain"]["warmup_steps"] == IntDistribution(500, 5000, step=500)
    assert SPACES["architecture"]["n_layers"] == IntDistribution(8, 24, step=2)
    # rosa-ratio: bottleneck_dim = round(budget·r / 16,384), density = budget·(1−r) / 8,388,608
    d = derive("rosa-ratio", {"total_budget": 250_000, "bottleneck_ratio": 0.4, "lr": 1e-3})
    assert d == {"lr": 1e-3, "bottleneck_dim": 6, "density": pytest.approx(250_000 * 0.6 / 8_388_608)}


def test_space_file_overrides_and_fixes_fields(tmp_path):
    f = tmp_path / "space.toml"
    f.write_text('rank = {type = "categorical", choices = [4]}\nlr = {type = "float", low = 0.001, high = 0.002}\n'
                 'patience = 3\nextra = {type = "int", low = 1, high = 3, step = 2}\n')
    space = load_space("lora", f)
    assert space["rank"] == CategoricalDistribution([4]) and space["patience"] == 3
    assert space["lr"] == FloatDistribution(0.001, 0.002) and space["extra"] == IntDistribution(1, 3, step=2)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    p = suggest(study.ask(), space)
    assert p["rank"] == 4 and p["patience"] == 3 and 0.001 <= p["lr"] <= 0.002 and p["extra"] in (1, 3)
    assert set(p) == set(space)


@pytest.mark.parametrize("text, needle", [
    ('lr = {type = "uniform", low = 0, high = 1}', "type must be float, int or categorical"),
    ('lr = {type = "float", low = 0.1}', "needs high"),
    ('lr = {type = "float", low = 1, high = 2, lo = 3}', "unknown keys"),
    ('rank = {type = "categorical", choices = []}', "non-empty"),
])
def test_bad_space_file_is_one_line_naming_file_and_field(tmp_path, text, needle):
    f = tmp_path / "s.toml"
    f.write_text(text + "\n")
    with pytest.raises(SpaceError) as e:
        load_space("lora", f)
    assert str(f) in str(e.value) and needle in str(e.value) and "\n" not in str(e.value)


def test_unknown_strategy_and_missing_adapter_fields():
    with pytest.raises(SpaceError, match="known: lora"):
        load_space("nope")
    with pytest.raises(ValueError, match="--strategy, --checkpoint and --data"):
        SweepSettings.load(out="x", strategy="lora")


def test_storage_urls(tmp_path):
    assert storage_url(None, tmp_path) == f"sqlite:///{(tmp_path / 'study.db').resolve()}"
    assert storage_url("postgresql://u@h/db", tmp_path) == "postgresql://u@h/db"
    assert storage_url(str(tmp_path / "s.log"), tmp_path) == f"journal:{(tmp_path / 's.log').resolve()}"
    assert storage_url(str(tmp_path / "a.db"), tmp_path) == f"sqlite:///{(tmp_path / 'a.db').resolve()}"


# ------------------------------------------------------------------ pruner hook
class _Ctx:
    def __init__(self, step):
        self.step, self.stop = step, None

    def request_stop(self, reason, by=""):
        self.stop = reason


def test_pruner_hook_reports_global_steps_once_and_requests_stop():
    study = optuna.create_study(pruner=optuna.pruners.ThresholdPruner(upper=5.0))
    trial = study.ask()
    hook = PrunerHook(trial, lambda m: m["v"])
    hook.on_event(ValidationEvent(100, {"v": 4.0}))
    hook.on_event(ValidationEvent(100, {"v": 1.0}))  # a resumed trial re-validating step 100: not re-reported
    ctx = _Ctx(100)
    hook.on_chunk(ctx)
    assert ctx.stop is None and study.trials[0].intermediate_values == {100: 4.0}
    hook.on_event(ValidationEvent(200, {"v": 6.0}))
    ctx = _Ctx(200)
    hook.on_chunk(ctx)
    assert ctx.stop == "pruned" and study.trials[0].intermediate_values == {100: 4.0, 200: 6.0} and hook.best == 4.0
    nan_hook = PrunerHook(study.ask(), lambda m: m["v"])
    nan_hook.on_event(ValidationEvent(10, {"v": float("nan")}))
    ctx = _Ctx(10)
    nan_hook.on_chunk(ctx)
    assert ctx.stop == "nonfinite_val"


# ------------------------------------------------------------------ populations
class _Recorder:
    intermediate_values: dict = {}

    def report(self, v, s):
        pass

    def should_prune(self):
        return False


def _population_vs_sequential(tmp_path, members, **over):
    from pawn.sweep.population import run_pretrain_population
    from pawn.train.pretrain import run_pretrain

    base = {**TOY, **over}
    configs = [PretrainConfig.load(**{**base, **m, "out": str(tmp_path / f"m{i}")}).model_dump(mode="json") for i, m in enumerate(members)]
    reps = [PrunerHook(_Recorder(), lambda m: m[KEY]) for _ in members]
    outs = run_pretrain_population(configs, reps, log=lambda m: None)
    for i, c in enumerate(configs):
        seq = PrunerHook(_Recorder(), lambda m: m[KEY])
        res = run_pretrain(PretrainConfig.load(**c), log=lambda m: None, progress=False, install_signal_handlers=False, hooks=[seq])
        train = {r["step"]: r["loss"] for r in map(json.loads, open(res.run_dir / "metrics.jsonl")) if r.get("type") == "train"}
        assert outs[i].reason == "completed" and set(outs[i].val_losses) == set(seq.reported) == set(range(2, base["total_steps"] + 1, 2))
        for s, v in seq.reported.items():
            assert outs[i].val_losses[s] == pytest.approx(v, rel=2e-5, abs=2e-5), (i, s)
        assert set(outs[i].train_losses) == set(train)
        for s, v in train.items():
            assert outs[i].train_losses[s] == pytest.approx(v, rel=2e-5, abs=2e-5), (i, s)
    return outs


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_population_of_2_reproduces_sequential_runs(tmp_path):
    outs = _population_vs_sequential(tmp_path, [dict(lr=3e-4, weight_decay=0.0), dict(lr=2e-3, weight_decay=0.1, warmup_steps=0)],
                                     total_steps=4)
    assert outs[0].val_losses[4] != pytest.approx(outs[1].val_losses[4], abs=1e-3)  # the members really differ


@pytest.mark.slow
def test_population_of_4_reproduces_sequential_runs(tmp_path):
    _population_vs_sequential(tmp_path, [dict(lr=3e-4, weight_decay=0.0), dict(lr=1e-3, weight_decay=0.05, warmup_steps=2),
                                         dict(lr=2e-3, weight_decay=0.1, warmup_steps=0), dict(lr=5e-4, weight_decay=0.01, warmup_steps=4)])


def test_population_refuses_members_differing_in_shared_fields():
    from pawn.sweep.population import PopulationError, check_population

    check_population([{"lr": 1e-3, "batch_size": 4, "out": "a"}, {"lr": 2e-3, "batch_size": 4, "out": "b"}])
    with pytest.raises(PopulationError, match="differ in batch_size"):
        check_population([{"lr": 1e-3, "batch_size": 4}, {"lr": 1e-3, "batch_size": 8}])


# ------------------------------------------------------------------ end to end
def _study(out: Path) -> optuna.Study:
    return optuna.load_study(study_name="pretrain", storage=f"sqlite:///{out / 'study.db'}")


@pytest.mark.slow
def test_sweep_prunes_bad_trial_continues_and_best_config_reproduces(tmp_path):
    out = tmp_path / "sw"
    r = subprocess.run(_sweep_cmd(out, 2, "--seed", "0"), env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    study = _study(out)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
    first_values = [t.value for t in study.trials]
    # one line per validation of the running trial (a trial printed nothing until it ended)
    lines = re.findall(r"^trial (\d+) step (\d+): val loss ([\d.]+) \(trial best ([\d.]+)(?:; study best ([\d.]+), trial (\d+))?\)$",
                       r.stderr, re.M)
    want = []
    for t in study.trials:
        for step, v in sorted(t.intermediate_values.items()):
            best_so_far = min(x for k, x in t.intermediate_values.items() if k <= step)
            study_best = ("", "") if t.number == 0 else (f"{first_values[0]:.4f}", "0")
            want.append((str(t.number), str(step), f"{v:.4f}", f"{best_so_far:.4f}", *study_best))
    assert lines == want and len(want) == 8, r.stderr[-3000:]
    study.enqueue_trial({"lr": 1.0})  # deliberately bad; the re-run continues the same study with it
    r = subprocess.run(_sweep_cmd(out, 3, "--seed", "0", "--json", str(tmp_path / "all.json")), env=_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    trials = json.loads((tmp_path / "all.json").read_text())["trials"]
    assert [t["value"] for t in trials[:2]] == first_values
    assert trials[2]["params"]["lr"] == 1.0 and trials[2]["state"] == "PRUNED" and trials[2]["steps"] == 2
    assert "1 pruned" in r.stdout
    best = min((t for t in trials if t["state"] == "COMPLETE"), key=lambda t: t["value"])
    cfg = json.loads((out / "best_config.json").read_text())
    assert cfg["lr"] == best["params"]["lr"] and "out" not in cfg
    r = subprocess.run([sys.executable, "-m", "pawn.cli", "pretrain", "--config", str(out / "best_config.json"),
                        "--out", str(tmp_path / "again")], env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    vals = [json.loads(line) for line in open(tmp_path / "again" / "metrics.jsonl")]
    again = min(v[KEY] for v in vals if v.get("type") == "val")
    assert again == pytest.approx(best["value"], rel=1e-6)


@pytest.mark.slow
def test_ctrl_c_then_rerun_continues_the_study(tmp_path):
    out = tmp_path / "sw"
    # 400-step trials (~12 s each here): the Ctrl-C lands in the second trial's training with seconds
    # to spare, not after a short sweep has already ended (it did once: 3 trials of 8 steps in 10 s).
    cmd = _sweep_cmd(out, 3, steps=400)
    p = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:
        time.sleep(0.2)
        if (out / "study.db").exists():
            try:
                trials = _study(out).trials
            except Exception:  # the study may not exist yet
                continue
            if any(t.number == 1 and t.state == TrialState.RUNNING and t.intermediate_values for t in trials):
                break  # the second trial has reported a validation: mid-trial
    assert p.poll() is None, "the sweep ended before its second trial was seen mid-training"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-2000:]
    before = _study(out).trials
    done_before = [t for t in before if t.state == TrialState.COMPLETE]
    assert [t.number for t in done_before] == [0] and all(t.state != TrialState.RUNNING for t in before)
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    after = _study(out).trials
    assert [t.value for t in after[:len(done_before)]] == [t.value for t in done_before]  # the same study, continued
    assert sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in after) == 3
    assert len(optuna.get_all_study_names(f"sqlite:///{out / 'study.db'}")) == 1


@pytest.mark.slow
def test_two_workers_started_at_once_on_a_fresh_sqlite_file(tmp_path):
    out = tmp_path / "sw"
    cmd = _sweep_cmd(out, 2)
    procs = [subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=600) for p in procs]
    for p, (o, e) in zip(procs, results):
        assert p.returncode == 0, e[-2000:]
        assert "database is locked" not in e
    assert optuna.get_all_study_names(f"sqlite:///{out / 'study.db'}") == ["pretrain"]
    trials = _study(out).trials
    assert sum(t.state == TrialState.COMPLETE for t in trials) >= 2 and not any(t.state == TrialState.RUNNING for t in trials)


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_population_sweep_tells_each_member_to_the_study(tmp_path):
    from pawn.sweep.study import run_sweep

    (tmp_path / "base.json").write_text(json.dumps({**TOY, "total_steps": 4}))
    (tmp_path / "space.json").write_text(json.dumps({"lr": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
                                                     "beta2": {"type": "categorical", "choices": [0.9, 0.95, 0.99]},
                                                     "batch_size": 4, "total_steps": 4, "warmup_steps": 1}))
    s = SweepSettings.load(run_type="pretrain", trials=2, population=2, pruner="none", seed=3, out=tmp_path / "sw",
                           base_config=tmp_path / "base.json", space=tmp_path / "space.json")
    res = run_sweep(s, log=lambda m: None)
    trials = res.trials
    assert [t["state"] for t in trials] == ["COMPLETE", "COMPLETE"]
    assert trials[0]["population"] == trials[1]["population"] == [0, 1]
    assert trials[0]["params"]["beta2"] == trials[1]["params"]["beta2"]  # not array-valued: shared through the queue
    assert trials[0]["params"]["lr"] != trials[1]["params"]["lr"]
    assert set(trials[0]["intermediate"]) == {"2", "4"} and trials[0]["value"] == min(trials[0]["intermediate"].values())
    best = min(trials, key=lambda t: t["value"])
    assert json.loads(res.best_config.read_text())["lr"] == best["params"]["lr"]


@pytest.mark.slow
def test_a_killed_worker_leaves_no_trial_running(tmp_path):
    out = tmp_path / "sw"
    hb = ["--heartbeat-s", "1", "--grace-s", "4"]
    cmd = _sweep_cmd(out, 1, *hb, steps=400)  # a trial of seconds: the kill lands in it, not after it
    p = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:
        time.sleep(0.2)
        try:
            # mid-trial: every parameter sampled and its run started (`run_dir` is set after the last
            # suggest_*; a kill between two suggest_* calls, seen in CI, retries the sampled ones only)
            if any(t.state == TrialState.RUNNING and "run_dir" in t.user_attrs for t in _study(out).trials):
                break  # (a kill before the first heartbeat: the test below)
        except Exception:  # no study yet
            pass
    p.kill()  # SIGKILL mid-trial: no chance to record anything
    p.wait()
    assert [t.state for t in _study(out).trials] == [TrialState.RUNNING]
    time.sleep(5)  # past the grace period
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    trials = _study(out).trials
    assert trials[0].state == TrialState.FAIL
    assert trials[1].state == TrialState.COMPLETE and trials[1].system_attrs.get("failed_trial") == trials[0].number
    assert set(trials[0].params) == {"lr", "weight_decay"}
    assert trials[1].params == trials[0].params  # retried with the same parameters


@pytest.mark.slow
def test_a_trial_killed_before_its_first_heartbeat_is_failed_and_retried(tmp_path):
    # A worker killed between Optuna creating its trial and the first heartbeat left a trial that
    # Optuna's stale check skips (it compares heartbeats only): it stayed RUNNING for ever (seen in CI).
    from pawn.sweep.storage import open_storage

    out = tmp_path / "sw"
    out.mkdir()
    storage = open_storage(f"sqlite:///{out / 'study.db'}", heartbeat_s=1, grace_s=2)
    orphan = optuna.create_study(study_name="pretrain", storage=storage).ask()  # no heartbeat, no params
    time.sleep(2.5)  # past the grace period
    r = subprocess.run(_sweep_cmd(out, 1, "--heartbeat-s", "1", "--grace-s", "2"), env=_env(), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "trials [0] had no heartbeat for over --grace-s" in r.stdout + r.stderr
    trials = _study(out).trials
    assert trials[0].number == orphan.number and trials[0].state == TrialState.FAIL
    assert "no heartbeat ever recorded" in trials[0].user_attrs["fail_reason"]
    assert trials[1].state == TrialState.COMPLETE and trials[1].system_attrs.get("failed_trial") == 0
    assert not any(t.state == TrialState.RUNNING for t in trials)


def test_a_live_trial_without_a_heartbeat_yet_is_left_running(tmp_path):
    from pawn.sweep.study import open_shared

    s = SweepSettings.load(run_type="pretrain", heartbeat_s=1, grace_s=2, out=tmp_path / "sw")
    shared = open_shared(s)
    shared.study.ask()  # no heartbeat, no worker attribute
    assert shared.fail_stale() == []  # started just now: within the grace period
    assert [t.state for t in shared.study.trials] == [TrialState.RUNNING]
    time.sleep(2.5)
    assert shared.fail_stale() == [0]
    assert shared.fail_stale() == []  # failed once, retried once
    trials = shared.study.trials
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert "no heartbeat ever recorded" in trials[0].user_attrs["fail_reason"]
    assert trials[1].system_attrs["failed_trial"] == 0


class _FakeRunner:
    """A run type whose trials take ``seconds`` and score 1.0; ``during(n)`` runs inside trial n."""

    command, objective_key = "pretrain", "val_loss"

    def __init__(self, during=lambda n: None, seconds=0.0):
        self.during, self.seconds, self.calls = during, seconds, 0

    def config(self, params, trial_dir):
        return {**params, "out": str(trial_dir)}

    def run(self, config, hooks):
        from pawn.sweep.trials import TrialOutcome

        self.during(self.calls)
        self.calls += 1
        time.sleep(self.seconds)
        return TrialOutcome(best_val_loss=1.0, reason="completed", step=1, run_dir=None, config=config,
                            val_losses={1: 1.0})


def _worker_settings(tmp_path, trials, **kw):
    return SweepSettings.load(run_type="pretrain", trials=trials, pruner="none", out=tmp_path / "sw", **kw)


def test_other_workers_running_trials_count_toward_trials(tmp_path):
    # W workers used to finish up to W - 1 trials past --trials (each counted finished trials only).
    from pawn.sweep.study import open_study, run_worker

    s = _worker_settings(tmp_path, 3)
    other, _ = open_study(s)  # another worker on the same storage
    runner = _FakeRunner(during=lambda n: other.ask() if n == 0 else None)
    study = run_worker(s, log=lambda m: None, runner=runner, space={"lr": FloatDistribution(1e-4, 1e-2, log=True)})
    assert runner.calls == 2  # its own 2 finished + the other worker's 1 running = 3
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.RUNNING, TrialState.COMPLETE]
    logs = []
    run_worker(_worker_settings(tmp_path, 4), log=logs.append, runner=runner,
               space={"lr": FloatDistribution(1e-4, 1e-2, log=True)})
    assert runner.calls == 3 and logs[-1].startswith("stopped at 3 of 4 finished trials: RUNNING trials [1]")
    logs = []
    s = _worker_settings(tmp_path, 4)
    assert run_worker(s, log=logs.append, runner=runner, space={"lr": FloatDistribution(1e-4, 1e-2, log=True)})
    assert runner.calls == 3 and "RUNNING trials [1], 4 in all: nothing left" in logs[-1]


def test_a_population_is_cut_to_what_other_workers_leave(tmp_path, monkeypatch):
    import pawn.sweep.population as pop
    from pawn.sweep.study import open_study, run_worker
    from pawn.sweep.trials import TrialOutcome
    from pawn.train.pretrain import PretrainTask

    sizes = []

    def fake_population(configs, reporters, log):
        sizes.append(len(configs))
        return [TrialOutcome(best_val_loss=1.0, reason="completed", step=1, run_dir=None, config=c, val_losses={1: 1.0})
                for c in configs]

    class _PopulationRunner(_FakeRunner):
        task = PretrainTask  # its trials are pretraining runs: their population trainer is pawn's

    monkeypatch.setattr(pop, "run_pretrain_population", fake_population)
    s = _worker_settings(tmp_path, 4, population=2)
    other, _ = open_study(s)
    other.ask()  # another worker's running trial
    study = run_worker(s, log=lambda m: None, runner=_PopulationRunner(), space={"lr": FloatDistribution(1e-4, 1e-2, log=True)})
    assert sizes == [2, 1]  # 1 running elsewhere + 2 + 1 = 4 (was [2, 2]: 5 trials)
    assert sum(t.state == TrialState.COMPLETE for t in study.trials) == 3


def test_a_killed_workers_stale_trial_stops_counting_and_is_retried(tmp_path):
    from pawn.sweep.study import open_study, run_worker

    s = _worker_settings(tmp_path, 2, heartbeat_s=1, grace_s=2)
    other, _ = open_study(s)

    def killed_worker(n):
        if n == 0:  # a worker that sampled its trial, beat once, then died
            t = other.ask({"lr": FloatDistribution(1e-4, 1e-2, log=True)})
            other._storage.record_heartbeat(t._trial_id)

    runner = _FakeRunner(during=killed_worker, seconds=2.5)  # the heartbeat is stale when trial 0 ends
    study = run_worker(s, log=lambda m: None, runner=runner, space={"lr": FloatDistribution(1e-4, 1e-2, log=True)})
    states = [t.state for t in study.trials]
    assert states == [TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE], states
    assert study.trials[2].system_attrs.get("failed_trial") == 1  # the dead worker's trial, retried
    assert study.trials[2].params == study.trials[1].params


def test_journal_storage_study_is_created_once_and_checked(tmp_path):
    from pawn.sweep.storage import fail_running_trials
    from pawn.sweep.study import open_shared, open_study
    from pawn.sweep.trials import SweepError

    s = SweepSettings.load(run_type="pretrain", storage=str(tmp_path / "study.log"), out=tmp_path / "sw")
    a, url = open_study(s)
    assert url == f"journal:{(tmp_path / 'study.log').resolve()}"
    running = a.ask()
    b = open_shared(s)  # load_if_exists: the same study
    assert b.study._study_id == a._study_id and len(b.study.trials) == 1
    assert fail_running_trials(b, "test: no worker runs") == [running.number]
    t = open_study(s)[0].trials[0]
    assert t.state == TrialState.FAIL and t.user_attrs["fail_reason"] == "test: no worker runs"
    with pytest.raises(SweepError, match="is a pretrain sweep over 'pretrain', not adapter over 'lora'"):
        open_study(SweepSettings.load(strategy="lora", checkpoint="x", data="y", study_name="pretrain",
                                      storage=str(tmp_path / "study.log"), out=tmp_path / "sw"))


def test_cli_bad_storage_and_space_are_one_line_errors(tmp_path):
    from typer.testing import CliRunner

    from pawn.cli import app

    r = CliRunner().invoke(app, ["sweep", "--run-type", "pretrain", "--storage", "nosuchdb://x", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "--storage nosuchdb://x: cannot open" in r.output and "Traceback" not in r.output
    (tmp_path / "s.json").write_text('{"lr": {"type": "float", "low": 1}}')
    r = CliRunner().invoke(app, ["sweep", "--run-type", "pretrain", "--space", str(tmp_path / "s.json"), "--out", str(tmp_path / "o2")])
    assert r.exit_code == 2 and "field lr: type float needs high" in r.output


@pytest.mark.slow
def test_workers_flag_spawns_processes_on_one_study(tmp_path):
    out = tmp_path / "sw"
    r = subprocess.run(_sweep_cmd(out, 2, "--workers", "2"), env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "started 2 workers" in r.stderr and "database is locked" not in r.stderr
    assert json.loads((out / "worker_config.json").read_text())["workers"] == 1
    trials = _study(out).trials
    assert sum(t.state == TrialState.COMPLETE for t in trials) >= 2 and not any(t.state == TrialState.RUNNING for t in trials)
    assert "2 completed" in r.stdout or "3 completed" in r.stdout
    # one summary (table, best, storage), the parent's; each worker only says it is done (issue 26)
    assert r.stdout.count(" completed, ") == 1 and r.stdout.count("best: trial") == 1 and r.stdout.count("storage: ") == 1, r.stdout
    assert sorted(line.split(" done:")[0] for line in r.stderr.splitlines() if " done: the study holds" in line) == ["worker 0", "worker 1"]


def test_spawned_workers_do_not_share_a_sampler_seed(monkeypatch):
    from pawn.sweep.study import make_sampler

    s = SweepSettings.load(run_type="pretrain", sampler="random", seed=5, out="x")
    draws = []
    for worker in ("0", "1"):
        monkeypatch.setenv("PAWN_SWEEP_WORKER", worker)
        study = optuna.create_study(sampler=make_sampler(s))
        draws.append(study.ask().suggest_float("lr", 0, 1))
    monkeypatch.delenv("PAWN_SWEEP_WORKER")
    again = optuna.create_study(sampler=make_sampler(s)).ask().suggest_float("lr", 0, 1)
    assert draws[0] != draws[1] and again == draws[0]


def test_a_ctrl_c_python_drops_in_a_callback_still_stops_the_next_chunk():
    # A slow-run failure: the sweep's SIGINT landed while a weakref callback ran; Python printed
    # "Exception ignored … KeyboardInterrupt" and the sweep went on to its next trial (exit 0, not 130).
    import os
    import signal
    import weakref

    from pawn.sweep.trials import CTRL_C, PrunerHook, ctrl_c_latch

    class Obj:
        pass

    before = signal.getsignal(signal.SIGINT)
    with ctrl_c_latch():
        obj = Obj()
        fired = []

        def callback(_ref):
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs inside this callback
            fired.append(sum(range(10_000)))  # bytecode after the signal: the handler's raise lands here

        ref = weakref.ref(obj, callback)
        del obj  # the callback's KeyboardInterrupt is printed and dropped by Python
        assert fired == [] and ref() is None and CTRL_C.is_set()
        with pytest.raises(KeyboardInterrupt):
            PrunerHook(None, lambda m: m["loss"]).on_chunk(None)
    assert signal.getsignal(signal.SIGINT) is before  # the previous handler is back
    # and the latch is clear: a later sweep in the same process (this test worker ran the adapter
    # population test next and was interrupted by the stale latch) is not stopped by it
    assert not CTRL_C.is_set()
    PrunerHook(None, lambda m: m["loss"]).on_chunk(None)


def test_opening_a_study_storage_prints_no_optuna_experimental_warning(tmp_path):
    """Every ``pawn sweep`` printed Optuna's ``ExperimentalWarning`` about its heartbeat callback (a
    ``storage.py:425:`` line a user reads as a fault); the storage opens without one."""
    import warnings

    from pawn.sweep.storage import open_storage

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        open_storage(f"sqlite:///{tmp_path / 'study.db'}", heartbeat_s=60, grace_s=900, retry_s=0)
    assert [str(w.message) for w in seen if issubclass(w.category, optuna.exceptions.ExperimentalWarning)] == []
