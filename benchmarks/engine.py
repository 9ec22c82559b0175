"""Engine throughput: random games/s and plies/s at max_ply 512, on 1 thread and on all cores.

Usage: python benchmarks/engine.py [--games N] [--max-ply 512]

Each configuration runs in a fresh subprocess because rayon's global pool size
(RAYON_NUM_THREADS) is fixed when the pool first starts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_CHILD = """
import json, sys, time
from pawn.engine import random_games
n, max_ply = int(sys.argv[1]), int(sys.argv[2])
random_games(min(n, 500), max_ply, seed=123)  # warm-up: thread pool start, page faults
best = None
for rep in range(3):
    t0 = time.perf_counter()
    g = random_games(n, max_ply, seed=rep)
    wall_s = time.perf_counter() - t0
    if best is None or wall_s < best[0]:
        best = (wall_s, int(g.lengths.astype('int64').sum()))
wall_s, plies = best
print(json.dumps({"games_per_s": n / wall_s, "plies_per_s": plies / wall_s, "wall_s": wall_s}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--games", type=int, default=20_000)
    p.add_argument("--max-ply", type=int, default=512)
    args = p.parse_args()
    cores = os.cpu_count() or 1
    print(f"random games, max_ply={args.max_ply}, {args.games} games per run (best of 3)")
    print(f"{'threads':>8} {'games/s':>12} {'plies/s':>14}")
    for threads in sorted({1, cores}):
        env = {**os.environ, "RAYON_NUM_THREADS": str(threads)}
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(args.games), str(args.max_ply)],
            env=env, capture_output=True, text=True, check=True,
        )
        r = json.loads(out.stdout)
        print(f"{threads:>8} {r['games_per_s']:>12,.0f} {r['plies_per_s']:>14,.0f}")


if __name__ == "__main__":
    main()
