"""pawn.stats against hand-computed values: the paired t over seeds, the bootstrap over games,
both together, and the verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pawn import stats


def test_t_quantile_is_the_tables_value():
    # df 2 has a closed form: t_p = (2p − 1) / √(2p(1 − p)), p = 0.975
    assert stats.t_quantile(0.95, 2) == pytest.approx(0.95 / math.sqrt(2 * 0.975 * 0.025), rel=1e-9)
    assert stats.t_quantile(0.95, 30) == pytest.approx(2.042, abs=5e-4)  # any t table
    with pytest.raises(ValueError, match="at least 2 seeds"):
        stats.t_quantile(0.95, 0)


def test_paired_seeds_by_hand():
    # d = 1, 2, 3: mean 2, s 1, se 1/√3, t 2√3, interval 2 ± 4.3027/√3
    r = stats.paired_seeds([1.5, 2.0, 3.25], [0.5, 0.0, 0.25])
    assert r.diffs == (1.0, 2.0, 3.0)
    assert (r.mean, r.sd, r.df) == (2.0, 1.0, 2)
    assert r.se == pytest.approx(1 / math.sqrt(3))
    assert r.t == pytest.approx(2 * math.sqrt(3))
    half = 4.302652729911275 / math.sqrt(3)
    assert (r.interval.lo, r.interval.hi) == pytest.approx((2 - half, 2 + half))
    assert r.interval.method == "paired t over seeds" and r.interval.n == 3
    with pytest.raises(ValueError, match="same seeds"):
        stats.paired_seeds([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="at least 2 seeds"):
        stats.paired_seeds([1], [0])


def test_bootstrap_of_two_games_has_the_plug_in_standard_error():
    """Games scoring 0 and 2 (one position each): the resampled mean is 0, 1 or 2 with probability
    1/4, 1/2, 1/4, so its SD is √(1/2) and the 95 % percentile interval is [0, 2]."""
    iv = stats.bootstrap_ratio([0.0, 2.0], [1.0, 1.0], n_boot=4000)
    assert iv.estimate == 1.0
    assert iv.se == pytest.approx(math.sqrt(0.5), rel=0.05)
    assert (iv.lo, iv.hi) == (0.0, 2.0)
    assert iv.method == "bootstrap over games" and iv.n == 2


def test_bootstrap_standard_error_of_a_mean_is_sd_over_root_n():
    v = np.arange(100, dtype=float)  # plug-in SD √((100² − 1)/12); SE of the mean = that / 10
    iv = stats.bootstrap_mean(v)
    assert iv.estimate == pytest.approx(49.5)
    assert iv.se == pytest.approx(math.sqrt((100 ** 2 - 1) / 12) / 10, rel=0.06)
    assert iv.lo < 49.5 < iv.hi and iv.hi - iv.lo == pytest.approx(2 * 1.96 * iv.se, rel=0.1)


def test_bootstrap_ratio_weights_positions_not_games():
    # game 1: 10 positions of loss 1; game 2: 1 position of loss 12 → (10 + 12) / 11 = 2, not (1 + 12) / 2
    iv = stats.bootstrap_ratio([10.0, 12.0], [10.0, 1.0])
    assert iv.estimate == pytest.approx(2.0)
    same = stats.bootstrap_ratio([3.0, 6.0, 9.0], [1.0, 2.0, 3.0])
    assert (same.estimate, same.lo, same.hi, same.se) == pytest.approx((3.0, 3.0, 3.0, 0.0))
    again = stats.bootstrap_ratio([10.0, 12.0], [10.0, 1.0])
    assert (again.lo, again.hi) == (iv.lo, iv.hi)  # seeded: the same inputs give the same interval
    with pytest.raises(ValueError, match="no position"):
        stats.bootstrap_ratio([1.0], [0.0])
    with pytest.raises(ValueError, match="no game"):
        stats.bootstrap_ratio([], [])


def test_paired_bootstrap_cancels_what_the_games_share():
    """B's per-game loss is A's plus 0.1 per position, with large differences between games: the
    difference is 0.1 in every replicate, while either model alone varies widely."""
    rng = np.random.default_rng(1)
    den = rng.integers(20, 200, 300).astype(float)
    a = den * rng.uniform(1, 5, 300)
    iv = stats.paired_bootstrap_ratio(a, a + 0.1 * den, den)
    assert (iv.estimate, iv.lo, iv.hi) == pytest.approx((-0.1, -0.1, -0.1))
    assert stats.bootstrap_ratio(a, den).se > 0.02


def test_compare_adds_seed_and_game_variance_and_states_the_verdict():
    """Per-seed shifts 0.3, 0.31, 0.29 per position on top of game noise shared by both arms: the
    seed part is the paired t (mean 0.3, s 0.01), the game part 0 (the difference is the same in
    every resampled game set), so the interval is 0.3 ± 4.303 · 0.01/√3."""
    rng = np.random.default_rng(2)
    den = rng.integers(10, 100, (3, 200)).astype(float)
    b = den * rng.uniform(0, 1, (3, 200))
    a = b + np.array([0.3, 0.31, 0.29])[:, None] * den
    c = stats.compare(a, b, den, higher_is_better=True, names=("bottleneck", "lora"))
    half = 4.302652729911275 * 0.01 / math.sqrt(3)
    assert c.seeds.mean == pytest.approx(0.3)
    assert c.games.se == pytest.approx(0.0, abs=1e-12)
    assert (c.interval.lo, c.interval.hi) == pytest.approx((0.3 - half, 0.3 + half))
    assert c.verdict == "bottleneck better"
    assert stats.compare(a, b, den, higher_is_better=False, names=("bottleneck", "lora")).verdict == "lora better"
    d = c.to_dict()
    assert d["verdict"] == "bottleneck better" and d["interval"]["method"] == "seeds and games"


def test_compare_widens_the_seed_interval_by_the_games_spread():
    """Arm A adds game-level noise (the same in every seed): the seeds agree exactly, so only the
    bootstrap over games can say the difference is uncertain, and the combined half-width is
    √((t·se_seeds)² + (z·se_games)²)."""
    rng = np.random.default_rng(3)
    den = np.full((3, 50), 20.0)
    b = den * 0.5
    noise = rng.normal(0, 0.4, 50) * 20.0  # per game, shared by the three seeds
    a = b + noise[None, :]
    c = stats.compare(a, b, den, higher_is_better=True)
    assert c.seeds.se == pytest.approx(0.0, abs=1e-12)
    assert c.games.se == pytest.approx(0.4 / math.sqrt(50), rel=0.15)
    half = math.hypot(4.302652729911275 * c.seeds.se, 1.959963984540054 * c.games.se)
    assert (c.interval.lo, c.interval.hi) == pytest.approx((c.seeds.mean - half, c.seeds.mean + half))
    assert c.interval.hi - c.interval.lo > 0.15


def test_verdict_needs_an_interval_that_excludes_zero():
    iv = stats.Interval(0.23, -0.25, 0.71, 0.11, 0.95, "paired t over seeds", 3)
    assert stats.verdict(iv, higher_is_better=True) == "no significant difference"
    up = stats.Interval(0.31, 0.13, 0.49, 0.04, 0.95, "x", 3)
    assert stats.verdict(up, higher_is_better=True, names=("bottleneck", "lora")) == "bottleneck better"
    assert stats.verdict(up, higher_is_better=False, names=("bottleneck", "lora")) == "lora better"
    assert stats.format_interval(up, "+.2f", scale=100) == "+31.00 [+13.00, +49.00]"
    assert stats.format_interval(None) == "—"


def test_seeds_and_games_of_one_arm_is_its_seed_mean_with_both_spreads():
    # per-seed figures 0.2, 0.3, 0.4 on games that all score alike: the t-interval 0.3 ± 4.303 · 0.1/√3
    den = np.full((3, 40), 10.0)
    num = np.array([0.2, 0.3, 0.4])[:, None] * den
    iv = stats.seeds_and_games(num, den)
    half = 0.95 / math.sqrt(2 * 0.975 * 0.025) * 0.1 / math.sqrt(3)
    assert (iv.estimate, iv.lo, iv.hi) == pytest.approx((0.3, 0.3 - half, 0.3 + half))
    assert iv.method == "seeds and games" and iv.n == 3


def test_interval_text_scales_formats_and_marks_missing_ends():
    from pawn.stats import interval_text

    assert interval_text(0.0027, -0.0022, 0.0077, "+.2f", 100) == "+0.27 [-0.22, +0.77]"
    assert interval_text(-0.2078, -0.2197, float("nan")) == "-0.2078 [-0.2197, —]"
    assert interval_text(None, 0.1, 0.2) is None and interval_text(float("inf"), 0, 1) is None
    assert interval_text(True, 0, 1) is None  # a bool is not a figure
