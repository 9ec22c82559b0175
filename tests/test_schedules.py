"""LR schedules (spec training-and-adapters.md §2) against hand-computed values."""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pawn.train.schedules import build_schedule


def approx(x):
    return pytest.approx(x, rel=1e-5, abs=1e-9)


def test_cosine_pretraining_floor_and_warmup():
    s = build_schedule("cosine", 3e-4, 200_000, 10_000)
    assert s.value(0) == 0.0  # the first update has LR 0
    assert s.value(5_000) == approx(1.5e-4)
    assert s.value(10_000) == approx(3e-4)
    # halfway through the decay: 0.1 + 0.9 · ½(1 + cos(π/2)) = 0.55
    assert s.value(105_000) == approx(0.55 * 3e-4)
    assert s.value(200_000) == approx(3e-5)
    assert s.value(400_000) == approx(3e-5)  # holds the floor past T


def test_cosine_with_zero_floor_quarter_point():
    s = build_schedule("cosine", 1.0, 110, 10, min_ratio=0.0)
    assert s.value(35) == approx(0.5 * (1 + math.cos(math.pi * 0.25)))


def test_wsd_linear_and_cosine_tails():
    lin = build_schedule("wsd", 1.0, 100, 10, decay_frac=0.2)
    assert [lin.value(x) for x in (5, 10, 79, 80, 90, 100)] == [approx(v) for v in (0.5, 1, 1, 1, 0.5, 0)]
    cos = build_schedule("wsd", 1.0, 100, 10, decay_frac=0.2, decay_shape="cosine")
    assert cos.value(85) == approx(0.5 * (1 + math.cos(math.pi * 0.25)))


def test_constant_is_flat_after_warmup():
    s = build_schedule("constant", 2e-3, 50, 4)
    assert [s.value(x) for x in (2, 4, 49, 500)] == [approx(1e-3), approx(2e-3), approx(2e-3), approx(2e-3)]


def test_one_cycle_shape():
    s = build_schedule("one_cycle", 1.0, 100, 30)
    assert s.value(0) == approx(1 / 25)
    assert s.value(15) == approx(1 / 25 + (1 - 1 / 25) * 0.5)
    assert s.value(30) == approx(1.0)
    assert s.value(65) == approx(1e-4 + (1 - 1e-4) * 0.5)
    assert s.value(100) == approx(1e-4)


