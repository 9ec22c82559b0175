"""Speed of the Lichess data path: cache build, verified cache load, and training batches/s.

Usage: python benchmarks/lichess_data.py [--data $PAWN_SHARED_DIR/data/lichess] [--seq-len 512] [--batch-size 64]
       [--steps 60]

Builds the CSR cache (elo 1200–2200, min_ply 10) in a temporary cache root, loads it again (hash
verification, no parsing), then times ``GameBatches.batch_at`` with and without the legal sets and
``iter_from`` (prefetch thread), interleaved A, B, A, B because the machine is shared. Prints one
line per figure and the load average.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    shared = os.environ.get("PAWN_SHARED_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
    ap.add_argument("--data", default=os.path.join(shared, "data", "lichess"))
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()

    from pawn.data.layout import Layout
    from pawn.data.lichess import LichessFilters, load_corpus
    from pawn.data.lichess_batches import GameBatches

    with tempfile.TemporaryDirectory() as root:
        f = LichessFilters(1200, 2200, 10)
        t = time.perf_counter()
        corpus = load_corpus(args.data, f, cache_dir=root)
        build = time.perf_counter() - t
        t = time.perf_counter()
        corpus = load_corpus(args.data, f, cache_dir=root)
        load = time.perf_counter() - t
        print(f"cache build {build:.2f} s ({corpus.caches[0].stats.read} games read), verified load {load:.3f} s; "
              f"train {len(corpus.train)} / val {len(corpus.val)} games")
        layout, T, B = Layout(False), args.seq_len, args.batch_size
        with_legal = GameBatches(corpus.train, layout, T, B, 0)
        without = GameBatches(corpus.train, layout, T, B, 0, legal_mask=False)
        rates: dict[str, list[float]] = {"batch_at + legal": [], "batch_at, no legal": [], "iter_from (prefetch)": []}
        for rep in range(2):
            for name, fn in (("batch_at + legal", lambda s: with_legal.batch_at(s)),
                             ("batch_at, no legal", lambda s: without.batch_at(s))):
                t = time.perf_counter()
                for s in range(args.steps):
                    fn(s)
                rates[name].append(args.steps / (time.perf_counter() - t))
            t = time.perf_counter()
            for _, _b in zip(range(args.steps), with_legal.iter_from(0)):
                pass
            rates["iter_from (prefetch)"].append(args.steps / (time.perf_counter() - t))
        for name, r in rates.items():
            print(f"{name}: {max(r):.1f} batches/s ({max(r) * B:.0f} games/s) at B={B}, T={T}")
        print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
