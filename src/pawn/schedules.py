"""Learning-rate schedules (spec ``training-and-adapters.md`` §2).

``s`` is the number of optimizer updates already applied (update ``s`` uses ``lr(s)``), ``T`` the
total steps, ``W`` the warmup steps; ``lr(s) = peak · f(s)``. Every schedule but ``one_cycle``
starts with the linear warmup ``f(s) = s / max(1, W)`` for ``s < W`` (the first update has LR 0
when W > 0). Functions accept a Python number or a traced JAX scalar.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import jax.numpy as jnp

ScheduleName = Literal["cosine", "wsd", "constant", "one_cycle", "infinite"]
SHOULD_REACH_ZERO = {"cosine": True, "wsd": True, "infinite": True, "one_cycle": True, "constant": False}
"""Per schedule: whether the run's final LR is meant to be (near) zero (``schedule_health.json``).
Pretraining cosine floors at 0.1 × peak but is still reported as a decaying schedule (spec §1.10)."""


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
        """f(s), the multiplier of ``peak`` after ``s`` updates (float or traced scalar)."""
        s = jnp.asarray(s, jnp.float32)
        T, W = float(self.total_steps), float(self.warmup_steps)
        half_cos = lambda p: 0.5 * (1.0 + jnp.cos(jnp.pi * p))  # noqa: E731
        tail = (lambda p: 1.0 - p) if self.decay_shape == "linear" else half_cos
        warm = s / max(1.0, W)
        if self.name == "constant":
            after = jnp.ones_like(s)
        elif self.name == "cosine":
            p = jnp.minimum(1.0, (s - W) / max(1.0, T - W))
            after = self.min_ratio + (1.0 - self.min_ratio) * half_cos(p)
        elif self.name == "wsd":
            S = max(W, T - self.decay_steps)
            p = jnp.clip((s - S) / max(T - S, 1.0), 0.0, 1.0)
            after = jnp.where(s < S, 1.0, tail(p))
        elif self.name == "infinite":
            r, C = self.stable_ratio, float(self.cooldown_steps)
            E = W + C
            F = max(E, T - self.decay_steps)
            cool = r + (1.0 - r) * half_cos((s - W) / max(C, 1.0))
            final = r * tail(jnp.clip((s - F) / max(T - F, 1.0), 0.0, 1.0))
            after = jnp.where(s < E, cool, jnp.where(s < F, r, final))
        elif self.name == "one_cycle":
            P = W
            up = 1 / 25 + (1 - 1 / 25) * 0.5 * (1.0 - jnp.cos(jnp.pi * s / P))
            p = jnp.minimum(1.0, (s - P) / max(1.0, T - P))
            down = 1e-4 + (1 - 1e-4) * half_cos(p)
            return jnp.where(s <= P, up, down)
        else:  # pragma: no cover - guarded by the config's Literal
            raise ValueError(f"unknown schedule {self.name!r}")
        return jnp.where(s < W, warm, after)

    def __call__(self, s):
        """lr(s) = peak · f(s); usable as an optax schedule."""
        return self.peak * self.factor(s)

    def value(self, s: int) -> float:
        """lr(s) as a Python float."""
        return float(self(s))


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
        raise ValueError(f"warmup_steps ({warmup_steps}) must be in [0, total_steps={total_steps})")
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
            f"warmup_steps ({warmup_steps}) + decay steps (decay_frac·total_steps = {D}) exceed total_steps ({total_steps})"
        )
    if name == "infinite" and warmup_steps + C + D > total_steps:
        raise ValueError(
            f"warmup_steps ({warmup_steps}) + cooldown (cooldown_frac·total_steps = {C}) + decay "
            f"(decay_frac·total_steps = {D}) exceed total_steps ({total_steps})"
        )
    return Schedule(name, float(peak), int(total_steps), int(warmup_steps), float(min_ratio), D, C, float(stable_ratio), decay_shape)  # type: ignore[arg-type]
