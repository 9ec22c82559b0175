"""Intervals and verdicts for comparing models: a bootstrap over games, paired differences over
seeds, and the two together (pure NumPy functions; every figure PAWN's docs compare goes through here).

Games, not positions, are the independent unit of an evaluation: the positions of one game share
its opening, its length and its player, so a per-position standard error is too small. Every
interval here therefore resamples whole games (a ratio of per-game sums: positions are weighted as
in the point estimate). Seeds are a second, independent source of variation (initialisation and
data order): a comparison of two training recipes pairs the runs that share a seed and data.

References:
    B. Efron and R. J. Tibshirani, *An Introduction to the Bootstrap*, Chapman & Hall, 1993:
    ch. 6 (the bootstrap estimate of standard error), ch. 13 (intervals from bootstrap percentiles).
    W. S. Gosset ("Student"), "The probable error of a mean", *Biometrika* 6 (1908): the paired
    t-interval over seeds.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Optional

import numpy as np
from scipy import stats as _scipy_stats

LEVEL = 0.95
"""Coverage of every interval unless told otherwise."""

N_BOOT = 2000
"""Bootstrap replicates (Efron & Tibshirani 1993 advise about 1,000 or more for a percentile interval)."""

SEED = 0
"""Seed of the resampling, so an interval is reproducible from the same inputs."""


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided interval.

    Attributes:
        estimate: the statistic on the data as observed.
        lo, hi: the interval's ends (``level`` coverage).
        se: its standard error (bootstrap SD, or the t-interval's s/√n; combined: the root sum of squares).
        level: the coverage, e.g. 0.95.
        method: how it was made (``"bootstrap over games"``, ``"paired t over seeds"``, ``"seeds and games"``).
        n: the number of resampled units (games, or seeds).
    """

    estimate: float
    lo: float
    hi: float
    se: float
    level: float
    method: str
    n: int

    def excludes_zero(self) -> bool:
        """True when 0 lies outside [lo, hi]."""
        return self.lo > 0 or self.hi < 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{estimate, lo, hi, se, level, method, n}``."""
        return asdict(self)


def _as_1d(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
    return a


def _games_weights(n_games: int, n_boot: int, seed: int) -> np.ndarray:
    """Multinomial resampling counts of ``n_games`` games: int64 [n_boot, n_games] whose rows each
    sum to ``n_games`` (row b: how often each game is drawn in replicate b)."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_games, np.full(n_games, 1.0 / n_games), size=n_boot)


