"""Memory of the training step (issues 10 and 11): blockwise attention with a custom VJP, remat
modes, gradient accumulation and the compiled-memory check that refuses, in one line, a step
that will not fit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import platform
import sys

import numpy as np
import pytest

from pawn.config import TOY
import pawn.model as pm
from pawn.model import REMAT_MODES, PAWNModel, _attend, attention_path, causal_attention
from pawn.settings import PretrainConfig
from pawn.train import memory as memmod
from pawn.train.loop import TrainProgram, counter_value, init_state, make_mesh, make_optimizer
from pawn.train.schedules import build_schedule


def _program(accumulation_steps=1, remat="none", variants=((TOY, 1.0),)):
    sched = build_schedule("constant", 1e-3, 10**9, 0)
    opt = make_optimizer(sched, b1=0.9, b2=0.95, weight_decay=0.01, max_grad_norm=1.0)
    return TrainProgram(opt, schedule=sched, variants=list(variants), dtype="float32", remat=remat, mesh=make_mesh(),
                        accumulation_steps=accumulation_steps)


def _batch(B=8, T=24, seed=3):
    """Packed engine games of varied lengths; row 5 is an empty game (nothing supervised)."""
    from pawn.data.packing import pack_games
    from pawn.engine import random_games

    g = random_games(B, T, seed)
    lengths = np.asarray(g.lengths).copy()
    lengths[1], lengths[5] = 3, 0  # unequal supervised counts per micro-batch
    b = pack_games(g.tokens, lengths, g.outcome, T)
    return {k: jnp.asarray(v) for k, v in b.items()}


@pytest.mark.slow  # 27 s: the default run measured 13 min 43 s of its 15-min budget; CI runs it in -m slow
def test_blockwise_attention_equals_materialised_softmax_in_value_and_gradient():
    B, T, H, hd = 3, 300, 2, 16  # three query blocks of 128, the last one partial
    q, k, v, do = (jax.random.normal(x, (B, T, H, hd)) for x in jax.random.split(jax.random.key(0), 4))
    mask = jnp.arange(T)[None, :] < jnp.array([300, 120, 0])[:, None]
    mask = mask.at[0, 0].set(False)  # leading masked key: row 0 of game 0 has no key at all
    all_masked = jnp.cumsum(mask.astype(jnp.int32), 1) == 0
    keep = jnp.tril(jnp.ones((T, T), bool))[None] & mask[:, None, :]

    def ref(q, k, v):
        return _attend(q, k, v, keep, all_masked)

    def new(q, k, v):
        return jnp.where(all_masked[:, :, None, None], 0.0, causal_attention(q, k, v, mask, 128))

    o_ref, vjp_ref = jax.vjp(ref, q, k, v)
    o_new, vjp_new = jax.vjp(new, q, k, v)
    np.testing.assert_allclose(np.asarray(o_new), np.asarray(o_ref), atol=2e-6)
    assert float(jnp.abs(o_ref).max()) > 0.1
    for g_new, g_ref in zip(vjp_new(do), vjp_ref(do)):
        assert bool(jnp.isfinite(g_new).all())
        np.testing.assert_allclose(np.asarray(g_new), np.asarray(g_ref), atol=5e-6)


def test_plain_path_and_blockwise_path_are_the_same_function_in_logits_and_gradients(monkeypatch):
    """Issue 27: short sequences without remat run plain attention; the blockwise custom-VJP
    attention must compute the same logits and gradients,
    padded query rows and rows with no key at all included."""
    B, T = 4, 40
    model = PAWNModel(TOY, jax.random.key(2))
    tokens = jax.random.randint(jax.random.key(3), (B, T), 1, 1968)
    mask = jnp.arange(T)[None, :] < jnp.array([T, 17, 0, T])[:, None]  # full, padded, empty game
    mask = mask.at[3, :5].set(False)  # leading masked keys: rows 0-4 of game 3 see no key
    tokens = jnp.where(mask, tokens, 0)
    cot = jax.random.normal(jax.random.key(4), (B, T, TOY.vocab_size))

    def run():  # a fresh function per call: jax caches traces by function, and the path is read at trace time
        def loss(m):
            lg = m(tokens, mask, dtype="float32")
            return (lg * cot).sum() / 100.0, lg

        fn = jax.jit(jax.value_and_grad(loss, has_aux=True))
        (_, lg), g = fn(model)
        return lg, jax.tree_util.tree_leaves(g), str(jax.make_jaxpr(loss)(model))

    assert attention_path(T, "none") == "plain" and attention_path(T, False) == "plain"
    assert attention_path(T, "attention") == attention_path(T, "full") == "blockwise"
    assert attention_path(pm.PLAIN_ATTENTION_MAX_T + 1, "none") == "blockwise"
    lg_plain, g_plain, jaxpr_plain = run()
    monkeypatch.setattr(pm, "PLAIN_ATTENTION_MAX_T", 0)
    assert attention_path(T, "none") == "blockwise"
    lg_block, g_block, jaxpr_block = run()
    # the two programs really differ: the custom VJP against XLA's own VJP
    assert "custom_vjp" in jaxpr_block and "custom_vjp" not in jaxpr_plain
    np.testing.assert_allclose(np.asarray(lg_plain), np.asarray(lg_block), atol=1e-5, rtol=1e-5)
    assert bool(jnp.isfinite(lg_plain).all())
    assert float(jnp.abs(lg_plain[2] - lg_plain[2, :1]).max()) < 1e-5  # no key anywhere: one constant row
    for a, c in zip(g_plain, g_block):
        assert bool(jnp.isfinite(a).all())
        np.testing.assert_allclose(np.asarray(a), np.asarray(c), atol=1e-5, rtol=1e-5)
    assert max(float(jnp.abs(a).max()) for a in g_plain) > 1e-2


@pytest.mark.parametrize("mode", [pytest.param("attention", marks=pytest.mark.slow), "full"])
def test_remat_modes_change_memory_not_numbers(mode):
    model = PAWNModel(TOY, jax.random.key(1))
    b = _batch()

    def loss(m, remat):
        lg = m(b["input_ids"], b["attn_mask"], dtype="float32", remat=remat, prefix_mask=True)
        return (lg * jax.nn.one_hot(b["targets"], lg.shape[-1])).sum() / 100.0

    l0, g0 = jax.value_and_grad(loss)(model, "none")
    l1, g1 = jax.value_and_grad(loss)(model, mode)
    assert abs(float(l0) - float(l1)) < 1e-5
    for a, c in zip(jax.tree_util.tree_leaves(g0), jax.tree_util.tree_leaves(g1)):
        np.testing.assert_allclose(np.asarray(c), np.asarray(a), atol=1e-6)


def test_unknown_remat_mode_is_refused():
    with pytest.raises(ValueError, match="unknown remat mode 'some'"):
        _program(remat="some")
    assert REMAT_MODES == ("none", "attention", "full")


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_accumulation_over_micro_batches_gives_the_full_batch_loss_and_gradient():
    model = PAWNModel(TOY, jax.random.key(2))
    b = _batch()
    full = _program(1)._loss_and_grads(model, b)
    acc = _program(4)._loss_and_grads(model, b)
    loss_f, per_f, n_f, top1_f, g_f = full
    loss_a, per_a, n_a, top1_a, g_a = acc
    assert int(n_f) == int(n_a) == int(b["loss_mask"].sum())
    np.testing.assert_allclose(float(loss_a), float(loss_f), rtol=1e-6)
    np.testing.assert_allclose(float(per_a[TOY.name]), float(per_f[TOY.name]), rtol=1e-6)
    np.testing.assert_allclose(float(top1_a[TOY.name]), float(top1_f[TOY.name]), rtol=1e-6)
    for a, c in zip(jax.tree_util.tree_leaves(g_f), jax.tree_util.tree_leaves(g_a)):
        np.testing.assert_allclose(np.asarray(c), np.asarray(a), rtol=1e-4, atol=1e-8)
    # The micro-batches carry unequal supervised counts: a plain mean of micro-batch means is off.
    micro = {k: v.reshape(2, 4, *v.shape[1:]).swapaxes(0, 1) for k, v in b.items()}
    naive = np.mean([float(_program(1)._loss_and_grads(model, {k: v[i] for k, v in micro.items()})[0]) for i in range(4)])
    assert abs(naive - float(loss_f)) > 1e-3


def test_accumulated_training_step_matches_the_full_batch_step():
    b = _batch()
    chunk = {k: v[None] for k, v in b.items()}
    out = []
    for a in (1, 4):
        prog = _program(a)
        state = prog.place_state(init_state(PAWNModel(TOY, jax.random.key(4)), prog.optimizer))
        state, m = prog.run_chunk(state, prog.place_chunk({k: np.asarray(v) for k, v in chunk.items()}))
        out.append((state, m))
    (s1, m1), (s4, m4) = out
    np.testing.assert_allclose(np.asarray(m4["loss"]), np.asarray(m1["loss"]), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(m4["grad_norm"]), np.asarray(m1["grad_norm"]), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(s4.model.wq), np.asarray(s1.model.wq), atol=1e-6)
    assert counter_value(s4.step) == counter_value(s1.step) == 1


def test_batch_that_does_not_split_into_micro_batches_is_an_error():
    with pytest.raises(ValueError, match="accumulation_steps"):
        PretrainConfig.load(variant="toy", total_steps=2, batch_size=6, accumulation_steps=4)


def test_old_run_configs_with_boolean_remat_still_load():
    assert PretrainConfig.load(variant="toy", total_steps=2, remat=True).remat == "full"
    assert PretrainConfig.load(variant="toy", total_steps=2, remat=False).remat == "none"
    assert PretrainConfig.load(variant="toy", total_steps=2).remat == "auto"


def test_memory_estimate_of_a_compiled_step_counts_the_state_and_the_activations():
    prog = _program(1, "none")
    compiled, est = memmod.compile_chunk(prog, TOY, 2, 4, 32)
    # Arguments = fp32 params + Adam moments (3 × 267,392 × 4 bytes) + the int32/bool chunk.
    chunk_bytes = 2 * 4 * 32 * (4 + 4 + 1 + 1)
    assert est.argument_bytes >= 3 * 267_392 * 4 + chunk_bytes
    assert est.argument_bytes < 3 * 267_392 * 4 + chunk_bytes + 4096
    assert est.temp_bytes > 0 and est.peak_bytes == est.fixed_bytes + est.temp_bytes
    assert est.alias_bytes > 0  # the donated state is updated in place
    assert prog._compiled  # the run reuses this executable


def _patch_capacity(monkeypatch, nbytes):
    monkeypatch.setattr(memmod, "device_memory", lambda: (int(nbytes), "test memory"))


def test_pretrain_refuses_a_step_that_does_not_fit_in_one_line_and_leaves_no_run_dir(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from pawn.cli import app

    _, est = memmod.compile_chunk(_program(1, "none"), TOY, 2, 8, 32)
    # Room for the state and about a third of the activations: accumulation 4 (or B ≤ 2) fits.
    _patch_capacity(monkeypatch, (est.fixed_bytes + 0.3 * est.temp_bytes) / (1 - memmod.HEADROOM))
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["pretrain", "--variant", "toy", "--total-steps", "2", "--batch-size", "8", "--seq-len", "32",
                                 "--steps-per-chunk", "2", "--val-games", "0", "--remat", "none", "--out", str(out)])
    assert r.exit_code == 1, r.output
    # the plan's expected wall time (issue 42) sits under the plan line; the rest as before
    lines = [ln for ln in r.output.splitlines() if ln.strip() and not ln.startswith("expected wall time")]
    # the plan and the memory check come first (issue 26), then the one-line refusal
    assert lines[0].startswith("plan: variant toy") and lines[1].startswith("memory check: compiling"), r.output
    assert [ln for ln in lines if ln.startswith("error:")] == lines[-1:]
    assert lines[-1].startswith("error: this training step needs"), r.output
    line = lines[-1]
    assert f"{est.peak_bytes / 2**30:.1f} GiB per device" in line and "test memory is" in line
    assert "--remat full" in line and "--accumulation-steps 4" in line and "--batch-size 2" in line
    assert not out.exists()


def test_bench_step_refuses_in_one_line_instead_of_running_out_of_memory(monkeypatch):
    from typer.testing import CliRunner

    from pawn.cli import app

    _patch_capacity(monkeypatch, 1024)
    r = CliRunner().invoke(app, ["bench", "--only", "step,mfu", "--variant", "toy", "--batch-size", "4", "--seq-len", "32",
                                 "--steps-per-chunk", "2", "--remat", "full"])
    assert r.exit_code == 1
    lines = [ln for ln in r.output.splitlines() if ln.strip() and not ln.startswith("pawn bench:")]
    assert len(lines) == 1 and lines[0].startswith("error: the train step (variant toy, batch 4 × seq 32) needs"), r.output
    # beyond the flags, the other ways out: a smaller model, an accelerator (JAX runs on the CPU here), the plan alone
    assert "; or train a smaller model (--supernet tiny, or --variant small or base)" in lines[0]
    assert "; or run it on an accelerator (GPU or TPU" in lines[0]
    assert lines[0].endswith("; pawn pretrain --dry-run prints the plan and this check without training")
    assert "0.0 GiB (90% usable)" in lines[0]


def test_a_refusal_offers_the_flags_then_a_smaller_model_an_accelerator_and_the_dry_run():
    """The large supernet refused on a CPU: --accumulation-steps alone started a run of years, so
    the line goes on to a smaller model, an accelerator and --dry-run, in that order."""
    est = memmod.MemoryEstimate(argument_bytes=10 * 2**30, output_bytes=10 * 2**30, alias_bytes=10 * 2**30,
                                temp_bytes=100 * 2**30, code_bytes=0)
    line = memmod.refusal(est, int(80e9), "of this machine's memory", batch_size=256, n_devices=1, remat="full",
                          accumulation_steps=1, what="this training step")
    i = [line.index(s) for s in ("--accumulation-steps 2", "--supernet tiny", "an accelerator", "--dry-run")]
    assert i == sorted(i), line
    assert "\n" not in line


def test_suggested_accumulation_divides_the_per_device_batch():
    est = memmod.MemoryEstimate(argument_bytes=10 * 2**30, output_bytes=10 * 2**30, alias_bytes=10 * 2**30,
                                temp_bytes=100 * 2**30, code_bytes=0)
    flags = memmod.suggest_flags(est, 80e9, batch_size=256, n_devices=1, remat="none", accumulation_steps=1)
    # usable 0.9 · 80e9 B = 67.06 GiB; 57.06 GiB for activations → 100/2 = 50 GiB fits.
    assert flags[0] == "--remat full"
    assert flags[1].startswith("--accumulation-steps 2 ")
    assert flags[2].startswith("--batch-size 128 ")  # 146 fits; suggested as a size users pick (issue 26)
    assert memmod.accumulation_choices(256, 4) == [2, 4, 8, 16, 32, 64]


_FRAGMENTED_HEAP = r"""
import ctypes, json, sys
from pawn.train.memory import release_free_heap

