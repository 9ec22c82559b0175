"""``--init-from CKPT`` (issue 26): a new run from a checkpoint's weights only, with a fresh
optimizer, schedule and step counter, recorded in its config."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pawn.checkpoint import load_checkpoint
from pawn.settings import PretrainConfig
from pawn.train.pretrain import TrainingError, _initial_state, _load_init_from, run_pretrain

RUN = dict(progress=False, install_signal_handlers=False)
SMALL = dict(variant="toy", batch_size=4, seq_len=32, val_games=0, steps_per_chunk=2, lr=1e-3, warmup_steps=1)


@pytest.mark.slow  # two toy runs (~1 min on a shared CPU)
def test_init_from_takes_the_weights_only_and_starts_a_new_schedule(tmp_path):
    src = run_pretrain(PretrainConfig.load(**SMALL, total_steps=4, checkpoint_every=4, val_every=4, out=tmp_path / "a"), **RUN)
    ck = load_checkpoint(src.checkpoint)
    cfg = PretrainConfig.load(**{**SMALL, "lr": 5e-4, "lr_schedule": "constant"}, total_steps=2, checkpoint_every=2,
                              val_every=2, out=tmp_path / "b", init_from=src.checkpoint)
    from pawn.train.loop import make_optimizer

    stored = cfg.model_configs()[0]
    init = _load_init_from(cfg, stored)
    opt = make_optimizer(cfg.schedule(), b1=cfg.beta1, b2=cfg.beta2, weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm)
    msgs: list[str] = []
    st = _initial_state(cfg, stored, opt, None, msgs.append, init)
    state, start, elapsed = st.state, st.start, st.elapsed0
    assert (start, elapsed) == (0, 0.0)
    params = state.model.params()
    for name, v in ck.params.items():  # step 0 of the new run: exactly the checkpoint's weights
        np.testing.assert_array_equal(np.asarray(params[name]), v, err_msg=name)
    assert msgs == [f"weights from {src.checkpoint} (its step 4); optimizer, schedule and step counter start fresh"]

    res = run_pretrain(cfg, **RUN)
    assert (res.reason, res.step) == ("completed", 2)
    conf = json.loads((res.run_dir / "config.json").read_text())
    assert conf["init_from"] == str(src.checkpoint)
    train = [json.loads(ln) for ln in (res.run_dir / "metrics.jsonl").read_text().splitlines() if '"type": "train"' in ln]
    assert train[0]["lr"] == pytest.approx(5e-4)  # the new constant schedule after its 1-step warm-up, not the old one's
    assert load_checkpoint(res.checkpoint).training_state["step"] == 2


def test_init_from_a_different_model_size_is_refused(tmp_path):
    from pawn.checkpoint import save_checkpoint
    from pawn.config import ModelConfig

    other = ModelConfig(d_model=32, n_layers=2, n_heads=1, d_ff=64)
    save_checkpoint(tmp_path / "ck", {k: np.zeros(s.shape, np.float32) for k, s in _shapes(other).items()}, other)
    cfg = PretrainConfig.load(**SMALL, total_steps=2, checkpoint_every=2, val_every=2, out=tmp_path / "b", init_from=tmp_path / "ck")
    with pytest.raises(TrainingError, match=r"--init-from .*/ck: its model d32_L2_F64 is not this run's d64_L2_F256"):
        _load_init_from(cfg, cfg.model_configs()[0])


def test_init_from_a_model_that_differs_only_in_heads_names_the_field(tmp_path):
    # the model names (d64_L2_F256 both) do not show n_heads: the message must name it
    from pawn.checkpoint import save_checkpoint

    cfg = PretrainConfig.load(**SMALL, total_steps=2, checkpoint_every=2, val_every=2, out=tmp_path / "b", init_from=tmp_path / "ck")
    mine = cfg.model_configs()[0]
    other = mine.model_copy(update={"n_heads": 1 if mine.n_heads != 1 else 2})
    save_checkpoint(tmp_path / "ck", {k: np.zeros(s.shape, np.float32) for k, s in _shapes(other).items()}, other)
    with pytest.raises(TrainingError, match=rf"is not this run's {mine.name}: n_heads {other.n_heads} \(this run: {mine.n_heads}\)"):
        _load_init_from(cfg, mine)


def _shapes(cfg):
    import jax

    from pawn.model import PAWNModel

    return {k: v for k, v in PAWNModel(cfg, jax.random.key(0)).params().items()}


def _train_losses(run_dir):
    return [json.loads(ln)["loss"] for ln in (run_dir / "metrics.jsonl").read_text().splitlines() if '"type": "train"' in ln]


@pytest.mark.slow  # three toy runs
def test_a_finished_constant_run_extends_to_exactly_the_longer_run(tmp_path):
    base = {**SMALL, "lr_schedule": "constant", "checkpoint_every": 4, "val_every": 4}
    full = run_pretrain(PretrainConfig.load(**base, total_steps=8, out=tmp_path / "full"), **RUN)
    short = run_pretrain(PretrainConfig.load(**base, total_steps=4, out=tmp_path / "short"), **RUN)
    assert (short.reason, short.step) == ("completed", 4)
    msgs: list[str] = []
    ext = run_pretrain(PretrainConfig.load(resume="auto", out=tmp_path / "short", total_steps=8), log=msgs.append, **RUN)
    assert (ext.reason, ext.step) == ("completed", 8)
    assert "extending the run from 4 to 8 steps (constant schedule: warm-up 1 and 2 steps per chunk kept)" in msgs
    assert _train_losses(ext.run_dir) == _train_losses(full.run_dir)  # exact: the same steps as the 8-step run
    a, b = load_checkpoint(full.checkpoint), load_checkpoint(ext.checkpoint)
    for name in a.params:
        np.testing.assert_array_equal(a.params[name], b.params[name], err_msg=name)


@pytest.mark.slow  # a toy run (~1 min on a shared CPU)
def test_extending_a_decaying_schedule_is_refused_with_the_way_out(tmp_path):
    from pawn.train.pretrain import PretrainTask
    from pawn.train.spine import resolve_resume

    run = run_pretrain(PretrainConfig.load(**SMALL, total_steps=2, checkpoint_every=2, val_every=2, out=tmp_path / "c"), **RUN)
    with pytest.raises(TrainingError, match=r"--total-steps 6 differs from the run's 2; only a constant-schedule run .* "
                                            r"--init-from .*step_00000002"):
        resolve_resume(PretrainConfig.load(resume="auto", out=run.run_dir, total_steps=6), PretrainTask(PretrainConfig.load(total_steps=1)), print)
