"""Sequential sweep trials do not re-compile (issue 15): hyperparameters as data of the compiled
chunk (pawn.train.loop.TrainProgram.weight_decay / with_hyperparams), one backbone load and one
compilation per worker (pawn.train.adapt.AdaptReuse), and JAX's persistent compilation cache
across processes (pawn.sweep.study.compilation_cache)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from pawn.config import ModelConfig
from pawn.data.stream import EngineSource, make_batch
from pawn.model import PAWNModel
from pawn.train.loop import TrainProgram, init_partitioned_state, make_mesh, make_optimizer
from pawn.train.schedules import build_schedule

SMALL = ModelConfig(d_model=32, n_layers=2, n_heads=1, d_ff=64)


class CompileCounter:
    """Counts XLA compilations (JAX's backend-compile event) by function name while active."""

    def __init__(self):
        self.names: list[str] = []

    def __call__(self, event, duration, **kw):
        if event == "/jax/core/compile/backend_compile_duration":
            self.names.append(str(kw.get("fun_name", "")))

    def __enter__(self):
        jax.monitoring.register_event_duration_secs_listener(self)
        return self

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self)

    def count(self, name: str) -> int:
        return sum(1 for n in self.names if name in n)


def _chunk(k=2, b=4, t=16, s0=0):
    batches = [make_batch(EngineSource(1, t), s, b, t, False) for s in range(s0, s0 + k)]
    return {n: np.stack([x[n] for x in batches]) for n in batches[0]}


def _train(program, opt, chunks=3):
    state, frozen = init_partitioned_state(PAWNModel(SMALL, jax.random.key(0)), opt)
    state, ms = program.place_state(state), []
    for c in range(chunks):
        state, m = program.run_chunk(state, program.place_chunk(_chunk(s0=2 * c)), program.place_frozen(frozen))
        ms.append({k: np.asarray(v) for k, v in m.items()})
    return {k: np.concatenate([m[k] for m in ms]) for k in ms[0]}, {n: np.asarray(v) for n, v in state.model.params().items()}


def test_hyperparameters_as_data_follow_the_compiled_in_program_and_share_one_executable():
    s1, s2 = build_schedule("cosine", 1e-2, 6, 2), build_schedule("wsd", 3e-3, 6, 1)
    o1 = make_optimizer(s1, b1=0.9, b2=0.95, weight_decay=0.1, max_grad_norm=1.0)
    o2 = make_optimizer(s2, b1=0.9, b2=0.95, weight_decay=0.03, max_grad_norm=1.0)
    mesh = make_mesh(jax.devices()[:1])
    data1 = TrainProgram.of(o1, s1, SMALL, mesh=mesh, accumulation_steps=2, weight_decay=0.1)
    m1, p1 = _train(data1, o1)
    const2 = TrainProgram.of(o2, s2, SMALL, mesh=mesh, accumulation_steps=2)
    mc, pc = _train(const2, o2)
    with CompileCounter() as cc:
        data2 = data1.with_hyperparams(s2, 0.03)
        m2, p2 = _train(data2, o2)
    assert cc.count("chunk_fn") == 0, cc.names  # the second schedule and decay reuse the executable
    # the learning rates are the in-graph schedule's bit for bit; the rest up to float rounding
    assert np.array_equal(m2["lr"], mc["lr"]) and m2["lr"][0] == 0.0 and m2["lr"][1] == pytest.approx(3e-3)
    np.testing.assert_allclose(m2["loss"], mc["loss"], rtol=1e-5)
    for n in pc:
        np.testing.assert_allclose(p2[n], pc[n], rtol=1e-4, atol=1e-6, err_msg=n)
    # ... and really trained with schedule 2 / decay 0.03, not with the first program's values
    assert not np.allclose(m2["loss"][2:], m1["loss"][2:])
    assert any(not np.allclose(p2[n], p1[n]) for n in p1)
    with pytest.raises(ValueError, match="zero decay"):
        data1.with_hyperparams(s2, 0.0)
    with pytest.raises(ValueError, match="hyperparameters as data"):
        const2.with_hyperparams(s1, 0.1)


def test_with_hyperparams_is_the_fresh_program_bit_for_bit():
    s1, s2 = build_schedule("constant", 1e-2, 6, 0), build_schedule("one_cycle", 4e-3, 6, 2)
    o1 = make_optimizer(s1, b1=0.9, b2=0.99, weight_decay=0.05, max_grad_norm=1.0)
    o2 = make_optimizer(s2, b1=0.9, b2=0.99, weight_decay=0.2, max_grad_norm=1.0)
    mesh = make_mesh(jax.devices()[:1])
    data1 = TrainProgram.of(o1, s1, SMALL, mesh=mesh, weight_decay=0.05)
    _train(data1, o1, chunks=1)
    shared, shared_p = _train(data1.with_hyperparams(s2, 0.2), o2)
    fresh, fresh_p = _train(TrainProgram.of(o2, s2, SMALL, mesh=mesh, weight_decay=0.2), o2)
    assert all(np.array_equal(shared[k], fresh[k]) for k in fresh)
    assert all(np.array_equal(shared_p[n], fresh_p[n]) for n in fresh_p)


