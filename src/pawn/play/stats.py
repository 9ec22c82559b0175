"""Match scoring and the Elo estimate (spec ``eval-probe-generate-sweep-bench.md`` §4.2).

Score ``S = W + D/2`` over ``N = W + D + L`` scored games (games ended by an engine error are
not scored), score rate ``s = S / N``. The Elo difference implied by ``s`` is the logistic Elo
model's inverse, ``Δ = −400 · log10(1/s − 1)`` (Elo, *The Rating of Chessplayers*, 1978; the
expected score of a player ``Δ`` points stronger is ``1 / (1 + 10^(−Δ/400))``).

The 95 % interval of the score rate is the Wilson score interval (Wilson, "Probable inference,
the law of succession, and statistical inference", JASA 22, 1927) with the score rate as the
success proportion over ``N`` trials:

    centre = (s + z²/2N) / (1 + z²/N),  half = z / (1 + z²/N) · √(s(1 − s)/N + z²/4N²),

``z = 1.959964``. Unlike the normal (Wald) interval ``s ± z·σ/√N`` that cutechess-cli prints, it
keeps a width above zero at 0 %, 100 % and all draws (2 games of 2 wins give [0.342, 1], not
[1, 1]), and it stays inside [0, 1]. Counting a draw as half a success with the binomial variance
``s(1 − s)`` is conservative: a draw's variance around ``s`` is never larger than a win's or a
loss's, so the interval is at least as wide as the trinomial one would be. The Elo interval is the
two bounds mapped through ``Δ(·)``; a bound of 0 or 1 maps to −∞ or +∞ (reported as ``None`` in
JSON).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

Z95 = 1.959963984540054
"""Two-sided 95 % normal quantile."""


def elo_diff(score_rate: float) -> float:
    """Elo difference implied by a score rate: ``−400 · log10(1/s − 1)``; ±inf at s = 1 / 0.

    Raises:
        ValueError: ``score_rate`` outside [0, 1] or NaN.
    """
    s = float(score_rate)
    if not 0.0 <= s <= 1.0:
        raise ValueError(f"score rate must lie in [0, 1], got {score_rate}")
    if s == 0.0:
        return -math.inf
    if s == 1.0:
        return math.inf
    return 0.0 - 400.0 * math.log10(1.0 / s - 1.0)  # 0.0 - …: +0.0, not -0.0, at s = 0.5


def wilson_interval(rate: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval ``(low, high)`` of a proportion ``rate`` observed over ``n`` trials
    (module docstring for the formula); bounds clipped to [0, 1] against rounding.

    Raises:
        ValueError: ``n`` < 1 or ``rate`` outside [0, 1].
    """
    if n < 1:
        raise ValueError(f"n must be ≥ 1, got {n}")
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must lie in [0, 1], got {rate}")
    z2n = z * z / n
    centre = (rate + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(rate * (1 - rate) / n + z2n / (4 * n))
    lo, hi = max(0.0, centre - half), min(1.0, centre + half)
    return (0.0 if rate == 0.0 else lo), (1.0 if rate == 1.0 else hi)  # exact ends, not 1 − 1e-16


@dataclass(frozen=True)
class Score:
    """Wins/draws/losses of one side (PAWN's point of view) and what follows from them.

    Attributes:
        wins, draws, losses: scored games (ints ≥ 0).
    """

    wins: int
    draws: int
    losses: int

    @property
    def games(self) -> int:
        """N = W + D + L."""
        return self.wins + self.draws + self.losses

    @property
    def score(self) -> float:
        """W + D/2 (points)."""
        return self.wins + 0.5 * self.draws

    @property
    def score_rate(self) -> float:
        """(W + D/2) / N; NaN when N = 0."""
        return self.score / self.games if self.games else math.nan

    @property
    def winrate_strict(self) -> float:
        """W / N; NaN when N = 0."""
        return self.wins / self.games if self.games else math.nan

    def score_interval(self, z: float = Z95) -> tuple[float, float]:
        """``(low, high)`` of the score rate's Wilson interval (module docstring), within [0, 1];
        (NaN, NaN) when N = 0."""
        n = self.games
        if n == 0:
            return math.nan, math.nan
        return wilson_interval(self.score_rate, n, z)

    def elo(self) -> float:
        """Elo difference implied by the score rate (:func:`elo_diff`); NaN when N = 0."""
        return math.nan if self.games == 0 else elo_diff(self.score_rate)

    def elo_interval(self, z: float = Z95) -> tuple[float, float]:
        """95 % interval of the Elo difference: the score interval's bounds through :func:`elo_diff`."""
        lo, hi = self.score_interval(z)
        if math.isnan(lo):
            return math.nan, math.nan
        return elo_diff(lo), elo_diff(hi)

    def to_dict(self, reference_elo: Optional[float] = None) -> dict:
        """JSON-ready summary: ``wins, draws, losses, games, score, score_rate, score_rate_ci95,
        winrate_strict, elo_diff, elo_diff_ci95``, and with ``reference_elo`` (the opponent's
        rating) ``elo_estimate`` / ``elo_estimate_ci95`` = reference + difference."""
        lo, hi = self.elo_interval()
        d = {"wins": self.wins, "draws": self.draws, "losses": self.losses, "games": self.games, "score": self.score,
             "score_rate": self.score_rate, "score_rate_ci95": list(self.score_interval()),
             "winrate_strict": self.winrate_strict, "elo_diff": self.elo(), "elo_diff_ci95": [lo, hi]}
        if reference_elo is not None:
            d["elo_estimate"] = reference_elo + self.elo()
            d["elo_estimate_ci95"] = [reference_elo + lo, reference_elo + hi]
        return d
