"""``pawn bench`` section ``adapt``: the adapter train step of ``pawn adapt`` (spec
``training-and-adapters.md`` §5: gradients only w.r.t. the trainable half, ≈4N instead of 6N
FLOPs per token) against full fine-tuning of the same backbone, per strategy, and the data-wait
fraction when training from the memory-mapped Lichess cache.

Workload: the bench's model shape (``--variant``/``--supernet``, random weights) as the backbone,
batch ``B × T`` of real Lichess games from ``--adapt-data`` (default: :func:`default_adapt_data`;
engine random games written as PGN, said so, when there are none), the legal-masked loss, K steps per compiled chunk. "tokens" are padded positions
``K·B·T`` per chunk, as everywhere in ``pawn bench``.

Each row also reports its model FLOP utilisation against the same peak as the ``mfu`` section
(the measured matmul on CPU, the published figure on a known GPU; :func:`pawn.bench.mfu.peak_flops`,
reused from that section when it ran), with the FLOP convention of spec eval §7.3:
:data:`ADAPTER_FLOPS_FORMULA`; the pretraining step's MFU is printed beside it when ``mfu`` ran.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pawn.bench.records import Measurement
from pawn.bench.settings import BenchSettings
from pawn.bench.report import BenchColumn, TableView, _n, _range
from pawn.bench.section import Section, register, train_step_work
from pawn.bench.timing import time_call
from pawn.errors import UsageError
from pawn.train.walltime import adapter_flops_per_token  # noqa: F401  (re-exported: pawn.bench names them)

ADAPTER_FLOPS_FORMULA = ("FLOPs/token: frozen-backbone adapter step 4·N + 12·L·T·d (forward and activation-gradient "
                         "matmuls of the N backbone parameters, attention ×3; the adapter's own few FLOPs not counted), "
                         "full fine-tuning 6·N + 12·L·T·d")
"""The model-FLOP convention of the section (spec eval §7.3: "frozen-backbone adapters ≈ 4N")."""


FULL = "full_finetune"
"""Row name of full fine-tuning (every backbone weight trained, same loss and data)."""


@dataclass
class AdaptStep:
    """One strategy's K-step chunk: ``trainable_params`` and the :class:`Measurement` (rates
    ``tokens_per_s``, ``steps_per_s``); ``vs_full`` = its tokens/s over full fine-tuning's;
    ``flops_per_token`` (:func:`adapter_flops_per_token`) and ``mfu`` = flops_per_token ·
    tokens/s / the section's peak FLOP/s (a fraction)."""

    strategy: str
    trainable_params: int
    chunk: Measurement
    vs_full: Optional[float] = None
    flops_per_token: int = 0
    mfu: Optional[float] = None


@dataclass
class AdaptDataWait:
    """Training one strategy from the memory-mapped cache with the trainer's prefetching
    :class:`~pawn.train.adapter_step.BatchChunks` for ``chunks`` chunks: wall seconds, seconds the loop
    waited for batches, their ratio and the tokens/s achieved."""

    strategy: str
    chunks: int
    wall_s: float
    wait_s: float
    wait_frac: float
    tokens_per_s: float


@dataclass
class AdaptResult:
    """The ``adapt`` section: the backbone, sizes, the data source and games, the per-strategy
    steps (full fine-tuning first), the data wait, the :class:`~pawn.bench.mfu.Peak` the MFU
    divides by and the pretraining step's MFU from the ``mfu`` section (None when it did not run)."""

    backbone: str
    backbone_params: int
    batch_size: int
    seq_len: int
    steps_per_chunk: int
    data: str
    train_games: int
    steps: list[AdaptStep] = field(default_factory=list)
    data_wait: Optional[AdaptDataWait] = None
    peak: Any = None
    pretrain_mfu: Optional[float] = None
    flops_formula: str = ADAPTER_FLOPS_FORMULA


LICHESS_FOLDER = Path("..") / "shared" / "data" / "lichess"
"""The Lichess PGN folder ``--adapt-data`` defaults to, from the working directory (after
``$PAWN_SHARED_DIR/data/lichess``): games of the public Lichess database, database.lichess.org."""

EXAMPLES_FOLDER = Path("examples") / "lichess"
"""The repository's Lichess sample (7,321 games of the public Lichess database, CC0, as
``.pgn.zst``), from the working directory: ``--adapt-data``'s default in a checkout with no
shared data folder beside it (a fresh clone run from its root)."""

RANDOM_GAMES = ("engine random games (no --adapt-data given, and no Lichess folder at $PAWN_SHARED_DIR/data/lichess, "
                "../shared/data/lichess or examples/lichess)")
"""The ``data`` of a record timed on engine random games written as PGN, as printed."""


