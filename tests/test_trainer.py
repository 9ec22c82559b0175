"""The trainer as a loop plus hooks (pawn.train.run) and the partitioned / pluggable-loss program
(pawn.train.loop) that adapter training builds on (spec training-and-adapters.md §1.5–1.10, §5)."""

from __future__ import annotations

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from pawn.checkpoint import MANIFEST, load_checkpoint
from pawn.config import TOY
from pawn.data.stream import EngineSource, make_batch
from pawn.model import PAWNModel
from pawn.settings import PretrainConfig
from pawn.train.loop import (
    TrainProgram,
    init_partitioned_state,
    make_mesh,
    make_optimizer,
    optimizer_to_arrays,
)
from pawn.train.metrics import read_metrics
from pawn.train.pretrain import run_pretrain
from pawn.train.run import CheckpointEvent, Hook, StepChunks, ValidationEvent
from pawn.train.schedules import build_schedule

RUN = dict(progress=False, install_signal_handlers=False)
TRAINABLE = ("final_norm", "lm_head")


# ------------------------------------------------------------------------------ hooks in a pretraining run
class Pruner(Hook):
    """A sweep-pruner-like hook: records what it sees and stops the run at ``stop_at``."""

    def __init__(self, stop_at: int):
        self.stop_at = stop_at
        self.chunks, self.vals, self.events, self.rejected = [], [], [], None

    def on_chunk(self, ctx):
        r = ctx.result
        self.chunks.append((r.step_start, ctx.step, r.loss, r.tokens, r.chunk_wall_s > 0))
        if ctx.val is not None:
            self.vals.append((ctx.step, ctx.val["loss"]))
        if ctx.step == 2:
            self.rejected = ctx.request_stop("too-early", before_step=2)  # at/past before_step: ignored
        if ctx.step == self.stop_at:
            assert ctx.request_stop("pruned", by="test")

    def on_event(self, event):
        if isinstance(event, CheckpointEvent):
            # observed after the atomic rename: the directory is sealed and holds this step
            ts = json.loads((event.path / "training_state.json").read_text())
            self.events.append((event.kind, event.step, event.path.name, (event.path / MANIFEST).is_file(), ts["step"]))
        elif isinstance(event, ValidationEvent):
            self.events.append(("val", event.step))


def test_a_hook_sees_chunks_and_validation_at_the_global_step_and_can_stop_the_run(tmp_path):
    pruner = Pruner(stop_at=4)
    cfg = PretrainConfig.load(variant="toy", batch_size=4, seq_len=32, val_games=4, steps_per_chunk=2, lr=1e-3,
                              warmup_steps=1, total_steps=8, val_every=2, checkpoint_every=8, keep_checkpoints=0,
                              out=tmp_path / "run")
    res = run_pretrain(cfg, hooks=[pruner], **RUN)
    assert (res.reason, res.step) == ("pruned", 4)
    assert pruner.rejected is False
    assert [(a, b, t, ok) for a, b, _, t, ok in pruner.chunks] == [(0, 2, 2 * 4 * 32, True), (2, 4, 2 * 4 * 32, True)]
    recs = read_metrics(res.run_dir / "metrics.jsonl")
    train = [r for r in recs if r["type"] == "train"]
    val = [r for r in recs if r["type"] == "val"]
    assert [r["step"] for r in train] == [2, 4]  # nothing after the stop
    assert [r["loss"] for r in train] == [pytest_approx(c[2]) for c in pruner.chunks]
    assert pruner.vals == [(v["step"], v["loss"]) for v in val] and [s for s, _ in pruner.vals] == [2, 4]
    # the stop wrote this step's checkpoint (announced as "final") and recorded the reason
    assert res.checkpoint == res.run_dir / "checkpoints" / "step_00000004"
    assert load_checkpoint(res.checkpoint).training_state["step"] == 4
    assert json.loads((res.run_dir / "schedule_health.json").read_text())["reason_for_stop"] == "pruned"
    ckpt_events = [e for e in pruner.events if e[0] != "val"]
    assert ("final", 4, "step_00000004", True, 4) in ckpt_events
    assert ckpt_events[0] == ("best", 2, "best", True, 2)  # the first validation is a new best
    assert pruner.events.index(("val", 2)) < pruner.events.index(ckpt_events[0])
    assert all(sealed and step == ts for _, step, _, sealed, ts in ckpt_events)


