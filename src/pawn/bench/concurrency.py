"""``pawn bench`` section ``concurrency``: 1…N independent training processes at once, their
aggregate tokens/s over one common wall window (spec ``eval-probe-generate-sweep-bench.md``
§7.1 item 4)."""

from __future__ import annotations

import os
import queue
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from pawn.bench.records import OMIT_NONE
from pawn.bench.settings import BenchSettings
from pawn.bench.section import Section, register, train_step_work
from pawn.bench.report import _n, TableView
from pawn.bench.step import make_setup
from pawn.bench.timing import common_window_rate


@dataclass
class ConcurrencyRow:
    """``processes`` at once: aggregate and per-process tokens/s, the common window (s), the
    speed-up over one process and each process's chunk seconds; or only ``error`` when a
    process failed (the sweep stops there)."""

    processes: int
    aggregate_tokens_per_s: Optional[float] = field(default=None, metadata=OMIT_NONE)
    window_s: Optional[float] = field(default=None, metadata=OMIT_NONE)
    per_process_tokens_per_s: Optional[list[float]] = field(default=None, metadata=OMIT_NONE)
    mean_per_process_tokens_per_s: Optional[float] = field(default=None, metadata=OMIT_NONE)
    speedup_vs_1: Optional[float] = field(default=None, metadata=OMIT_NONE)
    chunks_per_process: Optional[int] = field(default=None, metadata=OMIT_NONE)
    per_process_chunk_s: Optional[list[list[float]]] = field(default=None, metadata=OMIT_NONE)
    error: Optional[str] = field(default=None, metadata=OMIT_NONE)


@dataclass
class ConcurrencyResult:
    """The ``concurrency`` section: the start method (always ``spawn``), tokens per chunk and one
    :class:`ConcurrencyRow` per process count."""

    start_method: str
    tokens_per_chunk: int
    rows: list[ConcurrencyRow] = field(default_factory=list)


def _output_to_file() -> int:
    """Point this process's stdout and stderr (file descriptors 1 and 2, so native libraries'
    output too) at a new temporary file, already unlinked (nothing is left behind, whatever
    ends the process), and return a descriptor to read it back. A spawned child inherits the
    parent's terminal: what it printed (JAX and XLA logs) landed after the parent's spinner
    text, on the same line."""
    import tempfile

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    fd, path = tempfile.mkstemp(prefix="pawn-bench-child-", suffix=".log")
    os.unlink(path)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    return fd


def _tail(fd: int, lines: int = 3) -> str:
    """The last ``lines`` non-empty lines written to ``fd`` (of its last 64 KiB), joined with
    `` | `` ("" if none)."""
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, 1 << 16, max(0, size - (1 << 16)))
    except OSError:
        return ""
    text = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return " | ".join(text[-lines:])


def concurrency_worker(settings: dict, index: int, barrier, results) -> None:
    """One spawned training process: build, compile, wait at the barrier, then run
    ``concurrency_chunks`` chunks (placement included) and report its span on the wall clock
    (``time.time()``, the clock the processes share) and the per-chunk times. Its own output
    goes to a temporary file (:func:`_output_to_file`), whose last lines an error report carries."""
    log = _output_to_file()
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
        said = _tail(log)
        results.put({"index": index, "error": f"{e.__class__.__name__}: {e}" + (f" (its output ended: {said})" if said else "")})
    finally:
        os.close(log)


def _collect(procs, results, n: int, timeout_s: float) -> list[dict[str, Any]]:
    """What the ``n`` processes report before ``timeout_s`` (or until all died); then join them."""

    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        try:
            got.append(results.get(timeout=1.0))
        except queue.Empty:
            if not any(p.is_alive() for p in procs) and results.empty():
                break
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    return got


