"""``pawn adapt`` with the sparse / RoSA family (issue 14): each strategy runs end to end on the shared
Lichess games from a tiny backbone and lifts val top-1 above step 0; a RoSA run interrupted inside
the LoRA warm-up or inside the main phase resumes to exactly the uninterrupted run's weights and
losses; masks and the phase reach the checkpoints and the metrics."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from pawn.adapters import count_params
from pawn.adapters.io import load_adapter
from pawn.config import ModelConfig

from pawn.train.adapt import run_adapt
from pawn.train.adapt_config import AdaptSettings
from pawn.train.run import Hook

BB_CFG = ModelConfig(d_model=32, n_layers=2, n_heads=1, d_ff=64)
ROSA = dict(density=0.05, rosa_warmup_steps=4, mask_samples=2)


@pytest.fixture(scope="module")
def backbone(tiny_backbone) -> Path:
    return tiny_backbone


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("rosa-cache")


def _cfg(backbone, shared_data, cache_dir, out, **kw) -> AdaptSettings:
    base = dict(backbone=str(backbone), data=str(shared_data / "lichess"), elo_min=1200, elo_max=2200, epochs=2,
                steps_per_epoch=4, batch_size=16, seq_len=96, val_games=64, lr=1e-2, data_seed=7,
                cache_dir=str(cache_dir), out=str(out), **ROSA)
    base.update(kw)
    return AdaptSettings.load(**base)


def _run(cfg, hooks=()):
    return run_adapt(cfg, log=lambda m: None, progress=False, install_signal_handlers=False, hooks=hooks)


def _records(run_dir: Path, kind: str) -> list[dict]:
    """The run's ``kind`` records in file order, read through the run record (pawn.runs), flat:
    step, metric values (pawn.metrics keys), other fields."""
    from pawn.runs import open_run

    return [{"step": r.step, **r.values, **r.fields} for r in open_run(run_dir).records(types=[kind])[0]]


class _StopAt(Hook):
    def __init__(self, at: int):
        self.at = at

    def on_chunk(self, ctx):
        if ctx.step >= self.at:
            ctx.request_stop("test_stop")


def _final_tensors(run_dir: Path) -> dict[str, np.ndarray]:
    last = sorted((run_dir / "checkpoints").glob("step_*"))[-1]
    return load_file(str(last / "adapter.safetensors"))


@pytest.mark.parametrize("strategy,extra", [
    ("rosa", {}),
    pytest.param("sparse", {"density": 0.2}, marks=pytest.mark.slow),
    pytest.param("retro-sparse", {}, marks=pytest.mark.slow),
    pytest.param("retro-bottleneck", {"bottleneck_dim": 4, "bottleneck_layers": (1,)}, marks=pytest.mark.slow),
])
def test_strategy_runs_end_to_end_and_lifts_val_top1(backbone, shared_data, cache_dir, tmp_path, strategy, extra):
    cfg = _cfg(backbone, shared_data, cache_dir, tmp_path / "run", strategy=strategy, **extra)
    res = _run(cfg)
    assert res.reason == "step_limit" and res.step == 8  # warm-up steps are not main steps
    vals = _records(res.run_dir, "val")
    assert [v["step"] for v in vals] == [0, 4, 8]
    assert vals[-1]["top1"] > res.baseline_val["top1"], (res.baseline_val, vals[-1])
    if strategy == "sparse":
        return
    want = count_params(strategy, cfg.adapter_settings(), BB_CFG)
    assert vals[-1]["weights"]["rosa/phase"] == 3 and vals[-1]["weights"]["rosa/total_active_params"] == want
    assert vals[-1]["weights"]["rosa/mask_density"] == pytest.approx(int(0.05 * 32 * 32) / (32 * 32))
    warm = [r for r in _records(res.run_dir, "train") if "rosa/warmup_loss" in r]
    assert [r["rosa/warmup_step"] for r in warm] == [4] and all(r["step"] == 0 for r in warm)
    la = load_adapter(res.run_dir / "best")
    assert la.model.adapter.phase == 3 and la.model.num_trainable_params() == want
    masks = {k: v for k, v in _final_tensors(res.run_dir).items() if ".mask." in k}
    assert masks and all(int(m[j].sum()) == int(0.05 * m[j].size) for m in masks.values() for j in range(m.shape[0]))


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_rosa_resume_inside_warmup_and_inside_main_phase_is_exact(backbone, shared_data, cache_dir, tmp_path):
    full = _run(_cfg(backbone, shared_data, cache_dir, tmp_path / "full", strategy="rosa", steps_per_chunk=2))
    want = _final_tensors(full.run_dir)
    losses = [r["loss"] for r in _records(full.run_dir, "train") if "rosa/warmup_loss" not in r]

    # interrupted inside the warm-up (after warm-up step 2 of 4): a step_0 checkpoint in phase 1
    a = tmp_path / "warm"
    stopped = _run(_cfg(backbone, shared_data, cache_dir, a, strategy="rosa", steps_per_chunk=2), hooks=[_StopAt(2)])
    assert stopped.reason == "test_stop" and stopped.step == 0
    ck0 = next((a / "checkpoints").glob("step_*"))
    ts = json.loads((ck0 / "training_state.json").read_text())
    assert ts["step"] == 0 and ts["rosa"] == {"phase": 1, "warmup_step": 2}
    assert json.loads((ck0 / "config.json").read_text())["adapter"]["state"] == {"phase": 1}
    res = _run(_cfg(backbone, shared_data, cache_dir, a, strategy="rosa", steps_per_chunk=2, resume="auto"))
    assert res.step == 8
    got = _final_tensors(a)
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)

    # interrupted inside the main phase (pause after main step 4), resumed
    b = tmp_path / "main"
    _run(_cfg(backbone, shared_data, cache_dir, b, strategy="rosa", steps_per_chunk=2, pause_after_steps=4))
    res = _run(_cfg(backbone, shared_data, cache_dir, b, strategy="rosa", steps_per_chunk=2, resume="auto"))
    assert res.step == 8
    got = _final_tensors(b)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    got_losses = [r["loss"] for r in _records(b, "train") if "rosa/warmup_loss" not in r]
    assert got_losses[-1] == losses[-1]


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_resume_from_the_main_phase_step_0_checkpoint_writes_the_step_0_val_once(backbone, shared_data, cache_dir, tmp_path):
    # A RoSA run whose newest checkpoint is main-phase step 0 (phase 3 just entered: masks made,
    # no main step yet) resumed from there: metrics.jsonl keeps the one step-0 baseline record.
    from pawn.train.lifecycle import step_dir_name

    out = tmp_path / "run"
    _run(_cfg(backbone, shared_data, cache_dir, out, strategy="rosa", steps_per_chunk=2, pause_after_steps=2))
    step0 = out / "checkpoints" / step_dir_name(0)
    assert json.loads((step0 / "training_state.json").read_text())["rosa"] == {"phase": 3}
    first = [v for v in _records(out, "val") if v["step"] == 0]
    assert len(first) == 1 and first[0]["epoch"] == -1
    res = _run(_cfg(backbone, shared_data, cache_dir, out, strategy="rosa", steps_per_chunk=2, resume=str(step0)))
    assert res.step == 8 and res.reason == "step_limit"
    vals = _records(out, "val")
    assert [v["step"] for v in vals] == [0, 4, 8]
    assert vals[0] == first[0]  # the original baseline, kept as written
