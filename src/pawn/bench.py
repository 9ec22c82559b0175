"""``pawn bench``: where the time goes — compiled memory, engine, train step, MFU, data path,
concurrency, eval, decode (spec ``eval-probe-generate-sweep-bench.md`` §7).

Every section is one function returning a plain dict (JSON-ready). Timings are medians over
repeated runs after warm-up, with min and max, and every timed call ends in
``jax.block_until_ready``; the first call of a jitted function is reported apart as
``first_call_s`` and ``compile_s`` (first call minus the steady-state median: tracing plus XLA
compilation). Throughput "tokens" are padded sequence positions, ``B·T`` per step (spec §7.3).
Nothing is estimated except where a field says so (``compile_s`` and MFU's FLOP count, whose
formula is :data:`FLOPS_FORMULA`).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from pawn.config import flops_per_token  # noqa: F401  (re-exported; defined with param_count)

SECTIONS: tuple[str, ...] = ("memory", "engine", "step", "mfu", "data", "concurrency", "eval", "decode")
"""Section names accepted by ``--only``, in run order."""

FLOPS_FORMULA = "FLOPs/token = 6·N + 12·L·T·d (N = all parameters, L layers, T sequence length, d width); supernet = sum over variants"
"""The model-FLOP convention of spec §7.3, as printed in the output."""

PEAK_SOURCE = "vendor datasheet dense (no sparsity) figures, TFLOP/s; fp32 = non-tensor-core FP32"
"""Where :data:`GPU_PEAKS` comes from."""

# (substring of jax's device_kind, bf16 dense TFLOP/s, fp32 TFLOP/s). More specific names first.
GPU_PEAKS: tuple[tuple[str, float, float], ...] = (
    ("GB200", 2500.0, 80.0),
    ("B200", 2250.0, 75.0),
    ("GH200", 989.4, 66.9),
    ("H200 NVL", 835.0, 60.0),
    ("H200", 989.4, 66.9),
    ("H100 PCIe", 756.0, 51.2),
    ("H100 NVL", 835.0, 60.0),
    ("H100", 989.4, 66.9),
    ("A100", 312.0, 19.5),
    ("L40S", 362.05, 91.6),
    ("L40", 181.0, 90.5),
    ("L4", 121.0, 30.3),
    ("A10G", 70.0, 31.2),
    ("A10", 125.0, 31.2),
    ("RTX 6000 Ada", 364.2, 91.1),
    ("RTX A6000", 154.8, 38.7),
    ("RTX 4090", 165.2, 82.6),
    ("RTX 3090", 71.0, 35.6),
)
"""Published dense peaks per GPU (:data:`PEAK_SOURCE`). Consumer cards list bf16 with fp32
accumulation. Note that JAX may run fp32 matmuls on TF32 tensor cores on Ampere and newer, so fp32
MFU against the non-tensor figure can exceed what the name suggests."""


# =============================================================================== timing
def timing_stats(samples_s: Sequence[float]) -> dict[str, float]:
    """Median, min and max of timed runs.

    Args:
        samples_s: wall times in seconds (at least one).

    Returns:
        ``{"median_s", "min_s", "max_s", "n"}``.

    Raises:
        ValueError: no samples.
    """
    if len(samples_s) == 0:
        raise ValueError("timing_stats needs at least one sample")
    xs = [float(x) for x in samples_s]
    return {"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs), "n": len(xs)}


def rates(stats: dict[str, float], work: float, unit: str) -> dict[str, float]:
    """Throughput ``work / time`` from :func:`timing_stats`: ``{unit}`` at the median, and the
    ``_min``/``_max`` rates (from the slowest and fastest runs)."""
    return {unit: work / stats["median_s"], f"{unit}_min": work / stats["max_s"], f"{unit}_max": work / stats["min_s"]}


def per_repetition_rates(samples_s: Sequence[float], work: Sequence[float], unit: str) -> dict[str, float]:
    """Throughput when each timed repetition did its own amount of work (random games of
    different lengths): the per-repetition rates ``work[i] / samples_s[i]``, reported as their
    median (``{unit}``), min and max, plus ``{unit}_total`` = Σ work / Σ time over the same
    repetitions. (Dividing one repetition's work by the median time of all of them mixes runs.)

    Args:
        samples_s: wall seconds per repetition (> 0).
        work: the work done in each of those repetitions (same length).
        unit: the key of the median rate, e.g. ``"plies_per_s"``.

    Raises:
        ValueError: no samples, lengths differ, or a time ≤ 0.
    """
    if len(samples_s) == 0 or len(samples_s) != len(work):
        raise ValueError(f"need one work figure per timed repetition, got {len(work)} for {len(samples_s)} times")
    if min(samples_s) <= 0:
        raise ValueError(f"repetition times must be > 0, got {min(samples_s)}")
    rs = [float(w) / float(t) for w, t in zip(work, samples_s)]
    return {unit: statistics.median(rs), f"{unit}_min": min(rs), f"{unit}_max": max(rs),
            f"{unit}_total": float(sum(work)) / float(sum(samples_s))}


def common_window_rate(spans: Sequence[tuple[float, float, float]]) -> dict[str, float]:
    """Aggregate throughput of processes that ran at the same time: all their work divided by
    one common wall window, from the first process's start to the last one's finish (a
    straggler counts against the aggregate; summing per-process rates would not see it).

    Args:
        spans: per process ``(start_s, end_s, work)``, times on one clock shared by the processes.

    Returns:
        ``{"window_s", "work", "rate"}`` with ``rate = work / window_s``.

    Raises:
        ValueError: no spans, or a span that ends before it starts, or a zero window.
    """
    if not spans:
        raise ValueError("common_window_rate needs at least one span")
    for start, end, _ in spans:
        if end < start:
            raise ValueError(f"a span ends ({end}) before it starts ({start})")
    window = max(e for _, e, _ in spans) - min(s for s, _, _ in spans)
    if window <= 0:
        raise ValueError("the common window is empty")
    work = float(sum(w for _, _, w in spans))
    return {"window_s": window, "work": work, "rate": work / window}


def time_call(fn: Callable[[], Any], *, repeats: int, warmup: int = 1) -> dict[str, Any]:
    """Time ``fn()`` (which may carry state in a closure): ``warmup`` untimed calls, then
    ``repeats`` timed ones, each ended by ``jax.block_until_ready`` on its result.

    Returns:
        :func:`timing_stats` of the timed calls plus ``first_call_s`` (the first warm-up call,
        which includes any compilation) and ``compile_s`` = ``first_call_s − median_s`` (an
        estimate of tracing + compilation; 0 when there is no warm-up).
    """
    import jax

    first = None
    for i in range(warmup):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        if i == 0:
            first = time.perf_counter() - t0
    samples = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        samples.append(time.perf_counter() - t0)
    st = timing_stats(samples)
    st["first_call_s"] = first
    st["compile_s"] = max(0.0, first - st["median_s"]) if first is not None else 0.0
    return st


# =============================================================================== settings
@dataclass
class BenchSettings:
    """Sizes of one ``pawn bench`` run (defaults = the full run; :meth:`quick` = the smoke run).

    Attributes:
        variant / supernet: the model (a single ``NAMED_CONFIGS`` size, or a ``SUPERNETS`` name
            trained jointly over its variants); exactly one is used, supernet ``tiny`` by default.
        batch_size, seq_len, steps_per_chunk: the train step's B, T and K.
        dtype: compute dtype (None = float32 on CPU, bfloat16 on accelerators).
        remat: :data:`pawn.model.REMAT_MODES` or ``"auto"`` (the first that fits the device;
            the memory section then reports every mode).
        accumulation_steps: micro-batches per optimizer step.
        repeats: timed repetitions per measurement. warmup: untimed ones before.
        engine_games, engine_max_ply: random-game workload of the engine section.
        mask_games: games whose legal masks are computed. chess_games: python-chess games.
        data_chunks: chunks timed in the data-wait measurement.
        concurrency: N (processes 1..N). concurrency_chunks: chunks timed per process.
        eval_games: games scored by the teacher-forced evaluation (batch ``batch_size``, ``seq_len``).
        decode_games, decode_len: generation batch and sequence length (end-to-end, both forms).
        decode_long_games, decode_long_len: the second decode workload (default 64 games × 257
            positions = 256 plies after the outcome token): per-step comparison and KV-cache
            generation end to end.
        matmul_n: size of the CPU peak matmul.
        pgn_files: PGN files for the parsing workload (e.g. real Lichess exports); empty = the
            random games above written as PGN.
    """

    variant: Optional[str] = None
    supernet: Optional[str] = "tiny"
    batch_size: int = 16
    seq_len: int = 128
    steps_per_chunk: int = 10
    dtype: Optional[str] = None
    remat: str = "auto"
    accumulation_steps: int = 1
    repeats: int = 5
    warmup: int = 1
    engine_games: int = 4000
    engine_max_ply: int = 512
    mask_games: int = 64
    chess_games: int = 20
    data_chunks: int = 4
    concurrency: int = 2
    concurrency_chunks: int = 3
    decode_games: int = 8
    decode_len: int = 128
    decode_long_games: int = 64
    decode_long_len: int = 257
    eval_games: int = 64
    matmul_n: int = 1024
    pgn_files: tuple[str, ...] = ()
    quick: bool = False
    seed: int = 0

    @classmethod
    def quick_defaults(cls) -> dict[str, Any]:
        """Tiny sizes: every section in well under a minute on two CPU cores."""
        return dict(variant="toy", supernet=None, batch_size=4, seq_len=32, steps_per_chunk=2, repeats=2,
                    engine_games=200, engine_max_ply=128, mask_games=8, chess_games=2, data_chunks=2,
                    concurrency=2, concurrency_chunks=1, decode_games=2, decode_len=16, decode_long_games=4,
                    decode_long_len=24, eval_games=8, matmul_n=256, quick=True)

    def model(self):
        """``(stored config, [(variant config, weight 1.0)], label)``.

        Raises:
            ValueError: unknown variant/supernet name, or both given.
        """
        from pawn.config import NAMED_CONFIGS, SUPERNETS

        if self.variant is not None and self.supernet is not None:
            raise ValueError("give either --variant or --supernet, not both")
        if self.variant is not None:
            if self.variant not in NAMED_CONFIGS:
                raise ValueError(f"unknown variant {self.variant!r}; choose from {', '.join(NAMED_CONFIGS)}")
            cfg = NAMED_CONFIGS[self.variant]
            return cfg, [(cfg, 1.0)], f"variant {self.variant}"
        name = self.supernet or "tiny"
        if name not in SUPERNETS:
            raise ValueError(f"unknown supernet {name!r}; choose from {', '.join(SUPERNETS)}")
        sup, variants = SUPERNETS[name]
        return sup, [(c, 1.0) for c in variants.values()], f"supernet {name} ({', '.join(variants)})"

    def check(self) -> None:
        """Raises ValueError naming the first bad size."""
        from pawn.vocab import MAX_SEQ_LEN

        self.model()
        from pawn.model import REMAT_MODES

        for name in ("batch_size", "seq_len", "steps_per_chunk", "repeats", "engine_games", "engine_max_ply",
                     "mask_games", "data_chunks", "concurrency", "concurrency_chunks", "decode_games", "decode_long_games",
                     "eval_games", "matmul_n", "accumulation_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if self.seq_len > MAX_SEQ_LEN:
            raise ValueError(f"seq_len {self.seq_len} exceeds the model context {MAX_SEQ_LEN}")
        for name in ("decode_len", "decode_long_len"):
            if not 2 <= getattr(self, name) <= MAX_SEQ_LEN:
                raise ValueError(f"{name} must be in 2..{MAX_SEQ_LEN}, got {getattr(self, name)}")
        if self.dtype not in (None, "auto", "float32", "bfloat16"):
            raise ValueError(f"dtype must be float32 or bfloat16, got {self.dtype!r}")
        if self.remat not in ("auto", *REMAT_MODES):
            raise ValueError(f"remat must be one of auto, {', '.join(REMAT_MODES)}; got {self.remat!r}")
        if self.batch_size % self.accumulation_steps:
            raise ValueError(f"batch_size {self.batch_size} is not a multiple of accumulation_steps {self.accumulation_steps}")

    def remat_candidates(self) -> list[str]:
        """Remat modes to try, cheapest compute first (``auto``: all of them)."""
        from pawn.model import REMAT_MODES

        return list(REMAT_MODES) if self.remat == "auto" else [self.remat]

    def compute_dtype(self) -> Optional[str]:
        """The dtype name passed to the model (None = auto)."""
        return None if self.dtype in (None, "auto") else self.dtype

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# =============================================================================== header
def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (Linux) or ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def header() -> dict[str, Any]:
    """Where the numbers come from: device, JAX version, thread counts, CPU model, host."""
    import jax
    import jaxlib

    from pawn import __version__

    devs = jax.devices()
    try:
        cpus_avail = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus_avail = os.cpu_count() or 1
    return {
        "timestamp": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "hostname": platform.node(),
        "pawn_version": __version__,
        "python": platform.python_version(),
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "backend": jax.default_backend(),
        "device": devs[0].device_kind,
        "device_count": len(devs),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_available": cpus_avail,
        "rayon_threads": int(os.environ.get("RAYON_NUM_THREADS") or cpus_avail),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


# =============================================================================== memory
def bench_memory(s: BenchSettings) -> dict[str, Any]:
    """Compiled memory of the K-step train chunk, without running it: for each remat mode of
    :meth:`BenchSettings.remat_candidates` (``auto`` = all), the chunk is compiled from shapes
    alone (nothing allocated) and XLA's ``memory_analysis()`` reported per device: argument,
    output, alias (donated) and temp bytes, and the peak (arguments + unaliased outputs + temps),
    with whether that fits this device and each of :data:`pawn.train.memory.NAMED_DEVICES`
    after :data:`~pawn.train.memory.HEADROOM`. On CPU the figure is a proxy for a GPU (no cuDNN
    fused attention there).

    Raises:
        ValueError: the batch does not split over devices × micro-batches.
    """
    import jax
    import jax.numpy as jnp

    from pawn.model import ATTENTION_IMPL
    from pawn.train.loop import TrainProgram, make_mesh, make_optimizer
    from pawn.train.memory import HEADROOM, NAMED_DEVICES, compile_chunk, device_memory, fits
    from pawn.schedules import build_schedule

    cfg, variants, label = s.model()
    n_dev = jax.device_count()
    if s.batch_size % (n_dev * s.accumulation_steps):
        raise ValueError(f"batch_size {s.batch_size} does not split over {n_dev} devices × {s.accumulation_steps} micro-batches")
    schedule = build_schedule("constant", 3e-4, 10**9, 0)
    opt = make_optimizer(schedule, b1=0.9, b2=0.95, weight_decay=0.01, max_grad_norm=1.0)
    cap, where = device_memory()
    dt_name = jnp.dtype(_compute_dtype(s)).name
    rows = []
    for mode in s.remat_candidates():
        program = TrainProgram(opt, schedule, variants, s.compute_dtype(), mode, make_mesh(), s.accumulation_steps)
        ATTENTION_IMPL.clear()
        t0 = time.perf_counter()
        _, est = compile_chunk(program, cfg, s.steps_per_chunk, s.batch_size, s.seq_len)
        rows.append({"remat": mode, **est.to_dict(), "compile_s": time.perf_counter() - t0,
                     "attention": ATTENTION_IMPL.get(dt_name, "?"),
                     "fits_this_device": None if cap is None else fits(est.peak_bytes, cap),
                     "fits": {name: fits(est.peak_bytes, size) for name, size in NAMED_DEVICES}})
    return {"model": label, "batch_size": s.batch_size, "seq_len": s.seq_len, "steps_per_chunk": s.steps_per_chunk,
            "compute_dtype": dt_name, "accumulation_steps": s.accumulation_steps, "backend": jax.default_backend(),
            "devices": n_dev, "headroom": HEADROOM, "this_device": {"bytes": cap, "source": where},
            "named_devices": [{"name": n, "bytes": b} for n, b in NAMED_DEVICES], "rows": rows,
            "source": "XLA memory_analysis() of the compiled K-step chunk, per device"
                      + ("; CPU: a proxy for a GPU, which can use cuDNN fused attention" if jax.default_backend() == "cpu" else "")}


# =============================================================================== engine
_ENGINE_CHILD = r"""
import json, sys, time
import numpy as np
from pawn.engine import legal_move_masks, parse_pgn, random_games, tokens_to_san
n, max_ply, mask_games, repeats = (int(a) for a in sys.argv[1:5])
pgn_files = json.loads(sys.argv[5])
out = {}
random_games(min(n, 200), max_ply, seed=10**6)  # warm-up: thread pool start, page faults
t, plies = [], []
for rep in range(repeats):
    t0 = time.perf_counter(); g = random_games(n, max_ply, seed=rep); t.append(time.perf_counter() - t0)
    plies.append(int(g.lengths.astype(np.int64).sum()))
out["random_games"] = {"samples_s": t, "games": n, "plies": plies}
# PGN: the games above written as PGN text (untimed), then parsed from memory.
san = tokens_to_san(g.tokens, g.lengths)
parts = []
for i, moves in enumerate(san):
    body = " ".join((f"{k // 2 + 1}. " if k % 2 == 0 else "") + m for k, m in enumerate(moves))
    parts.append(f'[Event "bench"]\n[Site "?"]\n[White "a"]\n[Black "b"]\n[Result "1/2-1/2"]\n[Termination "Normal"]\n\n{body} 1/2-1/2\n')
text = "\n".join(parts).encode()
if pgn_files:  # real files instead: the games of every file, in order
    text = b"\n\n".join(open(f, "rb").read() for f in pgn_files)
parse_pgn(text, max_ply=max_ply)
t = []
for rep in range(repeats):
    t0 = time.perf_counter(); p = parse_pgn(text, max_ply=max_ply); t.append(time.perf_counter() - t0)
assert pgn_files or len(p) == n, f"the PGN parser kept {len(p)} of {n} games: {p.counts}"
out["parse_pgn"] = {"samples_s": t, "games": int(p.counts["read"]) if pgn_files else len(p), "mb": len(text) / 1e6,
                   "source": "files" if pgn_files else "random games as PGN"}
mt, ml = np.ascontiguousarray(g.tokens[:mask_games]), np.ascontiguousarray(g.lengths[:mask_games])
legal_move_masks(mt, ml)
t = []
for rep in range(repeats):
    t0 = time.perf_counter(); legal_move_masks(mt, ml); t.append(time.perf_counter() - t0)
out["legal_masks"] = {"samples_s": t, "positions": int(ml.astype(np.int64).sum())}
print(json.dumps(out))
"""


def _python_chess_games(n_games: int, max_ply: int, seed: int) -> tuple[int, int]:
    """Play ``n_games`` uniformly random games in python-chess with the engine's stopping rules
    (checkmate, stalemate, insufficient material, 75-move rule, fivefold repetition, ply cap).
    Returns ``(games, plies)``."""
    import random

    import chess

    rng = random.Random(seed)
    plies = 0
    for _ in range(n_games):
        b = chess.Board()
        k = 0
        while k < max_ply and not b.is_game_over(claim_draw=False):
            b.push(rng.choice(list(b.legal_moves)))
            k += 1
        plies += k
    return n_games, plies


def bench_engine(s: BenchSettings) -> dict[str, Any]:
    """Engine throughput at 1 thread and at all available threads, each in a fresh subprocess
    (rayon's pool size is fixed at first use through ``RAYON_NUM_THREADS``): random games/s and
    plies/s at ``engine_max_ply``, PGN parsing games/s (the same games written as PGN text,
    parsed from memory) and legal-mask positions/s (dense ``legal_move_masks``); plus, when
    python-chess is installed, the same random-game workload in python-chess on one thread.
    Each repetition plays games of another seed, so its plies differ: plies/s is the median of
    the per-repetition rates (:func:`per_repetition_rates`), with the plies of every repetition."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    rows = []
    for threads in sorted({1, cores}):
        env = {**os.environ, "RAYON_NUM_THREADS": str(threads)}
        args = [str(s.engine_games), str(s.engine_max_ply), str(s.mask_games), str(s.repeats), json.dumps(list(s.pgn_files))]
        proc = subprocess.run([sys.executable, "-c", _ENGINE_CHILD, *args], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"engine benchmark subprocess failed ({threads} threads): {proc.stderr.strip()[-500:]}")
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        rg, pg, lm = r["random_games"], r["parse_pgn"], r["legal_masks"]
        st_rg, st_pg, st_lm = (timing_stats(x["samples_s"]) for x in (rg, pg, lm))
        rows.append({
            "threads": threads,
            "random_games": {**st_rg, **rates(st_rg, rg["games"], "games_per_s"),
                             **per_repetition_rates(rg["samples_s"], rg["plies"], "plies_per_s"),
                             "games": rg["games"], "plies": rg["plies"], "max_ply": s.engine_max_ply},
            "parse_pgn": {**st_pg, **rates(st_pg, pg["games"], "games_per_s"), "games": pg["games"], "mb": pg["mb"],
                          "source": pg["source"]},
            "legal_masks": {**st_lm, **rates(st_lm, lm["positions"], "positions_per_s"), "positions": lm["positions"]},
        })
    out: dict[str, Any] = {"threads": rows, "python_chess": None}
    try:
        import chess  # noqa: F401
    except ImportError:
        out["python_chess"] = {"skipped": "python-chess is not installed"}
        return out
    samples, plies = [], []
    for rep in range(s.repeats):
        t0 = time.perf_counter()
        _, n_plies = _python_chess_games(s.chess_games, s.engine_max_ply, seed=rep)
        samples.append(time.perf_counter() - t0)
        plies.append(n_plies)
    st = timing_stats(samples)
    out["python_chess"] = {**st, **rates(st, s.chess_games, "games_per_s"), **per_repetition_rates(samples, plies, "plies_per_s"),
                           "games": s.chess_games, "plies": plies, "max_ply": s.engine_max_ply, "threads": 1}
    return out


# =============================================================================== train step
@dataclass
class StepSetup:
    """A ready-to-run training setup: program, fresh state, host batches."""

    program: Any
    state: Any
    batch: dict[str, np.ndarray]
    chunk: dict[str, np.ndarray]
    config: Any
    variants: list
    label: str
    extra: dict = field(default_factory=dict)


def make_setup(s: BenchSettings, model_seed: int = 0) -> StepSetup:
    """Model, optimizer (pretraining defaults: AdamW lr 3e-4 constant, β 0.9/0.95, wd 0.01,
    clip 1.0), :class:`~pawn.train.loop.TrainProgram` on all devices, one packed batch
    [B, T] and one chunk [K, B, T] of engine games. Before anything is allocated the chunk is
    compiled from shapes and its XLA memory analysis checked against the device
    (:func:`pawn.train.memory.check_step_memory`; ``remat auto`` takes the first mode that fits).

    Raises:
        ValueError: batch not divisible by the device count (times accumulation steps), or a
            bad model name.
        pawn.train.memory.InsufficientMemoryError: the step does not fit (one line, with flags).
    """
    import jax

    from pawn.data.stream import EngineSource, make_batch
    from pawn.model import PAWNModel
    from pawn.train.loop import TrainProgram, init_state, make_mesh, make_optimizer
    from pawn.schedules import build_schedule

    from pawn.train.memory import check_step_memory

    cfg, variants, label = s.model()
    n_dev = jax.device_count()
    if s.batch_size % (n_dev * s.accumulation_steps):
        raise ValueError(f"batch_size {s.batch_size} is not divisible by the {n_dev} devices it is sharded over"
                         + (f" times {s.accumulation_steps} micro-batches" if s.accumulation_steps > 1 else ""))
    schedule = build_schedule("constant", 3e-4, 10**9, 0)
    opt = make_optimizer(schedule, b1=0.9, b2=0.95, weight_decay=0.01, max_grad_norm=1.0)
    program = TrainProgram(opt, schedule, variants, s.compute_dtype(), "none", make_mesh(), s.accumulation_steps)
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


def _chunk_timing(setup: StepSetup, s: BenchSettings, repeats: int) -> dict[str, Any]:
    """Time ``TrainProgram.run_chunk`` (state and chunk are donated, so the chunk is placed
    afresh before each call, outside the timing)."""
    import jax

    prog = setup.program
    holder = {"state": fresh_state(setup)}
    samples, first = [], None
    for i in range(s.warmup + repeats):
        chunk = jax.block_until_ready(prog.place_chunk(setup.chunk))
        t0 = time.perf_counter()
        holder["state"], m = prog.run_chunk(holder["state"], chunk)
        jax.block_until_ready((holder["state"], m))
        dt = time.perf_counter() - t0
        if i == 0:
            first = dt
        if i >= s.warmup:
            samples.append(dt)
    st = timing_stats(samples)
    st["first_call_s"] = first
    st["compile_s"] = max(0.0, first - st["median_s"]) if s.warmup else 0.0
    st["final_loss"] = float(np.asarray(m["loss"])[-1])
    return st


def bench_step(s: BenchSettings, setup: Optional[StepSetup] = None) -> dict[str, Any]:
    """Train-step tokens/s and steps/s in three forms: eager (the same step function under
    ``jax.disable_jit()``: every primitive dispatched one by one, ``lax.scan`` run as a Python
    loop, as in a framework without a compiler), a jitted single step driven from Python (state
    donated), and the K-step ``lax.scan`` chunk the trainer runs (``TrainProgram.run_chunk``).
    Compile time is reported apart from the steady state (for eager, the first call's extra
    time is the per-primitive kernel compilation)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    setup = setup or make_setup(s)
    prog = setup.program
    B, T, K = s.batch_size, s.seq_len, s.steps_per_chunk
    tokens_per_step = B * T
    out: dict[str, Any] = {"model": setup.label, "batch_size": B, "seq_len": T, "steps_per_chunk": K,
                           "tokens_per_step": tokens_per_step, "param_count": int(setup.state.model.num_params()),
                           "compute_dtype": str(jnp.dtype(_compute_dtype(s))), "remat": prog.remat,
                           "accumulation_steps": prog.accumulation_steps, "forms": {}}
    batch = {k: jnp.asarray(v) for k, v in setup.batch.items()}

    # eager: the same step function with jit disabled (op-by-op dispatch)
    holder = {"state": fresh_state(setup)}

    def eager():
        with jax.disable_jit():
            holder["state"], m = prog._step(holder["state"], batch)
        return holder["state"], m

    eager_repeats = max(1, min(s.repeats, 3))
    st = time_call(eager, repeats=eager_repeats, warmup=s.warmup)
    out["forms"]["eager"] = {**st, **rates(st, tokens_per_step, "tokens_per_s"), **rates(st, 1, "steps_per_s")}

    # jitted single step, driven from Python
    jstep = eqx.filter_jit(lambda b, state: prog._step(state, b), donate="all-except-first")
    holder = {"state": fresh_state(setup)}

    def jitted():
        holder["state"], m = jstep(batch, holder["state"])
        return holder["state"], m

    st = time_call(jitted, repeats=s.repeats * K, warmup=s.warmup)
    out["forms"]["jit_step"] = {**st, **rates(st, tokens_per_step, "tokens_per_s"), **rates(st, 1, "steps_per_s")}

    # K-step scan chunk
    st = _chunk_timing(setup, s, s.repeats)
    out["forms"]["scan_chunk"] = {**st, **rates(st, tokens_per_step * K, "tokens_per_s"), **rates(st, K, "steps_per_s")}
    return out


def _compute_dtype(s: Optional[BenchSettings] = None):
    from pawn.model import resolve_dtype

    return resolve_dtype(s.compute_dtype() if s is not None else None)


# =============================================================================== MFU
def step_flops_per_token(variants: Sequence, seq_len: int) -> int:
    """Supernet joint step: the sum of :func:`flops_per_token` over the variants trained (each
    runs its own forward and backward). ``variants`` are configs or ``(config, weight)`` pairs."""
    return sum(flops_per_token(v[0] if isinstance(v, tuple) else v, seq_len) for v in variants)


def lookup_gpu_peak(device_kind: str) -> Optional[tuple[str, float, float]]:
    """The :data:`GPU_PEAKS` row whose name occurs in ``device_kind`` (first match), or None."""
    kind = device_kind.upper()
    for row in GPU_PEAKS:
        if row[0].upper() in kind:
            return row
    return None


def measure_matmul_peak(n: int, dtype: str, repeats: int) -> dict[str, Any]:
    """Measured matmul throughput on the default device: a jitted ``[n, n] @ [n, n]`` in
    ``dtype`` (2·n³ FLOPs per call), median over ``repeats`` runs."""
    import jax

    a = jax.random.normal(jax.random.key(0), (n, n), dtype)
    b = jax.random.normal(jax.random.key(1), (n, n), dtype)
    f = jax.jit(lambda x, y: x @ y)
    st = time_call(lambda: f(a, b), repeats=max(3, repeats), warmup=2)
    return {**st, "n": n, "dtype": dtype, **rates(st, 2.0 * n ** 3, "flops_per_s")}


def bench_mfu(s: BenchSettings, step: Optional[dict] = None, setup: Optional[StepSetup] = None) -> dict[str, Any]:
    """Model FLOPs per token (:data:`FLOPS_FORMULA`) and MFU of the K-step scan chunk:
    ``flops_per_token · tokens_per_s / peak``. Peak: on GPUs the published dense figure for the
    compute dtype from :data:`GPU_PEAKS`; on CPU (or a GPU not in the table) a matmul peak
    measured in this run (:func:`measure_matmul_peak`)."""
    import jax
    import jax.numpy as jnp

    from pawn.config import param_count

    setup = setup or make_setup(s)
    if step is None or "scan_chunk" not in step.get("forms", {}):
        st = _chunk_timing(setup, s, s.repeats)
        tps = s.batch_size * s.seq_len * s.steps_per_chunk / st["median_s"]
        measured_here = True
    else:
        tps = step["forms"]["scan_chunk"]["tokens_per_s"]
        measured_here = False
    dt_name = jnp.dtype(_compute_dtype(s)).name
    per_variant = [{"name": c.name, "param_count": param_count(c), "flops_per_token": flops_per_token(c, s.seq_len),
                    "attention_flops_per_token": 12 * c.n_layers * s.seq_len * c.d_model} for c, _ in setup.variants]
    fpt = step_flops_per_token(setup.variants, s.seq_len)
    achieved = fpt * tps
    out: dict[str, Any] = {"formula": FLOPS_FORMULA, "seq_len": s.seq_len, "variants": per_variant,
                           "flops_per_token": fpt, "tokens_per_s": tps, "tokens_per_s_measured_in_mfu": measured_here,
                           "achieved_flops_per_s": achieved, "compute_dtype": dt_name}
    backend = jax.default_backend()
    kind = jax.devices()[0].device_kind
    row = lookup_gpu_peak(kind) if backend == "gpu" else None
    n_dev = jax.device_count()
    if row is not None:
        peak_one = (row[1] if dt_name == "bfloat16" else row[2]) * 1e12
        out["peak"] = {"flops_per_s": peak_one * n_dev, "per_device_flops_per_s": peak_one, "devices": n_dev,
                       "source": f"{PEAK_SOURCE} ({row[0]}, {'bf16' if dt_name == 'bfloat16' else 'fp32'})"}
    else:
        mm = measure_matmul_peak(s.matmul_n, dt_name, s.repeats)
        why = "CPU" if backend == "cpu" else f"{kind} is not in the published-peak table"
        out["peak"] = {"flops_per_s": mm["flops_per_s"] * n_dev, "per_device_flops_per_s": mm["flops_per_s"], "devices": n_dev,
                       "source": f"measured in this run ({why}): jitted {s.matmul_n}×{s.matmul_n} {dt_name} matmul, median",
                       "matmul": mm}
    out["mfu"] = achieved / out["peak"]["flops_per_s"]
    return out


# =============================================================================== data path
def bench_data(s: BenchSettings, setup: Optional[StepSetup] = None) -> dict[str, Any]:
    """The trainer's data path. (1) Host batch build per step (``make_batch``: games → packed
    [B, T]) from fresh engine games versus a pre-staged on-disk corpus (built in a temporary
    directory, untimed). (2) The data-wait fraction while training: the trainer's
    :class:`~pawn.data.stream.ChunkStream` (background thread, prefetch 2) feeding
    ``run_chunk`` for ``data_chunks`` chunks after compilation, for both sources;
    ``wait_frac`` = seconds the loop blocked on data / wall seconds."""
    import jax

    from pawn.data.stream import ChunkStream, CorpusSource, EngineSource, build_corpus, make_batch

    B, T, K = s.batch_size, s.seq_len, s.steps_per_chunk
    n_steps = max(s.repeats, s.data_chunks * K) + K
    tmp = tempfile.mkdtemp(prefix="pawn-bench-corpus-")
    try:
        from pathlib import Path

        t0 = time.perf_counter()
        build_corpus(Path(tmp) / "corpus", n_steps * B, T, s.seed)
        build_s = time.perf_counter() - t0
        sources = {"engine": EngineSource(s.seed, T),
                   "corpus": CorpusSource(Path(tmp) / "corpus", seed=s.seed, max_ply=T, mate_boost=0.0, n_games=n_steps * B)}
        out: dict[str, Any] = {"batch_size": B, "seq_len": T, "steps_per_chunk": K,
                               "corpus": {"games": n_steps * B, "build_s": build_s}, "batch_build": {}, "training": {}}
        for name, src in sources.items():
            make_batch(src, 0, B, T, False)
            samples = []
            for i in range(s.repeats):
                t0 = time.perf_counter()
                make_batch(src, i + 1, B, T, False)
                samples.append(time.perf_counter() - t0)
            st = timing_stats(samples)
            out["batch_build"][name] = {**st, **rates(st, 1, "batches_per_s"), **rates(st, B, "games_per_s"),
                                        **rates(st, B * T, "tokens_per_s")}
        setup = setup or make_setup(s)
        prog = setup.program
        state = fresh_state(setup)
        state, _ = prog.run_chunk(state, prog.place_chunk(setup.chunk))  # compile outside the timing
        jax.block_until_ready(state)
        for name, src in sources.items():
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
            out["training"][name] = {"chunks": s.data_chunks, "wall_s": wall, "wait_s": stream.wait_s,
                                     "wait_frac": stream.wait_s / wall if wall > 0 else 0.0,
                                     "tokens_per_s": s.data_chunks * K * B * T / wall}
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# =============================================================================== concurrency
def _concurrency_worker(settings: dict, index: int, barrier, results) -> None:
    """One spawned training process: build, compile, wait at the barrier, then run
    ``concurrency_chunks`` chunks (placement included) and report its span on the wall clock
    (``time.time()``, the clock the processes share) and the per-chunk times."""
    try:
        import jax

        s = BenchSettings(**settings)
        setup = make_setup(s, model_seed=index)
        prog = setup.program
        state = prog.place_state(setup.state)
        state, m = prog.run_chunk(state, prog.place_chunk(setup.chunk))
        jax.block_until_ready(m)
        barrier.wait(timeout=600)
        samples = []
        start = time.time()
        for _ in range(s.concurrency_chunks):
            t0 = time.perf_counter()
            state, m = prog.run_chunk(state, prog.place_chunk(setup.chunk))
            jax.block_until_ready(m)
            samples.append(time.perf_counter() - t0)
        end = time.time()
        results.put({"index": index, "samples_s": samples, "start_s": start, "end_s": end})
    except BaseException as e:  # report, never hang the parent
        try:
            barrier.abort()
        except Exception:
            pass
        results.put({"index": index, "error": f"{e.__class__.__name__}: {e}"})


def bench_concurrency(s: BenchSettings, timeout_s: float = 900.0) -> dict[str, Any]:
    """``n = 1 … concurrency`` independent training processes at once (``multiprocessing``
    *spawn*, never fork), released together by a barrier after each compiled its chunk. Per n:
    the aggregate tokens/s = all processes' tokens / the common wall window from the first
    start to the last finish (:func:`common_window_rate`), each process's own tokens/s over its
    own span, and the speed-up of the aggregate over n = 1. On GPUs the children do not
    preallocate memory (``XLA_PYTHON_CLIENT_PREALLOCATE=false``). Stops early if a process fails
    (e.g. OOM)."""
    import multiprocessing as mp
    import queue as _queue

    ctx = mp.get_context("spawn")
    tokens_per_chunk = s.batch_size * s.seq_len * s.steps_per_chunk
    rows: list[dict[str, Any]] = []
    base = None
    saved = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    try:
        for n in range(1, s.concurrency + 1):
            barrier, results = ctx.Barrier(n), ctx.Queue()
            procs = [ctx.Process(target=_concurrency_worker, args=(s.to_dict(), i, barrier, results), daemon=True)
                     for i in range(n)]
            for p in procs:
                p.start()
            got, deadline = [], time.monotonic() + timeout_s
            while len(got) < n and time.monotonic() < deadline:
                try:
                    got.append(results.get(timeout=1.0))
                except _queue.Empty:
                    if not any(p.is_alive() for p in procs) and results.empty():
                        break
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
            errors = [g["error"] for g in got if "error" in g]
            if errors or len(got) < n:
                rows.append({"processes": n, "error": errors[0] if errors else f"only {len(got)} of {n} processes reported"})
                break
            per = sorted(got, key=lambda g: g["index"])
            tokens = tokens_per_chunk * s.concurrency_chunks
            window = common_window_rate([(g["start_s"], g["end_s"], tokens) for g in per])
            per_rates = [tokens / (g["end_s"] - g["start_s"]) for g in per]
            agg = window["rate"]
            base = base or agg
            rows.append({"processes": n, "aggregate_tokens_per_s": agg, "window_s": window["window_s"],
                         "per_process_tokens_per_s": per_rates, "mean_per_process_tokens_per_s": agg / n,
                         "speedup_vs_1": agg / base, "chunks_per_process": s.concurrency_chunks,
                         "per_process_chunk_s": [g["samples_s"] for g in per]})
    finally:
        if saved is None:
            os.environ.pop("XLA_PYTHON_CLIENT_PREALLOCATE", None)
        else:
            os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = saved
    return {"start_method": "spawn", "tokens_per_chunk": tokens_per_chunk, "rows": rows}


# =============================================================================== eval
def bench_eval(s: BenchSettings) -> dict[str, Any]:
    """Teacher-forced evaluation speed, what ``pawn eval`` runs: positions/s and games/s of
    :func:`pawn.evaluate.accuracy.evaluate_games` on ``eval_games`` random games of the
    published validation stream (seed 2^63 − 1) at ``seq_len``, ``batch_size`` games per model
    call; packing, the engine's legal masks and the host-side scoring are part of the measured
    call. The warm-up call scores the same games (the same shapes), so the timed calls compile
    nothing; its time is ``first_call_s``. Positions are the supervised (``loss_mask``) ones.
    The model is the stored config (the supernet itself for a supernet), random init: speed
    does not depend on the weights."""
    import jax

    from pawn.engine import random_games
    from pawn.evaluate.accuracy import evaluate_games
    from pawn.model import PAWNModel

    cfg, _, label = s.model()
    model = PAWNModel(cfg, jax.random.key(0))
    g = random_games(s.eval_games, s.seq_len, seed=2**63 - 1)
    res = {}

    def run():
        res["r"] = evaluate_games(model, g.tokens, g.lengths, g.outcome, seq_len=s.seq_len, batch_size=s.batch_size)
        return res["r"].n_positions

    st = time_call(run, repeats=s.repeats, warmup=max(1, s.warmup))
    n_pos = int(res["r"].n_positions)
    return {"model": label, "config": cfg.name, "games": s.eval_games, "seq_len": s.seq_len, "batch_size": s.batch_size,
            "positions": n_pos, **st, **rates(st, n_pos, "positions_per_s"), **rates(st, s.eval_games, "games_per_s")}


# =============================================================================== decode
def decode_step_timing(model, games: int, seq_len: int, *, repeats: int, warmup: int) -> dict[str, Any]:
    """Model time of one generation step at batch ``games`` and length ``seq_len``, engine
    excluded: the jitted KV-cache decode step (cache of ``seq_len`` slots, donated, written at the
    middle position; its cost does not depend on the position) against the jitted full-recompute
    forward over the [games, seq_len] buffer that ``use_kv_cache=False`` runs at every step.

    Returns:
        ``{"kv_cache": stats, "recompute": stats, "step_speedup"}``: :func:`time_call` stats per
        single step (dispatch + compute + sync), speed-up = recompute median / KV median.
    """
    import jax
    import jax.numpy as jnp

    from pawn.evaluate.generation import _decode, _full_at, _prefill_at
    from pawn.vocab import PLY_LIMIT

    seq = np.full((games, seq_len), 100, np.int32)  # any real move tokens
    seq[:, 0] = PLY_LIMIT
    pos = seq_len // 2
    attn = np.arange(seq_len)[None, :].repeat(games, 0) <= pos - 1
    _, cache = _prefill_at(model, jnp.asarray(seq), jnp.asarray(attn), jnp.int32(pos - 1), None)
    state = {"cache": cache}
    tok, p = jnp.asarray(seq[:, pos]), jnp.int32(pos)

    def kv():
        logits, state["cache"] = _decode(model, state["cache"], tok, p)  # rewrites slot pos each call
        return logits

    dev = jnp.asarray(seq)
    out = {"kv_cache": time_call(kv, repeats=max(10, repeats), warmup=max(1, warmup)),
           "recompute": time_call(lambda: _full_at(model, dev, p, None), repeats=max(1, min(repeats, 2)),
                                  warmup=max(1, warmup))}
    out["step_speedup"] = out["recompute"]["median_s"] / out["kv_cache"]["median_s"]
    return out


def bench_decode(s: BenchSettings) -> dict[str, Any]:
    """Decoding speed on two workloads, ``decode_games × decode_len`` and ``decode_long_games ×
    decode_long_len`` (default 64 games × 257 positions: 256 plies after the outcome token).

    Per workload: ``step`` = :func:`decode_step_timing` (KV-cache decode step against the full
    recompute forward, model time only), and ``forms`` = end-to-end generation tokens/s of
    :func:`pawn.evaluate.generation.autoregressive_generate` from the outcome token PLY_LIMIT,
    legal moves only (so random weights still play full games), the engine's legal masks and
    moves per step included; tokens = moves generated. The first workload runs both forms
    (``kv_speedup`` = KV tokens/s ÷ recompute tokens/s); the long one runs the KV cache only
    (recomputing 64 × 257 positions per ply is minutes per game batch on a CPU; its per-step
    ratio is ``step.step_speedup``). The model is the step section's stored model, random init.
    """
    import jax

    from pawn.evaluate.generation import autoregressive_generate
    from pawn.model import PAWNModel
    from pawn.vocab import PLY_LIMIT

    cfg, _, label = s.model()
    model = PAWNModel(cfg, jax.random.key(0))
    out: dict[str, Any] = {"model": label, "config": cfg.name, "workloads": []}
    loads = [(s.decode_games, s.decode_len, ("kv_cache", "recompute")), (s.decode_long_games, s.decode_long_len, ("kv_cache",))]
    for games, seq_len, forms in loads:
        w: dict[str, Any] = {"games": games, "seq_len": seq_len,
                             "step": decode_step_timing(model, games, seq_len, repeats=s.repeats, warmup=s.warmup), "forms": {}}
        for name in forms:
            res = {}

            def run(kv=name == "kv_cache"):
                res["r"] = autoregressive_generate(model, games, outcome_token=PLY_LIMIT, max_seq_len=seq_len,
                                                   mask_illegal=True, batch_size=games, seed=0, use_kv_cache=kv)
                return res["r"].sequences

            st = time_call(run, repeats=max(1, min(s.repeats, 2)), warmup=s.warmup)
            toks = int(res["r"].game_lengths.astype(np.int64).sum())
            w["forms"][name] = {**st, **rates(st, toks, "tokens_per_s"), "tokens": toks}
        f = w["forms"]
        if "recompute" in f:
            w["kv_speedup"] = f["kv_cache"]["tokens_per_s"] / f["recompute"]["tokens_per_s"]
        out["workloads"].append(w)
    return out


# =============================================================================== driver
def parse_only(values: Optional[Sequence[str]]) -> list[str]:
    """``--only`` values (repeatable, comma lists) → section names in run order.

    Raises:
        ValueError: an unknown name (listing the valid ones).
    """
    if not values:
        return list(SECTIONS)
    names = {x.strip() for v in values for x in v.split(",") if x.strip()}
    bad = sorted(names - set(SECTIONS))
    if bad:
        raise ValueError(f"unknown section(s) {', '.join(bad)}; choose from {', '.join(SECTIONS)}")
    return [n for n in SECTIONS if n in names]


# Rough wall seconds of each section on an otherwise idle 2-core CPU: (--quick, default settings =
# tiny supernet, batch 16 × 128, K 10, 5 repeats). Concurrency is the one-process row (see
# estimate_seconds). Derived from CPU seconds measured per section on a busy 2-core machine
# (quick: engine 0.5, step 29.8, mfu 0.4, data 0.1, concurrency 28.2 for rows 1 and 2, decode 3.2;
# default: engine 12.2, step 168.5, mfu 0.7, data 71.4), and, for the default concurrency and
# decode sections, from a whole default run with --concurrency 4 taking about 7.5 minutes there.
# memory: three compilations of 10–25 s (toy to large supernet); eval and the decode section's
# 64 × 257 workload are guesses from their first timings.
# Only used for the estimate printed before a run.
REFERENCE_SECTION_S: dict[str, tuple[float, float]] = {
    "memory": (30.0, 60.0), "engine": (2.0, 10.0), "step": (25.0, 120.0), "mfu": (2.0, 3.0), "data": (1.0, 50.0),
    "concurrency": (9.0, 46.0), "eval": (3.0, 10.0), "decode": (5.0, 60.0),
}
REFERENCE_MACHINE = "a 2-core CPU"
"""Where :data:`REFERENCE_SECTION_S` was measured."""


def _work(s: BenchSettings, name: str) -> float:
    """Relative amount of work of a section (its dominant loop), for :func:`estimate_seconds`."""
    from pawn.config import NAMED_CONFIGS, SUPERNETS

    if name == "engine":
        return s.engine_games * s.engine_max_ply * s.repeats
    if name == "memory":  # compile only: about one compilation per remat mode, whatever the sizes
        return float(len(s.remat_candidates()))
    if s.variant is not None and s.variant in NAMED_CONFIGS:
        variants = [(NAMED_CONFIGS[s.variant], 1.0)]
        stored = NAMED_CONFIGS[s.variant]
    else:
        sup, vs = SUPERNETS.get(s.supernet or "tiny", SUPERNETS["tiny"])
        variants, stored = [(c, 1.0) for c in vs.values()], sup
    if name == "decode":
        return flops_per_token(stored, s.decode_len) / 3 * s.decode_games * s.decode_len * s.decode_len
    if name == "eval":
        return flops_per_token(stored, s.seq_len) / 3 * s.eval_games * s.seq_len * s.repeats
    step = step_flops_per_token(variants, s.seq_len) * s.batch_size * s.seq_len * s.steps_per_chunk
    if name == "concurrency":
        return step * s.concurrency_chunks
    if name == "data":
        return step * s.data_chunks
    return step * s.repeats


def estimate_seconds(s: BenchSettings, sections: Sequence[str], cores: int = 2) -> dict[str, float]:
    """Rough wall seconds per section on :data:`REFERENCE_MACHINE`: the reference time of the
    default run (or of ``--quick``), half fixed cost (start-up, compilation) and half scaled by
    the section's work relative to that reference (:func:`_work`). Concurrency sums its rows:
    the row of n processes costs ``max(1, n / cores)`` times the one-process row (the processes
    share ``cores`` CPU cores). Accelerators are usually much faster for large models."""
    ref = BenchSettings(**BenchSettings.quick_defaults()) if s.quick else BenchSettings()
    out = {}
    for name in sections:
        base = REFERENCE_SECTION_S[name][0 if s.quick else 1]
        ratio = _work(s, name) / max(_work(ref, name), 1.0)
        t = 0.5 * base + 0.5 * base * ratio
        if name == "concurrency":
            t *= sum(max(1.0, n / cores) for n in range(1, s.concurrency + 1))
        out[name] = t
    return out


def run_bench(
    s: BenchSettings,
    sections: Sequence[str],
    progress: Callable[[str], None] = lambda m: None,
    on_section: Optional[Callable[[str, dict[str, Any]], None]] = None,
) -> dict[str, Any]:
    """Run the chosen sections in order; returns ``{"header", "settings", "sections",
    "completed_sections", <section>: dict …}``. The step, mfu and data sections share one
    compiled setup. ``on_section(name, report)`` is called as each section finishes (the CLI
    prints its table then).

    Ctrl-C (KeyboardInterrupt) stops the run and returns what finished: ``completed_sections``
    lists those sections and ``interrupted`` names the one that was running.

    Raises:
        ValueError: bad settings (see :meth:`BenchSettings.check`).
    """
    s.check()
    report: dict[str, Any] = {"header": header(), "settings": s.to_dict(), "sections": list(sections), "completed_sections": []}
    setup = None
    t_all = time.perf_counter()
    name = None
    try:
        for name in sections:
            progress(name)
            t0 = time.perf_counter()
            if name in ("step", "mfu", "data") and setup is None:
                setup = make_setup(s)
            if name == "memory":
                result = bench_memory(s)
            elif name == "engine":
                result = bench_engine(s)
            elif name == "step":
                result = bench_step(s, setup)
            elif name == "mfu":
                result = bench_mfu(s, report.get("step"), setup)
            elif name == "data":
                result = bench_data(s, setup)
            elif name == "concurrency":
                result = bench_concurrency(s)
            elif name == "eval":
                result = bench_eval(s)
            elif name == "decode":
                result = bench_decode(s)
            result["section_wall_s"] = time.perf_counter() - t0
            report[name] = result
            report["completed_sections"].append(name)
            if on_section is not None:
                on_section(name, report)
    except KeyboardInterrupt:
        report["interrupted"] = name
    report["wall_s"] = time.perf_counter() - t_all
    return report


# =============================================================================== tables
def _n(x: Optional[float], digits: int = 0) -> str:
    if x is None:
        return "—"
    return f"{x:,.{digits}f}"


def _ms(st: dict) -> str:
    return f"{1e3 * st['median_s']:,.2f} ({1e3 * st['min_s']:,.2f}–{1e3 * st['max_s']:,.2f})"


def print_report(report: dict[str, Any], console=None, *, only: Optional[Sequence[str]] = None,
                 header: bool = True, footer: bool = True) -> None:
    """Print the report as rich tables (one per section): the header line, the tables of the
    sections in ``only`` (default: every section in the report) and the total time."""
    from pawn.progress import output_console
    from rich.table import Table

    console = console or output_console()
    h = report["header"]
    if header:
        console.print(f"[bold]pawn bench[/bold] {h['timestamp']}  {h['backend']}: {h['device']} ×{h['device_count']}  "
                      f"JAX {h['jax_version']}  CPU {h['cpu_model']} ({h['cpus_available']} threads available, "
                      f"rayon {h['rayon_threads']})  pawn {h['pawn_version']}")
        console.print("[dim]median (min–max) over timed runs after warm-up; rates are work / time[/dim]")
    if only is not None:
        report = {k: v for k, v in report.items() if k not in SECTIONS or k in only}

    if "memory" in report:
        mem = report["memory"]
        t = Table(title=f"compiled train-step memory: {mem['model']}, batch {mem['batch_size']} × seq {mem['seq_len']} "
                        f"({mem['compute_dtype']}), K = {mem['steps_per_chunk']}, accumulation {mem['accumulation_steps']}, "
                        f"per device ({mem['backend']})")
        cols = ["remat", "attention", "temp GiB", "args GiB", "out GiB", "alias GiB", "peak GiB", "compile s"]
        cols += [f"fits {d['name'].split(' (')[0]}" for d in mem["named_devices"]]
        cap = mem["this_device"]["bytes"]
        cols.append(f"fits here ({cap / 2**30:.0f} GiB)" if cap else "fits here")
        for c in cols:
            t.add_column(c, justify="left" if c == "remat" else "right")
        yes = {True: "yes", False: "no", None: "?"}
        for r in mem["rows"]:
            t.add_row(r["remat"], r["attention"], f"{r['temp_gib']:.2f}", f"{r['argument_gib']:.2f}", f"{r['output_gib']:.2f}",
                      f"{r['alias_gib']:.2f}", f"{r['peak_gib']:.2f}", f"{r['compile_s']:.1f}",
                      *(yes[r["fits"][d["name"]]] for d in mem["named_devices"]), yes[r["fits_this_device"]])
        console.print(t)
        console.print(f"[dim]{mem['source']}; fits = peak ≤ {100 * (1 - mem['headroom']):.0f}% of the device; "
                      f"this device: {mem['this_device']['source']}[/dim]")

    if "engine" in report:
        e = report["engine"]
        t = Table(title="engine")
        for c in ("workload", "threads", "time ms", "rate (median)", "rate min–max"):
            t.add_column(c, justify="left" if c == "workload" else "right")
        for r in e["threads"]:
            rg = r["random_games"]
            t.add_row(f"random games ×{rg['games']} (max_ply {rg['max_ply']})", str(r["threads"]), _ms(rg),
                      f"{_n(rg['games_per_s'])} games/s, {_n(rg['plies_per_s'])} plies/s",
                      f"{_n(rg['games_per_s_min'])}–{_n(rg['games_per_s_max'])} games/s")
            pg = r["parse_pgn"]
            t.add_row(f"parse PGN ×{pg['games']} ({pg['mb']:.1f} MB, {pg.get('source', 'random games as PGN')})", str(r["threads"]), _ms(pg), f"{_n(pg['games_per_s'])} games/s",
                      f"{_n(pg['games_per_s_min'])}–{_n(pg['games_per_s_max'])}")
            lm = r["legal_masks"]
            t.add_row(f"legal masks ×{lm['positions']} positions", str(r["threads"]), _ms(lm), f"{_n(lm['positions_per_s'])} positions/s",
                      f"{_n(lm['positions_per_s_min'])}–{_n(lm['positions_per_s_max'])}")
        pc = e.get("python_chess")
        if pc and "skipped" not in pc:
            t.add_row(f"python-chess random games ×{pc['games']}", "1", _ms(pc),
                      f"{_n(pc['games_per_s'], 1)} games/s, {_n(pc['plies_per_s'])} plies/s",
                      f"{_n(pc['games_per_s_min'], 1)}–{_n(pc['games_per_s_max'], 1)} games/s")
        elif pc:
            t.add_row("python-chess", "", "", pc["skipped"], "")
        console.print(t)

    if "step" in report:
        st = report["step"]
        t = Table(title=f"train step: {st['model']}, {st['param_count']:,} params, batch {st['batch_size']} × seq {st['seq_len']}"
                        f" ({st['compute_dtype']}), K = {st['steps_per_chunk']}, remat {st.get('remat', 'none')}, "
                        f"accumulation {st.get('accumulation_steps', 1)}")
        for c in ("form", "time ms (per call)", "tokens/s", "tokens/s min–max", "steps/s", "first call s", "compile s"):
            t.add_column(c, justify="left" if c == "form" else "right")
        names = {"eager": "eager (no jit)", "jit_step": "jit, 1 step per call", "scan_chunk": f"lax.scan chunk, {st['steps_per_chunk']} steps"}
        for k, f in st["forms"].items():
            t.add_row(names[k], _ms(f), _n(f["tokens_per_s"]), f"{_n(f['tokens_per_s_min'])}–{_n(f['tokens_per_s_max'])}",
                      _n(f["steps_per_s"], 2), _n(f["first_call_s"], 2), _n(f["compile_s"], 2))
        console.print(t)
        console.print("[dim]compile s = first call − steady-state median (tracing + XLA compile, an estimate)[/dim]")

    if "mfu" in report:
        m = report["mfu"]
        t = Table(title="MFU")
        t.add_column("quantity")
        t.add_column("value", justify="right")
        for v in m["variants"]:
            t.add_row(f"FLOPs/token {v['name']} ({v['param_count']:,} params)",
                      f"{v['flops_per_token']:,} (attention {v['attention_flops_per_token']:,})")
        t.add_row("FLOPs/token, step total", f"{m['flops_per_token']:,}")
        t.add_row("tokens/s (scan chunk)", _n(m["tokens_per_s"]))
        t.add_row("achieved", f"{m['achieved_flops_per_s'] / 1e9:,.2f} GFLOP/s")
        t.add_row("peak", f"{m['peak']['flops_per_s'] / 1e9:,.2f} GFLOP/s")
        t.add_row("MFU", f"{100 * m['mfu']:.2f}%")
        console.print(t)
        console.print(f"[dim]{m['formula']}[/dim]")
        console.print(f"[dim]peak: {m['peak']['source']}[/dim]")

    if "data" in report:
        d = report["data"]
        t = Table(title=f"data path: batch {d['batch_size']} × seq {d['seq_len']}")
        for c in ("source", "batch build ms", "games/s", "tokens/s", "train wall s", "data wait s", "wait fraction", "train tokens/s"):
            t.add_column(c, justify="left" if c == "source" else "right")
        for name in d["batch_build"]:
            b, tr = d["batch_build"][name], d["training"][name]
            label = "fresh engine games" if name == "engine" else f"on-disk corpus ({d['corpus']['games']:,} games)"
            t.add_row(label, _ms(b), _n(b["games_per_s"]), _n(b["tokens_per_s"]), _n(tr["wall_s"], 2), _n(tr["wait_s"], 3),
                      f"{100 * tr['wait_frac']:.1f}%", _n(tr["tokens_per_s"]))
        console.print(t)

    if "concurrency" in report:
        c = report["concurrency"]
        t = Table(title=f"concurrency: independent training processes (spawned), {c['tokens_per_chunk']:,} tokens per chunk")
        for col in ("processes", "window s", "aggregate tokens/s", "per-process tokens/s", "speed-up vs 1"):
            t.add_column(col, justify="right")
        for r in c["rows"]:
            if "error" in r:
                t.add_row(str(r["processes"]), "", "failed", r["error"][:80], "")
            else:
                t.add_row(str(r["processes"]), _n(r["window_s"], 2), _n(r["aggregate_tokens_per_s"]),
                          ", ".join(_n(x) for x in r["per_process_tokens_per_s"]), f"{r['speedup_vs_1']:.2f}×")
        console.print(t)
        console.print("[dim]aggregate = all processes' tokens / one wall window, first start (barrier) to last finish[/dim]")

    if "eval" in report:
        ev = report["eval"]
        t = Table(title=f"eval (teacher-forced, as pawn eval): {ev['model']} ({ev['config']}), {ev['games']} games × "
                        f"{ev['seq_len']} positions, batch {ev['batch_size']}")
        for col in ("positions", "time ms", "positions/s", "positions/s min–max", "games/s", "first call s"):
            t.add_column(col, justify="right")
        t.add_row(f"{ev['positions']:,}", _ms(ev), _n(ev["positions_per_s"]),
                  f"{_n(ev['positions_per_s_min'])}–{_n(ev['positions_per_s_max'])}", _n(ev["games_per_s"], 1),
                  _n(ev["first_call_s"], 2))
        console.print(t)

    if "decode" in report:
        d = report["decode"]
        t = Table(title=f"decode: {d['model']} ({d['config']}), legal sampling; step = one jitted model step, engine excluded")
        for col in ("workload", "form", "time ms", "tokens", "tokens/s", "tokens/s min–max", "first call s"):
            t.add_column(col, justify="left" if col in ("workload", "form") else "right")
        for w in d["workloads"]:
            wl = f"{w['games']} games × {w['seq_len']}"
            for k, f in w["step"].items():
                if k != "step_speedup":
                    t.add_row(wl, "step, KV cache" if k == "kv_cache" else "step, recompute",
                              _ms(f), "", "", "", _n(f["first_call_s"], 2))
            t.add_row(wl, "step speed-up", f"{w['step']['step_speedup']:.2f}×", "", "", "", "")
            for k, f in w["forms"].items():
                t.add_row(wl, "generate, KV cache" if k == "kv_cache" else "generate, recompute", _ms(f),
                          str(f["tokens"]), _n(f["tokens_per_s"]), f"{_n(f['tokens_per_s_min'])}–{_n(f['tokens_per_s_max'])}",
                          _n(f["first_call_s"], 2))
            if "kv_speedup" in w:
                t.add_row(wl, "generate speed-up", f"{w['kv_speedup']:.2f}×", "", "", "", "")
        console.print(t)
    if footer and "wall_s" in report:
        console.print(f"[dim]total {report['wall_s']:.1f} s[/dim]")
