"""Streaming a large Lichess export into the game cache: peak RSS and games/s for plain PGN and
.pgn.zst, on a synthetic file made by concatenating the shared Lichess games ``--copies`` times.

    python benchmarks/lichess_stream.py --out /tmp/big --copies 200 [--threads N]

Writes ``big.pgn`` (the copies concatenated) and ``big.pgn.zst`` (zstandard level 3), a 1-copy
``small.pgn``/``small.pgn.zst``, then builds each one's cache in a fresh process
(``load_corpus``, ``--min-ply 1``, a private cache folder) and prints its wall time, games read
per second and peak RSS (``getrusage`` of the child), in the order small, big, big.zst,
small.zst, big, big.zst (A/B interleaved). Peak RSS independent of the file size is the claim
shown: it is set by the 64 MiB pieces in flight and their parsed games, not by the file (run with
two ``--copies`` to see it).

Measured (2-core Xeon, 2 threads, the shared 7,321 games): ``--copies 100`` (0.92 GiB, 732,100 games)
peak RSS 773 / 778 MiB plain / .zst; ``--copies 300`` (2.77 GiB, 2,196,300 games) 796–797 / 805–816
MiB; the 1-copy file 93 / 95 MiB. Games/s .zst ÷ plain: 0.93, 0.93 (``--copies 300``), 0.96
(``--copies 100``).
Every copy after the first is dropped as ``duplicate`` (the same Lichess ids), so the caches are
small; the games are all parsed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SHARED = Path("/work/shared/data/lichess")

_CHILD = """
import json, resource, sys, time
from pawn.data.lichess import LichessFilters, load_corpus
t = time.perf_counter()
c = load_corpus(sys.argv[1], LichessFilters(min_ply=1), cache_dir=sys.argv[2], val_games=0, warn=lambda m: None)
s = c.caches[0].stats
print(json.dumps({"seconds": time.perf_counter() - t, "read": s.read, "kept": s.kept, "dropped": s.dropped,
                  "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def make(out: Path, copies: int) -> dict[str, Path]:
    import zstandard

    out.mkdir(parents=True, exist_ok=True)
    one = b"".join(f.read_bytes().rstrip(b"\n") + b"\n\n" for f in sorted(SHARED.glob("*.pgn")))
    paths = {}
    for name, k in (("small", 1), ("big", copies)):
        pgn = out / name / f"{name}.pgn"
        zst = out / f"{name}-zst" / f"{name}.pgn.zst"
        for p in (pgn, zst):
            p.parent.mkdir(exist_ok=True)
        if not pgn.exists() or pgn.stat().st_size != len(one) * k:
            with open(pgn, "wb") as f:
                for _ in range(k):
                    f.write(one)
        if not zst.exists():
            cctx = zstandard.ZstdCompressor(level=3, threads=-1)
            with open(pgn, "rb") as src, open(zst, "wb") as dst:
                cctx.copy_stream(src, dst)
        paths[name], paths[name + ".zst"] = pgn, zst
    return paths


def run(path: Path, cache: Path, threads: int) -> dict:
    shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads)}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(cache)], env=env, capture_output=True,
                          text=True, check=True)
    wall = time.perf_counter() - t
    d = json.loads(proc.stdout.strip().splitlines()[-1])
    d.update(wall=wall)
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--copies", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--order", default="small,big,big.zst,small.zst,big,big.zst", help="runs, comma-separated")
    a = ap.parse_args()
    paths = make(a.out, a.copies)
    for name in a.order.split(","):
        p = paths[name]
        d = run(p.parent, a.out / "cache", a.threads)
        print(f"{name:10s} {p.stat().st_size / 2**30:7.3f} GiB  {d['read']:>10,} games  {d['seconds']:8.1f} s  "
              f"{d['read'] / d['seconds']:9,.0f} games/s  peak RSS {d['peak_kib'] / 2**10:,.0f} MiB",
              flush=True)


if __name__ == "__main__":
    main()
