"""Weak opponents with a stated rating anchor, and one maximum-likelihood Elo fit over results
against several of them at once (issue 29: every CPU-trainable model scores 0 % against Debian's
Stockfish, whose UCI_Elo floor is 1350, so one rung says nothing).

Rungs (:func:`rung`):

* ``random``: a uniformly random legal mover. Anchor **0 by convention** (a choice of origin, as
  in the "random mover = 0" convention of engine-strength ladders; nothing measured it).
* ``greedy``: a one-ply material-greedy mover: the legal move that maximises its material after
  the move (pawn 1, knight 3, bishop 3, rook 5, queen 9; a mate counts as +1000), ties broken
  uniformly at random. Anchor :data:`GREEDY_ANCHOR`, **measured here** against the random mover
  (see its docstring), so it rests on the random convention.
* ``sf-<elo>`` (e.g. ``sf-1350``): Stockfish with ``UCI_LimitStrength`` at ``UCI_Elo`` = elo.
  Anchor = the UCI_Elo played, **Stockfish's own calibration** (its UCI_Elo is fitted to CCRL
  40/4-type ratings at a long time control; at ``pawn play``'s 1 ms per move it plays weaker,
  so estimates against it read high).
* ``sf-skill<S>-depth<D>`` (e.g. ``sf-skill0-depth1``): Stockfish with ``Skill Level`` = S
  (0–20) and a search of ``go depth D`` (1–20) per move; with a ``-random<P>`` suffix (P = 1–99,
  e.g. ``sf-skill0-depth1-random50``) each move is, with probability P %, a uniformly random
  legal move instead (the "engine diluted with random moves" ladder: P = 100 would be the random
  mover). Stockfish documents no rating below its UCI_Elo floor, and even ``sf-skill0-depth1``
  beats ``greedy`` in nearly every game, so these rungs fill that gap; their anchors are
  **measured here** (:data:`MEASURED_ANCHORS`, each rung against rungs already anchored, by
  ``benchmarks/ladder_anchors.py``). A combination not in that table is played and reported per
  rung, but has no anchor and stays out of the joint fit (said in the rung's note). Stockfish's
  skill handicap draws from a generator seeded by the clock, so these games do not repeat
  exactly from ``--seed``.

The fit (:func:`fit_elo`): the logistic Elo model gives the expected score of a player rated
``R`` against a rung rated ``A`` as ``E = 1 / (1 + 10^((A − R)/400))`` (Elo 1978). The estimate
maximises ``Σ_g [s_g ln E_g + (1 − s_g) ln(1 − E_g)]`` over the scored games (a draw counts
s = ½), and the 95 % interval is the likelihood-ratio (profile) interval: every ``R`` whose
log-likelihood lies within ``χ²₁(0.95)/2 = 1.920729`` of the maximum. Against one rung it
reduces to the usual score-rate estimate; results at 0 % or 100 % against every rung give a
half-open interval (one bound ±∞), never a zero-width one.
"""

from __future__ import annotations

import math
import re
from typing import Optional, Sequence

import numpy as np

RANDOM_ANCHOR = 0.0
"""Rating of the uniformly random mover: a convention (the origin of the scale), not a measurement."""
GREEDY_ANCHOR = 478.0
"""Rating of the one-ply material-greedy mover, **measured** against the random mover (anchor 0):
400 games, colours alternating, 400-ply limit scored a draw (``pawn play``'s rules), generators
seeded 123 (greedy) and 456 (random): 352 wins, 48 draws, 0 losses, score 0.94, maximum-likelihood
Δ = +478 Elo, 95 % likelihood-ratio interval [+410, +554] (:func:`fit_elo`). Its uncertainty adds
to every estimate that leans on this rung."""
MEASURED_ANCHORS: dict[str, dict] = {
    "sf-skill0-depth1-random50": {"anchor": 402.0, "ci95": (360.0, 445.0), "against": "random, greedy"},
    "sf-skill0-depth1-random25": {"anchor": 726.0, "ci95": (681.0, 774.0), "against": "greedy, sf-skill0-depth1-random50"},
    "sf-skill0-depth1-random10": {"anchor": 1047.0, "ci95": (986.0, 1114.0),
                                  "against": "sf-skill0-depth1-random50, sf-skill0-depth1-random25"},
    "sf-skill0-depth1": {"anchor": 1395.0, "ci95": (1330.0, 1466.0),
                         "against": "sf-skill0-depth1-random25, sf-skill0-depth1-random10"},
}
"""Anchors of ``sf-skill<S>-depth<D>[-random<P>]`` rungs **measured here** (rung →
``{"anchor", "ci95", "against"}``), on the scale random = 0, greedy = GREEDY_ANCHOR, by
``benchmarks/ladder_anchors.py --games 200`` (defaults otherwise: seed 123, 400-ply limit, each
rung against the two anchored rungs below it, 400 games per rung, Stockfish 15.1 as Debian ships
it, 2026-12-02). The intervals are each rung's own 95 % likelihood-ratio interval given its
opponents' anchors; the uncertainty of those anchors adds along the chain. A check of the chain:
``sf-1350`` (UCI_Elo 1350 at ``pawn play``'s 1 ms per move) measured the same way, against
``sf-skill0-depth1-random10`` and ``sf-skill0-depth1``, came out at 1433 [1392, 1475], near the
1350 Stockfish claims for it."""
PIECE_VALUES = {1: 1, 2: 3, 3: 3, 4: 5, 5: 9, 6: 0}
"""python-chess piece type → material value (pawn, knight, bishop, rook, queen, king)."""
LR_HALF_CHI2 = 1.920729410347062
"""χ²₁(0.95) / 2: the log-likelihood drop that bounds the 95 % profile interval."""