def default_adapt_data() -> Optional[str]:
    """The Lichess PGN folder of ``--adapt-data``'s default: ``$PAWN_SHARED_DIR/data/lichess``,
    else :data:`LICHESS_FOLDER`, else :data:`EXAMPLES_FOLDER` (both from the working directory,
    not from where the package is installed), or None when none is a folder."""
    candidates = []
    if os.environ.get("PAWN_SHARED_DIR"):
        candidates.append(Path(os.environ["PAWN_SHARED_DIR"]) / "data" / "lichess")
    candidates += [LICHESS_FOLDER, EXAMPLES_FOLDER]
    return next((str(c) for c in candidates if c.is_dir()), None)


def adapt_data(s: BenchSettings, detail: Any = lambda m: None) -> Optional[str]:
    """``--adapt-data``, else :func:`default_adapt_data`; when neither gives games, says so
    through ``detail`` (the section's sub-status line) and returns None (the caller then times
    engine random games, recorded as :data:`RANDOM_GAMES`)."""
    data = s.adapt_data or default_adapt_data()
    if data is None:
        detail(f"timing {RANDOM_GAMES}")
    return data


def data_name(data: str) -> str:
    """A record's ``data`` as a table title names it: the file or folder name, or :data:`RANDOM_GAMES`."""
    return data if data == RANDOM_GAMES else Path(data).name


def _random_games_pgn(path: Path, n: int, max_ply: int, seed: int) -> str:
    """Write ``n`` engine random games as a PGN file (the stand-in when no Lichess games are
    available); returns its path."""
    from pawn.bench.engine_child import games_as_pgn
    from pawn.engine import random_games, tokens_to_san

    g = random_games(n, max_ply, seed)
    path.write_bytes(games_as_pgn(tokens_to_san(g.tokens, g.lengths)))
    return str(path)


