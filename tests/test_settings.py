"""PretrainConfig (spec training-and-adapters.md §3): precedence, unknown fields, cross-field rules."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from pawn.cli import app
from pawn.settings import ConfigFileError, PretrainConfig, format_validation_error


def test_precedence_cli_over_env_over_file_over_defaults(tmp_path, monkeypatch):
    f = tmp_path / "run.toml"
    f.write_text('total_steps = 400\nbatch_size = 32\nlr = 0.001\nval_every = 100\ncheckpoint_every = 100\n')
    monkeypatch.setenv("PAWN_BATCH_SIZE", "64")
    monkeypatch.setenv("PAWN_LR", "0.002")
    cfg = PretrainConfig.load(f, lr=0.003)
    assert cfg.total_steps == 400  # file
    assert cfg.batch_size == 64  # env beats file
    assert cfg.lr == 0.003  # CLI beats env
    assert cfg.seq_len == 512 and cfg.weight_decay == 0.01  # defaults


def test_json_config_file_and_unknown_fields(tmp_path):
    f = tmp_path / "run.json"
    f.write_text(json.dumps({"total_steps": 100, "val_every": 50, "checkpoint_every": 50, "lerning_rate": 1}))
    with pytest.raises(ValidationError) as e:
        PretrainConfig.load(f)
    assert "lerning_rate: unknown field" in format_validation_error(e.value)


def test_unreadable_config_file_names_the_file(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("total_steps = = 3")
    with pytest.raises(ConfigFileError, match="bad.toml"):
        PretrainConfig.load(f)


def test_total_steps_is_required():
    with pytest.raises(ValidationError) as e:
        PretrainConfig.load()
    assert "total_steps: required" in format_validation_error(e.value)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(supernet="tiny", variant="toy"), "either supernet or variant"),
        (dict(lr_schedule="wsd", warmup_steps=950, decay_frac=0.1), "warmup_steps (950) + decay steps"),
        (dict(lr_schedule="infinite", warmup_frac=0.75), "cooldown"),
        (dict(seq_len=1024), "seq_len"),
        (dict(steps_per_chunk=7), "multiple of steps_per_chunk"),
        (dict(warmup_frac=1.5), "warmup_frac"),
        (dict(batch_size=0), "batch_size"),
        (dict(lr_schedule="one_cycle", warmup_steps=0), "one_cycle"),
    ],
)
def test_cross_field_rules_fail_at_parse_time(kwargs, needle):
    base = dict(total_steps=1000, val_every=100, checkpoint_every=100)
    with pytest.raises(ValidationError) as e:
        PretrainConfig.load(**{**base, **kwargs})
    assert needle in format_validation_error(e.value)


def test_resolved_defaults_follow_the_published_run():
    cfg = PretrainConfig.load(total_steps=200_000)
    assert cfg.resolved_warmup_steps == 10_000
    assert (cfg.lr, cfg.batch_size, cfg.seq_len, cfg.max_grad_norm) == (3e-4, 256, 512, 1.0)
    assert cfg.chunk_steps == 50 and cfg.model_configs()[0].d_model == 640
    assert cfg.schedule().value(200_000) == pytest.approx(3e-5)


def test_cli_reports_validation_errors_in_one_line(tmp_path):
    r = CliRunner().invoke(app, ["pretrain", "--supernet", "tiny", "--total-steps", "100", "--lr-schedule", "wsd", "--warmup-steps", "95", "--val-every", "100", "--checkpoint-every", "100"])
    assert r.exit_code == 2
    assert "Traceback" not in r.output and "warmup_steps (95)" in r.output
    assert not (tmp_path / "runs").exists()
