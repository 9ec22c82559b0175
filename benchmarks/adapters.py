"""Training-step speed of each adapter strategy against full fine-tuning of the same backbone.

Usage: python benchmarks/adapters.py [--config tiny|toy|base] [--batch 8] [--seq 128] [--steps 5]
       [--rounds 2] [--only full,lora,...] [--dtype float32]

One jitted step = forward, gradient w.r.t. the trainable partition only (``eqx.partition`` with
``AdaptedModel.trainable_filter()``; the frozen backbone closed over), clip 1.0 + AdamW update of
the trainable leaves. ``full`` trains every backbone weight with no adapter (the plain
PAWNModel forward). Strategies are timed in interleaved rounds (A, B, …, A, B, …) and the
median step time per strategy is printed with tokens/s and the ratio to ``full``; the load
average is printed because timings are only comparable within one run on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

SETTINGS = {
    "lora": {"rank": 4}, "film": {"use_output_film": True}, "bottleneck": {"bottleneck_dim": 32},
    "hybrid": {"rank": 4, "use_output_film": True}, "sparse": {"density": 0.015}, "unfreeze": {"top_n": 1},
}


def _step_fn(model, filter_spec, opt):
    trainable, frozen = eqx.partition(model, filter_spec)

    def loss(tr, tokens):
        m = eqx.combine(tr, frozen)
        logits = m(tokens[:, :-1], dtype=DTYPE, prefix_mask=True)
        lse = jax.nn.logsumexp(logits, axis=-1)
        tgt = jnp.take_along_axis(logits, tokens[:, 1:, None], axis=-1)[..., 0]
        return jnp.mean(lse - tgt)

    @jax.jit
    def step(tr, state, tokens):
        g = jax.grad(loss)(tr, tokens)
        upd, state = opt.update(g, state, tr)
        return optax.apply_updates(tr, upd), state

    return trainable, opt.init(trainable), step


def main() -> None:
    global DTYPE
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="tiny", choices=["tiny", "toy", "base"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--only", default=None, help="comma-separated subset of full," + ",".join(SETTINGS))
    p.add_argument("--dtype", default="float32")
    a = p.parse_args()
    DTYPE = a.dtype

    from pawn.config import TINY_SUPERNET, TOY, VARIANTS
    from pawn.model import PAWNModel

    cfg = {"tiny": TINY_SUPERNET, "toy": TOY, "base": VARIANTS["base"]}[a.config]
    bb = PAWNModel(cfg, jax.random.PRNGKey(0))
    names = ["full", *SETTINGS] if a.only is None else a.only.split(",")
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-4, weight_decay=0.0))
    tokens = jax.random.randint(jax.random.PRNGKey(1), (a.batch, a.seq + 1), 0, 1968)
    runs = {}
    for n in names:
        if n == "full":
            model, spec, n_train = bb, jax.tree_util.tree_map(eqx.is_array, bb), bb.num_params()
        else:
            from pawn.adapters import build_adapted

            model = build_adapted(n, SETTINGS[n], bb, jax.random.PRNGKey(2))
            spec, n_train = model.trainable_filter(), model.num_trainable_params()
        tr, st, step = _step_fn(model, spec, opt)
        t0 = time.perf_counter()
        tr, st = step(tr, st, tokens)
        jax.block_until_ready(tr)
        runs[n] = {"state": (tr, st), "step": step, "times": [], "compile_s": time.perf_counter() - t0, "n": n_train}
    for _ in range(a.rounds):
        for n in names:
            r = runs[n]
            tr, st = r["state"]
            for _ in range(a.steps):
                t0 = time.perf_counter()
                tr, st = r["step"](tr, st, tokens)
                jax.block_until_ready(tr)
                r["times"].append(time.perf_counter() - t0)
            r["state"] = (tr, st)
    print(f"config {cfg.name}  batch {a.batch} x seq {a.seq}  dtype {a.dtype}  backend {jax.default_backend()}  "
          f"loadavg {os.getloadavg()[0]:.2f}")
    base = statistics.median(runs["full"]["times"]) if "full" in runs else None
    print(f"{'strategy':<12} {'trainable':>10} {'step ms':>9} {'tokens/s':>10} {'vs full':>8} {'compile s':>9}")
    for n in names:
        med = statistics.median(runs[n]["times"])
        ratio = f"{base / med:7.2f}x" if base else "-"
        print(f"{n:<12} {runs[n]['n']:>10,} {med * 1e3:>9.1f} {a.batch * a.seq / med:>10,.0f} {ratio:>8} {runs[n]['compile_s']:>9.1f}")


DTYPE = "float32"

if __name__ == "__main__":
    main()
