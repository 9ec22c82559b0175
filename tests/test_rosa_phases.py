"""RoSA phases 1–2 in the trainer (spec training-and-adapters.md §4.6): the warm-up runs on the
shared Trainer with its own counter and constant-lr AdamW, trains only the LoRA, stops and resumes
exactly inside the warm-up, then generates masks and switches to phase 3."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pawn.adapters import build_adapted
from pawn.adapters.strategies import rosa as R
from pawn.config import ModelConfig
from pawn.model import PAWNModel
from pawn.train.rosa_phases import run_warmup_and_masks, warmup_data_seed
from pawn.train.run import Hook

CFG = ModelConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64, max_seq_len=32)
SETTINGS = {"density": 0.05, "rosa_warmup_steps": 8, "mask_samples": 2, "targets": ["q", "v"]}


def _batch_at(w):
    rng = np.random.default_rng(1000 + w)
    t = rng.integers(0, 1968, (4, 12)).astype(np.int32)
    return {"tokens": t, "loss_mask": np.ones((4, 11), bool)}


def _loss(model, batch):
    t = batch["tokens"]
    logp = jax.nn.log_softmax(model(t[:, :-1], dtype="float32"), -1)
    return -jnp.mean(jnp.take_along_axis(logp, t[:, 1:, None], -1)), {}


class _StopAt(Hook):
    def __init__(self, at):
        self.at = at

    def on_chunk(self, ctx):
        if ctx.step >= self.at:
            ctx.request_stop("test_stop")


def _run(model, tmp_path, saves, steps_per_chunk=2, **kw):
    def save(path, m, opt, rosa_state):
        saves.append((m, opt, rosa_state))

    return run_warmup_and_masks(model, loss_fn=_loss, batch_at=_batch_at, lr=3e-3, b1=0.9, b2=0.999, weight_decay=0.0,
                                max_grad_norm=1.0, steps_per_chunk=steps_per_chunk, save=save, checkpoint_root=tmp_path,
                                key=jax.random.PRNGKey(9), log=lambda m: None, **kw)


@pytest.mark.parametrize("mode", ["rosa", pytest.param("retro-sparse", marks=pytest.mark.slow)])
def test_warmup_resumes_exactly_and_masks_follow(tmp_path, mode):
    bb = PAWNModel(CFG, jax.random.PRNGKey(0))
    m0 = build_adapted(mode, SETTINGS, bb, jax.random.PRNGKey(1))
    records: list[dict] = []
    full_saves: list = []
    full = _run(m0, tmp_path / "a", full_saves, log_metrics=records.append)
    assert full.reason == "completed" and full.warmup_step == 8 and full.model.adapter.phase == R.PHASE_TRAIN
    assert [r["rosa/warmup_step"] for r in records] == [2, 4, 6, 8] and all(r["rosa/phase"] == 1 for r in records)
    warm_full = full_saves[-1][0]  # the final warm-up checkpoint (warm-up step 8)
    assert full_saves[-1][2] == {"phase": 1, "warmup_step": 8}
    # the warm-up trained the LoRA only: backbone identical, B moved, Δ untouched
    assert float(jnp.abs(warm_full.adapter.lora.B["wq"]).max()) > 0
    np.testing.assert_array_equal(np.asarray(warm_full.backbone.wq), np.asarray(bb.wq))
    # exactly k = int(0.05·1024) = 51 entries per matrix per layer
    for n, m in full.model.adapter.sparse.mask.items():
        assert [int(x.sum()) for x in np.asarray(m)] == [51, 51]

    # stopped inside the warm-up at step 4, then resumed from that checkpoint
    part_saves: list = []
    part = _run(m0, tmp_path / "b", part_saves, hooks=[_StopAt(4)])
    assert part.reason == "test_stop" and part.warmup_step == 4 and part.model.adapter.phase == R.PHASE_WARMUP
    m_saved, opt_saved, rosa_state = part_saves[-1]
    assert rosa_state == {"phase": 1, "warmup_step": 4}
    res_saves: list = []
    resumed = _run(m_saved, tmp_path / "c", res_saves, resume=(4, opt_saved))
    warm_res = res_saves[-1][0]
    for n in ("wq", "wv"):
        np.testing.assert_array_equal(np.asarray(warm_res.adapter.lora.B[n]), np.asarray(warm_full.adapter.lora.B[n]))
        np.testing.assert_array_equal(np.asarray(warm_res.adapter.lora.A[n]), np.asarray(warm_full.adapter.lora.A[n]))
        np.testing.assert_array_equal(np.asarray(resumed.model.adapter.sparse.mask[n]), np.asarray(full.model.adapter.sparse.mask[n]))
    # the masks are the top-k of the warmed model's scores, not of the bare backbone's
    cold = R.gradient_masks(m0, _loss, [_batch_at(8), _batch_at(9)])
    assert any((cold[n] != np.asarray(full.model.adapter.sparse.mask[n])).any() for n in cold)


def test_warmup_runs_chunks_of_k_and_a_short_last_one(tmp_path):
    # K 3 does not divide W 8: the warm-up ran gcd(3, 8) = 1 step per compiled call (issue 27);
    # now chunks of 3, 3 and 2, with the same LoRA at the end as 2-step chunks.
    m0 = build_adapted("rosa", SETTINGS, PAWNModel(CFG, jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    records: list[dict] = []
    saves3: list = []
    out3 = _run(m0, tmp_path / "k3", saves3, steps_per_chunk=3, log_metrics=records.append)
    assert out3.reason == "completed" and out3.warmup_step == 8
    assert [r["rosa/warmup_step"] for r in records] == [3, 6, 8]
    assert [len(r["rosa/warmup_lr"]) for r in records] == [3, 3, 2]
    saves2: list = []
    _run(m0, tmp_path / "k2", saves2)
    for n in ("wq", "wv"):
        np.testing.assert_allclose(np.asarray(saves3[-1][0].adapter.lora.B[n]), np.asarray(saves2[-1][0].adapter.lora.B[n]),
                                   rtol=1e-5, atol=1e-7)


def test_zero_warmup_goes_straight_to_masks(tmp_path):
    m0 = build_adapted("retro-sparse", {**SETTINGS, "rosa_warmup_steps": 0}, PAWNModel(CFG, jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    saves: list = []
    out = _run(m0, tmp_path, saves)
    assert out.model.adapter.phase == R.PHASE_TRAIN and saves == [] and out.model.adapter.lora is None
    want = R.gradient_masks(m0, _loss, [_batch_at(0), _batch_at(1)])
    for n in want:
        np.testing.assert_array_equal(np.asarray(out.model.adapter.sparse.mask[n]), want[n])
    assert warmup_data_seed(5) != 5 and warmup_data_seed(warmup_data_seed(5)) == 5
