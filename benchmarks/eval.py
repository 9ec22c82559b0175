"""Speed of `pawn eval` (teacher-forced positions/s) and of KV-cache decoding vs full recompute.

Usage: python benchmarks/eval.py [--sizes tiny,base] [--games 64] [--max-ply 256]
       [--gen-games 8] [--gen-plies 256] [--gen-size tiny]

Random-init models (speed does not depend on the weights). Each measurement runs once to
compile, then is timed; compile time is reported separately.
"""

from __future__ import annotations

import argparse
import time

import jax

from pawn.config import TINY_SUPERNET, VARIANTS
from pawn.engine import random_games
from pawn.evaluate.accuracy import evaluate_games
from pawn.evaluate.generation import autoregressive_generate
from pawn.model import PAWNModel
from pawn.vocab import PLY_LIMIT

SIZES = {"tiny": TINY_SUPERNET, **VARIANTS}


def bench_eval(size: str, games: int, max_ply: int, batch: int) -> None:
    model = PAWNModel(SIZES[size], jax.random.PRNGKey(0))
    g = random_games(games, max_ply, 2**63 - 1)
    t = time.perf_counter()
    evaluate_games(model, g.tokens[:batch], g.lengths[:batch], g.outcome[:batch], seq_len=max_ply, batch_size=batch)
    warm = time.perf_counter() - t
    t = time.perf_counter()
    r = evaluate_games(model, g.tokens, g.lengths, g.outcome, seq_len=max_ply, batch_size=batch)
    wall = time.perf_counter() - t
    print(f"eval {size:5s} ({model.num_params() / 1e6:.2f}M): {r.n_positions} positions in {wall:.2f} s = "
          f"{r.n_positions / wall:,.0f} positions/s ({games} games, seq {max_ply}, batch {batch}; first batch incl. compile {warm:.1f} s)")


def bench_generate(size: str, games: int, plies: int) -> None:
    model = PAWNModel(SIZES[size], jax.random.PRNGKey(0))
    kw = dict(outcome_token=PLY_LIMIT, max_seq_len=plies + 1, mask_illegal=True, batch_size=games, seed=0)
    times = {}
    for kv in (True, False):
        autoregressive_generate(model, games, use_kv_cache=kv, **{**kw, "max_seq_len": 9})  # compile
        t = time.perf_counter()
        r = autoregressive_generate(model, games, use_kv_cache=kv, **kw)
        times[kv] = time.perf_counter() - t
        print(f"generate {size} {'KV cache ' if kv else 'recompute'}: {games} games, mean {r.game_lengths.mean():.0f} plies "
              f"(cap {plies}) in {times[kv]:.2f} s")
    print(f"KV-cache speed-up at {plies} plies: {times[False] / times[True]:.1f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="tiny,base")
    p.add_argument("--games", type=int, default=64)
    p.add_argument("--max-ply", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--gen-games", type=int, default=8)
    p.add_argument("--gen-plies", type=int, default=256)
    p.add_argument("--gen-size", default="tiny")
    args = p.parse_args()
    print(f"backend: {jax.default_backend()}, devices: {jax.devices()}")
    for s in args.sizes.split(","):
        bench_eval(s, args.games, args.max_ply, args.batch_size)
    bench_generate(args.gen_size, args.gen_games, args.gen_plies)


if __name__ == "__main__":
    main()
