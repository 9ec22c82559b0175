"""``pawn bench`` section ``step``: train-step throughput eager, jitted per step and as the K-step
``lax.scan`` chunk, and the shared compiled setup of the step, mfu and data sections (spec
``eval-probe-generate-sweep-bench.md`` §7.2)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from pawn.errors import UsageError
from pawn.bench.records import Measurement
from pawn.bench.settings import BenchSettings, pretrain_optimizer
from pawn.bench.section import Section, register, train_step_work
from pawn.bench.report import _range, TableView
from pawn.bench.timing import time_call, timing_stats


@dataclass
class StepSetup:
    """A ready-to-run training setup: program, fresh state, one host batch ``[B, T]`` and one
    chunk ``[K, B, T]`` (int arrays per batch key), the stored config, the trained variants
    ``[(config, weight)]``, the model label and the memory check's figures (``extra``)."""

    program: Any
    state: Any
    batch: dict[str, np.ndarray]
    chunk: dict[str, np.ndarray]
    config: Any
    variants: list
    label: str
    extra: dict = field(default_factory=dict)


def make_setup(s: BenchSettings, model_seed: int = 0) -> StepSetup:
    """Model, optimizer (:func:`~pawn.bench.settings.pretrain_optimizer`),
    :class:`~pawn.train.loop.TrainProgram` on all devices, one packed batch [B, T] and one chunk
    [K, B, T] of engine games. Before anything is allocated the chunk is compiled from shapes and
    its XLA memory analysis checked against the device
    (:func:`pawn.train.memory.check_step_memory`; ``remat auto`` takes the first mode that fits).

    Raises:
        ValueError: batch not divisible by the device count (times accumulation steps).
        pawn.train.memory.InsufficientMemoryError: the step does not fit (one line, with flags).
    """
    import jax

    from pawn.data.stream import EngineSource, make_batch
    from pawn.model import PAWNModel
    from pawn.train.loop import TrainProgram, init_state, make_mesh
    from pawn.train.memory import check_step_memory

    cfg, variants, label = s.model()
    n_dev = jax.device_count()
    if s.batch_size % (n_dev * s.accumulation_steps):
        raise UsageError(f"batch_size {s.batch_size} is not divisible by the {n_dev} devices it is sharded over"
                         + (f" times {s.accumulation_steps} micro-batches" if s.accumulation_steps > 1 else ""))
    opt, schedule = pretrain_optimizer()
    program = TrainProgram(opt, schedule=schedule, variants=variants, dtype=s.compute_dtype(), remat="none", mesh=make_mesh(),
                           accumulation_steps=s.accumulation_steps)
    mode, est, info = check_step_memory(program, cfg, k=s.steps_per_chunk, batch_size=s.batch_size, seq_len=s.seq_len,
                                        remat_candidates=s.remat_candidates(),
                                        what=f"the train step ({label}, batch {s.batch_size} × seq {s.seq_len})")
    state = init_state(PAWNModel(cfg, jax.random.key(model_seed)), opt)
    src = EngineSource(s.seed, s.seq_len)
    batches = [make_batch(src, i, s.batch_size, s.seq_len, False) for i in range(s.steps_per_chunk)]
    chunk = {k: np.stack([b[k] for b in batches]) for k in batches[0]}
    return StepSetup(program, state, batches[0], chunk, cfg, variants, label,
                     extra={"remat": mode, "memory": est.to_dict(), **info})


def fresh_state(setup: StepSetup):
    """A placed copy of the setup's initial state: the compiled step donates its state, so every
    measurement starts from its own buffers and ``setup.state`` stays valid."""
    import jax

    copied = jax.tree_util.tree_map(lambda x: x.copy() if isinstance(x, jax.Array) else x, setup.state)
    return setup.program.place_state(copied)


def chunk_timing(setup: StepSetup, s: BenchSettings, repeats: int) -> Measurement:
    """Time ``TrainProgram.run_chunk`` (state and chunk are donated, so the chunk is placed
    afresh before each call, outside the timing); ``work["final_loss"]`` = the last step's loss."""
    import jax

    prog = setup.program
    state = fresh_state(setup)
    samples, first = [], None
    for i in range(s.warmup + repeats):
        chunk = jax.block_until_ready(prog.place_chunk(setup.chunk))
        t0 = time.perf_counter()
        state, m = prog.run_chunk(state, chunk)
        jax.block_until_ready((state, m))
        dt = time.perf_counter() - t0
        if i == 0:
            first = dt
        if i >= s.warmup:
            samples.append(dt)
    st = timing_stats(samples)
    out = Measurement.of(st, final_loss=float(np.asarray(m["loss"])[-1]))
    out.first_call_s = first
    out.compile_s = max(0.0, first - st["median_s"]) if s.warmup else 0.0
    return out


