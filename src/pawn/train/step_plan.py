"""``--remat auto``: the fastest (remat × accumulation) plan that fits, by measured speed.

The memory check (:func:`pawn.train.memory.check_step_memory`) finds the first remat mode that
fits (none, attention, full); that is the fastest mode only when it needs no gradient
accumulation. On a TPU v5e the published recipe fit with remat full and ran 68 k tokens/s, while
remat attention with 4 micro-batches ran 90 k: the cheaper recompute paid for the smaller
micro-batches. So with ``--remat auto`` (and no ``--accumulation-steps`` given) PAWN compiles, for
each remat mode, the least accumulation that fits this device, runs one K-step chunk of each on
random games (:func:`time_chunk`), and takes the most tokens per second.

The search never costs more than :data:`SEARCH_FRACTION` of the run's wall time as measured on its
first candidate (a short run skips it and says so), and its result is kept in a JSON file in the
user's cache (:func:`cache_path`) keyed by device kind and count, model, batch, seq_len, dtype and
JAX version (:func:`plan_key`), so the next run with the same key compiles only the plan it found.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from pawn.fileio import atomic_output
from pawn.train.memory import (GIB, InsufficientMemoryError, MemoryEstimate, accumulation_choices, analytic_step_bytes,
                               check_step_memory, compile_chunk, device_memory, fits, usable)

SEARCH_FRACTION = 0.05
"""The most of a run's estimated wall time the search may spend (compiles and timed chunks)."""

MAX_ACCUMULATION = 16
"""The largest accumulation the search considers (powers of two up to this)."""

CACHE_FORMAT = 1


@dataclass
class Candidate:
    """One (remat, accumulation) plan of the search.

    Attributes:
        remat: :data:`pawn.model.REMAT_MODES` member. accumulation_steps: micro-batches per step.
        peak_bytes: XLA's per-device peak of the compiled chunk (0 when refused).
        fits: it compiled and fits the device. compile_s: seconds to compile it.
        step_s: measured seconds per optimizer step (None: not timed). tokens_per_s: B·T / step_s.
        note: why it was not timed or not taken ("" when it was).
    """

    remat: str
    accumulation_steps: int
    peak_bytes: int = 0
    fits: bool = False
    compile_s: float = 0.0
    step_s: Optional[float] = None
    tokens_per_s: Optional[float] = None
    note: str = ""

    def label(self) -> str:
        return f"remat {self.remat}, accumulation {self.accumulation_steps}"


@dataclass
class StepPlan:
    """The plan a run takes and how it was found.

    Attributes:
        remat, accumulation_steps: the plan. estimate: its :class:`MemoryEstimate`.
        source: ``"search"`` (measured now), ``"cache"`` (an earlier search, :attr:`cached_at`),
            ``"first-fit"`` (the memory check's first fitting mode: an explicit setting, a short
            run, or a backend without timing).
        candidates: the search's table (empty unless ``source == "search"``).
        info: :func:`check_step_memory`'s info dict (capacity, tried, analytic).
    """

    remat: str
    accumulation_steps: int
    estimate: MemoryEstimate
    source: str
    candidates: list[Candidate] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    cached_at: str = ""

    def label(self) -> str:
        return f"remat {self.remat}, accumulation {self.accumulation_steps}"

    def to_dict(self) -> dict[str, Any]:
        """The run summary's ``plan_search`` entry (JSON-ready)."""
        return {"source": self.source, "remat": self.remat, "accumulation_steps": self.accumulation_steps,
                "cached_at": self.cached_at or None, "candidates": [asdict(c) for c in self.candidates]}


