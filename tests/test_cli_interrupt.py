"""Ctrl-C that reaches the command (the second one, or one after the trainer restored the signal
handlers, e.g. during the final validation) names the checkpoint on disk (issue 26; it said
"stopped without writing a checkpoint" though the step checkpoint was there)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import typer

from pawn.checkpoint import save_checkpoint
from pawn.cli._output import run_training
from pawn.config import ModelConfig

CFG = ModelConfig(d_model=32, n_layers=2, n_heads=1, d_ff=64)


def _save(d: Path, step: int) -> None:
    from pawn.model import PAWNModel
    import jax

    m = PAWNModel(CFG, jax.random.PRNGKey(0))
    save_checkpoint(d, {k: np.asarray(v) for k, v in m.params().items()}, CFG, training_state={"step": step})


def test_ctrl_c_after_a_checkpoint_names_it(tmp_path, capsys):
    run = tmp_path / "run"

    def training():  # writes its step-2 checkpoint, then is interrupted (the final validation)
        _save(run / "checkpoints" / "step_00000002", 2)
        (run / "checkpoints" / "step_00000004.tmp").mkdir()  # a half-written one is not named
        raise KeyboardInterrupt

    with pytest.raises(typer.Exit) as e:
        run_training(training, run, "pretrain-*")
    assert e.value.exit_code == 130
    err = capsys.readouterr().err.strip()
    assert err == (f"error: interrupted (Ctrl-C); the last complete checkpoint is {run / 'checkpoints' / 'step_00000002'} "
                   f"(step 2), on disk and loadable; resume with --resume {run}")


def test_ctrl_c_into_the_default_run_directory_and_before_any_checkpoint(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    old = tmp_path / "runs" / "pretrain-20000101-000000"
    _save(old / "checkpoints" / "step_00000008", 8)
    os.utime(old, (0, 0))  # an earlier run: not this command's

    def training():
        _save(tmp_path / "runs" / "pretrain-20991231-000000" / "checkpoints" / "step_00000006", 6)
        raise KeyboardInterrupt

    with pytest.raises(typer.Exit):
        run_training(training, None, "pretrain-*")
    assert "checkpoint is runs/pretrain-20991231-000000/checkpoints/step_00000006 (step 6)" in capsys.readouterr().err

    def nothing():
        (tmp_path / "fresh").mkdir()
        raise KeyboardInterrupt

    with pytest.raises(typer.Exit):
        run_training(nothing, tmp_path / "fresh", "pretrain-*")
    assert capsys.readouterr().err.strip() == "error: interrupted (Ctrl-C); stopped before any checkpoint of this run was written"
