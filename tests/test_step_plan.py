"""`--remat auto` takes the fastest (remat × accumulation) plan that fits, by timing each
candidate's compiled chunk on random games, and keeps it in the user's cache (issue: a plan that
picks by measured speed). The real TrainProgram compiles and runs every candidate here (toy model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import pytest

from pawn.config import NAMED_CONFIGS
from pawn.schedules import build_schedule
from pawn.train import memory, step_plan
from pawn.train.loop import TrainProgram, make_optimizer

TOY = NAMED_CONFIGS["toy"]
K, B, T = 2, 8, 32


def _program(accumulation: int = 1) -> TrainProgram:
    sched = build_schedule("cosine", 1e-3, 100, 10)
    opt = make_optimizer(sched, b1=0.9, b2=0.95, weight_decay=0.0, max_grad_norm=1.0)
    return TrainProgram.of(opt, sched, TOY, accumulation_steps=accumulation)


def _choose(program, *, total_steps=10 ** 8, key="k", **kw):
    lines: list[str] = []
    plan = step_plan.choose_step_plan(program, TOY, k=K, batch_size=B, seq_len=T, total_steps=total_steps, search=True,
                                      remat_candidates=["none", "attention", "full"], cache_key=key, log=lines.append, **kw)
    return plan, lines


def test_search_times_every_mode_takes_the_fastest_and_caches_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PAWN_PLAN_CACHE", str(tmp_path / "plans.json"))
    program = _program()
    plan, lines = _choose(program)
    assert plan.source == "search"
    timed = [c for c in plan.candidates if c.tokens_per_s]
    assert sorted(c.remat for c in timed) == ["attention", "full", "none"]
    best = max(timed, key=lambda c: c.tokens_per_s)
    assert (plan.remat, plan.accumulation_steps) == (best.remat, best.accumulation_steps)
    # the program is left on the chosen plan, holding its executable: the run does not compile again
    assert (program.remat, program.accumulation_steps) == (best.remat, best.accumulation_steps)
    assert len(program._compiled) == 1
    assert sum(ln.startswith("step plan: remat ") for ln in lines) == 3 and "took remat" in lines[-1]
    data = json.loads((tmp_path / "plans.json").read_text())
    assert data["plans"]["k"]["remat"] == best.remat and len(data["plans"]["k"]["candidates"]) == 3
    # the chosen program trains: one chunk runs from a fresh state with the executable it holds
    from pawn.model import PAWNModel
    from pawn.train.loop import init_state

    state = program.place_state(init_state(PAWNModel(TOY, jax.random.key(1)), program.optimizer))
    state, secs = step_plan.time_chunk(program, state, step_plan.timing_chunk(K, B, T, seed=3))
    assert secs > 0 and len(program._compiled) == 1

    # the next run with the same key: the cached plan, one compile, nothing timed
    again = _program()
    calls = []
    real = step_plan.compile_chunk
    monkeypatch.setattr(step_plan, "compile_chunk", lambda *a, **k: calls.append(1) or real(*a, **k))
    plan2, lines2 = _choose(again)
    assert plan2.source == "cache" and (plan2.remat, plan2.accumulation_steps) == (plan.remat, plan.accumulation_steps)
    assert len(calls) == 1 and len(lines2) == 1 and "cached in" in lines2[0]
    # another key (another model, batch, device, dtype or JAX version) finds no entry
    assert "other" not in step_plan.read_cache(tmp_path / "plans.json")


def test_the_key_changes_with_each_thing_the_plan_depends_on():
    base = dict(device_kind="TPU v5 lite", n_devices=1, variants=[TOY], stored_config=TOY, batch_size=256, seq_len=512,
                dtype="bfloat16", jax_version="0.10.2")
    k0 = step_plan.plan_key(**base)
    assert step_plan.plan_key(**base) == k0
    for field, other in (("device_kind", "NVIDIA H200"), ("n_devices", 8), ("batch_size", 128), ("seq_len", 256),
                         ("dtype", "float32"), ("jax_version", "0.11.2"), ("stored_config", NAMED_CONFIGS["small"])):
        assert step_plan.plan_key(**{**base, field: other}) != k0, field


@pytest.mark.slow
def test_a_mode_that_does_not_fit_at_one_micro_batch_is_tried_with_more(tmp_path, monkeypatch):
    """On a device too small for remat none at accumulation 1 (capacity between its figures with
    1 and 4 micro-batches) the search compiles none with more micro-batches and times it."""
    monkeypatch.setenv("PAWN_PLAN_CACHE", str(tmp_path / "plans.json"))
    peaks = {}
    for remat, a in (("none", 1), ("none", 4), ("full", 1)):
        p = _program()
        p.set_plan(remat, a)
        peaks[(remat, a)] = memory.compile_chunk(p, TOY, K, B, T)[1].peak_bytes
    assert peaks[("none", 4)] < peaks[("none", 1)]
    cap = int((max(peaks[("none", 4)], peaks[("full", 1)]) + 0.02 * (peaks[("none", 1)] - peaks[("none", 4)])) / (1 - memory.HEADROOM))
    if memory.fits(peaks[("none", 1)], cap):
        pytest.skip("the toy model's remat none figures are too close to tell apart")
    capacity = lambda: (cap, "test device")  # noqa: E731 - a smaller device than this machine's RAM
    monkeypatch.setattr(memory, "device_memory", capacity)
    monkeypatch.setattr(step_plan, "device_memory", capacity)
    plan, lines = _choose(_program())
    none = [c for c in plan.candidates if c.remat == "none"]
    assert any(c.accumulation_steps > 1 and c.tokens_per_s for c in none), lines
    assert all(memory.fits(c.peak_bytes, cap) for c in plan.candidates if c.tokens_per_s)


def test_a_short_run_skips_the_search_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PAWN_PLAN_CACHE", str(tmp_path / "plans.json"))
    plan, lines = _choose(_program(), total_steps=100, estimated_run_s=2.0)
    assert plan.source == "first-fit" and plan.remat == "none"
    assert any("search skipped" in ln for ln in lines)
    assert not (tmp_path / "plans.json").exists()


def test_a_damaged_cache_file_reads_as_empty_and_is_rewritten(tmp_path):
    f = tmp_path / "plans.json"
    f.write_text("{not json")
    assert step_plan.read_cache(f) == {}
    step_plan.write_cache(f, "d", {"remat": "full", "accumulation_steps": 2})
    step_plan.write_cache(f, "e", {"remat": "none", "accumulation_steps": 1})
    assert step_plan.read_cache(f) == {"d": {"remat": "full", "accumulation_steps": 2}, "e": {"remat": "none", "accumulation_steps": 1}}
    assert [p.name for p in tmp_path.iterdir()] == ["plans.json"]  # no temp file left


def test_accumulation_ladder_keeps_only_splits_of_each_devices_share():
    assert step_plan.accumulation_ladder(256, 1) == [1, 2, 4, 8, 16]
    assert step_plan.accumulation_ladder(24, 2) == [1, 2, 4]  # 12 games a device
    assert step_plan.accumulation_ladder(6, 1) == [1, 2]


def _pawn(*args, env):
    return subprocess.run([sys.executable, "-c", "import sys; sys.argv[0] = 'pawn'; from pawn.cli import run; run()", *args],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_pretrain_cli_searches_then_reuses_and_explicit_flags_skip(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "COLUMNS": "200"}
    env.pop("PAWN_PLAN_CACHE", None)
    base = ("pretrain", "--variant", "toy", "--total-steps", "1000000", "--steps-per-chunk", "4", "--batch-size", "8",
            "--seq-len", "64", "--dry-run", "--out", str(tmp_path / "run"))
    p = _pawn(*base, env=env)
    assert p.returncode == 0, p.stderr
    out = p.stdout + p.stderr
    assert out.count("step plan: remat ") == 3 and "step plan: took remat" in out, out
    cache = tmp_path / "cache" / "pawn" / "step_plans.json"
    (entry,) = json.loads(cache.read_text())["plans"].values()
    assert f"(remat {entry['remat']}, accumulation {entry['accumulation_steps']})" in out  # the compiled step line
    p = _pawn(*base, env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "from the search cached in" in out and "step plan: took" not in out
    p = _pawn(*base, "--accumulation-steps", "2", env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "step plan" not in out and "accumulation 2)" in out
    p = _pawn(*base, "--remat", "full", env=env)
    assert p.returncode == 0 and "step plan" not in p.stdout + p.stderr
