"""LR schedules (spec training-and-adapters.md §2) against hand-computed values."""

from __future__ import annotations

import math

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