def bootstrap_ratio(num, den, *, level: float = LEVEL, n_boot: int = N_BOOT, seed: int = SEED) -> Interval:
    """Bootstrap over games of a ratio of sums Σ num / Σ den (e.g. a position-weighted mean loss:
    ``num`` the summed loss of each game, ``den`` its positions).

    The games are resampled with replacement ``n_boot`` times; the interval is the percentile
    interval of the replicated ratios and ``se`` their standard deviation (Efron & Tibshirani
    1993, ch. 6 and ch. 13; the statistic is a ratio of per-game sums, so games are resampled whole).

    Args:
        num: float [G] per-game numerator sums. den: float [G] per-game denominators (≥ 0, Σ > 0).
        level: coverage in (0, 1). n_boot: replicates (≥ 2). seed: the resampling seed.

    Returns:
        :class:`Interval` (``n`` = G, method ``"bootstrap over games"``).

    Raises:
        ValueError: shapes differ, no game, Σ den = 0, or a bad ``level``/``n_boot``.
    """
    num, den = _as_1d(num, "num"), _as_1d(den, "den")
    _check(num, den, level, n_boot)
    w = _games_weights(num.size, n_boot, seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = (w @ num) / (w @ den)
    reps = reps[np.isfinite(reps)]  # a replicate drawing only empty games has no ratio
    return _percentile(float(num.sum() / den.sum()), reps, level, "bootstrap over games", num.size)


def bootstrap_mean(values, *, level: float = LEVEL, n_boot: int = N_BOOT, seed: int = SEED) -> Interval:
    """Bootstrap over games of a plain mean of one value per game (:func:`bootstrap_ratio` with
    unit weights). ``values``: float [G]."""
    v = _as_1d(values, "values")
    return bootstrap_ratio(v, np.ones_like(v), level=level, n_boot=n_boot, seed=seed)


def paired_bootstrap_ratio(num_a, num_b, den, *, den_b=None, level: float = LEVEL, n_boot: int = N_BOOT,
                           seed: int = SEED) -> Interval:
    """Bootstrap over games of the difference of two ratios on the **same** games, A − B =
    Σ num_a / Σ den − Σ num_b / Σ den_b (den_b = den by default): both models see the same
    resampled games in every replicate, so what the games share cancels (a paired bootstrap,
    Efron & Tibshirani 1993 ch. 6 applied to the difference statistic).

    Args:
        num_a, num_b: float [G] per-game sums of each model. den: float [G] per-game positions
            (``den_b`` if B counts other positions of the same games).

    Returns:
        :class:`Interval` of A − B (``n`` = G).

    Raises:
        ValueError: shapes differ, no game, a zero denominator, or a bad ``level``/``n_boot``.
    """
    a, b, d = _as_1d(num_a, "num_a"), _as_1d(num_b, "num_b"), _as_1d(den, "den")
    db = d if den_b is None else _as_1d(den_b, "den_b")
    _check(a, d, level, n_boot)
    _check(b, db, level, n_boot)
    if a.size != b.size:
        raise ValueError(f"the two models' games differ in number: {a.size} vs {b.size}")
    w = _games_weights(a.size, n_boot, seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = (w @ a) / (w @ d) - (w @ b) / (w @ db)
    reps = reps[np.isfinite(reps)]
    return _percentile(float(a.sum() / d.sum() - b.sum() / db.sum()), reps, level, "bootstrap over games", a.size)


def t_quantile(level: float, df: int) -> float:
    """The two-sided Student-t quantile t_{(1+level)/2, df} (Student 1908), e.g. 4.303 for 0.95 and df 2.

    Raises:
        ValueError: df < 1 or level outside (0, 1).
    """
    if df < 1:
        raise ValueError(f"a t-interval needs at least 2 seeds (df ≥ 1), got df {df}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    return float(_scipy_stats.t.ppf((1 + level) / 2, df))


@dataclass(frozen=True)
class SeedDiff:
    """Paired differences over seeds (A − B per seed), with the paired t-interval.

    Attributes:
        diffs: the per-seed differences. mean, sd (n − 1 denominator), se = sd/√n, t = mean/se
        (inf when every difference is equal and non-zero), df = n − 1, interval: the t-interval.
    """

    diffs: tuple[float, ...]
    mean: float
    sd: float
    se: float
    t: float
    df: int
    interval: Interval

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, the interval as a nested dict."""
        d = asdict(self)
        d["diffs"] = list(self.diffs)
        return d


def paired_seeds(a, b, *, level: float = LEVEL) -> SeedDiff:
    """Paired t over seeds: d_s = a_s − b_s; mean ± t_{(1+level)/2, n−1} · s/√n (Student 1908;
    the paired design removes what the seed's data order shares between A and B).

    Args:
        a, b: float [S] one figure per seed of each arm, in the same seed order (S ≥ 2).

    Returns:
        :class:`SeedDiff`.

    Raises:
        ValueError: lengths differ or fewer than 2 seeds.
    """
    a, b = _as_1d(a, "a"), _as_1d(b, "b")
    if a.size != b.size:
        raise ValueError(f"paired seeds need the same seeds in both arms: {a.size} vs {b.size}")
    if a.size < 2:
        raise ValueError(f"a paired t-interval needs at least 2 seeds, got {a.size}")
    d = a - b
    n = d.size
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    t = mean / se if se > 0 else (math.copysign(math.inf, mean) if mean else 0.0)
    q = t_quantile(level, n - 1)
    iv = Interval(mean, mean - q * se, mean + q * se, se, level, "paired t over seeds", n)
    return SeedDiff(tuple(float(x) for x in d), mean, sd, se, t, n - 1, iv)


@dataclass(frozen=True)
class Comparison:
    """A − B over seeds and games (:func:`compare`).

    Attributes:
        seeds: the paired t over seeds on the observed games. games: the bootstrap over games of
        the seed-mean difference (seeds fixed). interval: both together. verdict: :func:`verdict`
        of ``interval``.
    """

    seeds: SeedDiff
    games: Interval
    interval: Interval
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready nested dict."""
        return {"seeds": self.seeds.to_dict(), "games": self.games.to_dict(), "interval": self.interval.to_dict(),
                "verdict": self.verdict}


def compare(num_a, num_b, den, *, den_b=None, higher_is_better: bool, level: float = LEVEL, n_boot: int = N_BOOT,
            seed: int = SEED, names: tuple[str, str] = ("A", "B")) -> Comparison:
    """Compare two arms trained on the same seeds and evaluated on the same games, A − B.

    Per seed s the figure of an arm is the ratio Σ_g num[s, g] / Σ_g den[s, g] (a position-weighted
    mean over the games). Two sources of variation are covered:

    * **seeds** — the paired t-interval of the per-seed differences on the observed games
      (:func:`paired_seeds`, Student 1908);
    * **games** — the bootstrap standard error of the seed-mean difference when the games are
      resampled (the same resampled games for every seed and both arms; Efron & Tibshirani 1993
      ch. 6).

    The combined interval is ``mean ± √((t_{S−1}·se_seeds)² + (z·se_games)²)`` (z the normal
    quantile at the same level): the two sources are independent, so their variances add; scaling
    each by its own quantile is conservative (the seed spread on fixed games already holds part of
    the seed × game interaction, which the game bootstrap counts again).

    Args:
        num_a, num_b: float [S, G] per-seed, per-game sums (e.g. summed legal-masked loss, or hits).
        den: float [S, G] per-seed, per-game positions (or [G], the same for every seed); ``den_b``
            likewise for B when it counts other positions.
        higher_is_better: True for accuracies, False for losses (the verdict's direction).
        names: the arms' names, used in the verdict.

    Returns:
        :class:`Comparison`.

    Raises:
        ValueError: shapes differ, fewer than 2 seeds, a zero denominator, or a bad ``level``/``n_boot``.
    """
    a = np.asarray(num_a, np.float64)
    b = np.asarray(num_b, np.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"num_a and num_b must both be [seeds, games], got {a.shape} and {b.shape}")
    d_a = np.broadcast_to(np.asarray(den, np.float64), a.shape)
    d_b = d_a if den_b is None else np.broadcast_to(np.asarray(den_b, np.float64), a.shape)
    if (d_a.sum(axis=1) <= 0).any() or (d_b.sum(axis=1) <= 0).any():
        raise ValueError("every seed needs positions (Σ den > 0) in both arms")
    _check(a[0], d_a[0], level, n_boot)
    seeds = paired_seeds(a.sum(1) / d_a.sum(1), b.sum(1) / d_b.sum(1), level=level)
    w = _games_weights(a.shape[1], n_boot, seed).astype(np.float64)  # [n_boot, G], shared by every seed
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = ((w @ a.T) / (w @ d_a.T) - (w @ b.T) / (w @ d_b.T)).mean(axis=1)  # [n_boot]
    reps = reps[np.isfinite(reps)]
    games = _percentile(seeds.mean, reps, level, "bootstrap over games (seed mean)", a.shape[1])
    half = math.hypot(t_quantile(level, seeds.df) * seeds.se, _z(level) * games.se)
    both = Interval(seeds.mean, seeds.mean - half, seeds.mean + half, math.hypot(seeds.se, games.se), level,
                    "seeds and games", a.shape[0])
    return Comparison(seeds, games, both, verdict(both, higher_is_better=higher_is_better, names=names))


def seeds_and_games(num, den, *, level: float = LEVEL, n_boot: int = N_BOOT, seed: int = SEED) -> Interval:
    """One arm's figure over seeds and games: the mean over seeds of Σ_g num[s, g] / Σ_g den[s, g],
    with the interval of :func:`compare` (the t-interval over seeds on the observed games combined
    with the bootstrap over games, variances added) — :func:`compare` of the arm against 0.

    Args:
        num: float [S, G] per-seed, per-game sums. den: float [S, G] or [G] positions.

    Returns:
        :class:`Interval` (method ``"seeds and games"``, ``n`` = S).

    Raises:
        ValueError: as :func:`compare`.
    """
    a = np.asarray(num, np.float64)
    return compare(a, np.zeros_like(a), den, higher_is_better=True, level=level, n_boot=n_boot, seed=seed).interval


def verdict(interval: Interval, *, higher_is_better: bool, names: tuple[str, str] = ("A", "B")) -> str:
    """The sentence an interval of A − B supports: ``"A better"`` / ``"B better"`` when it excludes
    0 (on the side ``higher_is_better`` says is better), else ``"no significant difference"``."""
    a, b = names
    if not interval.excludes_zero():
        return "no significant difference"
    a_wins = (interval.lo > 0) == higher_is_better
    return f"{a} better" if a_wins else f"{b} better"


def _z(level: float) -> float:
    return float(_scipy_stats.norm.ppf((1 + level) / 2))


def _check(num: np.ndarray, den: np.ndarray, level: float, n_boot: int) -> None:
    if num.shape != den.shape:
        raise ValueError(f"num and den differ in shape: {num.shape} vs {den.shape}")
    if num.size == 0:
        raise ValueError("no game to resample")
    if not den.sum() > 0:
        raise ValueError("the denominators sum to 0: no position to average over")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    if n_boot < 2:
        raise ValueError(f"n_boot must be ≥ 2, got {n_boot}")


def _percentile(estimate: float, reps: np.ndarray, level: float, method: str, n: int) -> Interval:
    """Percentile interval of bootstrap replicates (Efron & Tibshirani 1993, ch. 13)."""
    if reps.size < 2:
        return Interval(estimate, float("nan"), float("nan"), float("nan"), level, method, n)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(reps, [alpha, 1 - alpha])
    return Interval(estimate, float(lo), float(hi), float(reps.std(ddof=1)), level, method, n)


def format_interval(iv: Optional[Interval], fmt: str = "+.3f", scale: float = 1.0) -> str:
    """``"+0.441 [+0.402, +0.480]"``: the estimate and interval, each times ``scale`` in ``fmt``;
    ``"—"`` for None or a non-finite estimate."""
    if iv is None or not math.isfinite(iv.estimate):
        return "—"
    e, lo, hi = (format(x * scale, fmt) for x in (iv.estimate, iv.lo, iv.hi))
    return f"{e} [{lo}, {hi}]"


def interval_text(estimate: Any, lo: Any, hi: Any, fmt: str = "+.4f", scale: float = 1.0) -> Optional[str]:
    """``"+0.4392 [+0.4303, +0.4480]"``: an estimate and its interval as one string, each number times
    ``scale`` (e.g. 100 for percentage points) in the format spec ``fmt``; an end that is missing, not a
    number or not finite reads ``—``. Returns None when the estimate itself is missing or not finite.
    Used by every table that prints an interval (the report's eval cards, the model card)."""
    def num(v: Any) -> Optional[float]:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
            return None
        return float(v)

    e, a, b = num(estimate), num(lo), num(hi)
    if e is None:
        return None
    end = lambda x: "—" if x is None else format(x * scale, fmt)  # noqa: E731
    return f"{format(e * scale, fmt)} [{end(a)}, {end(b)}]"
