"""PGN parsing throughput: games/s of ``pawn.engine.parse_pgn`` over every ``*.pgn`` in a folder.

Usage: python benchmarks/pgn.py [--dir ../shared/data/lichess] [--repeats 5] [--max-ply 512]

Times the whole call (file read, parallel parse, NumPy and list building); the lazy ``san`` /
``uci`` lists are not materialised. Prints the best of ``--repeats`` passes over all files.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pawn.engine import parse_pgn

DEFAULT_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "lichess"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--max-ply", type=int, default=512)
    args = p.parse_args()
    files = sorted(args.dir.glob("*.pgn"))
    if not files:
        raise SystemExit(f"no .pgn files in {args.dir}")
    for f in files:  # warm-up: page cache, thread pool
        parse_pgn(f, max_ply=args.max_ply)
    best_s, games, plies = float("inf"), 0, 0
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        parsed = [parse_pgn(f, max_ply=args.max_ply) for f in files]
        wall_s = time.perf_counter() - t0
        if wall_s < best_s:
            best_s = wall_s
            games = sum(x.counts["read"] for x in parsed)
            plies = sum(int(x.lengths.astype("int64").sum()) for x in parsed)
    mb = sum(f.stat().st_size for f in files) / 1e6
    print(f"{len(files)} files, {mb:.1f} MB, {games} games, {plies} kept plies, best of {args.repeats}")
    print(f"wall_s {best_s:.3f}  games_per_s {games / best_s:,.0f}  plies_per_s {plies / best_s:,.0f}  MB_per_s {mb / best_s:.1f}")


if __name__ == "__main__":
    main()