def material(board, color: bool) -> int:
    """Material of ``color`` minus the other side's on ``board`` (PIECE_VALUES)."""
    total = 0
    for sq, piece in board.piece_map().items():
        v = PIECE_VALUES[piece.piece_type]
        total += v if piece.color == color else -v
    return total


class _Mover:
    """A rung played in-process: the pool interface of :class:`pawn.play.players.UciPool`
    (``move(slot, board) -> uci``, ``name``, ``effective_elo``, ``restarts``, ``start``,
    ``close``). Each slot draws from ``numpy.random.default_rng([seed, slot])``."""

    def __init__(self, name: str, anchor: float, slots: int, seed: int = 0):
        self.name, self.effective_elo, self.restarts, self.note = name, anchor, 0, None
        self._rngs = [np.random.default_rng([seed, s]) for s in range(slots)]

    def start(self) -> None:
        """Nothing to start."""

    def close(self) -> None:
        """Nothing to close."""


class RandomMover(_Mover):
    """Uniformly random legal moves (anchor :data:`RANDOM_ANCHOR`)."""

    def __init__(self, slots: int, seed: int = 0):
        super().__init__("random", RANDOM_ANCHOR, slots, seed)

    def move(self, slot: int, board) -> str:
        legal = list(board.legal_moves)
        return legal[int(self._rngs[slot].integers(len(legal)))].uci()


class GreedyMover(_Mover):
    """The one-ply material-greedy mover (module docstring; anchor :data:`GREEDY_ANCHOR`)."""

    def __init__(self, slots: int, seed: int = 0):
        super().__init__("greedy", GREEDY_ANCHOR, slots, seed)

    def move(self, slot: int, board) -> str:
        me = board.turn
        best, score = [], -math.inf
        for m in board.legal_moves:
            board.push(m)
            v = 1000 if board.is_checkmate() else material(board, me)
            board.pop()
            if v > score:
                best, score = [m], v
            elif v == score:
                best.append(m)
        return best[int(self._rngs[slot].integers(len(best)))].uci()


def _loglik(r: float, anchors: np.ndarray, scores: np.ndarray) -> float:
    e = 1.0 / (1.0 + 10.0 ** ((anchors - r) / 400.0))
    e = np.clip(e, 1e-300, 1 - 1e-16)
    return float(np.sum(scores * np.log(e) + (1 - scores) * np.log1p(-e)))


def fit_elo(anchors: Sequence[float], scores: Sequence[float]) -> dict:
    """Maximum-likelihood rating from games against anchored opponents (module docstring).

    Args:
        anchors: the opponent's rating per game. scores: the player's score per game (1, ½, 0).

    Returns:
        ``{"elo", "elo_ci95": [low, high], "games", "score_rate", "method"}``; ``elo`` is ±inf
        when every game was won or lost (the likelihood keeps rising), and so is the open bound.

    Raises:
        ValueError: no games, lengths differ, or a score outside {0, ½, 1}.
    """
    a, s = np.asarray(anchors, np.float64), np.asarray(scores, np.float64)
    if a.shape != s.shape or a.size == 0:
        raise ValueError(f"need ≥ 1 game with one anchor each (got {a.size} anchors, {s.size} scores)")
    if not np.isin(s, (0.0, 0.5, 1.0)).all():
        raise ValueError("scores must be 0, 0.5 or 1")
    lo_r, hi_r = float(a.min()) - 4000.0, float(a.max()) + 4000.0
    grid = np.linspace(lo_r, hi_r, 8001)  # 1 Elo steps, then refined
    ll = np.array([_loglik(r, a, s) for r in grid])
    k = int(np.argmax(ll))
    if s.sum() == 0:
        best = -math.inf
    elif s.sum() == s.size:
        best = math.inf
    else:
        left, right = grid[max(0, k - 1)], grid[min(len(grid) - 1, k + 1)]
        for _ in range(60):  # golden-section on the concave log-likelihood
            m1, m2 = left + (right - left) * 0.382, left + (right - left) * 0.618
            if _loglik(m1, a, s) < _loglik(m2, a, s):
                left = m1
            else:
                right = m2
        best = float(0.5 * (left + right))
    top = _loglik(best, a, s) if math.isfinite(best) else float(ll.max())
    inside = grid[ll >= top - LR_HALF_CHI2]

    def edge(x0: float, x1: float) -> float:  # bisection for ll(x) = top − c between inside x0 and outside x1
        for _ in range(60):
            xm = 0.5 * (x0 + x1)
            if _loglik(xm, a, s) >= top - LR_HALF_CHI2:
                x0 = xm
            else:
                x1 = xm
        return 0.5 * (x0 + x1)

    lo = -math.inf if (s.sum() == 0 or inside.min() <= lo_r) else edge(float(inside.min()), float(inside.min()) - 1.0)
    hi = math.inf if (s.sum() == s.size or inside.max() >= hi_r) else edge(float(inside.max()), float(inside.max()) + 1.0)
    return {"elo": float(best), "elo_ci95": [float(lo), float(hi)], "games": int(s.size), "score_rate": float(s.mean()),
            "method": "maximum likelihood, logistic Elo model; 95 % likelihood-ratio interval"}


