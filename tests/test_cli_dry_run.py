"""``pawn pretrain --dry-run`` (the plan and memory check, nothing written) and ``--print-config``
(the full resolved settings, re-feedable with --config) (issue 26)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from pawn.cli import app
from pawn.settings import PretrainConfig

TOY = ["--variant", "toy", "--total-steps", "4", "--batch-size", "4", "--seq-len", "32", "--steps-per-chunk", "2",
       "--val-games", "0"]


def test_print_config_is_the_resolved_config_and_feeds_back(tmp_path):
    r = CliRunner().invoke(app, ["pretrain", "--supernet", "tiny", "--total-steps", "100", "--lr", "1e-3", "--print-config"],
                           env={"PAWN_SEED": "7"})
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["lr"] == 1e-3 and data["seed"] == 7 and data["batch_size"] == 16  # flag, environment, tiny preset
    assert data["total_steps"] == 100 and "resume" not in data
    f = tmp_path / "c.json"
    f.write_text(r.stdout)
    again = PretrainConfig.load(f)
    assert again.model_dump(mode="json") == {**data, "resume": None}
    r2 = CliRunner().invoke(app, ["pretrain", "--config", str(f), "--print-config"])
    assert json.loads(r2.stdout) == data


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["pretrain", *TOY, "--out", str(out), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "plan: variant toy (267,392 parameters), 4 steps of 4 games × 32 tokens" in r.output
    assert "memory check: remat none needs" in r.output and "compiled step:" in r.output
    assert f"dry run: the plan and memory check above passed; nothing was trained or written ({out} not created)" in r.output
    assert not out.exists()


def test_adapt_print_config_feeds_back(tmp_path):
    from pawn.train.adapt_config import AdaptSettings

    r = CliRunner().invoke(app, ["adapt", "bb", "--strategy", "lora", "--lora-rank", "8", "--print-config"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert (data["backbone"], data["strategy"], data["lora_rank"]) == ("bb", "lora", 8)
    f = tmp_path / "a.json"
    f.write_text(r.stdout)
    assert AdaptSettings.load(f).model_dump(mode="json") == {**data, "resume": None}