def bench_concurrency(s: BenchSettings, timeout_s: float = 900.0, detail: Callable[[str], None] = lambda m: None,
                      partial: Optional[dict] = None) -> ConcurrencyResult:
    """``n = 1 … concurrency`` independent training processes at once (``multiprocessing``
    *spawn*, never fork), released together by a barrier after each compiled its chunk. Per n:
    the aggregate tokens/s = all processes' tokens / the common wall window from the first
    start to the last finish (:func:`~pawn.bench.timing.common_window_rate`), each process's own
    tokens/s over its own span, and the speed-up of the aggregate over n = 1. On GPUs the
    children do not preallocate memory (``XLA_PYTHON_CLIENT_PREALLOCATE=false``). Stops early if
    a process fails (e.g. OOM). ``detail`` is told which process count runs (``3 processes (3/4)``);
    the result is put in ``partial["concurrency"]`` before the first count runs and gains a row
    as each count finishes, so a Ctrl-C (its processes are terminated) keeps the finished rows."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ConcurrencyResult("spawn", s.batch_size * s.seq_len * s.steps_per_chunk)
    if partial is not None:
        partial["concurrency"] = out
    base = None
    saved = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    try:
        for n in range(1, s.concurrency + 1):
            barrier, results = ctx.Barrier(n), ctx.Queue()
            procs = [ctx.Process(target=concurrency_worker, args=(s.to_dict(), i, barrier, results), daemon=True)
                     for i in range(n)]
            detail(f"{n} process{'es' if n > 1 else ''} ({n}/{s.concurrency})")
            try:
                for p in procs:
                    p.start()
                got = _collect(procs, results, n, timeout_s)
            except BaseException:  # Ctrl-C / SIGTERM: no training process outlives the section
                for p in procs:
                    if p.is_alive():
                        p.terminate()
                raise
            errors = [g["error"] for g in got if "error" in g]
            if errors or len(got) < n:
                out.rows.append(ConcurrencyRow(n, error=errors[0] if errors else f"only {len(got)} of {n} processes reported"))
                break
            per = sorted(got, key=lambda g: g["index"])
            tokens = out.tokens_per_chunk * s.concurrency_chunks
            window = common_window_rate([(g["start_s"], g["end_s"], tokens) for g in per])
            agg = window["rate"]
            base = base or agg
            out.rows.append(ConcurrencyRow(n, agg, window["window_s"], [tokens / (g["end_s"] - g["start_s"]) for g in per],
                                           agg / n, agg / base, s.concurrency_chunks, [g["samples_s"] for g in per]))
    finally:
        if saved is None:
            os.environ.pop("XLA_PYTHON_CLIENT_PREALLOCATE", None)
        else:
            os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = saved
    return out


def view(c) -> TableView:
    """The printed table of the section (:class:`pawn.bench.report.TableView`)."""
    v = TableView(f"concurrency: independent training processes (spawned), {c.tokens_per_chunk:,} tokens per chunk",
                  ["processes", "window_s", "aggregate_tokens_per_s", "per_process_tokens_per_s", "speedup_vs_1"],
                  notes=["aggregate = all processes' tokens / one wall window, first start (barrier) to last finish"])
    for r in c.rows:
        if r.error is not None:
            v.rows.append({"processes": str(r.processes), "window_s": "", "aggregate_tokens_per_s": "failed",
                           "per_process_tokens_per_s": r.error[:80], "speedup_vs_1": ""})
        else:
            v.rows.append({"processes": str(r.processes), "window_s": r.window_s, "aggregate_tokens_per_s": _n(r.aggregate_tokens_per_s),
                           "per_process_tokens_per_s": ", ".join(_n(x) for x in r.per_process_tokens_per_s),
                           "speedup_vs_1": f"{r.speedup_vs_1:.2f}×"})
    return v


SECTION = register(Section("concurrency", 60, lambda s, ctx: bench_concurrency(s, detail=ctx.detail, partial=ctx.partial),
                           view, (9.0, 46.0),
                           lambda s: train_step_work(s) * s.concurrency_chunks))
"""The ``concurrency`` row of the section table (:mod:`pawn.bench.section`)."""