@dataclass
class StepResult:
    """The ``step`` section: the step's shape and one :class:`Measurement` per form
    (``eager``, ``jit_step``, ``scan_chunk``), each with ``tokens_per_s`` and ``steps_per_s``."""

    model: str
    batch_size: int
    seq_len: int
    steps_per_chunk: int
    tokens_per_step: int
    param_count: int
    compute_dtype: str
    remat: str
    accumulation_steps: int
    forms: dict[str, Measurement] = field(default_factory=dict)


def bench_step(s: BenchSettings, setup: StepSetup | None = None, detail: Callable[[str], None] = lambda m: None) -> StepResult:
    """Train-step tokens/s and steps/s in three forms: eager (the same step function under
    ``jax.disable_jit()``: every primitive dispatched one by one, ``lax.scan`` run as a Python
    loop, as in a framework without a compiler), a jitted single step driven from Python (state
    donated), and the K-step ``lax.scan`` chunk the trainer runs (``TrainProgram.run_chunk``).
    Compile time is reported apart from the steady state (for eager, the first call's extra
    time is the per-primitive kernel compilation). ``detail`` is told which form runs."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from pawn.model import resolve_dtype

    setup = setup or make_setup(s)
    prog = setup.program
    B, T, K = s.batch_size, s.seq_len, s.steps_per_chunk
    out = StepResult(setup.label, B, T, K, B * T, int(setup.state.model.num_params()),
                     str(jnp.dtype(resolve_dtype(s.compute_dtype()))), prog.remat, prog.accumulation_steps)
    batch = {k: jnp.asarray(v) for k, v in setup.batch.items()}

    holder = {"state": fresh_state(setup)}

    def eager():  # the same step function with jit disabled (op-by-op dispatch)
        with jax.disable_jit():
            holder["state"], m = prog.optimizer_step(None, holder["state"], batch)  # nothing frozen
        return holder["state"], m

    detail("eager (1/3)")
    st = time_call(eager, repeats=max(1, min(s.repeats, 3)), warmup=s.warmup)
    out.forms["eager"] = Measurement.of(st).per(B * T, "tokens_per_s").per(1, "steps_per_s")

    jstep = eqx.filter_jit(lambda b, state: prog.optimizer_step(None, state, b), donate="all-except-first")
    holder = {"state": fresh_state(setup)}

    def jitted():  # jitted single step, driven from Python
        holder["state"], m = jstep(batch, holder["state"])
        return holder["state"], m

    detail("jitted step (2/3)")
    st = time_call(jitted, repeats=s.repeats * K, warmup=s.warmup)
    out.forms["jit_step"] = Measurement.of(st).per(B * T, "tokens_per_s").per(1, "steps_per_s")
    detail(f"{K}-step lax.scan chunk (3/3)")
    out.forms["scan_chunk"] = chunk_timing(setup, s, s.repeats).per(B * T * K, "tokens_per_s").per(K, "steps_per_s")
    return out


def view(st) -> TableView:
    """The printed table of the section (:class:`pawn.bench.report.TableView`)."""
    names = {"eager": "eager (no jit)", "jit_step": "jit, 1 step per call", "scan_chunk": f"lax.scan chunk, {st.steps_per_chunk} steps"}
    v = TableView(f"train step: {st.model}, {st.param_count:,} params, batch {st.batch_size} × seq {st.seq_len} ({st.compute_dtype}), "
                  f"K = {st.steps_per_chunk}, remat {st.remat}, accumulation {st.accumulation_steps}",
                  ["form", "call_ms", "tokens_per_s", "tokens_per_s_range", "steps_per_s", "first_call_s", "compile_s"],
                  notes=["compile s = first call − steady-state median (tracing + XLA compile, an estimate)"])
    for k, f in st.forms.items():
        v.rows.append({"form": names[k], "call_ms": f, "tokens_per_s": f.rates["tokens_per_s"],
                       "tokens_per_s_range": _range(f, "tokens_per_s"), "steps_per_s": f.rates["steps_per_s"],
                       "first_call_s": f.first_call_s, "compile_s": f.compile_s})
    return v


SECTION = register(Section("step", 30, lambda s, ctx: bench_step(s, ctx.setup, ctx.detail), view, (25.0, 120.0),
                           lambda s: train_step_work(s) * s.repeats, shared_setup=True))
"""The ``step`` row of the section table (:mod:`pawn.bench.section`)."""
