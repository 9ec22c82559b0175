"""``pawn bench`` section ``engine``: random games, PGN parsing and legal masks at 1 thread and at
all available threads, plus python-chess on the same workload (spec
``eval-probe-generate-sweep-bench.md`` §7.1 item 1)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence, Union

from pawn.bench.records import Measurement
from pawn.bench.settings import BenchSettings, resolve_pgn_files
from pawn.bench.section import Section, register
from pawn.bench.report import _n, _range, TableView
from pawn.bench.timing import timing_stats
from pawn.errors import EngineFailure, UsageError


def cpus_available() -> int:
    """CPU cores this process may run on (its affinity mask, else ``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@dataclass
class EngineThreads:
    """The engine's workloads at one rayon thread count."""

    threads: int
    random_games: Measurement
    parse_pgn: Measurement
    legal_masks: Measurement


@dataclass
class EngineResult:
    """The ``engine`` section: one :class:`EngineThreads` per thread count, and python-chess on
    one thread (a :class:`Measurement`, or ``{"skipped": why}`` when it is not installed)."""

    threads: list[EngineThreads] = field(default_factory=list)
    python_chess: Union[Measurement, dict, None] = None


def python_chess_games(n_games: int, max_ply: int, seed: int) -> tuple[int, int]:
    """Play ``n_games`` uniformly random games in python-chess with the engine's stopping rules
    (checkmate, stalemate, insufficient material, 75-move rule, fivefold repetition, ply cap).
    Returns ``(games, plies)``."""

    import chess

    rng = random.Random(seed)
    plies = 0
    for _ in range(n_games):
        b = chess.Board()
        k = 0
        while k < max_ply and not b.is_game_over(claim_draw=False):
            b.push(rng.choice(list(b.legal_moves)))
            k += 1
        plies += k
    return n_games, plies


def _engine_at(s: BenchSettings, threads: int) -> EngineThreads:
    """Run :mod:`pawn.bench.engine_child` with ``RAYON_NUM_THREADS=threads``."""
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads)}
    args = [str(s.engine_games), str(s.engine_max_ply), str(s.mask_games), str(s.repeats), json.dumps(list(s.pgn_files))]
    proc = subprocess.run([sys.executable, "-m", "pawn.bench.engine_child", *args], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise EngineFailure(f"engine benchmark subprocess failed ({threads} threads): {proc.stderr.strip()[-500:]}")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    rg, pg, lm = r["random_games"], r["parse_pgn"], r["legal_masks"]
    return EngineThreads(
        threads,
        Measurement.of(timing_stats(rg["samples_s"]), games=rg["games"], plies=rg["plies"], max_ply=s.engine_max_ply)
        .per(rg["games"], "games_per_s").per_repetition(rg["samples_s"], rg["plies"], "plies_per_s"),
        Measurement.of(timing_stats(pg["samples_s"]), games=pg["games"], mb=pg["mb"], source=pg["source"])
        .per(pg["games"], "games_per_s"),
        Measurement.of(timing_stats(lm["samples_s"]), positions=lm["positions"]).per(lm["positions"], "positions_per_s"),
    )


def bench_engine(s: BenchSettings) -> EngineResult:
    """Engine throughput at 1 thread and at all available threads, each in a fresh subprocess
    (rayon's pool size is fixed at first use through ``RAYON_NUM_THREADS``): random games/s and
    plies/s at ``engine_max_ply``, PGN parsing games/s (the same games written as PGN text,
    parsed from memory) and legal-mask positions/s (dense ``legal_move_masks``); plus, when
    python-chess is installed, the same random-game workload in python-chess on one thread.
    Each repetition plays games of another seed, so its plies differ: plies/s is the median of
    the per-repetition rates (:func:`~pawn.bench.timing.per_repetition_rates`).

    Raises:
        RuntimeError: the child process failed (its last stderr lines).
    """
    out = EngineResult([_engine_at(s, threads) for threads in sorted({1, cpus_available()})])
    try:
        import chess  # noqa: F401
    except ImportError:
        out.python_chess = {"skipped": "python-chess is not installed"}
        return out
    samples, plies = [], []
    for rep in range(s.repeats):
        t0 = time.perf_counter()
        _, n_plies = python_chess_games(s.chess_games, s.engine_max_ply, seed=rep)
        samples.append(time.perf_counter() - t0)
        plies.append(n_plies)
    out.python_chess = (Measurement.of(timing_stats(samples), games=s.chess_games, plies=plies, max_ply=s.engine_max_ply, threads=1)
                        .per(s.chess_games, "games_per_s").per_repetition(samples, plies, "plies_per_s"))
    return out


def view(e) -> TableView:
    """The printed table of the section (:class:`pawn.bench.report.TableView`)."""
    v = TableView("engine", ["workload", "threads", "time_ms", "rate", "rate_range"])
    for r in e.threads:
        rg, pg, lm, th = r.random_games, r.parse_pgn, r.legal_masks, str(r.threads)
        v.rows += [
            {"workload": f"random games ×{rg.work['games']} (max_ply {rg.work['max_ply']})", "threads": th, "time_ms": rg,
             "rate": f"{_n(rg.rates['games_per_s'])} games/s, {_n(rg.rates['plies_per_s'])} plies/s",
             "rate_range": f"{_range(rg, 'games_per_s')} games/s"},
            {"workload": f"parse PGN ×{pg.work['games']} ({pg.work['mb']:.1f} MB, {pg.work['source']})", "threads": th,
             "time_ms": pg, "rate": f"{_n(pg.rates['games_per_s'])} games/s", "rate_range": _range(pg, "games_per_s")},
            {"workload": f"legal masks ×{lm.work['positions']} positions", "threads": th, "time_ms": lm,
             "rate": f"{_n(lm.rates['positions_per_s'])} positions/s", "rate_range": _range(lm, "positions_per_s")}]
    pc = e.python_chess
    if isinstance(pc, Measurement):
        v.rows.append({"workload": f"python-chess random games ×{pc.work['games']}", "threads": "1", "time_ms": pc,
                       "rate": f"{_n(pc.rates['games_per_s'], 1)} games/s, {_n(pc.rates['plies_per_s'])} plies/s",
                       "rate_range": f"{_range(pc, 'games_per_s', 1)} games/s"})
    elif pc:
        v.rows.append({"workload": "python-chess", "threads": "", "time_ms": "", "rate": pc["skipped"], "rate_range": ""})
    return v


SECTION = register(Section("engine", 20, lambda s, ctx: bench_engine(s), view, (2.0, 10.0),
                           lambda s: float(s.engine_games * s.engine_max_ply * s.repeats)))
"""The ``engine`` row of the section table (:mod:`pawn.bench.section`)."""
