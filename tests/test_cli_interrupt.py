"""Ctrl-C that reaches the command (the second one, or one after the trainer restored the signal
handlers, e.g. during the final validation) names the checkpoint on disk (issue 26; it said
"stopped without writing a checkpoint" though the step checkpoint was there)."""

from __future__ import annotations

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
        run_training(training, lambda: run)
    assert e.value.exit_code == 130
    err = capsys.readouterr().err.strip()
    assert err == (f"error: interrupted (Ctrl-C); the last complete checkpoint is {run / 'checkpoints' / 'step_00000002'} "
                   f"(step 2), on disk and loadable; resume with --resume {run}")


def test_ctrl_c_names_the_run_directory_the_run_decided_and_no_other(tmp_path, capsys, monkeypatch):
    # The command is handed the directory the run decided (the task's run_dir), never a guess:
    # a newer run of another command under runs/ is not named.
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "runs" / "pretrain-20000101-000000"
    other = tmp_path / "runs" / "pretrain-20991231-000000"

    def training():
        _save(mine / "checkpoints" / "step_00000006", 6)
        _save(other / "checkpoints" / "step_00000008", 8)  # written later (newer): another command's run
        raise KeyboardInterrupt

    with pytest.raises(typer.Exit):
        run_training(training, lambda: Path("runs") / mine.name)
    assert "checkpoint is runs/pretrain-20000101-000000/checkpoints/step_00000006 (step 6)" in capsys.readouterr().err

    def nothing():
        (tmp_path / "fresh").mkdir()
        raise KeyboardInterrupt

    for decided in (tmp_path / "fresh", None):  # a run directory with no checkpoint; none decided yet
        with pytest.raises(typer.Exit):
            run_training(nothing if decided is not None else (lambda: (_ for _ in ()).throw(KeyboardInterrupt)), lambda: decided)
        assert capsys.readouterr().err.strip() == "error: interrupted (Ctrl-C); stopped before any checkpoint of this run was written"