def cache_path() -> Path:
    """The search cache: ``$PAWN_PLAN_CACHE`` when set, else ``$XDG_CACHE_HOME/pawn/step_plans.json``
    (``~/.cache`` when ``XDG_CACHE_HOME`` is unset; the XDG Base Directory convention)."""
    if os.environ.get("PAWN_PLAN_CACHE"):
        return Path(os.environ["PAWN_PLAN_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pawn" / "step_plans.json"


def plan_key(*, device_kind: str, n_devices: int, variants: Sequence[Any], stored_config: Any, batch_size: int,
             seq_len: int, dtype: str, jax_version: str, extra: Sequence[Any] = ()) -> str:
    """The cache key: a SHA-256 of the device kind and count, the stored model and trained
    variants (their JSON configs), batch size, seq_len, compute dtype, JAX version and ``extra``
    (the optimizer constants that change the graph)."""
    parts = {"device": device_kind, "n": n_devices, "model": stored_config.to_json_dict(),
             "variants": [c.to_json_dict() for c in variants], "B": batch_size, "T": seq_len, "dtype": dtype,
             "jax": jax_version, "extra": [repr(x) for x in extra]}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def read_cache(path: Path) -> dict:
    """The cache file's entries (``{key: entry}``); an unreadable or foreign file reads as empty
    (the search runs again and rewrites it)."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT or not isinstance(data.get("plans"), dict):
        return {}
    return data["plans"]


def write_cache(path: Path, key: str, entry: dict) -> None:
    """Add ``entry`` under ``key`` to the cache file (read, update, write to a temp file, rename).

    Raises:
        OSError: the cache folder cannot be written (the caller reports it and goes on)."""
    plans = read_cache(path)
    plans[key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps({"format": CACHE_FORMAT, "plans": plans}, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def accumulation_ladder(batch_size: int, n_devices: int, limit: int = MAX_ACCUMULATION) -> list[int]:
    """1, then the powers of two up to ``limit`` that split each device's share of the batch."""
    valid = set(accumulation_choices(batch_size, n_devices))
    return [1] + [a for a in (2, 4, 8, 16, 32, 64) if a <= limit and a in valid]


def timing_chunk(k: int, batch_size: int, seq_len: int, *, prepend_outcome: bool = False, seed: int = 0):
    """A [K, B, T] chunk of this process's share of ``batch_size`` uniformly random games (the
    engine's; one batch repeated K times: the step's cost does not depend on which games), as
    :func:`pawn.data.packing.pack_games` packs them. Host numpy arrays."""
    import jax
    import numpy as np

    from pawn.data.packing import pack_games
    from pawn.engine import random_games

    local = batch_size // jax.process_count()
    g = random_games(local, max_ply=seq_len, seed=seed)
    packed = pack_games(np.asarray(g.tokens), np.asarray(g.lengths), np.asarray(g.outcome), seq_len,
                        prepend_outcome=prepend_outcome)
    return {n: np.broadcast_to(a, (k, *a.shape)).copy() for n, a in packed.items()}


def time_chunk(program, state, chunk_host, repeats: int = 2) -> tuple[Any, float]:
    """Run ``program``'s compiled chunk ``repeats`` times on ``chunk_host`` (placed on the devices
    before each timed call) from ``state``, waiting for each. Returns ``(new state, seconds of the
    fastest call)``; ``state`` is donated."""
    import jax

    best = float("inf")
    for _ in range(max(1, repeats)):  # the first call of an executable also loads it: the fastest call counts
        chunk = program.place_chunk(chunk_host)
        jax.block_until_ready(chunk)
        t0 = time.perf_counter()
        state, metrics = program.run_chunk(state, chunk)
        jax.block_until_ready((state, metrics))
        best = min(best, time.perf_counter() - t0)
    return state, best


def _fmt_rate(tok_s: Optional[float]) -> str:
    if tok_s is None:
        return "-"
    return f"{tok_s / 1e6:.2f} M tokens/s" if tok_s >= 1e6 else f"{tok_s / 1e3:.1f} k tokens/s"


def choose_step_plan(program, stored_config, *, k: int, batch_size: int, seq_len: int, total_steps: int,
                     search: bool, remat_candidates: Sequence[str], cache_key: Optional[str],
                     prepend_outcome: bool = False, what: str = "this training step", estimated_run_s: Optional[float] = None,
                     log: Callable[[str], None] = lambda _m: None,
                     fraction: float = SEARCH_FRACTION) -> StepPlan:
    """The remat mode and accumulation ``program`` runs with; ``program`` is left set to them,
    holding their compiled K-step chunk (the run does not compile again).

    1. A cached plan for ``cache_key`` (an earlier search): compiled and checked; taken when it
       fits, else forgotten.
    2. The memory check (:func:`check_step_memory`) at the program's accumulation: the first of
       ``remat_candidates`` that fits.
    3. With ``search`` (``--remat auto``, no ``--accumulation-steps``, a cache key): that plan's
       chunk is timed; the run's wall time is estimated from it (``total_steps`` × its step
       time), and the other remat modes, each at the least accumulation (1, 2, 4, … up to
       :data:`MAX_ACCUMULATION`) that fits, are compiled and timed while the time spent stays
       within ``fraction`` of that estimate. The fastest in tokens per second is taken and cached.

    ``estimated_run_s`` (the plan's wall-time estimate of the run, seconds) lets a short run skip
    the search before anything is timed. ``log`` gets one line per candidate (memory, tokens/s)
    and one for the choice.

    Returns:
        :class:`StepPlan`.

    Raises:
        InsufficientMemoryError: no candidate fits (the memory check's one-line refusal).
    """
    import jax

    path = cache_path()
    if search and cache_key is not None:
        entry = read_cache(path).get(cache_key)
        if entry is not None and entry.get("remat") in remat_candidates:
            hit = _try_cached(program, stored_config, entry, k=k, batch_size=batch_size, seq_len=seq_len, log=log, path=path)
            if hit is not None:
                return hit
    mode, est, info = check_step_memory(program, stored_config, k=k, batch_size=batch_size, seq_len=seq_len,
                                        remat_candidates=remat_candidates, what=what, log=log)
    first = StepPlan(mode, program.accumulation_steps, est, "first-fit", info=info)
    if not search or cache_key is None or len(remat_candidates) < 2:
        return first
    compile_s = max(info.get("compile_s", 0.0) or 0.0, 0.0)
    if estimated_run_s is not None and total_steps > 0:
        guess = compile_s + 2 * k * estimated_run_s / total_steps
        if guess > fraction * estimated_run_s:
            log(f"step plan: search skipped: a run of ≈ {estimated_run_s:.0f} s is too short to time other plans (each costs "
                f"≈ {guess:.0f} s, the search may take {100 * fraction:.0f}%); taking {first.label()} "
                f"(--remat and --accumulation-steps choose another)")
            return first
    n_dev = jax.device_count()
    capacity, _ = device_memory()
    t_start = time.perf_counter()
    from pawn.model import PAWNModel
    from pawn.train.loop import init_state

    chunk_host = timing_chunk(k, batch_size, seq_len, prepend_outcome=prepend_outcome)
    state = program.place_state(init_state(PAWNModel(stored_config, jax.random.key(0)), program.optimizer))
    tokens = batch_size * seq_len
    c0 = Candidate(mode, program.accumulation_steps, est.peak_bytes, True)
    state, secs = time_chunk(program, state, chunk_host)
    c0.step_s, c0.tokens_per_s = secs / k, tokens * k / secs
    run_s = total_steps * c0.step_s
    budget = fraction * run_s
    log(f"step plan: {c0.label()}: {est.peak_bytes / GIB:.1f} GiB, {_fmt_rate(c0.tokens_per_s)} (the first that fits; "
        f"the faster of two {k}-step chunks)")
    per_candidate = compile_s + 2 * k * c0.step_s
    candidates = [c0]
    others = [m for m in remat_candidates if m != mode]
    if per_candidate > budget:
        log(f"step plan: search skipped: each further candidate costs ≈ {per_candidate:.0f} s, over "
            f"{100 * fraction:.0f}% of this run's ≈ {run_s:.0f} s; taking {c0.label()} "
            f"(--remat and --accumulation-steps choose another)")
        first.candidates = candidates
        return first
    compiled: dict[tuple[str, int], tuple[Any, MemoryEstimate]] = {(mode, program.accumulation_steps): (program.snapshot(), est)}
    import numpy as np

    from pawn.model import resolve_dtype

    cbytes = np.dtype(resolve_dtype(program.dtype)).itemsize
    variants = [c for c, _ in program.variants]
    ratio = est.peak_bytes / max(1, analytic_step_bytes(variants, stored_config, batch_size=batch_size, seq_len=seq_len,
                                                        n_devices=n_dev, accumulation_steps=program.accumulation_steps,
                                                        compute_bytes=cbytes, remat=mode))
    stopped = False
    for other in others:
        for a in accumulation_ladder(batch_size, n_dev):
            spent = time.perf_counter() - t_start
            if spent + per_candidate > budget:
                log(f"step plan: search stopped after {spent:.0f} s (within {100 * fraction:.0f}% of this run's ≈ {run_s:.0f} s)")
                stopped = True
                break
            guess = ratio * analytic_step_bytes(variants, stored_config, batch_size=batch_size, seq_len=seq_len,
                                                n_devices=n_dev, accumulation_steps=a, compute_bytes=cbytes, remat=other)
            if capacity is not None and guess > 1.25 * usable(capacity):
                continue  # calibrated estimate far over the device: more accumulation first
            cand = _compile_candidate(program, stored_config, other, a, k=k, batch_size=batch_size, seq_len=seq_len,
                                      capacity=capacity)
            candidates.append(cand)
            if not cand.fits:
                log(f"step plan: {cand.label()}: {cand.note}")
                continue
            state, secs = time_chunk(program, state, chunk_host)
            cand.step_s, cand.tokens_per_s = secs / k, tokens * k / secs
            compiled[(other, a)] = (program.snapshot(), program.last_estimate)
            log(f"step plan: {cand.label()}: {cand.peak_bytes / GIB:.1f} GiB, {_fmt_rate(cand.tokens_per_s)}")
            break  # the least accumulation that fits is this mode's fastest
        if stopped:
            break
    del state
    return _take_fastest(program, candidates, compiled, info, c0=c0, path=path, cache_key=cache_key,
                         search_s=time.perf_counter() - t_start, log=log)


def _take_fastest(program, candidates: list[Candidate], compiled: dict, info: dict, *, c0: Candidate, path: Path,
                  cache_key: str, search_s: float, log: Callable[[str], None]) -> StepPlan:
    """Set ``program`` back to the timed candidate with the most tokens/s (its kept executable),
    note how much slower each other one was, write the choice to the cache and say so."""
    best = max((c for c in candidates if c.tokens_per_s), key=lambda c: c.tokens_per_s)
    snap, best_est = compiled[(best.remat, best.accumulation_steps)]
    program.restore(snap)
    for c in candidates:
        if c is not best and c.fits and not c.note:
            c.note = f"{best.tokens_per_s / c.tokens_per_s:.2f}× slower" if c.tokens_per_s else "not timed"
    entry = {"remat": best.remat, "accumulation_steps": best.accumulation_steps, "tokens_per_s": best.tokens_per_s,
             "peak_bytes": best.peak_bytes, "measured_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
             "candidates": [asdict(c) for c in candidates]}
    try:
        write_cache(path, cache_key, entry)
        kept = f"; kept in {path} for the next run on this device, model, batch, seq_len, dtype and JAX version"
    except OSError as e:
        kept = f"; not cached ({path}: {e.strerror or e})"
    log(f"step plan: took {best.label()} ({_fmt_rate(best.tokens_per_s)}, {best.tokens_per_s / c0.tokens_per_s:.2f}× the "
        f"first that fits; search {search_s:.0f} s){kept}")
    return StepPlan(best.remat, best.accumulation_steps, best_est, "search", candidates, info)


def _compile_candidate(program, stored_config, remat: str, a: int, *, k: int, batch_size: int, seq_len: int,
                       capacity: Optional[int]) -> Candidate:
    """Set ``program`` to (``remat``, ``a``), compile its chunk from shapes and read its memory
    (kept as ``program.last_estimate``)."""
    cand = Candidate(remat, a)
    program.set_plan(remat, a)
    t0 = time.perf_counter()
    _, est = compile_chunk(program, stored_config, k, batch_size, seq_len)
    program.last_estimate = est
    cand.compile_s = time.perf_counter() - t0
    cand.peak_bytes = est.peak_bytes
    cand.fits = not est.refused and (capacity is None or fits(est.peak_bytes, capacity))
    if not cand.fits:
        cand.note = est.verdict() or f"does not fit ({est.peak_bytes / GIB:.1f} GiB)"
    return cand


def _try_cached(program, stored_config, entry: dict, *, k: int, batch_size: int, seq_len: int,
                log: Callable[[str], None], path: Path) -> Optional[StepPlan]:
    """Compile the cached plan ``entry``; a :class:`StepPlan` when it still fits, else None."""
    import jax

    remat, a = entry["remat"], int(entry.get("accumulation_steps", 1))
    if batch_size % (jax.device_count() * a):
        return None
    capacity, _ = device_memory()
    program.set_plan(remat, a)
    _, est = compile_chunk(program, stored_config, k, batch_size, seq_len)
    if est.refused or (capacity is not None and not fits(est.peak_bytes, capacity)):
        log(f"step plan: the cached remat {remat}, accumulation {a} no longer fits ({est.peak_bytes / GIB:.1f} GiB); searching again")
        return None
    when = str(entry.get("measured_at", ""))
    log(f"step plan: remat {remat}, accumulation {a} from the search cached in {path} "
        f"({_fmt_rate(entry.get('tokens_per_s'))} measured {when[:10] or 'earlier'}); {est.peak_bytes / GIB:.1f} GiB; "
        f"--remat and --accumulation-steps choose another")
    info = {"capacity_bytes": capacity, "capacity_source": device_memory()[1], "tried": {remat: est.peak_bytes}}
    return StepPlan(remat, a, est, "cache", info=info, cached_at=when)


__all__ = ["Candidate", "InsufficientMemoryError", "SEARCH_FRACTION", "StepPlan", "accumulation_ladder", "cache_path",
           "choose_step_plan", "plan_key", "read_cache", "time_chunk", "timing_chunk", "write_cache"]
