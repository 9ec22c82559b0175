"""Each adapter strategy's own learning rate (issue 43 item 4): ``pawn adapt`` without ``--lr``
uses the strategy table's ``lr`` (measured per strategy, ``benchmarks/adapter_lr.py``), records it
in ``config.json``, and shows it in ``--list-strategies``; ``--lr``, ``PAWN_LR`` and a config file
still win; a run stored before (its config holds the old shared default) resumes with its own lr."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pawn.adapters.registry import STRATEGIES
from pawn.adapters.table import register
from pawn.cli import app


def _show(tmp_path: Path, *args: str, env: dict | None = None) -> dict:
    r = CliRunner().invoke(app, ["adapt", str(tmp_path), "--out", str(tmp_path / "run"), *args,
                                 "--print-config"], env=env)
    assert r.exit_code == 0, r.output
    return json.loads(r.output[r.output.index("{"):])


def test_the_strategies_do_not_share_one_learning_rate():
    lrs = {name: row.lr for name, row in STRATEGIES.items()}
    assert len(set(lrs.values())) > 1, lrs  # one shared default (3e-4 for every strategy) was the old rule
    assert lrs["ia3"] > lrs["lora"], lrs  # IA³'s scaling vectors barely move at LoRA's rate (issue 43)


@pytest.mark.parametrize("strategy", ["lora", "ia3", "film"])
def test_unset_lr_is_the_strategys_own(tmp_path, strategy):
    assert _show(tmp_path, "--strategy", strategy)["lr"] == STRATEGIES[strategy].lr


def test_flag_environment_and_config_file_still_win(tmp_path):
    assert _show(tmp_path, "--strategy", "ia3", "--lr", "0.0042")["lr"] == 0.0042
    assert _show(tmp_path, "--strategy", "ia3", env={"PAWN_LR": "0.0031"})["lr"] == 0.0031
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"strategy": "ia3", "lr": 0.0017}))
    assert _show(tmp_path, "--config", str(cfg))["lr"] == 0.0017
    # the strategy from the environment picks its own lr too
    assert _show(tmp_path, env={"PAWN_STRATEGY": "film"})["lr"] == STRATEGIES["film"].lr


def test_list_strategies_shows_each_rows_lr_and_a_given_lr():
    r = CliRunner().invoke(app, ["adapt", "--list-strategies"], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    for name, row in STRATEGIES.items():
        line = next(ln for ln in r.output.splitlines() if re.match(rf"│ {re.escape(name)} +│", ln))
        assert f"│{row.lr:g}│" in re.sub(r" *│ *", "│", line), line
    r = CliRunner().invoke(app, ["adapt", "--list-strategies", "--lr", "0.0042"], env={"COLUMNS": "300"})
    ia3 = next(ln for ln in r.output.splitlines() if re.match(r"│ ia3 +│", ln))
    assert "│0.0042│" in re.sub(r" *│ *", "│", ia3)


@pytest.mark.parametrize("bad", [0.0, 1.5, True, "1e-3"])
def test_a_row_with_a_bad_lr_is_refused_at_registration(bad):
    row = dataclasses.replace(STRATEGIES["ia3"], name="ia3-copy", lr=bad)
    with pytest.raises(TypeError, match="lr must be a learning rate"):
        register(row)
    assert "ia3-copy" not in STRATEGIES


def _adapt(bb: Path, data: Path, cache: Path, out: Path, *extra: str):
    return CliRunner().invoke(app, ["adapt", str(bb), "--strategy", "ia3", "--data", str(data / "lichess"),
                                    "--epochs", "1", "--steps-per-epoch", "4", "--steps-per-chunk", "2", "--batch-size", "8",
                                    "--seq-len", "64", "--val-games", "32", "--lr-schedule", "constant", "--data-seed", "7",
                                    "--cache-dir", str(cache), "--out", str(out), *extra])


@pytest.mark.slow  # three tiny adapter runs through the CLI
def test_a_run_records_its_strategys_lr_and_an_older_run_resumes_with_its_own(tmp_path, tiny_backbone, shared_data):
    cache, new, old = tmp_path / "cache", tmp_path / "new", tmp_path / "old"
    r = _adapt(tiny_backbone, shared_data, cache, new)
    assert r.exit_code == 0, r.output
    want = STRATEGIES["ia3"].lr
    assert f"lr {want:g}: strategy ia3's own default (--lr sets another)" in r.output
    assert json.loads((new / "config.json").read_text())["lr"] == want
    from pawn.runs import open_run

    assert [t.values["lr"] for t in open_run(new).train] == [pytest.approx(want)] * 2  # the constant schedule's peak

    # a run stored with the old shared default (3e-4), paused, then resumed without --lr: its own lr, no conflict
    r = _adapt(tiny_backbone, shared_data, cache, old, "--lr", "3e-4", "--pause-after-steps", "2")
    assert r.exit_code == 0, r.output
    assert "own default" not in r.output
    r = CliRunner().invoke(app, ["adapt", "--resume", str(old), "--cache-dir", str(cache)], env={"PAWN_LR": "0.01"})
    assert r.exit_code == 1 and "settings differ from the checkpoint's run (lr)" in r.output, r.output
    assert "drop those settings (flags, PAWN_ variables, config-file keys)" in r.output, r.output
    r = CliRunner().invoke(app, ["adapt", "--resume", str(old), "--cache-dir", str(cache)])
    assert r.exit_code == 0, r.output
    run = open_run(old)
    assert run.last_step == 4
    assert [t.values["lr"] for t in run.train] == [pytest.approx(3e-4)] * 2
    assert json.loads((old / "config.json").read_text())["lr"] == 3e-4


def test_the_sweep_lr_range_reaches_past_each_strategys_default():
    from pawn.sweep.space import SPACES

    for name, row in STRATEGIES.items():
        d = SPACES[name]["lr"]
        assert d.log and d.low == 1e-5 and d.high >= row.lr, (name, d, row.lr)
        # the common range (spec §6.1) unless the default lies above it
        assert d.high == (3 * row.lr if row.lr > 1e-2 else 1e-2), (name, d)
    assert SPACES["ia3"]["lr"].high == pytest.approx(0.9) and SPACES["lora"]["lr"].high == 1e-2