RUNG_HELP = ("random, greedy, sf-<UCI_Elo> (e.g. sf-1350) or sf-skill<0..20>-depth<1..20>[-random<1..99>] "
             "(e.g. sf-skill0-depth1-random50)")
_SKILL_DEPTH = re.compile(r"sf-skill(\d+)-depth(\d+)(?:-random(\d+))?")


def skill_depth(name: str) -> Optional[tuple[int, int, int]]:
    """``(skill, depth, random %)`` of an ``sf-skill<S>-depth<D>[-random<P>]`` rung name with S in
    0..20, D in 1..20 and P in 1..99 (0 without the suffix), else None."""
    m = _SKILL_DEPTH.fullmatch(name)
    if m is None:
        return None
    skill, depth = int(m.group(1)), int(m.group(2))
    pct = 0 if m.group(3) is None else int(m.group(3))
    ok = 0 <= skill <= 20 and 1 <= depth <= 20 and (m.group(3) is None or 1 <= pct <= 99)
    return (skill, depth, pct) if ok else None


class DilutedPool:
    """An engine rung whose every move is, with probability ``random_pct`` %, a uniformly random
    legal move instead of the engine's (slot ``s`` draws from ``default_rng([seed, s])``); the
    pool interface of :class:`pawn.play.players.UciPool` (``move``, ``name``, ``effective_elo``,
    ``restarts``, ``note``, ``start``, ``close``).

    Args:
        base: the engine pool (a :class:`~pawn.play.players.UciPool`). random_pct: 1..99.
        slots: concurrent games. seed: generator seed. name, anchor: as for a rung.
    """

    def __init__(self, base, random_pct: int, slots: int, seed: int, name: str, anchor: Optional[float]):
        self.base, self.p = base, random_pct / 100.0
        self.name, self.effective_elo, self.note = name, anchor, None
        self._rngs = [np.random.default_rng([seed, s]) for s in range(slots)]

    @property
    def restarts(self) -> int:
        """Engine processes started again after one died."""
        return self.base.restarts

    def start(self) -> None:
        """Start the engine's first process (a bad binary fails before any game)."""
        self.base.start()

    def move(self, slot: int, board) -> str:
        """A random legal move with probability ``random_pct`` %, else the engine's (UCI)."""
        rng = self._rngs[slot]
        if rng.random() < self.p:
            legal = list(board.legal_moves)
            return legal[int(rng.integers(len(legal)))].uci()
        return self.base.move(slot, board)

    def close(self) -> None:
        """Quit the engine processes."""
        self.base.close()


def is_rung(name: str) -> bool:
    """Whether ``name`` names a rung (:func:`rung`)."""
    return (name in ("random", "greedy") or (name.startswith("sf-") and name[3:].isdigit())
            or skill_depth(name) is not None)


def rung(name: str, slots: int, seed: int = 0, stockfish: Optional[str] = None, movetime_ms: float = 1.0):
    """The opponent called ``name`` (``random``, ``greedy``, ``sf-<elo>``, ``sf-skill<S>-depth<D>[-random<P>]``;
    module docstring) with ``slots`` slots; ``seed`` seeds the in-process generators.

    Raises:
        ValueError: an unknown rung name.
        pawn.play.players.StockfishNotFound: ``sf-…`` without a Stockfish binary.
    """
    from pawn.play.players import StockfishPool, find_stockfish

    if name == "random":
        return RandomMover(slots, seed)
    if name == "greedy":
        return GreedyMover(slots, seed)
    if name.startswith("sf-") and name[3:].isdigit():
        return StockfishPool(find_stockfish(stockfish), int(name[3:]), movetime_ms, slots)
    sd = skill_depth(name)
    if sd is not None:
        import chess.engine

        from pawn.play.players import UciPool

        measured = MEASURED_ANCHORS.get(name)
        anchor = None if measured is None else measured["anchor"]
        pool = UciPool([find_stockfish(stockfish)], {"Skill Level": sd[0], "Hash": 16, "Threads": 1},
                       chess.engine.Limit(depth=sd[1]), slots, name=name, anchor=anchor)
        if sd[2]:
            pool = DilutedPool(pool, sd[2], slots, seed, name, anchor)
        if measured is None:
            pool.note = (f"{name}: no measured anchor (measured: {', '.join(MEASURED_ANCHORS)}); "
                         "its games are reported but left out of the Elo fit")
        return pool
    raise ValueError(f"ladder rung {name!r}: expected {RUNG_HELP}")
