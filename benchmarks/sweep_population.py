"""Trials/hour of a ``pawn sweep --population P`` (one vmapped program) against P sequential
trials of the same settings (issue 15).

Usage: python benchmarks/sweep_population.py [--variant toy|small] [--population 4] [--batch 8]
       [--seq 64] [--steps 20] [--chunk 5] [--rounds 2] [--val-games 16] [--json OUT]

Two measurements, both over P pretraining configs that differ in lr, weight decay and warm-up:

- ``step``: steady-state training only. The vmapped K-step chunk of P members
  (:class:`pawn.sweep.population.PopulationProgram`) against P runs of the sequential
  :class:`pawn.train.loop.TrainProgram` chunk, both compiled first; rounds interleaved
  (pop, seq, pop, seq) and the median kept. Trials/hour = 3600 / (seconds per trial-step ×
  steps per trial).
- ``end_to_end``: what a sweep sees: :func:`run_pretrain_population` (one compile, shared
  batches, P validations) against P calls of :func:`run_pretrain` (each compiles, generates its
  batches, validates and checkpoints), with validation every ``--steps/2`` steps.

The load average is printed: timings compare only within one run on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import jax
import numpy as np

from pawn.model import PAWNModel
from pawn.settings import PretrainConfig
from pawn.sweep.population import PopulationProgram, lr_table, run_pretrain_population
from pawn.sweep.trials import PrunerHook, PretrainTrialRunner
from pawn.train.loop import TrainProgram, init_state, make_mesh, make_optimizer
from pawn.train.pretrain import run_pretrain

MEMBERS = [dict(lr=3e-4, weight_decay=0.0, warmup_steps=1), dict(lr=1e-3, weight_decay=0.05, warmup_steps=2),
           dict(lr=2e-3, weight_decay=0.1, warmup_steps=0), dict(lr=5e-4, weight_decay=0.01, warmup_steps=4)]


class _NoPrune:
    intermediate_values: dict = {}

    def report(self, v, s):
        pass

    def should_prune(self):
        return False


def _configs(a, tmp):
    base = dict(variant=a.variant, batch_size=a.batch, seq_len=a.seq, val_games=a.val_games, steps_per_chunk=a.chunk,
                val_every=a.steps // 2, checkpoint_every=a.steps, total_steps=a.steps)
    return [PretrainConfig.load(**{**base, **MEMBERS[i % len(MEMBERS)], "lr": MEMBERS[i % len(MEMBERS)]["lr"] * (1 + i // 4),
                                   "out": os.path.join(tmp, f"m{i}")}) for i in range(a.population)]


def bench_step(a, cfgs) -> dict:
    base = cfgs[0]
    stored, variants = base.model_configs()
    model = PAWNModel(stored, jax.random.key(0))
    rng = np.random.default_rng(0)
    K, B, T = a.chunk, a.batch, a.seq
    chunk = {"input_ids": rng.integers(1, 4000, (K, B, T)).astype(np.int32), "targets": rng.integers(1, 4000, (K, B, T)).astype(np.int32),
             "attn_mask": np.ones((K, B, T), bool), "loss_mask": np.ones((K, B, T), bool)}
    progs = []
    for c in cfgs:
        opt = make_optimizer(c.schedule(), b1=c.beta1, b2=c.beta2, weight_decay=c.weight_decay, max_grad_norm=c.max_grad_norm)
        progs.append((TrainProgram(opt, c.schedule(), [(v, 1.0) for v in variants.values()], None, "none", make_mesh()), opt))
    pop = PopulationProgram(progs[0][0], b1=base.beta1, b2=base.beta2, max_grad_norm=base.max_grad_norm)
    table = lr_table([c.schedule() for c in cfgs], base.total_steps)

    def run_pop(state):
        state, m = pop.run_chunk(state, progs[0][0].place_chunk(chunk), table)
        jax.block_until_ready(m["loss"])
        return state

    def run_seq(states):
        out = []
        for (prog, _), st in zip(progs, states):
            st, m = prog.run_chunk(st, prog.place_chunk(chunk))
            jax.block_until_ready(m["loss"])
            out.append(st)
        return out

    pstate = pop.init(model, [c.weight_decay for c in cfgs])
    sstates = [prog.place_state(init_state(model, opt)) for prog, opt in progs]
    t = time.perf_counter(); pstate = run_pop(pstate); pop_compile = time.perf_counter() - t
    t = time.perf_counter(); sstates = run_seq(sstates); seq_compile = time.perf_counter() - t
    tp, ts = [], []
    for _ in range(a.rounds):
        t = time.perf_counter(); pstate = run_pop(pstate); tp.append(time.perf_counter() - t)
        t = time.perf_counter(); sstates = run_seq(sstates); ts.append(time.perf_counter() - t)
    P = len(cfgs)
    per_trial_step = {"population": statistics.median(tp) / (K * P), "sequential": statistics.median(ts) / (K * P)}
    return {"first_chunk_s": {"population": pop_compile, "sequential": seq_compile},
            "s_per_trial_step": per_trial_step,
            "trials_per_hour": {k: 3600 / (v * base.total_steps) for k, v in per_trial_step.items()},
            "speedup": per_trial_step["sequential"] / per_trial_step["population"]}


def bench_end_to_end(a, cfgs) -> dict:
    key = PretrainTrialRunner(cfgs[0].model_dump(mode="json")).objective_key
    dumps = [c.model_dump(mode="json") for c in cfgs]
    t = time.perf_counter()
    run_pretrain_population(dumps, [PrunerHook(_NoPrune(), lambda m: m[key]) for _ in cfgs], log=lambda m: None)
    pop = time.perf_counter() - t
    t = time.perf_counter()
    for c in cfgs:
        run_pretrain(c, log=lambda m: None, progress=False, install_signal_handlers=False)
    seq = time.perf_counter() - t
    P = len(cfgs)
    return {"wall_s": {"population": pop, "sequential": seq},
            "trials_per_hour": {"population": 3600 * P / pop, "sequential": 3600 * P / seq}, "speedup": seq / pop}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", default="toy")
    ap.add_argument("--population", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--chunk", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--val-games", type=int, default=16)
    ap.add_argument("--skip-end-to-end", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    print(f"backend {jax.default_backend()} ({jax.devices()[0].device_kind}); load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        cfgs = _configs(a, tmp)
        res = {"settings": vars(a), "backend": jax.default_backend(), "step": bench_step(a, cfgs)}
        st = res["step"]
        print(f"step (P={a.population}, {a.variant}, batch {a.batch}×{a.seq}): s/trial-step population "
              f"{st['s_per_trial_step']['population']:.4f} vs sequential {st['s_per_trial_step']['sequential']:.4f} "
              f"→ ×{st['speedup']:.2f}; trials/hour {st['trials_per_hour']['population']:.0f} vs {st['trials_per_hour']['sequential']:.0f}")
        if not a.skip_end_to_end:
            res["end_to_end"] = e = bench_end_to_end(a, cfgs)
            print(f"end to end ({a.steps} steps, val every {a.steps // 2}): population {e['wall_s']['population']:.1f} s vs "
                  f"sequential {e['wall_s']['sequential']:.1f} s → ×{e['speedup']:.2f}; trials/hour "
                  f"{e['trials_per_hour']['population']:.0f} vs {e['trials_per_hour']['sequential']:.0f}")
    print(f"load average {os.getloadavg()}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
