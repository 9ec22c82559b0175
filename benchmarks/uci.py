"""ms per move of ``pawn uci`` on a random-init model of a given shape (the model's speed does not
depend on its weights), through the real protocol.

Usage: python benchmarks/uci.py [--shape toy|small|base|large] [--lengths 8,60,250,500] [--rounds 3]

For each history length L it alternates ``position startpos moves m1..mL`` (not an extension of
the previous position: a fresh KV-cache prefill) and ``… m1..m(L+2)`` (the next move of a game:
two decode steps), ``go movetime 60000`` each, and prints the medians of the engine's own
``info string … model X ms`` (the model call alone) and of the go→bestmove wall time (which
also includes parsing the position). Prints the load average: figures compare only within a
run on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="toy", choices=["toy", "small", "base", "large"])
    ap.add_argument("--lengths", default="8,60,250,500")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    import chess
    import jax
    import numpy as np

    from pawn.checkpoint import save_checkpoint
    from pawn.config import SUPERNETS, TOY
    from pawn.model import PAWNModel

    cfg = TOY if args.shape == "toy" else SUPERNETS["large"][1][args.shape]
    d = os.path.join(tempfile.mkdtemp(), args.shape)
    save_checkpoint(d, PAWNModel(cfg, jax.random.PRNGKey(0)).params(), cfg, run_config={"prepend_outcome": False, "seq_len": 512})
    p = subprocess.Popen([sys.executable, "-m", "pawn.cli", "uci", d], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, bufsize=1)

    def send(s: str) -> None:
        p.stdin.write(s + "\n")
        p.stdin.flush()

    def until(prefix: str) -> list[str]:
        out = []
        while True:
            line = p.stdout.readline().rstrip("\n")
            out.append(line)
            if line.startswith(prefix):
                return out

    send("uci")
    until("uciok")
    t = time.time()
    send("isready")
    until("readyok")
    print(f"{args.shape} {cfg}: readyok after {time.time() - t:.1f} s; load average {os.getloadavg()[0]:.1f}")
    lengths = [int(x) for x in args.lengths.split(",")]
    rng, b, moves = np.random.default_rng(0), chess.Board(), []
    while len(moves) < max(lengths) + 2:
        if b.is_game_over():
            b, moves = chess.Board(), []
        legal = list(b.legal_moves)
        m = legal[int(rng.integers(len(legal)))]
        b.push(m)
        moves.append(m.uci())
    for L in lengths:
        pre, inc, wall = [], [], []
        for k in range(2 * (args.rounds + 1)):
            n = L if k % 2 == 0 else L + 2
            send("position startpos moves " + " ".join(moves[:n]))
            t0 = time.perf_counter()
            send("go movetime 60000")
            out = until("bestmove")
            w = (time.perf_counter() - t0) * 1e3
            ms = [float(x) for line in out for x in re.findall(r"model ([0-9.]+) ms", line)]
            if k >= 2 and ms:  # the first pair warms this length
                (pre if k % 2 == 0 else inc).append(ms[0])
                wall.append(w)
        print(f"history {L:3d}: prefill {statistics.median(pre):7.1f} ms | next move (2 decode steps) "
              f"{statistics.median(inc):7.1f} ms | go→bestmove {statistics.median(wall):7.1f} ms")
    send("quit")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
