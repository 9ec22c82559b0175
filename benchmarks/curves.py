"""Cost of redrawing ``curves.png`` (:class:`pawn.train.hooks.CurvesHook`) late in a long run.

Usage: python benchmarks/curves.py [--chunks 4000] [--val-every 20] [--repeats 3]

Writes a synthetic ``metrics.jsonl`` shaped like the end of the published schedule on the large
supernet (200,000 steps in chunks of 50 = 4,000 ``train`` records with three variants, a ``val``
record every 20 chunks = every 1,000 steps) through :class:`~pawn.train.metrics.MetricsLogger`,
then times what the hook does at each validation: reading the file and drawing the PNG. The first
repeat includes importing matplotlib. The load average is printed: timings are only comparable
within one run on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from pawn.train.hooks import plot_curves
from pawn.train.metrics import MetricsLogger, read_metrics

VARIANTS = {"small": "d256_L8_F1024", "base": "d512_L8_F2048", "large": "d640_L10_F2560"}
VAL_FIELDS = ("loss", "perplexity", "accuracy", "top5_accuracy", "legal_move_rate", "late_legal_move_rate", "game_completion_rate")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=4000)
    ap.add_argument("--val-every", type=int, default=20, help="chunks between val records")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "metrics.jsonl"
        log = MetricsLogger(path)
        log.write("config", summary={"variants": {n: {"config": k} for n, k in VARIANTS.items()}})
        for i in range(1, args.chunks + 1):
            step = 50 * i
            log.write("train", step=step, loss=5.0 - i / args.chunks, lr=3e-4, tokens_per_s=1e5, includes_compile=i == 1,
                      **{f"loss_{k}": 5.0 - i / args.chunks for k in VARIANTS.values()},
                      **{f"accuracy_{k}": i / args.chunks for k in VARIANTS.values()})
            if i % args.val_every == 0:
                log.write("val", step=step, **{f"val/{f}_{k}": 0.5 for k in VARIANTS.values() for f in VAL_FIELDS})
        log.close()
        print(f"metrics.jsonl: {path.stat().st_size / 1e6:.2f} MB, load average {os.getloadavg()[0]:.1f}")
        for r in range(args.repeats):
            t0 = time.perf_counter()
            recs = read_metrics(path)
            t1 = time.perf_counter()
            plot_curves(recs, Path(tmp) / "curves.png", title="bench")
            t2 = time.perf_counter()
            print(f"repeat {r}: read {t1 - t0:.3f} s, draw {t2 - t1:.3f} s ({len(recs)} records)")


if __name__ == "__main__":
    main()