# ------------------------------------------------------------------------------ adapter trials
def _trial_cfg(backbone, shared_data, tmp_path, **kw):
    return dict(backbone=str(backbone), data=str(shared_data / "lichess"), strategy="lora", lora_rank=2, epochs=2,
                steps_per_epoch=2, steps_per_chunk=2, batch_size=8, seq_len=64, val_games=32, data_seed=7, seed=1,
                elo_min=1200, elo_max=2200, max_games=300, cache_dir=str(tmp_path / "cache"), resume=None, **kw)


def _summary(run_dir: Path):
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return ([(r["step"], r["loss_mean"], r["lr"]) for r in recs if r.get("type") == "train"],
            [(r["step"], r["loss"]) for r in recs if r.get("type") == "val"])


@pytest.mark.slow  # CI budget: a sweep-sized program compiled twice
def test_second_adapter_trial_compiles_neither_chunk_nor_validation(tiny_backbone, shared_data, tmp_path, monkeypatch):
    import pawn.train.adapt as adapt_mod
    from pawn.sweep.adapt import AdaptTrialRunner
    from pawn.train.adapt import AdaptReuse, run_adapt
    from pawn.train.adapt_config import AdaptSettings

    loads = []
    real = adapt_mod.load_backbone_for
    monkeypatch.setattr(adapt_mod, "load_backbone_for", lambda *a, **k: loads.append(1) or real(*a, **k))
    runner = AdaptTrialRunner({}, strategy="lora", checkpoint=str(tiny_backbone), data=str(shared_data / "lichess"),
                              log=lambda m: None)
    runner.check()
    configs = [_trial_cfg(tiny_backbone, shared_data, tmp_path, lr=3e-3, weight_decay=0.01, warmup_frac=0.0,
                          out=str(tmp_path / "t0")),
               _trial_cfg(tiny_backbone, shared_data, tmp_path, lr=1e-2, weight_decay=0.07, warmup_frac=0.25,
                          out=str(tmp_path / "t1"))]
    counts = []
    for c in configs:
        with CompileCounter() as cc:
            out = runner.run(AdaptSettings.load(**c).model_dump(mode="json"), [])
        assert out.error is None and out.reason == "step_limit", out
        counts.append((cc.count("chunk_fn"), cc.count("sums")))
    assert counts[0][0] >= 1 and counts[0][1] >= 1, counts  # the counter sees the first trial's compiles
    assert counts[1] == (0, 0), counts
    assert len(loads) == 1  # the check's load served both trials
    t1 = _summary(tmp_path / "t1")
    # the shared program ran trial 1's own schedule and decay: the same as a run compiled for it alone
    fresh = run_adapt(AdaptSettings.load(**{**configs[1], "out": str(tmp_path / "fresh")}), log=lambda m: None,
                      progress=False, install_signal_handlers=False, reuse=AdaptReuse())
    assert _summary(fresh.run_dir) == t1
    assert _summary(tmp_path / "t0") != t1



@pytest.mark.slow  # CI budget: a sweep-sized program compiled twice
def test_second_rosa_trial_compiles_neither_warmup_nor_mask_scores(tiny_backbone, shared_data, tmp_path):
    from pawn.sweep.adapt import AdaptTrialRunner
    from pawn.train.adapt_config import AdaptSettings

    runner = AdaptTrialRunner({}, strategy="rosa", checkpoint=str(tiny_backbone), data=str(shared_data / "lichess"),
                              log=lambda m: None)
    rosa = dict(strategy="rosa", lora_rank=2, density=0.05, rosa_warmup_steps=2, mask_samples=2)
    configs = [{**_trial_cfg(tiny_backbone, shared_data, tmp_path, lr=3e-3, weight_decay=0.01, out=str(tmp_path / "r0")),
                **rosa},
               {**_trial_cfg(tiny_backbone, shared_data, tmp_path, lr=1e-2, weight_decay=0.05, out=str(tmp_path / "r1")),
                **rosa}]
    counts, warm = [], []
    for c in configs:
        with CompileCounter() as cc:
            out = runner.run(AdaptSettings.load(**c).model_dump(mode="json"), [])
        assert out.error is None and out.reason == "step_limit", out
        counts.append((cc.count("chunk_fn"), cc.count("_mask_score")))
        recs = [json.loads(x) for x in (Path(c["out"]) / "metrics.jsonl").read_text().splitlines()]
        warm.append([r["rosa/warmup_loss"] for r in recs if "rosa/warmup_loss" in r])
    # trial 0 compiles the warm-up chunk, the main chunk and the mask score; trial 1 none of them
    assert counts[0][0] >= 2 and counts[0][1] >= 1 and counts[1] == (0, 0), counts
    assert len(warm[0]) == len(warm[1]) >= 1 and warm[0][0] != warm[1][0]  # each warm-up ran its own lr


