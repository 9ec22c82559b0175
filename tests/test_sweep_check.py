"""`pawn sweep` checks settings shared by every trial before any trial (new-user trial, "sweepcheck"):
base config, --space keys and ranges, a local --data path; base-config fields fix the searched
field; a sweep with no completed trial exits 1; best_config.json repeats the best trial's
data_seed; a Ctrl-C'd trial says so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
import pytest

from pawn.train.pretrain import PretrainTask
from typer.testing import CliRunner

from pawn.cli import app
from pawn.sweep import study as study_mod
from pawn.sweep.settings import SweepSettings
from pawn.sweep.space import SPACES
from pawn.sweep.study import prepare_space, run_sweep
from pawn.sweep.trials import SweepError
from pawn.sweep.trials import TrialOutcome


def _adapter(tmp_path: Path, backbone: Path, data: Path, *, base=None, space=None, strategy="lora", **over) -> SweepSettings:
    kw = {}
    if base is not None:
        (tmp_path / "base.json").write_text(json.dumps(base))
        kw["base_config"] = tmp_path / "base.json"
    if space is not None:
        (tmp_path / "space.json").write_text(json.dumps(space))
        kw["space"] = tmp_path / "space.json"
    return SweepSettings.load(**{"strategy": strategy, "checkpoint": str(backbone), "data": str(data), "trials": 3,
                                 "out": tmp_path / "sw", **kw, **over})


def _refused(s: SweepSettings) -> str:
    with pytest.raises(SweepError) as e:
        run_sweep(s, log=lambda m: None)
    assert not (s.out / "study.db").exists() and not s.out.exists()  # nothing created
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_missing_local_data_is_refused_before_any_trial(tmp_path, tiny_backbone):
    msg = _refused(_adapter(tmp_path, tiny_backbone, tmp_path / "nonexist"))
    assert msg.startswith("--data ") and str(tmp_path / "nonexist") in msg


def test_missing_data_via_cli_is_one_line_exit_1(tmp_path, tiny_backbone):
    res = CliRunner().invoke(app, ["sweep", "--strategy", "lora", "--checkpoint", str(tiny_backbone), "--data",
                                   str(tmp_path / "nonexist"), "--trials", "3", "--out", str(tmp_path / "sw")])
    assert res.exit_code == 1, res.output
    assert "--data" in res.output and "Traceback" not in res.output and not (tmp_path / "sw" / "study.db").exists()


def test_unknown_base_config_and_space_keys_name_their_file(tmp_path, tiny_backbone, shared_data):
    lichess = shared_data / "lichess"
    msg = _refused(_adapter(tmp_path, tiny_backbone, lichess, base={"lora_rnak": 4}))
    assert msg.startswith(f"--base-config {tmp_path / 'base.json'}: lora_rnak") and "not a setting of pawn adapt" in msg
    msg = _refused(_adapter(tmp_path, tiny_backbone, lichess, space={"lora_rnak": {"type": "categorical", "choices": [2]}}))
    assert msg.startswith(f"--space {tmp_path / 'space.json'}: lora_rnak") and "not a setting" in msg


def test_space_values_are_validated_at_their_ends_and_choices(tmp_path, tiny_backbone, shared_data):
    lichess = shared_data / "lichess"
    # film has no random adapter weights: any init_scale other than 1 is refused (the high end here)
    msg = _refused(_adapter(tmp_path, tiny_backbone, lichess, strategy="film",
                            space={"init_scale": {"type": "float", "low": 1.0, "high": 2.0}}))
    assert msg.startswith(f"--space {tmp_path / 'space.json'}: init_scale = 2:") and "film" in msg
    msg = _refused(_adapter(tmp_path, tiny_backbone, lichess, space={"init_scale": {"type": "float", "low": -1, "high": 2}}))
    assert msg.startswith(f"--space {tmp_path / 'space.json'}: init_scale = -1:"), msg
    # a categorical choice in the middle of the list is probed too
    msg = _refused(_adapter(tmp_path, tiny_backbone, lichess, space={"rank": {"type": "categorical", "choices": [2, 0, 4]}}))
    assert msg.startswith(f"--space {tmp_path / 'space.json'}: rank = 0: lora_rank"), msg
    # a base config the trial command refuses names the base config
    msg = _refused(_adapter(tmp_path, tiny_backbone, lichess, base={"epochs": 0}))
    assert msg.startswith(f"--base-config {tmp_path / 'base.json'}: epochs"), msg


@pytest.mark.parametrize("strategy", [k for k in SPACES if k not in ("pretrain", "architecture")])
def test_every_spec_adapter_space_passes_the_check(tmp_path, tiny_backbone, shared_data, strategy):
    s = _adapter(tmp_path, tiny_backbone, shared_data / "lichess", strategy=strategy)
    space = prepare_space(s, study_mod.make_runner(s, lambda m: None), lambda m: None)
    assert set(space) == set(SPACES[strategy])


def test_base_config_fixes_a_searched_field_unless_space_names_it(tmp_path, tiny_backbone, shared_data):
    lines: list[str] = []
    s = _adapter(tmp_path, tiny_backbone, shared_data / "lichess", base={"batch_size": 8, "lora_rank": 4})
    space = prepare_space(s, study_mod.make_runner(s, lines.append), lines.append)
    assert "batch_size" not in space and "rank" not in space and "lr" in space
    assert any("batch_size = 8" in m and "batch_size is fixed" in m for m in lines), lines
    assert any("lora_rank = 4" in m and "rank is fixed" in m for m in lines), lines
    runner = study_mod.make_runner(s, lambda m: None)
    assert runner.config({"lr": 1e-3}, tmp_path / "t")["batch_size"] == 8
    s = _adapter(tmp_path, tiny_backbone, shared_data / "lichess", base={"batch_size": 8},
                 space={"batch_size": {"type": "categorical", "choices": [16, 32]}})
    space = prepare_space(s, study_mod.make_runner(s, lambda m: None), lambda m: None)
    assert list(space["batch_size"].choices) == [16, 32]


class _FakeRunner:
    """A pretraining-shaped runner whose trials fail, or are interrupted."""

    command = "pretrain"
    objective_key = "val/loss"
    task = PretrainTask  # as the pretraining runner (its population trainer)

    def __init__(self, interrupt: bool = False):
        self.interrupt = interrupt

    def config(self, params, trial_dir):
        return {**params, "out": str(trial_dir)}

    def run(self, config, hooks):
        if self.interrupt:
            raise KeyboardInterrupt
        return TrialOutcome(float("nan"), "exception", 0, None, config, {}, "boom")


def _pretrain_settings(tmp_path: Path, **over) -> SweepSettings:
    return SweepSettings.load(run_type="pretrain", trials=2, out=tmp_path / "sw", compilation_cache="none", **over)


def test_a_sweep_with_no_completed_trial_exits_1_after_the_table(tmp_path, monkeypatch):
    real = study_mod.run_sweep
    monkeypatch.setattr(study_mod, "run_sweep", lambda s, log, **kw: real(s, log=log, runner=_FakeRunner(), **kw))
    res = CliRunner().invoke(app, ["sweep", "--run-type", "pretrain", "--trials", "2", "--compilation-cache", "none",
                                   "--out", str(tmp_path / "sw"), "--json", str(tmp_path / "all.json")])
    assert res.exit_code == 1, res.output
    assert "0 completed" in res.output and "boom" in res.output  # the table came first
    assert res.output.rstrip().splitlines()[-1] == "error: no trial completed; see the table"
    assert [t["state"] for t in json.loads((tmp_path / "all.json").read_text())["trials"]] == ["FAIL", "FAIL"]


@pytest.mark.parametrize("population", [1, 2])
def test_a_ctrl_c_trial_is_failed_with_its_reason(tmp_path, monkeypatch, population):
    from pawn.sweep import population as pop_mod

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(pop_mod, "run_pretrain_population", interrupted)
    s = _pretrain_settings(tmp_path, population=population)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(s, log=lambda m: None, runner=_FakeRunner(interrupt=True))
    trials = optuna.load_study(study_name="pretrain", storage=f"sqlite:///{s.out / 'study.db'}").trials
    assert trials and all(t.state == optuna.trial.TrialState.FAIL for t in trials)
    assert all(t.user_attrs.get("fail_reason") == "interrupted (Ctrl-C)" for t in trials)


@pytest.mark.parametrize("population", [1, 2])
def test_best_config_carries_the_resolved_data_seed(tmp_path, tiny_backbone, shared_data, population):
    """No data_seed in the base config: each run draws one; best_config.json must hold the one
    the best trial used (read back from the trainer's own log line)."""
    base = dict(elo_min=1200, elo_max=2200, epochs=1, steps_per_epoch=2, steps_per_chunk=2, batch_size=8, seq_len=64,
                val_games=16, cache_dir=str(tmp_path / "cache"))
    s = _adapter(tmp_path, tiny_backbone, shared_data / "lichess", base=base, trials=population, population=population,
                 pruner="none", seed=1, compilation_cache="none",
                 space={"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}, "rank": 2,
                        "warmup_frac": 0.0, "weight_decay": 0.0, "patience": 5})
    lines: list[str] = []
    res = run_sweep(s, log=lines.append)
    seeds = [int(m) for line in lines for m in re.findall(r"data seed (\d+)", line)]
    assert len(seeds) == 1, lines  # one run (population: one shared stream)
    assert all(t["state"] == "COMPLETE" for t in res.trials)
    cfg = json.loads(res.best_config.read_text())
    assert cfg["data_seed"] == seeds[0]
