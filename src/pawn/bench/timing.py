"""Timing primitives of ``pawn bench`` (spec ``eval-probe-generate-sweep-bench.md`` §7): medians
over repeated runs after warm-up, with min and max; throughputs as work / time; the common wall
window of concurrent processes. Every timed call ends in ``jax.block_until_ready``."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence

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