def pytest_approx(x):
    import pytest

    return pytest.approx(x, rel=1e-6)


# ------------------------------------------------------------------------------ partition: frozen backbone
def _chunk(k=2, b=4, t=16):
    batches = [make_batch(EngineSource(1, t), s, b, t, False) for s in range(k)]
    return {n: np.stack([x[n] for x in batches]) for n in batches[0]}


def _filter(model):
    spec = jax.tree_util.tree_map(lambda _: False, model)
    return eqx.tree_at(lambda m: tuple(getattr(m, n) for n in TRAINABLE), spec, replace=(True,) * len(TRAINABLE))


def test_partitioned_program_trains_only_the_trainable_leaves_and_keeps_frozen_ones_bitwise():
    schedule = build_schedule("cosine", 1e-2, 100, 1)
    # weight decay 0.1: a frozen leaf that reached the optimizer would shrink
    opt = make_optimizer(schedule, b1=0.9, b2=0.95, weight_decay=0.1, max_grad_norm=1.0)
    model = PAWNModel(TOY, jax.random.key(0))
    before = {n: np.asarray(v).copy() for n, v in model.params().items()}
    state, frozen = init_partitioned_state(model, opt, _filter(model))
    names = optimizer_to_arrays(state.opt_state)
    moment_names = {k for k in names if not k.endswith(".count")}
    assert moment_names and all(any(f".{n}" in k for n in TRAINABLE) for k in moment_names), sorted(moment_names)
    assert len(moment_names) == 2 * len(TRAINABLE)  # Adam mu and nu, trainable leaves only
    program = TrainProgram.of(opt, schedule, TOY, mesh=make_mesh(jax.devices()[:1]))
    frozen = program.place_frozen(frozen)
    chunk = _chunk()
    program.compile(state, chunk, frozen)  # one executable, reused below with other frozen values
    state, m = program.run_chunk(program.place_state(state), program.place_chunk(chunk), frozen)
    after = eqx.combine(state.model, frozen)
    for n in before:
        a = np.asarray(getattr(after, n))  # frozen arrays were not donated: still readable
        if n in TRAINABLE:
            assert not np.array_equal(a, before[n]), n
        else:
            assert np.array_equal(a, before[n]), n
    assert np.isfinite(np.asarray(m["loss"])).all() and np.asarray(m["grad_norm"]).min() > 0
    # The frozen half is an argument of the compiled step, not a constant baked into it: the same
    # executable, given a different backbone, computes a different loss.
    other = eqx.partition(PAWNModel(TOY, jax.random.key(1)), _filter(model))[1]
    copy = jax.tree_util.tree_map(jnp.copy, state)
    _, m2 = program.run_chunk(state, program.place_chunk(chunk), program.place_frozen(other))
    _, m1 = program.run_chunk(copy, program.place_chunk(chunk), frozen)
    assert len(program._compiled) == 1
    assert not np.allclose(np.asarray(m1["loss"]), np.asarray(m2["loss"]))


def test_full_model_filter_matches_the_unpartitioned_program_bitwise():
    schedule = build_schedule("cosine", 1e-2, 100, 1)
    opt = make_optimizer(schedule, b1=0.9, b2=0.95, weight_decay=0.1, max_grad_norm=1.0)
    chunk = _chunk()
    out = []
    for trainable in (None, lambda leaf: True):
        model = PAWNModel(TOY, jax.random.key(0))
        state, frozen = init_partitioned_state(model, opt, trainable)
        program = TrainProgram.of(opt, schedule, TOY, mesh=make_mesh(jax.devices()[:1]))
        state, m = program.run_chunk(program.place_state(state), program.place_chunk(chunk), program.place_frozen(frozen))
        full = state.model if frozen is None else eqx.combine(state.model, frozen)
        out.append(({n: np.asarray(v) for n, v in full.params().items()}, np.asarray(m["loss"])))
    assert np.array_equal(out[0][1], out[1][1])
    assert all(np.array_equal(out[0][0][n], out[1][0][n]) for n in out[0][0])