def bench_adapt(s: BenchSettings, mfu_result: Any = None, detail: Any = lambda m: None) -> AdaptResult:
    """Time the adapter chunk per strategy (``--adapt-strategies``) and full fine-tuning on the
    same backbone, batch and loss, then the data-wait fraction of the first adapter strategy fed
    from the cache (built in a temporary directory, untimed). ``mfu_result``: the ``mfu``
    section's :class:`~pawn.bench.mfu.MfuResult` when it ran (its peak is reused and its MFU
    reported beside the adapter rows); else the peak is measured here. ``detail``: the
    section's sub-status callback (:func:`adapt_data` says there when no Lichess games exist).

    Raises:
        UsageError: fewer games than the chunks need.
        AdapterConfigError: a strategy that does not fit the backbone shape.
    """
    import jax
    import numpy as np

    from pawn.adapters import build_adapted, get_strategy
    from pawn.data.layout import Layout
    from pawn.data.lichess import LichessFilters, load_corpus
    from pawn.data.lichess_batches import GameBatches
    from pawn.model import PAWNModel
    from pawn.schedules import build_schedule
    from pawn.train.adapter_step import BATCH_KEYS, BatchChunks, make_adapter_loss
    from pawn.train.loop import TrainProgram, init_partitioned_state, make_mesh, make_optimizer

    cfg, _, label = s.model()
    B, T, K = s.batch_size, s.seq_len, s.steps_per_chunk
    data = adapt_data(s, detail)
    keys = (*BATCH_KEYS, "legal")
    tmp = Path(tempfile.mkdtemp(prefix="pawn-bench-adapt-"))
    try:
        n_steps = K * max(s.data_chunks, 1)
        if data is None:  # no Lichess games here: engine random games through the same PGN → cache path
            data = _random_games_pgn(tmp / "random-games.pgn", max(2 * n_steps * B, 64), T, s.seed)
        corpus = load_corpus(data, LichessFilters(min_ply=10), val_games=0, cache_dir=tmp)
        batches = GameBatches(corpus.train, Layout.of(False), T, B, s.seed)
        if batches.steps_per_epoch < n_steps:
            raise UsageError(f"bench adapt: {len(corpus.train)} games give {batches.steps_per_epoch} batches of {B}; "
                             f"the data-wait run needs {n_steps}")
        host = [batches.batch_at(i) for i in range(K)]
        chunk_host = {k: np.stack([getattr(b, k) for b in host]) for k in keys}
        backbone = PAWNModel(cfg, jax.random.key(0))
        out = AdaptResult(label, backbone.num_params(), B, T, K, s.adapt_data or default_adapt_data() or RANDOM_GAMES,
                          len(corpus.train))
        sched = build_schedule("constant", 1e-4, 10**6, 0)
        opt = make_optimizer(sched, b1=0.9, b2=0.999, weight_decay=0.0, max_grad_norm=1.0)
        loss = make_adapter_loss(legal_mask=True, illegal_penalty=0.0, dtype=s.compute_dtype())
        programs = {}
        names = (FULL, *s.adapt_strategies)
        for i, name in enumerate(names):
            detail(f"{'full fine-tuning' if name == FULL else name} ({i + 1}/{len(names)})")
            if name == FULL:
                model, trainable, n = backbone, None, backbone.num_params()
            else:
                get_strategy(name)
                model = build_adapted(name, None, backbone, jax.random.key(1))
                trainable, n = model.trainable_filter(), model.num_trainable_params()
            prog = TrainProgram.of(opt, sched, cfg, dtype=s.compute_dtype(), loss_fn=loss)
            st, frozen = init_partitioned_state(model, opt, trainable)
            holder = {"state": prog.place_state(st)}
            frozen = prog.place_frozen(frozen)

            def call(prog=prog, holder=holder, frozen=frozen):
                holder["state"], m = prog.run_chunk(holder["state"], prog.place_chunk(chunk_host), frozen)
                return m

            stats = time_call(call, repeats=s.repeats, warmup=max(1, s.warmup))
            meas = Measurement.of(stats).per(K * B * T, "tokens_per_s").per(K, "steps_per_s")
            trains_bb = name == FULL or model.adapter.trains_backbone
            out.steps.append(AdaptStep(name, int(n), meas, flops_per_token=adapter_flops_per_token(cfg, T, trains_backbone=trains_bb)))
            programs[name] = (prog, holder, frozen)
        full = out.steps[0].chunk.rates["tokens_per_s"]
        if mfu_result is not None and mfu_result.peak is not None:
            out.peak, out.pretrain_mfu = mfu_result.peak, mfu_result.mfu
        else:
            import jax.numpy as jnp

            from pawn.bench.mfu import peak_flops
            from pawn.model import resolve_dtype

            out.peak = peak_flops(jnp.dtype(resolve_dtype(s.compute_dtype())).name, s)
        for a in out.steps:
            a.vs_full = a.chunk.rates["tokens_per_s"] / full
            a.mfu = a.flops_per_token * a.chunk.rates["tokens_per_s"] / out.peak.flops_per_s
        name = s.adapt_strategies[0] if s.adapt_strategies else FULL
        prog, holder, frozen = programs[name]
        detail(f"data wait: {name}, {s.data_chunks} chunks from the cache")
        stream = BatchChunks(batches, start=K, end=K + s.data_chunks * K, k=K, keys=keys)
        try:
            t0 = time.perf_counter()
            for _, hc in stream:
                holder["state"], m = prog.run_chunk(holder["state"], prog.place_chunk(hc), frozen)
                jax.block_until_ready(m)
            wall = time.perf_counter() - t0
        finally:
            stream.close()
        out.data_wait = AdaptDataWait(name, s.data_chunks, wall, stream.wait_s, stream.wait_s / wall if wall > 0 else 0.0,
                                      s.data_chunks * K * B * T / wall)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def adapt_view(r: AdaptResult):
    """The printed table of the section (:class:`pawn.bench.report.TableView`)."""

    v = TableView(f"adapter step vs full fine-tuning: {r.backbone} ({r.backbone_params:,} params), batch {r.batch_size} × "
                  f"seq {r.seq_len}, K = {r.steps_per_chunk}, legal-masked loss, {r.train_games:,} games of {data_name(r.data)}",
                  ["workload", BenchColumn("trainable params"), "call_ms", "tokens_per_s", "tokens_per_s_range",
                   BenchColumn("vs full fine-tuning"), BenchColumn("FLOPs/token"), BenchColumn("% of peak")])
    for a in r.steps:
        v.rows.append({"workload": "full fine-tuning" if a.strategy == FULL else a.strategy,
                       "trainable params": f"{a.trainable_params:,}", "call_ms": a.chunk,
                       "tokens_per_s": a.chunk.rates["tokens_per_s"], "tokens_per_s_range": _range(a.chunk, "tokens_per_s"),
                       "vs full fine-tuning": f"{a.vs_full:.2f}×", "FLOPs/token": _n(a.flops_per_token),
                       "% of peak": "-" if a.mfu is None else f"{100 * a.mfu:.2f}%"})
    if r.data_wait is not None:
        w = r.data_wait
        v.notes.append(f"data wait ({w.strategy}, {w.chunks} chunks from the memory-mapped cache, prefetch thread): "
                       f"{w.wait_s:.3f} s of {w.wall_s:.2f} s = {100 * w.wait_frac:.1f}%, {_n(w.tokens_per_s)} tokens/s")
    v.notes.append("time ms = one K-step chunk; tokens = padded positions K·B·T")
    v.notes.append(r.flops_formula)
    if r.peak is not None:
        pre = ("" if r.pretrain_mfu is None else
               f"; pretraining step (section mfu, the same peak): {100 * r.pretrain_mfu:.2f}%")
        v.notes.append(f"% of peak = FLOPs/token · tokens/s / {r.peak.flops_per_s / 1e9:,.2f} GFLOP/s ({r.peak.source}){pre}")
    return v


def _work(s: BenchSettings) -> float:
    """One chunk per strategy (+ full fine-tuning) per repeat, plus the data-wait chunks."""
    return train_step_work(s) * ((len(s.adapt_strategies) + 1) * (s.repeats + s.warmup) + s.data_chunks)


SECTION = register(Section("adapt", 90, lambda s, ctx: bench_adapt(s, ctx.results.get("mfu"), ctx.detail), adapt_view, (40.0, 240.0),
                           _work))
"""The ``adapt`` row of the section table (:mod:`pawn.bench.section`)."""
