"""Bad settings and inputs from a new-user trial: non-finite floats are refused at validation in
every settings model, a run that fails before writing leaves no directory that blocks its re-run,
a bad value is reported against its source (flag, environment variable, config file), and skipped
PGN games are named (file, game number, ply, reason)."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from pawn.adapters.configs import LoRAConfig
from pawn.bench.settings import BenchSettings
from pawn.cli import app
from pawn.config import ModelConfig
from pawn.evaluate.settings import GenerateSettings, ProbeSettings
from pawn.play.config import PlayConfig
from pawn.settings import PretrainConfig
from pawn.sweep.settings import SweepSettings
from pawn.train.adapt_config import AdaptSettings
from pawn.train.hooks import RunHooks
from pawn.train.run import Run
from pawn.train.rundir import check_run_dir

from tests.test_cli_errors import one_line_error

_ADAPT = {"backbone": "bb", "data": "games.pgn", "strategy": "lora"}


# (model, the other fields it needs, the float field set to a non-finite value)
_CASES = [
    (PretrainConfig, {"variant": "toy", "total_steps": 4}, "lr"),
    (PretrainConfig, {"variant": "toy", "total_steps": 4}, "hub_exit_wait_s"),
    (AdaptSettings, _ADAPT, "lr"),
    (AdaptSettings, _ADAPT, "init_scale"),
    (AdaptSettings, _ADAPT, "lora_alpha"),
    (AdaptSettings, _ADAPT, "weight_decay"),
    (SweepSettings, {"out": "sweeps/x"}, "timeout"),
    (PlayConfig, {}, "movetime_ms"),
    (ProbeSettings, {}, "lr"),
    (GenerateSettings, {}, "temperature"),
]


def _load(model, fields):
    return model.load(**fields) if hasattr(model, "load") else model(**fields)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 1e400])
@pytest.mark.parametrize("model,base,name", _CASES, ids=[f"{m.__name__}.{n}" for m, _, n in _CASES])
def test_every_settings_model_refuses_non_finite_floats(model, base, name, value):
    with pytest.raises(ValidationError) as ei:
        _load(model, {**base, name: value})
    errs = ei.value.errors()
    assert [e["loc"][0] for e in errs] == [name] and errs[0]["type"] == "finite_number", errs


def test_adapter_and_model_configs_refuse_non_finite_floats():
    with pytest.raises(ValidationError, match="finite"):
        LoRAConfig(init_scale=math.inf)
    with pytest.raises(ValidationError, match="finite"):
        LoRAConfig(alpha=math.nan)
    with pytest.raises(ValidationError, match="finite"):
        ModelConfig(d_model=64, n_layers=2, n_heads=4, d_ff=128, rope_base=math.inf)
    assert LoRAConfig(init_scale=0.5).init_scale == 0.5  # finite values still pass


def test_no_settings_float_field_needs_inf():
    """Every command's settings model refuses inf (none of their float fields means 'unlimited')."""
    for model in (PretrainConfig, AdaptSettings, SweepSettings, PlayConfig, BenchSettings, ProbeSettings, GenerateSettings):
        assert model.model_config.get("allow_inf_nan") is False, model.__name__


@pytest.mark.parametrize("argv,flag", [
    (["pretrain", "--variant", "toy", "--total-steps", "4", "--lr", "inf"], "--lr"),
    (["pretrain", "--variant", "toy", "--total-steps", "4", "--lr", "1e400"], "--lr"),
    (["adapt", "BB", "--strategy", "lora", "--data", "games.pgn", "--init-scale", "inf"], "--init-scale"),
    (["adapt", "BB", "--strategy", "lora", "--data", "games.pgn", "--lora-alpha", "inf"], "--lora-alpha"),
])
def test_cli_non_finite_float_is_one_line_and_writes_nothing(tmp_path, argv, flag):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, [*argv, "--out", str(out)])
    one_line_error(res, 2, f"{flag}: Input should be a finite number")
    assert not out.exists()


def _run(tmp_path, name="run"):
    run_dir = tmp_path / name
    return Run.check(run_dir, resume=None, resume_from=None, overwrite=False, new_config={}, ignored_fields=(), log=lambda m: None)


def test_a_run_that_fails_before_writing_its_config_leaves_nothing_that_blocks_the_rerun(tmp_path):
    run = _run(tmp_path)
    with pytest.raises(ValueError):  # a snapshot that is not JSON (what --init-scale inf used to give)
        run.open(snapshot={"lr": math.inf}, open_sinks=RunHooks, start_step=0, resumed_from=None)
    assert not run.run_dir.exists()
    assert check_run_dir(run.run_dir).move_aside is False  # the re-run is not refused
    run = _run(tmp_path)
    run.open(snapshot={"lr": 1.0}, open_sinks=RunHooks, start_step=0, resumed_from=None)
    assert (run.run_dir / "config.json").is_file() and (run.run_dir / "checkpoints").is_dir()
    run.logger.close()


def test_a_failed_open_keeps_what_was_there_before(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "slurm.log").write_text("job started")
    run = _run(tmp_path)
    with pytest.raises(ValueError):
        run.open(snapshot={"lr": math.nan}, open_sinks=RunHooks, start_step=0, resumed_from=None)
    assert sorted(p.name for p in run_dir.iterdir()) == ["slurm.log"]
    assert (run_dir / "slurm.log").read_text() == "job started"


def test_bad_value_from_the_environment_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("PAWN_LORA_RANK", "abc")
    res = CliRunner().invoke(app, ["adapt", "BB", "--strategy", "lora", "--data", "g.pgn", "--out", str(tmp_path / "o")])
    line = one_line_error(res, 2, "PAWN_LORA_RANK: ", "integer")
    assert "error: lora_rank" not in line


def test_bad_value_from_the_environment_with_another_prefix(tmp_path, monkeypatch):
    monkeypatch.setenv("PAWN_SWEEP_TIMEOUT", "-3")
    res = CliRunner().invoke(app, ["sweep", "--strategy", "lora", "--out", str(tmp_path / "s")])
    one_line_error(res, 2, "PAWN_SWEEP_TIMEOUT: ", "greater than 0")


@pytest.mark.parametrize("suffix,text", [(".toml", "lora_rnak = 3\n"), (".json", '{"lora_rnak": 3}')])
def test_unknown_key_in_a_config_file_names_the_file(tmp_path, suffix, text):
    cfg = tmp_path / f"c1{suffix}"
    cfg.write_text(text)
    res = CliRunner().invoke(app, ["adapt", "BB", "--strategy", "lora", "--data", "g.pgn", "--config", str(cfg)])
    one_line_error(res, 2, f"{cfg}: lora_rnak: unknown field")


def test_each_source_is_named_and_the_winning_source_is_the_one_named(tmp_path, monkeypatch):
    cfg = tmp_path / "c.toml"
    cfg.write_text("lr = -1.0\nweight_decay = -2.0\n")
    monkeypatch.setenv("PAWN_WEIGHT_DECAY", "-3")  # the environment beats the file
    res = CliRunner().invoke(app, ["adapt", "BB", "--strategy", "lora", "--data", "g.pgn", "--config", str(cfg),
                                   "--init-scale", "inf"])
    line = one_line_error(res, 2)
    assert f"{cfg}: lr: " in line and "PAWN_WEIGHT_DECAY: " in line and "--init-scale: " in line, line
    assert f"{cfg}: weight_decay" not in line
