"""Pretraining joint-step speed A/B: this build's attention path against the blockwise one, or
against other source trees (e.g. an older commit), interleaved.

Usage: python benchmarks/joint_step.py [--seq 64,128,256,512] [--tokens 2048] [--rounds 4]
       [--steps 3] [--tree NAME=SRC_DIR ...]

The step is the TINY supernet's joint step (its three nested variants, weight 1 each, fp32,
remat none): forward, gradient, clip 1.0 + AdamW, jitted with the state donated, on one fixed
packed batch of B = tokens / T random rows (prefix attention masks of random length, one empty
row). Without ``--tree``, two programs are built in this process and timed A, B, B, A, …:
``blockwise`` (``pawn.model.PLAIN_ATTENTION_MAX_T = 0``: blockwise custom-VJP attention at every
T; the layer loop is unrolled in both, as it is whenever remat is none since issue 27, so this
compares the attention alone) and ``auto`` (this build's choice, :func:`pawn.model.attention_path`). With ``--tree``, each round runs one process per tree in turn
(``PYTHONPATH=SRC_DIR``; the order rotates by one each round, so a load trend hits every tree
alike), so builds of other commits compare on the same machine; the first tree is the baseline.
Printed per T: the median step time over rounds, the ratio baseline/this of the medians and the
median of the per-round ratios ("paired"; >1 = faster than the baseline), XLA's compiled temp
memory and the final loss (equal across programs to float rounding). Timings are only comparable
within one run on a shared machine, so the load average is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def _batch(B: int, T: int):
    import jax.numpy as jnp

    r = np.random.default_rng(0)
    lens = r.integers(T // 2, T + 1, B)
    lens[0] = 0
    mask = np.arange(T)[None] < lens[:, None]
    ids = np.where(mask, r.integers(0, 1968, (B, T)), 0).astype(np.int32)
    return {"input_ids": jnp.asarray(ids), "attn_mask": jnp.asarray(mask),
            "targets": jnp.asarray(np.roll(ids, -1, 1)), "loss_mask": jnp.asarray(mask)}


def build(T: int, tokens: int, blockwise: bool = False):
    """``(run(n) -> (seconds per step, loss, CPU seconds per step), temp_bytes)`` for the joint step at
    seq len T."""
    import equinox as eqx
    import jax
    import optax

    import pawn.model as pm
    from pawn.config import TINY_SUPERNET, TINY_VARIANTS
    from pawn.train.losses import joint_loss

    variants = [(c, 1.0) for c in TINY_VARIANTS.values()]
    model = pm.PAWNModel(TINY_SUPERNET, jax.random.key(0))
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(3e-4, 0.9, 0.95, weight_decay=0.01))
    holder = {"s": (model, opt.init(eqx.filter(model, eqx.is_array)))}
    b = _batch(max(1, tokens // T), T)

    def step(model, st, b):
        f = lambda m: joint_loss(m, b, variants, dtype="float32", remat=False)[0]  # noqa: E731
        loss, g = eqx.filter_value_and_grad(f)(model)
        u, st = opt.update(g, st, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, u), st, loss

    saved = pm.PLAIN_ATTENTION_MAX_T if blockwise else None
    if blockwise:
        pm.PLAIN_ATTENTION_MAX_T = 0  # read at trace time
    try:
        comp = jax.jit(step, donate_argnums=(0, 1)).lower(*holder["s"], b).compile()
    finally:
        if blockwise:
            pm.PLAIN_ATTENTION_MAX_T = saved
    temp = int(comp.memory_analysis().temp_size_in_bytes)

    def run(n: int):
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(n):
            m, st, loss = comp(*holder["s"], b)
            holder["s"] = (m, st)
        jax.block_until_ready(loss)
        return (time.perf_counter() - t0) / n, float(loss), (time.process_time() - c0) / n

    run(2)  # warm-up
    return run, temp


def _report(T: int, names: list[str], times: dict, extra: dict) -> None:
    base = statistics.median(times[names[0]])
    for n in names:
        med = statistics.median(times[n])
        paired = statistics.median(b / t for b, t in zip(times[names[0]], times[n]))  # per round
        temp, loss = extra[n]
        print(f"T {T:4d}  {n:10s} median {med * 1e3:8.1f} ms  {names[0]}/this {base / med:5.2f}x (paired {paired:4.2f}x)  "
              f"temp {temp / 2**20:7.1f} MiB  loss {loss:.6f}  (rounds: {', '.join(f'{t * 1e3:.0f}' for t in times[n])})",
              flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", default="64,128,256,512")
    p.add_argument("--tokens", type=int, default=2048, help="B·T per step")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=3, help="steps per timed round")
    p.add_argument("--tree", action="append", default=[], help="NAME=SRC_DIR (repeatable; first = baseline)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    seqs = [int(t) for t in a.seq.split(",")]
    if a.worker:  # one tree, one T: warm up, time one round, print JSON
        run, temp = build(seqs[0], a.tokens)
        dt, loss, cpu = run(a.steps)
        print(json.dumps({"s": dt, "loss": loss, "temp": temp, "cpu": cpu}))
        return
    print(f"joint step TINY supernet, B·T = {a.tokens}, fp32, remat none; {a.rounds} rounds × {a.steps} steps")
    for T in seqs:
        times: dict[str, list] = {}
        extra: dict[str, tuple] = {}
        if a.tree:
            trees = [t.split("=", 1) for t in a.tree]
            for r in range(a.rounds):
                for name, src in trees[r % len(trees):] + trees[:r % len(trees)]:  # rotated: a load trend hits all alike
                    env = {**os.environ, "PYTHONPATH": os.path.abspath(src), "JAX_PLATFORMS": "cpu"}
                    out = subprocess.run([sys.executable, __file__, "--worker", "--seq", str(T), "--tokens", str(a.tokens),
                                          "--steps", str(a.steps)], env=env, capture_output=True, text=True)
                    if out.returncode:
                        sys.exit(f"error: tree {name} ({src}) failed at T {T}:\n{out.stderr[-2000:]}")
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    times.setdefault(name, []).append(r["s"])
                    extra[name] = (r["temp"], r["loss"])
            names = [n for n, _ in trees]
        else:
            names = ["blockwise", "auto"]
            runs = {}
            for n in names:
                runs[n], temp = build(T, a.tokens, blockwise=n == "blockwise")
                extra[n] = (temp, float("nan"))
            for r in range(a.rounds):
                for n in (names if r % 2 == 0 else names[::-1]):
                    dt, loss, _ = runs[n](a.steps)
                    times.setdefault(n, []).append(dt)
                    extra[n] = (extra[n][0], loss)
        _report(T, names, times, extra)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