def test_infinite_cooldown_plateau_and_final_decay():
    s = build_schedule("infinite", 1.0, 100, 10, cooldown_frac=0.2, decay_frac=0.1, stable_ratio=0.1)
    # W=10, C=20 → E=30; D=10 → F=90
    assert s.value(20) == approx(0.1 + 0.9 * 0.5)
    assert s.value(30) == approx(0.1) and s.value(89) == approx(0.1)
    assert s.value(95) == approx(0.05)
    assert s.value(100) == approx(0.0)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(name="cosine", peak=1.0, total_steps=10, warmup_steps=10), "warmup_steps"),
        (dict(name="one_cycle", peak=1.0, total_steps=10, warmup_steps=0), "one_cycle"),
        (dict(name="wsd", peak=1.0, total_steps=100, warmup_steps=95, decay_frac=0.1), "decay"),
        (dict(name="infinite", peak=1.0, total_steps=100, warmup_steps=75, cooldown_frac=0.2, decay_frac=0.1), "cooldown"),
        (dict(name="cosine", peak=0.0, total_steps=10, warmup_steps=1), "lr"),
    ],
)
def test_invalid_schedules_name_the_fields(kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_schedule(**kwargs)


# ------------------------------------------------------------------ optax composition vs spec §2


def old_factor(name, T, W, s, *, m=0.1, decay_frac=0.1, cooldown_frac=0.2, r=0.1, shape="linear"):
    """The hand-written float32 schedules the optax composition replaced (spec §2's table, same
    operation order), kept as the oracle; ``s`` a float32 array."""
    T, W = float(T), float(W)
    D, C = int(decay_frac * T), int(cooldown_frac * T)
    half_cos = lambda p: 0.5 * (1.0 + jnp.cos(jnp.pi * p))  # noqa: E731
    tail = (lambda p: 1.0 - p) if shape == "linear" else half_cos
    warm = s / max(1.0, W)
    if name == "constant":
        after = jnp.ones_like(s)
    elif name == "cosine":
        after = m + (1.0 - m) * half_cos(jnp.minimum(1.0, (s - W) / max(1.0, T - W)))
    elif name == "wsd":
        S = max(W, T - D)
        after = jnp.where(s < S, 1.0, tail(jnp.clip((s - S) / max(T - S, 1.0), 0.0, 1.0)))
    elif name == "infinite":
        E = W + C
        F = max(E, T - D)
        cool = r + (1.0 - r) * half_cos((s - W) / max(C, 1.0))
        final = r * tail(jnp.clip((s - F) / max(T - F, 1.0), 0.0, 1.0))
        after = jnp.where(s < E, cool, jnp.where(s < F, r, final))
    else:  # one_cycle
        up = 1 / 25 + (1 - 1 / 25) * 0.5 * (1.0 - jnp.cos(jnp.pi * s / W))
        down = 1e-4 + (1 - 1e-4) * half_cos(jnp.minimum(1.0, (s - W) / max(1.0, T - W)))
        return jnp.where(s <= W, up, down)
    return jnp.where(s < W, warm, after)


_ZERO = {"m": 0.0, "decay_frac": 0.0, "cooldown_frac": 0.0}
KWARGS = {  # the settings each schedule reads
    "constant": ({},),
    "cosine": ({}, _ZERO),
    "wsd": ({}, {"shape": "cosine"}, _ZERO, {"decay_frac": 0.5}),
    "infinite": ({}, {"shape": "cosine"}, _ZERO, {"decay_frac": 0.5, "cooldown_frac": 0.3, "r": 0.3}),
}
GRID = [  # (name, T, W, kwargs): warm-up 0, T = 1, overlapping phases, zero-length windows, T > 2^31
    *[(n, T, W, kw) for n in ("cosine", "wsd", "constant", "infinite") for T, W in ((1, 0), (2, 1), (100, 0), (100, 10), (110, 10), (200_000, 10_000), (2**32, 10))
      for kw in KWARGS[n]
      if not (n == "wsd" and W + int(kw.get("decay_frac", 0.1) * T) > T)
      and not (n == "infinite" and W + int(kw.get("cooldown_frac", 0.2) * T) + int(kw.get("decay_frac", 0.1) * T) > T)],
    *[("one_cycle", T, W, {}) for T, W in ((2, 1), (100, 29), (100, 30), (200_000, 60_000), (2**32, 2**31 + 7))],
]


def build(name, T, W, kw, peak=3e-4):
    return build_schedule(name, peak, T, W, min_ratio=kw.get("m", 0.1), decay_frac=kw.get("decay_frac", 0.1),
                          cooldown_frac=kw.get("cooldown_frac", 0.2), stable_ratio=kw.get("r", 0.1), decay_shape=kw.get("shape", "linear"))


def grid_steps(sched):
    T, W, D, C = sched.total_steps, sched.warmup_steps, sched.decay_steps, sched.cooldown_steps
    marks = {0, 1, W, T, T - D, W + C, max(W, T - D), T // 2, T // 3, 2 * T, 2**31 - 1, 2**31, 2**31 + 1}
    pts = {p + d for p in marks for d in (-1, 0, 1)} | set(np.linspace(0, 1.2 * T, 61).astype(np.int64).tolist())
    return np.array(sorted(p for p in pts if p >= 0), np.float64)


@pytest.mark.parametrize("name,T,W,kw", GRID, ids=[f"{n}-T{T}-W{W}-{i}" for i, (n, T, W, _) in enumerate(GRID)])
def test_optax_composition_equals_the_hand_written_schedules(name, T, W, kw):
    sched = build(name, T, W, kw)
    s = grid_steps(sched)
    s32 = jnp.asarray(s, jnp.float32)  # the schedule sees the step as float32 (loop.counter_as_float)
    old = partial(old_factor, name, T, W, **kw)
    eager = np.asarray(jax.vmap(sched)(s32), np.float64)  # op by op, not compiled
    assert [sched.value(x) for x in (0, W, T, 2 * T)] == list(eager[np.searchsorted(s, [0, W, T, 2 * T])])
    jitted = np.asarray(jax.jit(jax.vmap(sched))(s32), np.float64)
    for got, ref in ((eager, np.asarray(old(s32))), (jitted, np.asarray(jax.jit(old)(s32)))):
        # float32 ~1e-7 relative; ½(1 + cos πp) near p = 1 only agrees to float32 absolute
        np.testing.assert_allclose(got, sched.peak * ref.astype(np.float64), rtol=2e-7, atol=2e-7 * sched.peak)
        assert (got >= 0).all()  # never a negative LR, also where XLA turns /L into ·(1/L)
    if name in ("wsd", "infinite"):  # floor 0: exactly 0 one step past T, however it is evaluated
        past = np.asarray(s32, np.float64) >= T + 1
        assert (eager[past] == 0).all() and (jitted[past] == 0).all()


def test_warmup_is_exact_for_small_ratios():
    # optax.linear_schedule(0, 1, W) gives 1 − (1 − s/W): ~3e-4 relative error at s = 1 of 10 000
    s = build_schedule("cosine", 3e-4, 200_000, 10_000)
    assert s.value(1) == pytest.approx(3e-4 / 10_000, rel=1e-7)
    long = build_schedule("wsd", 1.0, 2**32, 2**31)
    assert long.value(1) == pytest.approx(2.0**-31, rel=1e-7)  # optax's form rounds this to 0


def test_decaying_tails_end_exactly_at_zero_under_jit():
    for shape in ("linear", "cosine"):
        for sched in (build_schedule("wsd", 1.0, 110, 10, decay_frac=0.5, decay_shape=shape),
                      build_schedule("infinite", 2e-3, 110, 10, decay_shape=shape)):
            T = sched.total_steps
            after = jax.jit(jax.vmap(sched))(jnp.asarray([T, T + 1, 2 * T, 10 * T], jnp.float32))
            assert (np.asarray(after) == 0.0).all(), (sched, after)


def test_one_cycle_peaks_exactly_at_the_configured_step():
    # optax.cosine_onecycle_schedule would put the peak at int(0.29 · 100) = 28
    s = build_schedule("one_cycle", 1.0, 100, 29)
    assert s.value(29) == approx(1.0) and s.value(28) < s.value(29) and s.value(30) < s.value(29)
    assert s.value(28) == approx(1 / 25 + (1 - 1 / 25) * 0.5 * (1 - math.cos(math.pi * 28 / 29)))
    assert s.value(100) == approx(1e-4) and s.value(10**12) == approx(1e-4)


def test_steps_past_2_pow_31_are_not_int32():
    s = build_schedule("infinite", 1.0, 2**32, 10, decay_frac=0.25)
    F = 2**32 - 2**30
    assert s.value(2**31 + 5) == approx(0.1)  # on the plateau, no int32 overflow in optax's comparisons
    assert s.value(F + 2**29) == approx(0.05) and s.value(2**33) == 0.0
