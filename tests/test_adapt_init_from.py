"""``pawn adapt --init-from``: a new adapter run that starts from an adapter checkpoint's weights
(a fresh optimizer, schedule and step counter), as ``pawn pretrain --init-from`` does for a
backbone (issue 40: one initial state for both trainers)."""

from __future__ import annotations

import json
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest
from typer.testing import CliRunner

from pawn.adapters.io import load_adapter
from pawn.cli import app


def _adapt(bb: Path, shared_data: Path, cache_dir: Path, out: Path, *extra: str):
    return CliRunner().invoke(app, ["adapt", str(bb), "--strategy", "bottleneck", "--bottleneck-dim", "8",
                                    "--data", str(shared_data / "lichess"), "--elo-min", "1200", "--elo-max", "2200",
                                    "--epochs", "1", "--steps-per-epoch", "4", "--batch-size", "16", "--seq-len", "96",
                                    "--val-games", "64", "--lr", "3e-3", "--data-seed", "7", "--cache-dir", str(cache_dir),
                                    "--out", str(out), *extra])


def _records(run_dir: Path, kind: str) -> list[dict]:
    return [r for r in (json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()) if r["type"] == kind]


@pytest.mark.slow  # two tiny adapter runs through the CLI
def test_adapt_init_from_starts_a_new_run_from_the_adapters_weights(tmp_path, tiny_backbone, shared_data):
    cache = tmp_path / "cache"
    src = tmp_path / "a"
    r = _adapt(tiny_backbone, shared_data, cache, src)
    assert r.exit_code == 0, r.output
    best_val = min(_records(src, "val"), key=lambda v: v["loss"])

    new = tmp_path / "b"
    r = _adapt(tiny_backbone, shared_data, cache, new, "--init-from", str(src), "--lr-schedule", "constant")
    assert r.exit_code == 0, r.output
    assert "--init-from uses its best checkpoint" in r.output  # a run directory stands for its best checkpoint
    assert "optimizer, schedule and step counter start fresh" in r.output
    assert "step 0 (the --init-from adapter): val loss" in r.output and "backbone + identity adapter" not in r.output
    assert "│ step 0 (the --init-from adapter)" in r.output  # the end table too
    conf = json.loads((new / "config.json").read_text())
    assert conf["init_from"] == str(src / "checkpoints" / "best")
    # step 0 of the new run (its baseline validation) is the source's best adapter exactly
    base = next(v for v in _records(new, "val") if v["step"] == 0)
    assert base["loss"] == pytest.approx(best_val["loss"], rel=1e-6)
    first = _records(new, "train")[0]
    assert first["step_start"] == 0 and first["lr"] == pytest.approx(3e-3)  # the new constant schedule, from step 0
    a, b = load_adapter(src / "checkpoints" / "best"), load_adapter(new / "checkpoints" / "step_00000004")
    assert b.training_state["step"] == 4
    leaves = [jax.tree_util.tree_leaves(eqx.filter(m.model.adapter, eqx.is_array)) for m in (a, b)]
    assert any(not np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(*leaves))  # trained on from there


@pytest.mark.slow  # one tiny adapter run through the CLI
def test_adapt_init_from_another_strategy_is_refused_in_one_line(tmp_path, tiny_backbone, shared_data):
    src = tmp_path / "a"
    r = _adapt(tiny_backbone, shared_data, tmp_path / "cache", src)
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["adapt", str(tiny_backbone), "--strategy", "lora", "--data", str(shared_data / "lichess"),
                                 "--init-from", str(src / "checkpoints" / "step_00000004"), "--out", str(tmp_path / "b"),
                                 "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code != 0
    assert "a bottleneck adapter, not this run's lora" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "b" / "metrics.jsonl").exists()
