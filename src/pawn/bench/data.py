"""``pawn bench`` section ``data``: the trainer's data path, fresh engine games against an on-disk
corpus (spec ``eval-probe-generate-sweep-bench.md`` §7.2: corpus staging instead of live data
workers)."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from pawn.bench.records import Measurement
from pawn.bench.settings import BenchSettings
from pawn.bench.section import Section, register, train_step_work
from pawn.bench.report import TableView
from pawn.bench.step import StepSetup, fresh_state, make_setup
from pawn.bench.timing import timing_stats


@dataclass
class DataWait:
    """Training fed by the trainer's ``ChunkStream`` for ``chunks`` chunks: wall seconds, seconds
    blocked on data, their ratio and the training tokens/s."""

    chunks: int
    wall_s: float
    wait_s: float
    wait_frac: float
    tokens_per_s: float


@dataclass
class DataResult:
    """The ``data`` section: per source (``engine``, ``corpus``) the host batch build
    (:class:`Measurement` with batches/games/tokens per s) and the :class:`DataWait` in training;
    ``corpus`` = ``{"games", "build_s"}`` of the staged corpus."""

    batch_size: int
    seq_len: int
    steps_per_chunk: int
    corpus: dict[str, Any]
    batch_build: dict[str, Measurement] = field(default_factory=dict)
    training: dict[str, DataWait] = field(default_factory=dict)


def bench_data(s: BenchSettings, setup: Optional[StepSetup] = None, detail: Callable[[str], None] = lambda m: None) -> DataResult:
    """The trainer's data path. (1) Host batch build per step (``make_batch``: games → packed
    [B, T]) from fresh engine games versus a pre-staged on-disk corpus (built in a temporary
    directory, untimed). (2) The data-wait fraction while training: the trainer's
    :class:`~pawn.data.stream.ChunkStream` (background thread, prefetch 2) feeding
    ``run_chunk`` for ``data_chunks`` chunks after compilation, for both sources;
    ``wait_frac`` = seconds the loop blocked on data / wall seconds. ``detail`` is told which part runs."""
    import jax

    from pawn.data.stream import ChunkStream, CorpusSource, EngineSource, build_corpus, make_batch

    B, T, K = s.batch_size, s.seq_len, s.steps_per_chunk
    n_steps = max(s.repeats, s.data_chunks * K) + K
    tmp = Path(tempfile.mkdtemp(prefix="pawn-bench-corpus-"))
    try:
        detail(f"building a corpus of {n_steps * B} games (untimed)")
        t0 = time.perf_counter()
        build_corpus(tmp / "corpus", n_steps * B, T, s.seed)
        out = DataResult(B, T, K, {"games": n_steps * B, "build_s": time.perf_counter() - t0})
        sources = {"engine": EngineSource(s.seed, T),
                   "corpus": CorpusSource(tmp / "corpus", seed=s.seed, max_ply=T, mate_boost=0.0, n_games=n_steps * B)}
        for name, src in sources.items():
            detail(f"batch build from the {name}")
            make_batch(src, 0, B, T, False)
            samples = []
            for i in range(s.repeats):
                t0 = time.perf_counter()
                make_batch(src, i + 1, B, T, False)
                samples.append(time.perf_counter() - t0)
            out.batch_build[name] = (Measurement.of(timing_stats(samples)).per(1, "batches_per_s").per(B, "games_per_s")
                                     .per(B * T, "tokens_per_s"))
        setup = setup or make_setup(s)
        prog = setup.program
        state = fresh_state(setup)
        state, _ = prog.run_chunk(state, prog.place_chunk(setup.chunk))  # compile outside the timing
        jax.block_until_ready(state)
        for name, src in sources.items():
            detail(f"training fed from the {name}: {s.data_chunks} chunks")
            stream = ChunkStream(src, start_step=0, end_step=s.data_chunks * K, k=K, batch_size=B, seq_len=T,
                                 prepend_outcome=False, prefetch=2)
            try:
                t0 = time.perf_counter()
                for _, host in stream:
                    state, m = prog.run_chunk(state, prog.place_chunk(host))
                    jax.block_until_ready(m)
                wall = time.perf_counter() - t0
            finally:
                stream.close()
            out.training[name] = DataWait(s.data_chunks, wall, stream.wait_s, stream.wait_s / wall if wall > 0 else 0.0,
                                          s.data_chunks * K * B * T / wall)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def view(d) -> TableView:
    """The printed table of the section (:class:`pawn.bench.report.TableView`)."""
    v = TableView(f"data path: batch {d.batch_size} × seq {d.seq_len}",
                  ["source", "batch_build_ms", "games_per_s", "tokens_per_s", "wall_s", "wait_s", "wait_frac", "train_tokens_per_s"])
    for name, b in d.batch_build.items():
        tr = d.training[name]
        label = "fresh engine games" if name == "engine" else f"on-disk corpus ({d.corpus['games']:,} games)"
        v.rows.append({"source": label, "batch_build_ms": b, "games_per_s": b.rates["games_per_s"],
                       "tokens_per_s": b.rates["tokens_per_s"], "wall_s": tr.wall_s, "wait_s": tr.wait_s,
                       "wait_frac": tr.wait_frac, "train_tokens_per_s": tr.tokens_per_s})
    return v


SECTION = register(Section("data", 50, lambda s, ctx: bench_data(s, ctx.setup, ctx.detail), view, (1.0, 50.0),
                           lambda s: train_step_work(s) * s.data_chunks, shared_setup=True))
"""The ``data`` row of the section table (:mod:`pawn.bench.section`)."""
