"""Learning-rate schedules (spec ``training-and-adapters.md`` §2), composed from optax primitives.

``s`` is the number of optimizer updates already applied (update ``s`` uses ``lr(s)``), ``T`` the
total steps, ``W`` the warmup steps; ``lr(s) = peak · f(s)``. Every schedule but ``one_cycle``
starts with the linear warmup ``f(s) = s / max(1, W)`` for ``s < W`` (the first update has LR 0
when W > 0). Functions accept a Python number or a traced JAX scalar.

Each ``f`` is an ``optax.join_schedules`` of the warm-up, ``optax.constant_schedule`` (stable
phase, plateau), ``optax.linear_schedule`` (linear decay) and ``optax.cosine_decay_schedule``
(cosine decay and infinite's cooldown, ``alpha`` = its floor); ``one_cycle`` is
``optax.piecewise_interpolate_schedule`` with cosine interpolation. What optax does not provide
exactly is kept here, with named constants:

- The linear warm-up ``s / max(1, W)`` (:func:`_linear_warmup`): ``optax.linear_schedule`` computes
  it as ``1 − (1 − s/W)``, which loses the small early values in float32.
- ``optax.cosine_onecycle_schedule`` puts the peak at ``int(pct_start · T)`` (float rounding can
  miss the configured peak step, e.g. P = 29, T = 100 gives 28) and ends at
  ``peak / (div_factor · final_div_factor)``; PAWN's peak is exactly ``P = W`` and its floor is
  :data:`ONE_CYCLE_FLOOR` × peak, so the same cosine pieces are given explicit boundaries.
- Every boundary and length is passed as a Python float, and ``s`` is cast to float32 first:
  optax compares steps against Python ints, which overflow int32 past 2^31 (long runs, see
  ``pawn.train.loop.counter_as_float``).
- Decay windows are at least one step (``max(·, 1)``, spec §2): optax turns a zero-length
  ``linear_schedule`` into a constant ``init_value``, where the spec's tail is already at 0; each
  tail is followed by an explicit 0 (:func:`_tail`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # imported where a schedule is evaluated: the CLI's settings must not import JAX
    import optax

ScheduleName = Literal["cosine", "wsd", "constant", "one_cycle", "infinite"]
SHOULD_REACH_ZERO = {"cosine": True, "wsd": True, "infinite": True, "one_cycle": True, "constant": False}
"""Per schedule: whether the run's final LR is meant to be (near) zero (``schedule_health.json``).
Pretraining cosine floors at 0.1 × peak but is still reported as a decaying schedule (spec §1.10)."""

ONE_CYCLE_DIV_FACTOR = 25.0
"""one_cycle starts at ``peak / ONE_CYCLE_DIV_FACTOR`` (spec §2: ``f(0) = 1/25``)."""
ONE_CYCLE_FLOOR = 1e-4
"""one_cycle decays to ``ONE_CYCLE_FLOOR × peak`` at T and holds it (spec §2: ``f = 1e−4`` floor)."""


@dataclass(frozen=True)
class Schedule:
    """A fully resolved schedule: every fraction already turned into steps.

    Attributes:
        name: one of cosine, wsd, constant, one_cycle, infinite.
        peak: peak learning rate.
        total_steps: T. warmup_steps: W (for one_cycle, the peak step P).
        min_ratio: cosine floor m (0.1 for pretraining, spec §2).
        decay_steps: D = int(decay_frac·T) (wsd, infinite). cooldown_steps: C (infinite).
        stable_ratio: r, the infinite plateau. decay_shape: linear or cosine tail.
    """

    name: ScheduleName
    peak: float
    total_steps: int
    warmup_steps: int
    min_ratio: float = 0.1
    decay_steps: int = 0
    cooldown_steps: int = 0
    stable_ratio: float = 0.1
    decay_shape: Literal["linear", "cosine"] = "linear"

    def factor(self, s):
        """f(s), the multiplier of ``peak`` after ``s`` updates, from the optax composition of
        :func:`_compose`.

        ``s``: a Python number or a (traced) JAX scalar, cast to float32 first, so a step past
        2^31 is the float32 it rounds to, never an int32 overflow. Returns a float32 scalar array.
        """
        import jax.numpy as jnp

        return _compose(self)(jnp.asarray(s, jnp.float32))

    def __call__(self, s):
        """lr(s) = peak · f(s); usable as an optax schedule."""
        return self.peak * self.factor(s)

    def value(self, s: int) -> float:
        """lr(s) as a Python float."""
        return float(self(s))


def _linear_warmup(W: float) -> optax.Schedule:
    """``f(s) = s / max(1, W)``, the warm-up of every schedule but one_cycle (spec §2).

    Hand-written because optax cannot express it exactly in float32: ``optax.linear_schedule(0,
    1, W)`` evaluates ``1 − (1 − s/W)``, whose cancellation loses the low bits of small ratios
    (relative error ~3e-4 at s = 1 of a 10 000-step warm-up; 0 instead of s/W for s < W·2^−25).
    """
    return lambda s: s / max(1.0, W)


def _tail(shape: str, start: float, length: float) -> optax.Schedule:
    """Decay from ``start`` to 0 over ``length`` (≥ 1) steps, linear or half-cosine, then exactly 0.

    The explicit ``constant_schedule(0.0)`` after the window keeps the floor at 0: optax's
    ``linear_schedule`` reaches its end as ``1 − clip(x, 0, L)/L``, and under ``jit`` XLA turns
    ``/L`` into ``·(1/L)``, which can overshoot 1 and give a negative LR (−2^−24 · start) past T.
    """
    import optax

    decay = optax.linear_schedule(start, 0.0, length) if shape == "linear" else optax.cosine_decay_schedule(start, length)
    return optax.join_schedules([decay, optax.constant_schedule(0.0)], [length])


def _compose(sched: Schedule) -> optax.Schedule:
    """The optax schedule of ``f`` for ``sched`` (spec §2 table), built from optax primitives.

    Boundaries are Python floats (see the module docstring); the returned function expects a
    float32 step. Raises ValueError for an unknown schedule name (guarded by the config's Literal).
    """
    import optax

    T, W = float(sched.total_steps), float(sched.warmup_steps)
    if sched.name == "one_cycle":
        # cosine from peak/25 up to peak at P = W, down to 1e-4·peak at T, held after T
        return optax.piecewise_interpolate_schedule(
            "cosine", 1.0 / ONE_CYCLE_DIV_FACTOR, {W: ONE_CYCLE_DIV_FACTOR, T: ONE_CYCLE_FLOOR}
        )
    warmup = _linear_warmup(W)  # never reached when W = 0 (boundary 0)
    if sched.name == "constant":
        pieces, boundaries = [optax.constant_schedule(1.0)], []
    elif sched.name == "cosine":
        pieces, boundaries = [optax.cosine_decay_schedule(1.0, max(1.0, T - W), alpha=sched.min_ratio)], []
    elif sched.name == "wsd":
        S = max(W, T - sched.decay_steps)
        pieces = [optax.constant_schedule(1.0), _tail(sched.decay_shape, 1.0, max(T - S, 1.0))]
        boundaries = [S]
    elif sched.name == "infinite":
        r, C = sched.stable_ratio, float(sched.cooldown_steps)
        E = W + C
        F = max(E, T - sched.decay_steps)
        cooldown = optax.cosine_decay_schedule(1.0, max(C, 1.0), alpha=r)  # always cosine
        pieces = [cooldown, optax.constant_schedule(r), _tail(sched.decay_shape, r, max(T - F, 1.0))]
        boundaries = [E, F]
    else:  # pragma: no cover - guarded by the config's Literal
        raise ValueError(f"unknown schedule {sched.name!r}")
    return optax.join_schedules([warmup, *pieces], [W, *boundaries])


def build_schedule(
    name: ScheduleName,
    peak: float,
    total_steps: int,
    warmup_steps: int,
    *,
    min_ratio: float = 0.1,
    decay_frac: float = 0.1,
    cooldown_frac: float = 0.2,
    stable_ratio: float = 0.1,
    decay_shape: str = "linear",
) -> Schedule:
    """Resolve fractions to steps (``int(frac · T)``, spec §2) and check the schedule.

    Raises:
        ValueError: peak ≤ 0, T ≤ 0, W outside [0, T), one_cycle without 0 < W < T, ratios
            outside [0, 1], unknown decay shape, or warmup + decay (+ cooldown) longer than T
            (the message names the fields).
    """
    if peak <= 0:
        raise ValueError(f"lr must be > 0, got {peak}")
    if total_steps <= 0:
        raise ValueError(f"total_steps must be > 0, got {total_steps}")
    if not 0 <= warmup_steps < total_steps:
        raise ValueError(f"warmup_steps ({warmup_steps}) must be ≥ 0 and < total_steps ({total_steps})")
    if name == "one_cycle" and warmup_steps == 0:
        raise ValueError("one_cycle needs 0 < warmup_steps < total_steps (warmup is the peak step)")
    if decay_shape not in ("linear", "cosine"):
        raise ValueError(f"wsd_decay_shape must be linear or cosine, got {decay_shape!r}")
    for fname, v in (("min_lr_ratio", min_ratio), ("stable_lr_ratio", stable_ratio)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{fname} must be in [0, 1], got {v}")
    D = int(decay_frac * total_steps)
    C = int(cooldown_frac * total_steps)
    if name == "wsd" and warmup_steps + D > total_steps:
        raise ValueError(
            f"warmup_steps ({warmup_steps}) + decay steps (decay_frac × total_steps = {D}) exceed total_steps ({total_steps})"
        )
    if name == "infinite" and warmup_steps + C + D > total_steps:
        raise ValueError(
            f"warmup_steps ({warmup_steps}) + cooldown (cooldown_frac × total_steps = {C}) + decay "
            f"(decay_frac × total_steps = {D}) exceed total_steps ({total_steps})"
        )
    return Schedule(name, float(peak), int(total_steps), int(warmup_steps), float(min_ratio), D, C, float(stable_ratio), decay_shape)  # type: ignore[arg-type]
