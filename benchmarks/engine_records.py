"""Speed of the engine calls that return records: `random_games` (games/s) and `board_states`
(ms per call), to compare two builds of `pawn._engine` on a shared machine.

Usage: python benchmarks/engine_records.py [--games 40000] [--max-ply 256] [--board-games 2000]
       [--reps 3] [--json]

Run it alternately against the two builds in one session (A, B, A, B: set PYTHONPATH to each
build's ``src``) and compare the ratios; single timings are noisy when others share the CPUs.
``random_games`` with more than 32768 games exercises the blocks between which Ctrl-C is honoured.
Prints the best of ``--reps`` for each call, in wall time and in CPU time of all the process's
threads (steadier than wall time on a loaded machine), and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--games", type=int, default=40000)
    p.add_argument("--max-ply", type=int, default=256)
    p.add_argument("--board-games", type=int, default=2000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()

    import pawn
    from pawn.engine import board_states, random_games

    random_games(200, a.max_ply, seed=10**6)  # warm-up: thread pool start, page faults
    rg = [_timed(lambda rep=rep: random_games(a.games, a.max_ply, seed=rep)) for rep in range(a.reps)]
    g = random_games(a.board_games, a.max_ply, seed=99)
    bs = [_timed(lambda: board_states(g.tokens, g.lengths)) for _ in range(a.reps)]
    out = {
        "engine": os.path.dirname(pawn.__file__),
        "random_games_games_per_s": a.games / min(w for w, _ in rg),
        "random_games_games_per_cpu_s": a.games / min(c for _, c in rg),
        "board_states_ms": 1000 * min(w for w, _ in bs),
        "board_states_cpu_ms": 1000 * min(c for _, c in bs),
        "load": os.getloadavg()[0],
    }
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{out['engine']}: random_games {out['random_games_games_per_s']:.0f} games/s "
              f"({out['random_games_games_per_cpu_s']:.0f} per CPU-s), board_states [{a.board_games}, {a.max_ply}] "
              f"{out['board_states_ms']:.1f} ms ({out['board_states_cpu_ms']:.1f} CPU-ms) (load {out['load']:.1f})")


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process, all threads) of one call."""
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


if __name__ == "__main__":
    main()