# ------------------------------------------------------------------------------ pluggable loss, any batch
def _probe_loss(model, batch):
    # d/d final_norm = mean over the batch of w[b]; "probe" reports Σ w
    w = batch["w"]
    return jnp.mean(jnp.sum(model.final_norm[None, :] * w, axis=-1)), {"probe": jnp.sum(w)}


def _probe_run(accumulation_steps: int, counts):
    schedule = build_schedule("cosine", 1.0, 100, 1)
    opt = optax.chain(optax.sgd(0.5))  # plain SGD: the update is −0.5 · grad, exactly
    model = PAWNModel(TOY, jax.random.key(0))
    state, frozen = init_partitioned_state(model, opt, _filter(model))
    rng = np.random.default_rng(0)
    K, B, d = 2, 4, TOY.d_model
    w = rng.normal(size=(K, B, d)).astype(np.float32)
    n = np.asarray(counts, np.int32)[:, None].repeat(B, 1)  # [K, B]: a rank-2 batch field
    program = TrainProgram.of(opt, schedule, TOY, mesh=make_mesh(jax.devices()[:1]), accumulation_steps=accumulation_steps,
                              loss_fn=_probe_loss, count_fn=lambda b: b["n"].sum())
    f0 = np.asarray(model.final_norm).copy()
    state, m = program.run_chunk(program.place_state(state), program.place_chunk({"w": w, "n": n}),
                                 program.place_frozen(frozen))
    return f0, w, state, {k: np.asarray(v) for k, v in m.items()}


def test_loss_hook_takes_any_batch_dict_and_drives_the_gradient_and_metrics():
    f0, w, state, m = _probe_run(1, counts=[0, 1])
    # step 0 has no supervised position (count_fn = 0): skipped; step 1 moves by −0.5·mean_b w[1]
    np.testing.assert_allclose(np.asarray(state.model.final_norm), f0 - 0.5 * w[1].mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m["probe"], w.sum(axis=(1, 2)), rtol=1e-5)
    np.testing.assert_allclose(m["loss"][0], np.mean(w[0] @ f0), rtol=1e-5)
    assert list(m["n_supervised"]) == [0, 4]
    assert set(m) == {"loss", "grad_norm", "n_supervised", "lr", "probe"}
    # micro-batches weighted by their count share give the same update and metrics
    _, _, state2, m2 = _probe_run(2, counts=[0, 1])
    np.testing.assert_allclose(np.asarray(state2.model.final_norm), np.asarray(state.model.final_norm), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m2["loss"][1], m["loss"][1], rtol=1e-5, atol=1e-6)


def test_a_program_takes_every_field_after_the_optimizer_by_name():
    # seven positional fields (optimizer, schedule, variants, dtype, remat, mesh, accumulation) are easy to
    # misplace: after the optimizer they go by name, and .of fills the defaults
    schedule = build_schedule("constant", 1e-3, 10, 0)
    opt = make_optimizer(schedule, b1=0.9, b2=0.95, weight_decay=0.0, max_grad_norm=1.0)
    mesh = make_mesh(jax.devices()[:1])
    with pytest.raises(TypeError, match="positional"):
        TrainProgram(opt, schedule, [(TOY, 1.0)], None, "none", mesh, 2)
    named = TrainProgram(opt, schedule=schedule, variants=[(TOY, 1.0)], dtype=None, remat="full", mesh=mesh, accumulation_steps=2)
    of = TrainProgram.of(opt, schedule, TOY, remat="full", mesh=mesh, accumulation_steps=2)
    assert (named.variants, named.remat, named.accumulation_steps) == (of.variants, "full", 2) == (((TOY, 1.0),), "full", 2)


def test_step_chunks_stack_the_batches_of_each_global_step():
    chunks = list(StepChunks(lambda s: {"x": np.full((3, 2), s, np.int32), "y": np.arange(3) + 10 * s},
                             start_step=4, end_step=10, k=2))
    assert [s0 for s0, _ in chunks] == [4, 6, 8]
    assert chunks[1][1]["x"].shape == (2, 3, 2) and chunks[1][1]["x"][:, 0, 0].tolist() == [6, 7]
    assert chunks[2][1]["y"][1].tolist() == [90, 91, 92]
    import pytest

    with pytest.raises(ValueError, match="chunks of 4"):
        StepChunks(lambda s: {}, start_step=0, end_step=6, k=4)