# ------------------------------------------------------------------------------ persistent cache
_PROBE = """
import sys, jax, jax.numpy as jnp
from pathlib import Path
from pawn.sweep.study import compilation_cache
hits = []
jax.monitoring.register_event_listener(lambda e, **k: hits.append(e) if e == "/jax/compilation_cache/cache_hits" else None)
jax.jit(lambda x: x * 2.0)(jnp.ones(3))  # compiled before the cache is on: must not matter
with compilation_cache(Path(sys.argv[1])):
    jax.jit(lambda x: jnp.sin(x) * 3.0 + 1.0)(jnp.ones(7)).block_until_ready()
print(len(hits), jax.config.jax_compilation_cache_dir)
"""


def test_compilation_cache_is_shared_by_processes_and_restored(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    runs = [subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path / "jc")], env=env, capture_output=True, text=True,
                           timeout=300) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-2000:]
    assert runs[0].stdout.split() == ["0", "None"]  # first process: compiled and written; setting restored
    hits, restored = runs[1].stdout.split()
    assert int(hits) >= 1 and restored == "None"  # second: loaded from the cache
    assert any((tmp_path / "jc").iterdir())


def test_sweep_compilation_cache_setting(tmp_path):
    from pawn.sweep.settings import SweepSettings

    kw = dict(run_type="pretrain", out=tmp_path / "sw")
    assert SweepSettings.load(**kw).compilation_cache_dir == tmp_path / "sw" / "jax-cache"
    assert SweepSettings.load(**kw, compilation_cache="none").compilation_cache_dir is None
    assert SweepSettings.load(**kw, compilation_cache=str(tmp_path / "c")).compilation_cache_dir == tmp_path / "c"


# ------------------------------------------------------------------------------ pretraining trials
def _val_losses(run_dir: Path) -> list[tuple[int, float]]:
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in recs if r.get("type") == "val"]  # the toy variant (schema 2)


@pytest.mark.slow  # CI budget: a sweep-sized program compiled twice
def test_second_pretraining_trial_compiles_no_chunk_and_trains_its_own_schedule(tmp_path):
    from pawn.settings import PretrainConfig
    from pawn.sweep.trials import PretrainTrialRunner
    from pawn.train.pretrain import PretrainReuse, run_pretrain

    base = dict(variant="toy", batch_size=4, seq_len=32, val_games=8, total_steps=6, steps_per_chunk=2, val_every=2,
                checkpoint_every=6)
    runner = PretrainTrialRunner(base, log=lambda m: None)
    trials = [dict(lr=3e-3, weight_decay=0.01, warmup_frac=0.0), dict(lr=2e-2, weight_decay=0.08, warmup_frac=0.5)]
    counts = []
    for i, params in enumerate(trials):
        with CompileCounter() as cc:
            out = runner.run(runner.config(params, tmp_path / f"t{i}"), [])
        assert out.error is None and out.reason == "completed", out
        counts.append(cc.count("chunk_fn"))
    assert counts[0] >= 1 and counts[1] == 0, counts
    t0, t1 = _val_losses(tmp_path / "t0"), _val_losses(tmp_path / "t1")
    assert [s for s, _ in t1] == [2, 4, 6] and t0 != t1
    # trial 1 ran its own lr, warm-up and decay: what a run compiled for it alone gives, up to float rounding
    alone = run_pretrain(PretrainConfig.load(**base, **trials[1], out=str(tmp_path / "alone")), log=lambda m: None,
                         progress=False, install_signal_handlers=False)
    np.testing.assert_allclose([v for _, v in _val_losses(alone.run_dir)], [v for _, v in t1], rtol=1e-5)
    # and exactly what a fresh shared program gives (the reuse itself adds nothing)
    fresh = run_pretrain(PretrainConfig.load(**base, **trials[1], out=str(tmp_path / "fresh")), log=lambda m: None,
                         progress=False, install_signal_handlers=False, reuse=PretrainReuse())
    assert _val_losses(fresh.run_dir) == t1
    # the run summary of the reusing trial still reports the compiled memory figures
    cfg1 = [json.loads(x) for x in (tmp_path / "t1" / "metrics.jsonl").read_text().splitlines()][0]
    assert cfg1["summary"]["compiled_memory"]["peak_bytes"] > 0