def rss_kib():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS"))

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
blocks = [libc.malloc(4096) for _ in range(40_000)]  # 156 MiB of small blocks, below the mmap threshold
for b in blocks:
    ctypes.memset(b, 1, 4096)
for b in blocks[:-1]:  # the last one stays: free() alone trims only the heap's top, so the rest stays resident
    libc.free(b)
before = rss_kib()
called = release_free_heap()
print(json.dumps({"called": called, "before": before, "after": rss_kib()}))
"""


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"),
                    reason="glibc's malloc_trim and /proc: elsewhere release_free_heap does nothing")
def test_release_free_heap_gives_freed_heap_pages_back_to_the_os():
    """156 MiB freed below a live block stay resident under glibc until malloc_trim; the call
    must give them back (a no-op implementation leaves RSS where it was)."""
    import json
    import subprocess

    out = subprocess.run([sys.executable, "-c", _FRAGMENTED_HEAP], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    assert r["called"] is True
    assert r["before"] - r["after"] > 120 * 1024, r


def test_training_steps_release_the_free_heap_before_every_chunk(monkeypatch):
    """The README's tiny run peaked at 1.18–1.30 GiB resident without the trim and 0.97 GiB with it:
    every chunk must start with it, after the previous chunk's consumers (validation,
    checkpoints) have run."""
    import pawn.train.run as runmod

    events = []
    monkeypatch.setattr(runmod, "release_free_heap", lambda: events.append("trim") or True)
    prog = _program()
    real_run = prog.run_chunk

    def run_chunk(state, chunk, frozen=None):
        events.append("chunk")
        return real_run(state, chunk, frozen)

    monkeypatch.setattr(prog, "run_chunk", run_chunk)
    b = {k: np.asarray(v)[None] for k, v in _batch().items()}
    state = prog.place_state(init_state(PAWNModel(TOY, jax.random.key(4)), prog.optimizer))
    for r in runmod.training_steps(prog, state, [(0, b), (1, b), (2, b)], start_step=0):
        events.append("consumer")
    assert events == ["trim", "chunk", "consumer"] * 3
