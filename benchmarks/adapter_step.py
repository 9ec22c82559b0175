"""Adapter train-step speed A/B (``pawn adapt``'s compiled chunk), interleaved, between source
trees (e.g. today's main and this build) or between loss variants of this build.

Usage: python benchmarks/adapter_step.py [--strategies lora,bottleneck] [--shape 16x128,32x256]
       [--config tiny|base] [--rounds 4] [--chunks 2] [--k 4] [--loss legal,plain]
       [--tree NAME=SRC_DIR ...]

The step is exactly ``pawn adapt``'s: :class:`pawn.train.loop.TrainProgram` with
:func:`pawn.train.adapter_step.make_adapter_loss` (fp32, remat none), the trainable half in the donated
state and the frozen backbone as a separate argument, clip 1.0 + AdamW (β 0.9/0.999, no decay),
K steps per compiled chunk. Strategies at their defaults: ``lora`` = rank 4 on q, k, v, o of
every layer; ``bottleneck`` = width 8 after attention and FFN of every layer. The batch is fixed
and synthetic: B rows of random action ids with prefix masks of random length in [T/2, T] (one
row empty), legal sets = the target plus ~30 random actions (bit-packed as the trainer gets
them). ``--loss legal`` is the hard legal-masked loss (PAWN's default), ``plain`` the unmasked
cross-entropy. ``--config tiny`` is the tiny supernet's full shape (d 192, 4 layers), ``base``
the published base shape.

Without ``--tree``, every (strategy, shape, loss) program is built in this process and the
rounds run them in rotated order; ``--model-flag NAME`` builds each twice, with the boolean
``pawn.model.NAME`` (read at trace time) False, the baseline, and True. With ``--tree``, each round runs one worker process per tree
(``PYTHONPATH=SRC_DIR``, order rotated by one per round) that builds, warms up and times one
round, so builds of other commits compare on the same machine; the first tree is the baseline.
Printed per program: median seconds per step over rounds, tokens/s (B·T padded positions), the
ratio of the medians and the median of the per-round ratios against the baseline (>1 = faster),
the same paired ratio of process CPU time (all threads; steadier than wall time when other jobs
share the cores) and the last loss (equal across trees to float rounding). Without ``--tree``
and with both losses, the legal-masked / plain step-time ratio per strategy and shape ends the
output. Timings are only comparable within one run on a shared machine, so the load average is
printed too.

Measured on the shared 2-core CPU (AMD EPYC, load 4–11 from other jobs, so wall-time ratios
swing ±30 %; the CPU-time ratios are steadier), fp32, TINY supernet backbone (d 192, 4 layers,
2.77 M parameters), K 2, 4–6 rounds, at commit ``7afc1e6`` (the step code of ``main``):

* legal-masked / plain step, paired CPU time: lora 1.14 (B16 T128), 1.00 (B32 T256);
  bottleneck 1.05, 1.03 (wall 1.18, 0.85, 1.02, 1.05) — within the 15 % target.
* lora B16 T128: ≈ 530 CPU-ms per step for 25.1 GFLOP (4·N + 12·L·T·d per token), ≈ 47 GFLOP per
  CPU-second, about half the ≈ 92 GFLOP per CPU-second a lone ``[2048, 192] @ [192, 192…1980]``
  matmul reaches here; bottleneck ≈ 490 CPU-ms.
* ``--model-flag FUSED_PROJECTIONS`` (a switch added to ``pawn.model`` for this trial and removed
  again: q/k/v and gate/up as one matmul each with concatenated weights): lora 1.09× wall (paired 1.15×) but 0.94× CPU time, bottleneck 0.97× wall,
  0.95× CPU time, identical losses — no gain.
* ``--tree main=… --tree this=…`` with the same step code on both sides (3 rounds, B16 T128): CPU
  time 0.99× (lora) and 1.04× (bottleneck), wall paired 0.97× and 0.88×, identical losses — the
  noise floor of a cross-process comparison on that machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np


def _chunk(K: int, B: int, T: int) -> dict:
    r = np.random.default_rng(0)
    lens = r.integers(T // 2, T + 1, (K, B))
    lens[:, 0] = 0
    mask = np.arange(T)[None, None] < lens[..., None]
    ids = np.where(mask, r.integers(0, 1968, (K, B, T)), 0).astype(np.int32)
    targets = np.roll(ids, -1, 2)
    legal = r.random((K, B, T, 1980)) < 30 / 1968
    np.put_along_axis(legal, targets[..., None], True, axis=-1)
    return {"input_ids": ids, "targets": targets, "loss_mask": mask, "attn_mask": mask,
            "legal": np.packbits(legal, axis=-1, bitorder="little")}


def build(strategy: str, B: int, T: int, K: int, loss_kind: str, config: str, flag: tuple = ()):
    """``run(n_chunks) -> (seconds per step, last loss, CPU seconds per step)`` for one adapter
    program; ``flag`` = ``(NAME, value)`` sets ``pawn.model.NAME`` while the program is traced."""
    import jax

    import pawn.model as pm

    from pawn.adapters import build_adapted
    from pawn.config import TINY_SUPERNET, VARIANTS
    from pawn.model import PAWNModel
    from pawn.schedules import build_schedule
    from pawn.train.adapter_step import make_adapter_loss
    from pawn.train.loop import TrainProgram, init_partitioned_state, make_mesh, make_optimizer

    cfg = TINY_SUPERNET if config == "tiny" else VARIANTS["base"]
    backbone = PAWNModel(cfg, jax.random.key(0))
    model = build_adapted(strategy, None, backbone, jax.random.key(1))
    sched = build_schedule("constant", 1e-3, 10**6, 0)
    opt = make_optimizer(sched, b1=0.9, b2=0.999, weight_decay=0.0, max_grad_norm=1.0)
    loss = make_adapter_loss(legal_mask=loss_kind == "legal", illegal_penalty=0.0, dtype="float32")
    prog = TrainProgram.of(opt, sched, cfg, dtype="float32", loss_fn=loss)
    st, frozen = init_partitioned_state(model, opt, model.trainable_filter())
    holder = {"state": prog.place_state(st)}
    frozen = prog.place_frozen(frozen)
    host = _chunk(K, B, T)
    if loss_kind != "legal":
        host = {k: v for k, v in host.items() if k != "legal"}

    def run(n: int):
        chunks = [prog.place_chunk(host) for _ in range(n)]
        jax.block_until_ready(chunks)
        c0, t0 = time.process_time(), time.perf_counter()
        for c in chunks:
            holder["state"], m = prog.run_chunk(holder["state"], c, frozen)
        jax.block_until_ready(m)
        return (time.perf_counter() - t0) / (n * K), float(m["loss"][-1]), (time.process_time() - c0) / (n * K)

    if flag:
        saved = getattr(pm, flag[0])
        setattr(pm, flag[0], flag[1])
    try:
        run(1)  # compile + warm-up
    finally:
        if flag:
            setattr(pm, flag[0], saved)
    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--strategies", default="lora,bottleneck")
    p.add_argument("--shape", default="16x128", help="comma list of BxT")
    p.add_argument("--config", default="tiny", choices=["tiny", "base"])
    p.add_argument("--loss", default="legal", help="comma list of legal, plain")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--chunks", type=int, default=2, help="chunks per timed round")
    p.add_argument("--k", type=int, default=4, help="steps per chunk")
    p.add_argument("--tree", action="append", default=[], help="NAME=SRC_DIR (repeatable; first = baseline)")
    p.add_argument("--model-flag", default=None,
                   help="NAME of a boolean pawn.model switch read at trace time (e.g. FUSED_ATTENTION, or one added "
                        "to try a change): "
                        "each program is built with it False (the baseline) and True, in this process")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.model_flag:
        import pawn.model as pm

        if not isinstance(getattr(pm, a.model_flag, None), bool):
            sys.exit(f"error: --model-flag {a.model_flag}: pawn.model has no boolean switch of that name")
    bad = [x for x in a.loss.split(",") if x not in ("legal", "plain")]
    bad += [x for x in a.shape.split(",") if not re.fullmatch(r"\d+x\d+", x)]
    if bad:
        sys.exit(f"error: --loss takes legal,plain and --shape BxT items (e.g. 16x128); got {', '.join(bad)}")
    progs = [(s, *map(int, sh.split("x")), lo) for s in a.strategies.split(",") for sh in a.shape.split(",")
             for lo in a.loss.split(",")]
    if a.worker:
        s, B, T, lo = progs[0]
        dt, loss, cpu = build(s, B, T, a.k, lo, a.config)(a.chunks)
        print(json.dumps({"s": dt, "loss": loss, "cpu": cpu}))
        return
    print(f"adapter step, {a.config} backbone, fp32, remat none, K {a.k}; {a.rounds} rounds × {a.chunks} chunks")
    times: dict = {}
    cpus: dict = {}
    losses: dict = {}
    if a.tree:
        trees = [t.split("=", 1) for t in a.tree]
        names = [n for n, _ in trees]
        for prog in progs:
            s, B, T, lo = prog
            for r in range(a.rounds):
                for name, src in trees[r % len(trees):] + trees[:r % len(trees)]:
                    env = {**os.environ, "PYTHONPATH": os.path.abspath(src), "JAX_PLATFORMS": "cpu"}
                    out = subprocess.run([sys.executable, __file__, "--worker", "--strategies", s, "--shape", f"{B}x{T}",
                                          "--loss", lo, "--k", str(a.k), "--chunks", str(a.chunks), "--config", a.config],
                                         env=env, capture_output=True, text=True)
                    if out.returncode:
                        sys.exit(f"error: tree {name} ({src}) failed on {prog}:\n{out.stderr[-2000:]}")
                    res = json.loads(out.stdout.strip().splitlines()[-1])
                    times.setdefault((prog, name), []).append(res["s"])
                    cpus.setdefault((prog, name), []).append(res["cpu"])
                    losses[(prog, name)] = res["loss"]
        rows = [(prog, names) for prog in progs]
    else:
        names = [f"{a.model_flag}=0", f"{a.model_flag}=1"] if a.model_flag else ["this"]
        flags = {n: ((a.model_flag, n.endswith("=1")) if a.model_flag else ()) for n in names}
        runs = {(prog, n): build(prog[0], prog[1], prog[2], a.k, prog[3], a.config, flags[n]) for prog in progs for n in names}
        keys = list(runs)
        for r in range(a.rounds):
            for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                dt, loss, cpu = runs[key](a.chunks)
                times.setdefault(key, []).append(dt)
                cpus.setdefault(key, []).append(cpu)
                losses[key] = loss
        rows = [(prog, names) for prog in progs]
        # the legal/plain ratio per strategy and shape, when both were run
    for prog, names in rows:
        s, B, T, lo = prog
        base = times[(prog, names[0])]
        for n in names:
            t = times[(prog, n)]
            med = statistics.median(t)
            paired = statistics.median(b / x for b, x in zip(base, t))
            cb, cn = cpus[(prog, names[0])], cpus[(prog, n)]
            cpu_paired = statistics.median(b / x for b, x in zip(cb, cn))
            print(f"{s:<11} B{B:<3} T{T:<4} {lo:<6} {n:<10} {med * 1e3:8.1f} ms/step  {B * T / med:9,.0f} tok/s  "
                  f"{names[0]}/this {statistics.median(base) / med:5.2f}x (paired {paired:4.2f}x; CPU time {cpu_paired:4.2f}x, "
                  f"{statistics.median(cn) * 1e3:.0f} CPU-ms/step)  loss {losses[(prog, n)]:.6f}  "
                  f"(rounds: {', '.join(f'{x * 1e3:.0f}' for x in t)})", flush=True)
    if not a.tree and not a.model_flag:
        for s in a.strategies.split(","):
            for sh in a.shape.split(","):
                B, T = map(int, sh.split("x"))
                k_l, k_p = ((s, B, T, "legal"), "this"), ((s, B, T, "plain"), "this")
                if k_l in times and k_p in times:
                    ratio = statistics.median(l / p for l, p in zip(times[k_l], times[k_p]))
                    rc = statistics.median(l / p for l, p in zip(cpus[k_l], cpus[k_p]))
                    print(f"{s:<11} B{B:<3} T{T:<4} legal-masked / plain step time (paired): wall {ratio:.3f}, CPU time {rc:.3f}")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
