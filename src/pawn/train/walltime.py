"""How long a run takes here, said before it starts and kept true while it runs.

- **The rate.** A training step's model FLOPs (:func:`pawn.config.flops_per_token`,
  ``6·N + 12·L·T·d`` summed over a supernet's variants; frozen-backbone adapters ``4·N + 12·L·T·d``)
  divided by a rate in FLOP/s: the device's peak times the model FLOP utilisation PAWN recorded
  for that device class and model (:data:`RECORDED_MFU`). On a CPU, and on an accelerator missing
  from the peak tables, the peak is a jitted matmul timed here in well under a second
  (:func:`measure_matmul_rate`), and the recorded MFU is relative to that matmul.
- **The plan.** :class:`WallTimeEstimate`: the run's wall time, one chunk's, the first checkpoint's,
  and a warning with what would help when the run would take more than a day here.
- **While it runs.** :class:`WallClockHook` replaces the estimate by the first timed chunk's
  measured time (one line), checkpoints by the clock (``--checkpoint-every-minutes``) and keeps the
  Ctrl-C messages of :class:`~pawn.train.lifecycle.StopFlag` true: when the chunk under way should
  end, how long its checkpoint takes, and what a second Ctrl-C loses.
- **Chunks a stop can wait for.** :func:`cut_chunk_steps` shortens a compiled chunk whose estimated
  time is longer than the checkpoint interval, so a stop or a clock checkpoint waits for at most
  about that long.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from pawn.train.peaks import (  # noqa: F401  (re-exported: the rate's tables)
    DEFAULT_MFU, GPU_PEAKS, PEAK_SOURCE, RECORDED_MFU, TPU_PEAK_SOURCE, TPU_PEAKS, lookup_gpu_peak, lookup_tpu_peak,
    published_peak)

if TYPE_CHECKING:
    from pawn.train.task import TaskCost

DAY_S = 86400.0
"""A run estimated longer than this is warned about before it starts."""

DEFAULT_CHECKPOINT_EVERY_MINUTES = 30.0
"""``--checkpoint-every-minutes`` default: a stopped or killed run loses at most about this much work."""

def adapter_flops_per_token(cfg, seq_len: int, *, trains_backbone: bool) -> int:
    """Model FLOPs per token of one adapter train step: ``6·N + 12·L·T·d`` when the backbone is
    trained (full fine-tuning, ``specialized_clm``; :func:`pawn.config.flops_per_token`), else
    ``4·N + 12·L·T·d`` (no backbone weight gradients; spec eval §7.3: "frozen-backbone adapters
    ≈ 4N"). ``cfg``: the backbone's :class:`~pawn.config.ModelConfig`; ``seq_len``: T."""
    from pawn.config import flops_per_token, param_count

    full = flops_per_token(cfg, seq_len)
    return full if trains_backbone else full - 2 * param_count(cfg)


class MatmulRate(float):
    """A measured FLOP/s (the float itself: the median of the rounds' medians) with its spread:
    ``low`` and ``high``, the slowest and fastest round's FLOP/s, and ``rounds``."""

    low: float
    high: float
    rounds: int

    def __new__(cls, rates: Sequence[float]) -> "MatmulRate":
        ordered = sorted(rates)
        self = super().__new__(cls, statistics.median(ordered))
        self.low, self.high, self.rounds = ordered[0], ordered[-1], len(ordered)
        return self

    def spread_text(self) -> str:
        """``"median of 5 rounds, 0.037–0.154 TFLOP/s"``: the figure's spread, for the plan line."""
        return f"median of {self.rounds} rounds, {self.low / 1e12:.3g}–{self.high / 1e12:.3g} TFLOP/s"


def measure_matmul_rate(dtype: str = "float32", n: Optional[int] = None, repeats: int = 5, rounds: int = 5,
                        gap_s: float = 0.05) -> MatmulRate:
    """FLOP/s of one device of the default backend on a jitted ``[n, n] @ [n, n]`` matmul in
    ``dtype`` (2·n³ FLOPs a call): ``rounds`` rounds of ``repeats`` timed calls after two
    warm-ups, ``gap_s`` seconds apart, each round's median call; the result is the median of the
    rounds (a :class:`MatmulRate`, which also carries the slowest and fastest round), so one round
    that met a busy moment of a shared machine does not decide the plan. ``n`` defaults to 1024
    on CPU (≈ 20 ms a call on two cores) and 4096 elsewhere; the whole measurement takes about a
    second on a CPU, a few seconds at most with the compile."""
    import jax
    import jax.numpy as jnp

    n = n or (1024 if jax.default_backend() == "cpu" else 4096)
    a = jnp.ones((n, n), dtype)
    f = jax.jit(lambda x, y: x @ y)
    for _ in range(2):
        f(a, a).block_until_ready()
    rates = []
    for r in range(max(1, rounds)):
        if r:
            time.sleep(gap_s)
        times = []
        for _ in range(max(1, repeats)):
            t = time.perf_counter()
            f(a, a).block_until_ready()
            times.append(time.perf_counter() - t)
        rates.append(2.0 * n ** 3 / statistics.median(times))
    return MatmulRate(rates)


@dataclass(frozen=True)
class DeviceRate:
    """Model FLOP/s a training step reaches here, all devices together: ``peak · mfu``.

    Attributes:
        flops_per_s: the rate (FLOP/s, all devices). peak_flops_per_s: the peak it is a fraction of.
        mfu: that fraction. source: one line saying where peak and MFU come from.
    """

    flops_per_s: float
    peak_flops_per_s: float
    mfu: float
    source: str


def _recorded_mfu(device_class: str, model: str, flops_per_token: float) -> tuple[float, str]:
    rows = [r for r in RECORDED_MFU if (r[0] == "cpu") == (device_class == "cpu") and r[0].lower() in device_class.lower()]
    exact = next((r for r in rows if r[1] == model), None)
    if exact is not None:
        return exact[2], f"MFU {exact[2]:.1%} recorded for the {model} ({exact[3]})"
    if not rows:
        return DEFAULT_MFU, f"MFU {DEFAULT_MFU:.0%} assumed (none recorded for {device_class})"
    from pawn.config import SUPERNETS, flops_per_token as fpt

    def model_fpt(label: str) -> float:
        name = label.split()[-1]
        return sum(fpt(c, 512) for c in SUPERNETS[name][1].values()) if name in SUPERNETS else 1.0

    near = min(rows, key=lambda r: abs(math.log(max(model_fpt(r[1]), 1.0) / max(flops_per_token, 1.0))))
    return near[2], f"MFU {near[2]:.1%} of the {near[1]} ({near[3]}), the recorded model nearest in FLOPs per token"


def matmul_cache_path():
    """Where the fastest matmul rate per machine is kept: ``matmul_rates.json`` beside the step
    plans of :func:`pawn.train.step_plan.cache_path` (the user's cache, or ``$PAWN_PLAN_CACHE``'s folder)."""
    from pawn.train.step_plan import cache_path

    return cache_path().with_name("matmul_rates.json")


def fastest_matmul_rate(key: str, now: float) -> tuple[float, int, str]:
    """The fastest matmul FLOP/s this machine has shown for ``key`` (backend, device kind, dtype,
    cores, JAX version), ``now`` included, and how many timings and since when (ISO date).

    A plan made from one sub-second timing followed the load of a shared machine (3.8× between
    identical runs); the fastest rate seen is the machine's own and the same from run to run, and
    the ``measured:`` line corrects the estimate for the load once chunks have run. The record is
    rewritten atomically; an unreadable or unwritable file leaves ``now`` alone in charge."""
    import datetime as _dt
    import json as _json

    from pawn.fileio import atomic_output

    path = matmul_cache_path()
    try:
        data = _json.loads(path.read_text("utf-8"))
        entry = data.get(key) if isinstance(data, dict) else None
    except (OSError, ValueError):
        data, entry = {}, None
    if not isinstance(entry, dict) or not isinstance(entry.get("fastest"), (int, float)):
        entry = {"fastest": 0.0, "count": 0, "since": _dt.datetime.now(_dt.timezone.utc).date().isoformat()}
    entry = {"fastest": max(float(entry["fastest"]), float(now)), "count": int(entry.get("count", 0)) + 1,
             "since": str(entry.get("since", ""))}
    try:
        data = {**(data if isinstance(data, dict) else {}), key: entry}
        with atomic_output(path) as tmp:
            tmp.write_text(_json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    except OSError:
        return float(now), 1, ""
    return entry["fastest"], entry["count"], entry["since"]


def device_rate(model: str, flops_per_token: float, dtype: str, *, measure: Callable[[str], float] = measure_matmul_rate) -> DeviceRate:
    """The training rate on the default backend's devices for ``model`` (``"supernet large"``,
    ``"variant small"``, an adapter label) of ``flops_per_token`` in compute ``dtype``
    (``"float32"``/``"bfloat16"``): a published peak (:data:`GPU_PEAKS`, :data:`TPU_PEAKS`) or
    ``measure(dtype)`` (one device's FLOP/s; :func:`measure_matmul_rate`) where there is none, times
    the device count and the recorded MFU (:data:`RECORDED_MFU`)."""
    import jax

    backend, kind, n_dev = jax.default_backend(), jax.devices()[0].device_kind, jax.device_count()
    bf16 = dtype == "bfloat16"
    one, where = None, ""
    pub = published_peak(backend, kind, dtype)
    if pub is not None:
        one, where = pub[0], f"{kind} datasheet {'bf16' if bf16 else 'fp32'} peak"
    device_class = "cpu" if backend == "cpu" else kind
    if one is None:
        now = measure(dtype)
        spread = f"; now {now.spread_text()}" if isinstance(now, MatmulRate) else f"; now {now / 1e12:.3g} TFLOP/s"
        one, count, since = fastest_matmul_rate(f"{backend}|{kind}|{dtype}|{os.cpu_count()} cores|jax {jax.__version__}", now)
        where = (f"a {dtype} matmul on this {'CPU' if backend == 'cpu' else kind}: the fastest of {count} timing{'s' if count != 1 else ''}"
                 f"{f' since {since[:10]}' if since else ''}{spread}")
    mfu, why = _recorded_mfu(device_class, model, flops_per_token)
    peak = one * n_dev
    return DeviceRate(peak * mfu, peak, mfu, f"{peak / 1e12:.3g} TFLOP/s ({where}{f' × {n_dev} devices' if n_dev > 1 else ''}) × {why}")


def format_span(seconds: Optional[float]) -> str:
    """A duration a person reads at a glance: ``310 ms``, ``4.2 s``, ``45 s``, ``12 min``, ``3.4 h``, ``5.2 days``,
    ``14 years`` (``?`` for None or a non-finite value)."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = max(0.0, float(seconds))
    if s < 1:
        return f"{s * 1e3:.0f} ms"
    if s < 10:
        return f"{s:.1f} s"
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    if s < 48 * 3600:
        return f"{s / 3600:.1f} h"
    if s < 730 * 86400:
        return f"{s / 86400:.1f} days"
    return f"{s / (365.25 * 86400):.1f} years"


@dataclass(frozen=True)
class WallTimeEstimate:
    """The expected wall time of ``steps`` optimizer steps of ``flops_per_step`` model FLOPs at
    ``rate`` (compute only: validation, checkpoints and compilation come on top).

    Attributes:
        steps: steps this invocation runs. flops_per_step: model FLOPs of one step.
        chunk_steps: steps per compiled chunk. first_checkpoint_steps: steps until the first
            checkpoint (None: none before the end). rate: the :class:`DeviceRate`.
    """

    steps: int
    flops_per_step: float
    chunk_steps: int
    first_checkpoint_steps: Optional[int]
    rate: DeviceRate

    @property
    def step_s(self) -> float:
        """Seconds per optimizer step."""
        return self.flops_per_step / self.rate.flops_per_s

    @property
    def total_s(self) -> float:
        """Seconds for all the steps."""
        return self.steps * self.step_s

    @property
    def chunk_s(self) -> float:
        """Seconds per compiled chunk."""
        return self.chunk_steps * self.step_s

    @property
    def too_long(self) -> bool:
        """More than :data:`DAY_S` here."""
        return self.total_s > DAY_S

    def steps_in(self, seconds: float) -> int:
        """Steps that fit in ``seconds`` at this rate."""
        return int(seconds // self.step_s) if self.step_s > 0 else self.steps

    def lines(self, what: str, advice: Sequence[str] = (), tail: str = "corrected after the first chunk") -> list[str]:
        """The plan's lines: expected wall time (with one chunk's, when ``chunk_steps`` > 0, and the
        first checkpoint's), the rate's source, ``tail``, and when it is :attr:`too_long` a WARNING
        naming ``advice`` (flags, hardware) and the steps that fit a day here. ``what``: the run
        (``"this run"``)."""
        parts = []
        if self.chunk_steps:
            parts.append(f"one {self.chunk_steps}-step chunk ≈ {format_span(self.chunk_s)}")
        if self.first_checkpoint_steps:
            parts.append(f"the first checkpoint (after {self.first_checkpoint_steps:,} step{'s' if self.first_checkpoint_steps != 1 else ''}) "
                         f"≈ {format_span(self.first_checkpoint_steps * self.step_s)}")
        out = [f"expected wall time on this device: {what} ≈ {format_span(self.total_s)} ({self.steps:,} steps of "
               f"≈ {format_span(self.step_s)}{'; ' + ', '.join(parts) if parts else ''}); compute only, at "
               f"{self.rate.flops_per_s / 1e12:.3g} TFLOP/s = {self.rate.source}" + (f"; {tail}" if tail else "")]
        if self.too_long:
            day = self.steps_in(DAY_S)
            helps = list(advice) + ([f"fewer steps ({day:,} take about a day here)"] if day >= 1 else [])
            out.append(f"WARNING: {what} would take {format_span(self.total_s)} on this device (more than a day)"
                       + (f"; what would help: {', or '.join(helps)}" if helps else ""))
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready figures (seconds, FLOP/s) for the run summary."""
        return {"seconds": self.total_s, "step_s": self.step_s, "chunk_s": self.chunk_s, "steps": self.steps,
                "chunk_steps": self.chunk_steps, "first_checkpoint_steps": self.first_checkpoint_steps,
                "first_checkpoint_s": None if self.first_checkpoint_steps is None else self.first_checkpoint_steps * self.step_s,
                "flops_per_s": self.rate.flops_per_s, "mfu": self.rate.mfu, "source": self.rate.source}


def cut_chunk_steps(k: int, step_s: float, bound_s: float, start_step: int = 0) -> int:
    """The largest divisor of ``k`` that divides ``start_step`` (a resumed run starts on a chunk
    boundary) and whose chunk takes at most ``bound_s`` seconds at ``step_s`` seconds a step (the
    largest such divisor at all when even one step takes longer); ``k`` itself when it fits. A
    divisor of K keeps every interval that K divides (validation, checkpoints, pauses) a whole
    number of chunks."""
    ok = [d for d in range(1, k + 1) if k % d == 0 and start_step % d == 0]
    fits = [d for d in ok if step_s <= 0 or d * step_s <= bound_s]
    return max(fits) if fits else 1


def first_checkpoint_steps(start_step: int, end_step: int, *, every_steps: Optional[int], every_s: float, step_s: float,
                           chunk_steps: int) -> Optional[int]:
    """Steps from ``start_step`` to the run's first checkpoint: the next multiple of
    ``every_steps`` (None: by the clock or at the end only), or the last chunk boundary at most
    ``every_s`` seconds in at ``step_s`` a step (the first, when one chunk is longer; 0 = no
    clock), as :class:`WallClockHook` checkpoints, whichever comes first; the end of the run at the
    latest. None when no step is left."""
    left = end_step - start_step
    if left <= 0:
        return None
    cands = [left]
    if every_steps:
        cands.append((start_step // every_steps + 1) * every_steps - start_step)
    if every_s > 0 and step_s > 0:
        cands.append(max(1, math.floor(every_s / (chunk_steps * step_s))) * chunk_steps)
    return min(cands)


def accelerator_hint(model: str, flops_per_token: float, flops: float) -> Optional[str]:
    """On a CPU: how long ``flops`` model FLOPs of ``model`` (``flops_per_token`` a token) take on
    one NVIDIA H200 and on one TPU v5e chip, each at its datasheet bf16 peak and the recorded MFU
    (:data:`RECORDED_MFU`), as advice; None elsewhere."""
    import jax

    if jax.default_backend() != "cpu":
        return None
    tpu = dict(TPU_PEAKS)["TPU v5 lite"] * 1e12
    tpu_mfu, _ = _recorded_mfu("TPU v5 lite", model, flops_per_token)
    h200 = next(bf16 for name, bf16, _ in GPU_PEAKS if name == "H200") * 1e12
    h200_mfu, _ = _recorded_mfu("H200", model, flops_per_token)
    return (f"an accelerator (one NVIDIA H200: ≈ {format_span(flops / (h200 * h200_mfu))}; "
            f"one TPU v5e chip: ≈ {format_span(flops / (tpu * tpu_mfu))})")


def _chunk_by_the_clock(cfg, k: int, flops_per_step: float, rate, start_step: int, cut: bool,
                        log: Callable[[str], None]) -> tuple[float, float, int]:
    """``(seconds between clock checkpoints, seconds per step, steps per chunk)`` of a run whose
    step costs ``flops_per_step`` at ``rate``: ``k`` cut (when ``cut``) so a chunk takes no longer
    than ``cfg.checkpoint_every_minutes`` (:func:`cut_chunk_steps`), said in one line when it is."""
    every_s = 60.0 * cfg.checkpoint_every_minutes
    step_s = flops_per_step / rate.flops_per_s
    new_k = cut_chunk_steps(k, step_s, every_s if cut and every_s > 0 else math.inf, start_step)
    if new_k != k:
        log(f"steps per chunk {k} → {new_k}: a {k}-step chunk would take ≈ {format_span(k * step_s)} here, longer than "
            f"--checkpoint-every-minutes {cfg.checkpoint_every_minutes:g}, and a stop or checkpoint waits for the chunk under way")
    return every_s, step_s, new_k


def plan_pretrain(cfg, cost: "TaskCost", *, start_step: int, end_step: int, k: int, cut: bool,
                  log: Callable[[str], None], measure: Callable[[str], float] = measure_matmul_rate) -> tuple[int, WallTimeEstimate]:
    """``(steps per chunk, estimate)`` of a pretraining run before it compiles: the rate
    (:func:`device_rate`), the chunk cut to ``cfg.checkpoint_every_minutes`` when ``cut`` (K not
    given by the user; :func:`cut_chunk_steps`), and the plan's lines logged
    (:meth:`WallTimeEstimate.lines`), advice included.

    Args:
        cfg: the :class:`~pawn.settings.PretrainConfig` (its checkpoint interval and clock).
        cost: the task's cost of steps ``[start_step, end_step)``
            (:meth:`pawn.train.pretrain.PretrainTask.cost`: FLOPs a step, steps, model label, dtype, advice).
        start_step, end_step: this invocation's steps. k: the configured steps per chunk.
    """
    rate = device_rate(cost.model, cost.flops_per_token, cost.dtype, measure=measure)
    every_s, step_s, new_k = _chunk_by_the_clock(cfg, k, cost.flops_per_step, rate, start_step, cut, log)
    first = first_checkpoint_steps(start_step, end_step, every_steps=cfg.checkpoint_every, every_s=every_s, step_s=step_s,
                                   chunk_steps=new_k)
    est = WallTimeEstimate(cost.steps, cost.flops_per_step, new_k, first, rate)
    for line in est.lines("this run", _advice(cost)):
        log(line)
    if new_k * step_s > max(every_s, 0) and every_s > 0:
        log(f"WARNING: one step takes ≈ {format_span(step_s)} here, so a checkpoint (and a stop) comes no sooner than "
            f"every {format_span(new_k * step_s)}")
    return new_k, est


def plan_adapt(cfg, cost: "TaskCost", *, steps_per_epoch: int, start_step: int, end_step: int, k: int, cut: bool,
               log: Callable[[str], None], measure: Callable[[str], float] = measure_matmul_rate) -> tuple[int, WallTimeEstimate]:
    """:func:`plan_pretrain` for ``pawn adapt``: ``(steps per chunk, estimate)`` of an adapter run
    whose cost (:meth:`pawn.train.adapt.AdaptTask.cost`: :func:`adapter_flops_per_token` a token, the
    main steps of ``[start_step, end_step)`` and the RoSA family's warm-up steps and mask-scoring
    batches still to run, each counted as one step's work and named in the plan line) is ``cost``;
    it checkpoints every validation (every ``eval_interval`` steps, else every ``val_every`` epochs
    of ``steps_per_epoch``), every ``cfg.checkpoint_interval`` steps or by the clock, its chunks cut
    to ``cfg.checkpoint_every_minutes`` when ``cut``; the plan's lines logged."""
    rate = device_rate(cost.model, cost.flops_per_token, cost.dtype, measure=measure)
    every_s, step_s, new_k = _chunk_by_the_clock(cfg, k, cost.flops_per_step, rate, start_step, cut, log)
    firsts = [first_checkpoint_steps(start_step, end_step, every_steps=n, every_s=every_s, step_s=step_s, chunk_steps=new_k)
              for n in (cfg.checkpoint_interval, cfg.eval_interval or steps_per_epoch * cfg.val_every)]
    est = WallTimeEstimate(cost.steps, cost.flops_per_step, new_k, min((f for f in firsts if f is not None), default=None), rate)
    warm, masks = cost.phase_steps
    if warm or masks:
        from pawn.progress import counted

        what = (f"this run ({counted(cost.steps - warm - masks, 'main step')} + {counted(warm, 'RoSA warm-up step')} + "
                f"{counted(masks, 'mask-scoring batch', 'mask-scoring batches')}; compile and validation not counted)")
    else:
        what = "this run (compile and validation not counted)"
    for line in est.lines(what, _advice(cost)):
        log(line)
    return new_k, est


def _advice(cost: "TaskCost") -> list[str]:
    """What a run's plan names as help: the task's advice, the accelerator (on a CPU:
    :func:`accelerator_hint`), then the task's advice about its phases."""
    hint = accelerator_hint(cost.model, cost.flops_per_token, cost.flops_per_step * cost.steps)
    return [*cost.advice, *([hint] if hint else []), *([cost.phase_advice] if cost.phase_advice else [])]


def plan_sweep(trials: int, cost: "Optional[TaskCost]", *, log: Callable[[str], None],
               measure: Callable[[str], float] = measure_matmul_rate) -> Optional[WallTimeEstimate]:
    """The expected wall time of a sweep before its first trial: ``trials`` × one trial's steps ×
    the step time (:func:`device_rate`), from the trial task's ``cost``
    (:meth:`pawn.train.task.Task.cost`: its FLOPs a step, steps, model label and advice; the RoSA
    family's warm-up steps and mask-scoring batches counted as steps): training steps only (each
    trial's compile, data loading and validations come on top; pruned trials end sooner; one
    worker: ``--workers`` share the device). Logged as the plan's lines, with a WARNING past a day
    naming fewer ``--trials``, a shorter trial (in ``--base-config``) and an accelerator.

    Returns:
        The estimate, or None when ``cost`` is None (a trial's steps come from its data, e.g. an
        adapter sweep without ``steps_per_epoch``): then one line says each trial's plan gives it.
    """
    from pawn.progress import counted

    if cost is None:
        log(f"expected wall time: {trials} trials × each trial's steps, which come from the data (steps per epoch); "
            f"each trial's plan names its own (set steps_per_epoch in --base-config to have it here)")
        return None
    steps, fpt = cost.steps, cost.flops_per_token
    rate = device_rate(cost.model, fpt, cost.dtype, measure=measure)
    est = WallTimeEstimate(trials * steps, cost.flops_per_step, 0, None, rate)
    advice = [f"fewer --trials ({max(1, int(DAY_S // max(steps * est.step_s, 1e-9))):,} trials fit a day here)",
              f"{cost.shorter} in --base-config"]
    hint = accelerator_hint(cost.model, fpt, cost.flops_per_step * trials * steps)
    if hint:
        advice.append(hint)
    note = f" (each: {cost.note})" if cost.note else ""
    for line in est.lines(f"this sweep ({counted(trials, 'trial')} × {counted(steps, 'step')}{note}; each trial's compile, data loading and validations come on top, "
                          f"pruned trials end sooner)", advice,
                          tail="each trial's own plan follows at its start"):
        log(line)
    return est
