"""Train steps of PAWN against the public reference (v1 PyTorch or v2 JAX), side by side, interleaved.

Usage:
    python benchmarks/reference_ab.py --ref-src /path/to/reference --ref-python /path/to/venv/bin/python \
        [--ref-path DIR] [--step adapter|pretrain] [--strategies lora,bottleneck] [--shape 16x128,32x256]
        [--config tiny|base] [--loss legal|plain] [--rounds 4] [--steps 8]

The reference is read from ``--ref-src``: v1 is the PyTorch tree (github ``thomas-schweich/PAWN``
``main``), v2 its JAX / Equinox / Optax rewrite (branch ``jax_migration``; told apart by
``pawn/adapter_trainer.py``). Both interpreters should carry the same JAX, Equinox and Optax
versions for a v2 comparison.

Each round runs one fresh process per side (order alternating A, B, B, A …) that builds the step,
warms it up (the reference: two steps; PAWN: one K-step chunk, compile included) and times
``--steps`` more (PAWN: rounded up to whole K-step chunks), printing seconds per step (wall and
process CPU time, all threads) and the last loss. Printed per strategy and shape: the median tokens/s (B·T
positions per second) of each side, the ratio of the medians and the median of the per-round
ratios (> 1 = PAWN faster), wall and CPU time.

The two steps do the same work on batches of one synthetic generator (``adapter_step.py``'s, seed 0:
B rows of random action ids, prefix masks of random length in [T/2, T], one row empty; legal sets =
the target plus ~30 random actions; PAWN cycles through its chunk's K batches, the reference trains
on the first of them, so the printed losses differ), the TINY supernet's shape (d_model 192, 4 layers, 3 heads, d_ff 768; ``--config``),
fp32, grad clip 1.0 and AdamW (β 0.9/0.999, no decay); against v1 both apply the hard legal-masked
cross-entropy (against v2 see below):

* PAWN: ``benchmarks/adapter_step.py --worker`` — ``pawn adapt``'s own compiled K-step chunk
  (``--k``, default 4 steps a call), the legal sets bit-packed as the trainer gets them.
* the reference: its own modules, imported from ``--ref-src`` (``pawn.model.PAWNCLM``,
  ``pawn.adapters.lora.LoRACLM`` rank 4 on q, k, v, o / ``pawn.adapters.bottleneck.BottleneckCLM``
  width 8, ``pawn.adapter_training.build_compiled_step`` eager as on a CPU, its training loop's
  per-step calls: ``LegalMaskBuilder.scatter`` of the flat legal indices, ``zero_grad``,
  ``backward``, ``clip_grad_norm_``, ``AdamW.step``). Its Rust engine must be importable as
  ``chess_engine`` from ``--ref-path`` or the reference interpreter's own packages.

The v2 reference (its own ``pawn.model.init_model``, ``pawn.adapters.lora.init_lora_model`` rank 4
on q, k, v, o / ``pawn.adapters.bottleneck.init_bottleneck_model`` width 8,
``pawn.trainer.make_optimizer`` with the same clip and AdamW, ``pawn.adapter_trainer``'s
``init_adapter_state``, ``make_adapter_train_step`` and ``make_adapter_scan_step``) trains the same
K-step chunks as PAWN, K steps a compiled call. It has only the plain cross-entropy, so against v2
``--loss`` defaults to ``plain`` on PAWN's side too (``--loss legal`` times PAWN's default loss
against it); against v1 it defaults to ``legal``, the loss both apply. ``--config base`` uses the
published base shape (d_model 512, 8 layers, 8 heads, d_ff 2,048) instead of the TINY one.

``--step pretrain`` times the TINY supernet's pretraining step instead: PAWN's joint step of its
three nested variants (``benchmarks/joint_step.py --worker``: small d 64 × 2 layers, base d 128 × 3,
large d 192 × 4, weight 1 each, fp32, clip 1.0 + AdamW 3e-4, β 0.9/0.95, decay 0.01, state donated)
against the reference training three ``PAWNCLM`` of those shapes on the same batch, each as its
trainer's ``train_step`` + ``optimizer_step`` do it (``forward_train``, ``backward``,
``clip_grad_norm_``, ``AdamW.step``, ``zero_grad``). The same FLOPs: a nested variant's forward is
its own; the reference's optimizer updates three models' moments where PAWN's updates one supernet's.
The batch: B rows (``--shape BxT``) of random action ids with prefix masks of random length in [T/2, T], one
row empty (``joint_step.py``'s). Against v2: its own supernet joint step (``pawn.trainer``'s
``init_train_state`` and ``make_train_step`` over ``VariantSpec`` of its ``TINY_VARIANTS``, clip 1.0
+ AdamW 3e-4, β 0.9/0.95, decay 0.01), one jitted call per step as PAWN's worker.

Not timed on PAWN's side: moving the chunk to the device (``place_chunk``, done before the clock
starts); timed on the reference's: its per-step legal-mask scatter, as its loop runs it. The
reference's pretraining step leaves out its trainer's grad-norm logging and LR scheduler call.

The v1 reference's interpreter needs torch, numpy, wandb and polars (its ``adapter_training``
imports them), v2's JAX, Equinox, Optax and numpy; both need the reference's engine as
``chess_engine`` (``--ref-path``: the reference's PYTHONPATH is ``--ref-src``, ``--ref-path``, then this
interpreter's PYTHONPATH, so what only that names, as JAX on a TPU VM, stays importable). Before any
round the reference's modules are imported once under ``--ref-python`` (a one-line error if they do not
import); PAWN's side runs under this interpreter.
Both sides run on ``JAX_PLATFORMS`` (default ``cpu``; ``JAX_PLATFORMS=cuda`` on an NVIDIA GPU, where
the v1 reference's eager PyTorch step stays on the CPU). Threads: both use every core (torch's
intra-op pool, XLA's CPU pool; the reference's thread count is printed); both run with
``OPENBLAS_NUM_THREADS=1`` so numpy's idle OpenBLAS threads take no core (torch's CPU wheels use
MKL/oneDNN, not OpenBLAS, on x86). Timings on a shared machine drift: only the ratios of one run
mean anything.
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

HERE = os.path.dirname(os.path.abspath(__file__))


def synthetic_batch(B: int, T: int, K: int, V: int = 1980):
    """The reference's batch: step 0 of ``adapter_step.py``'s K-step chunk (same generator, seed 0,
    same draws): ``(ids, targets, mask, legal)`` with ids/targets int64 [B, T], mask bool [B, T] and
    legal bool [B, T, V]."""
    import numpy as np

    r = np.random.default_rng(0)
    lens = r.integers(T // 2, T + 1, (K, B))
    lens[:, 0] = 0
    mask = np.arange(T)[None, None] < lens[..., None]
    ids = np.where(mask, r.integers(0, 1968, (K, B, T)), 0)
    targets = np.roll(ids, -1, 2)
    legal = r.random((K, B, T, V)) < 30 / 1968
    np.put_along_axis(legal, targets[..., None], True, axis=-1)
    return ids[0], targets[0], mask[0], legal[0]


def reference_worker(strategy: str, B: int, T: int, steps: int, K: int, config: str) -> dict:
    """One timed round of the v1 (PyTorch) reference's adapter step (runs under the reference's interpreter)."""
    import numpy as np
    import torch

    from pawn.adapter_training import build_compiled_step
    from pawn.config import CLMConfig
    from pawn.lichess_data import LegalMaskBuilder
    from pawn.model import PAWNCLM

    torch.manual_seed(0)
    d, L, h, f = SHAPES[config]
    backbone = PAWNCLM(CLMConfig(d_model=d, n_layers=L, n_heads=h, d_ff=f))
    if strategy == "lora":
        from pawn.adapters.lora import LoRACLM

        model = LoRACLM(backbone, rank=4, attn_targets="qkvo")
        params = model.lora_parameters()
    elif strategy == "bottleneck":
        from pawn.adapters.bottleneck import BottleneckCLM

        model = BottleneckCLM(backbone, bottleneck_dim=8)
        params = model.adapter_parameters()
    else:
        raise SystemExit(f"error: the reference side has no strategy {strategy!r} here (lora, bottleneck)")
    model.train()
    step_fn = build_compiled_step(model, apply_legal_mask=True, illegal_penalty=0.0, amp_dtype=None,
                                  use_compile=False)
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), weight_decay=0.0)
    ids, targets, mask, legal = synthetic_batch(B, T, K)
    ids, tgt, msk = torch.from_numpy(ids), torch.from_numpy(targets), torch.from_numpy(mask)
    flat = torch.from_numpy(np.flatnonzero(legal.reshape(-1)).astype(np.int64))
    builder = LegalMaskBuilder(B, T, vocab_size=legal.shape[-1])

    def one() -> float:
        legal_mask = builder.scatter(flat, B, T)
        loss, _ = step_fn(ids, msk, legal_mask, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return float(loss.detach())

    for _ in range(2):
        one()
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        loss = one()
    return {"s": (time.perf_counter() - t0) / steps, "cpu": (time.process_time() - c0) / steps, "loss": loss,
            "threads": torch.get_num_threads()}


def reference_pretrain_worker(B: int, T: int, steps: int) -> dict:
    """One timed round of the reference's pretraining step on the TINY supernet's three shapes."""
    import numpy as np
    import torch

    from pawn.config import CLMConfig
    from pawn.model import PAWNCLM

    torch.manual_seed(0)
    shapes = [(64, 2, 1, 256), (128, 3, 2, 512), (192, 4, 3, 768)]
    models = [PAWNCLM(CLMConfig(d_model=d, n_layers=L, n_heads=h, d_ff=f)) for d, L, h, f in shapes]
    opts = [torch.optim.AdamW(m.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.01) for m in models]
    r = np.random.default_rng(0)
    lens = r.integers(T // 2, T + 1, B)
    lens[0] = 0
    mask = np.arange(T)[None] < lens[:, None]
    ids = np.where(mask, r.integers(0, 1968, (B, T)), 0)
    ids_t, msk, tgt = torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(np.roll(ids, -1, 1))

    def one() -> float:
        total = 0.0
        for m, o in zip(models, opts):
            m.train()
            loss, _ = m.forward_train(ids_t, msk, tgt)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            o.step()
            o.zero_grad(set_to_none=True)
            total += float(loss.detach())
        return total

    for _ in range(2):
        one()
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        loss = one()
    return {"s": (time.perf_counter() - t0) / steps, "cpu": (time.process_time() - c0) / steps, "loss": loss,
            "threads": torch.get_num_threads()}


SHAPES = {"tiny": (192, 4, 3, 768), "base": (512, 8, 8, 2048)}
"""d_model, n_layers, n_heads, d_ff of ``--config``'s backbone (spec §2: the TINY supernet, base)."""


def _timed_chunks(scan, state, chunk, K: int, steps: int):
    """Warm up one K-step chunk (compile included), then time ⌈steps / K⌉ more; returns the final
    ``(state, result dict)``."""
    import jax

    state, m = scan(state, chunk)
    jax.block_until_ready(m)
    n = -(-steps // K)
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        state, m = scan(state, chunk)
    jax.block_until_ready(m)
    return {"s": (time.perf_counter() - t0) / (n * K), "cpu": (time.process_time() - c0) / (n * K),
            "loss": float(m["loss"][-1])}


def reference_v2_worker(strategy: str, B: int, T: int, steps: int, K: int, config: str) -> dict:
    """One timed round of the v2 (JAX) reference's adapter chunk (runs under the reference's interpreter)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from pawn.adapter_trainer import init_adapter_state, make_adapter_scan_step, make_adapter_train_step
    from pawn.config import ModelConfig
    from pawn.model import init_model
    from pawn.trainer import make_optimizer

    d, L, h, f = SHAPES[config]
    backbone = init_model(ModelConfig(d_model=d, n_layers=L, n_heads=h, d_ff=f), jax.random.key(0))
    if strategy == "lora":
        from pawn.adapters.lora import LoRAConfig, adapter_filter, init_lora_model

        model = init_lora_model(backbone, LoRAConfig(rank=4, targets=("q", "k", "v", "o")), jax.random.key(1))
    else:
        from pawn.adapters.bottleneck import BottleneckConfig, adapter_filter, init_bottleneck_model

        model = init_bottleneck_model(backbone, BottleneckConfig(bottleneck_dim=8), jax.random.key(1))
    opt = make_optimizer(1e-3, weight_decay=0.0, b1=0.9, b2=0.999, max_grad_norm=1.0)
    state, frozen = init_adapter_state(model, opt, adapter_filter_fn=adapter_filter)
    scan = make_adapter_scan_step(make_adapter_train_step(opt, frozen), K)
    r = np.random.default_rng(0)  # adapter_step.py's chunk generator (the legal sets are not drawn: no use here)
    lens = r.integers(T // 2, T + 1, (K, B))
    lens[:, 0] = 0
    mask = np.arange(T)[None, None] < lens[..., None]
    ids = np.where(mask, r.integers(0, 1968, (K, B, T)), 0).astype(np.int32)
    chunk = (jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(np.roll(ids, -1, 2)), jnp.asarray(mask))
    return {**_timed_chunks(scan, state, chunk, K, steps), "threads": f"jax {jax.__version__}"}


def reference_v2_pretrain_setup(B: int, T: int):
    """``(step, state, batch)`` of the v2 (JAX) reference's supernet joint step on its TINY supernet, with
    ``joint_step.py``'s batch (runs under the reference's interpreter)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from pawn.config import TINY_SUPERNET, TINY_VARIANTS
    from pawn.model import init_model
    from pawn.trainer import VariantSpec, init_train_state, make_optimizer, make_train_step

    opt = make_optimizer(3e-4, weight_decay=0.01, b1=0.9, b2=0.95, max_grad_norm=1.0)
    state = init_train_state(init_model(TINY_SUPERNET, jax.random.key(0)), opt)
    step = make_train_step(opt, tuple(VariantSpec(c) for c in TINY_VARIANTS.values()))
    r = np.random.default_rng(0)  # joint_step.py's batch
    lens = r.integers(T // 2, T + 1, B)
    lens[0] = 0
    mask = np.arange(T)[None] < lens[:, None]
    ids = np.where(mask, r.integers(0, 1968, (B, T)), 0).astype(np.int32)
    batch = (jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(np.roll(ids, -1, 1)), jnp.asarray(mask))
    return step, state, batch


def reference_v2_pretrain_worker(B: int, T: int, steps: int) -> dict:
    """One timed round of the v2 (JAX) reference's supernet joint step on its TINY supernet."""
    import jax

    step, state, batch = reference_v2_pretrain_setup(B, T)
    for _ in range(2):
        state, m = step(state, batch)
    jax.block_until_ready(m)
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        state, m = step(state, batch)
    jax.block_until_ready(m)
    return {"s": (time.perf_counter() - t0) / steps, "cpu": (time.process_time() - c0) / steps,
            "loss": float(m["loss"]), "threads": f"jax {jax.__version__}"}


def _run(cmd: list[str], env: dict, what: str) -> dict:
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"error: {what} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ref-src", help="the reference's source tree (holds its pawn/ package)")
    p.add_argument("--ref-python", help="an interpreter with the reference's dependencies")
    p.add_argument("--ref-path", default="", help="extra PYTHONPATH for the reference (its chess_engine package)")
    p.add_argument("--step", default="adapter", choices=["adapter", "pretrain"])
    p.add_argument("--strategies", default="lora,bottleneck", help="adapter strategies (--step adapter)")
    p.add_argument("--shape", default="16x128", help="comma list of BxT")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=8, help="timed steps per round (PAWN: rounded up to whole chunks)")
    p.add_argument("--k", type=int, default=4, help="steps per compiled chunk (PAWN; the v2 reference's adapter chunk)")
    p.add_argument("--config", default="tiny", choices=sorted(SHAPES), help="adapter backbone shape")
    p.add_argument("--loss", default=None, choices=["legal", "plain"],
                   help="PAWN's adapter loss (default: the reference's: legal for v1, plain for v2)")
    p.add_argument("--ref-worker", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    shapes = a.shape.split(",")
    if any(not re.fullmatch(r"[1-9]\d*x[1-9]\d*", s) for s in shapes):
        sys.exit(f"error: --shape takes BxT items with B, T ≥ 1 (e.g. 16x128), got {a.shape!r}")
    if min(a.rounds, a.steps, a.k) < 1:
        sys.exit(f"error: --rounds, --steps and --k must be ≥ 1, got {a.rounds}, {a.steps}, {a.k}")
    bad = set(a.strategies.split(",")) - {"lora", "bottleneck"}
    if a.step == "adapter" and bad:
        sys.exit(f"error: --strategies takes lora and bottleneck (the reference's counterparts here), got {sorted(bad)}")
    if a.ref_worker:
        B, T = map(int, shapes[0].split("x"))
        kind, what = a.ref_worker.split(":")
        if kind == "v2":
            res = (reference_v2_pretrain_worker(B, T, a.steps) if what == "pretrain"
                   else reference_v2_worker(what, B, T, a.steps, a.k, a.config))
        else:
            res = (reference_pretrain_worker(B, T, a.steps) if what == "pretrain"
                   else reference_worker(what, B, T, a.steps, a.k, a.config))
        print(json.dumps(res))
        return
    if not (a.ref_src and a.ref_python):
        sys.exit("error: --ref-src and --ref-python are required")
    if not os.path.isfile(os.path.join(a.ref_src, "pawn", "model.py")):
        sys.exit(f"error: --ref-src {a.ref_src}: no pawn/model.py there (give the reference's source tree)")
    if not (os.path.isfile(a.ref_python) and os.access(a.ref_python, os.X_OK)):
        sys.exit(f"error: --ref-python {a.ref_python}: not an executable file")
    kind = "v2" if os.path.isfile(os.path.join(a.ref_src, "pawn", "adapter_trainer.py")) else "v1"
    loss = a.loss or ("plain" if kind == "v2" else "legal")
    if a.step == "adapter" and kind == "v1" and loss != "legal":
        sys.exit("error: the v1 reference's adapter step applies the legal mask: --loss plain has no counterpart there")
    platform = os.environ.get("JAX_PLATFORMS") or "cpu"  # JAX_PLATFORMS=cuda times both sides on a GPU
    # the reference's tree and --ref-path first (its pawn shadows any other), then the caller's PYTHONPATH, which on
    # a TPU VM names the machine's JAX, numpy and scipy
    ref_path = (os.path.abspath(a.ref_src), a.ref_path, os.environ.get("PYTHONPATH", ""))
    ref_env = {**os.environ, "PYTHONPATH": os.pathsep.join(x for x in ref_path if x),
               "OPENBLAS_NUM_THREADS": "1", "JAX_PLATFORMS": platform}
    pawn_env = {**os.environ, "JAX_PLATFORMS": platform, "OPENBLAS_NUM_THREADS": "1"}
    chunks = -(-a.steps // a.k)
    probe = ("import pawn.adapter_trainer, pawn.trainer, pawn.model, chess_engine" if kind == "v2"
             else "import torch, pawn.model, chess_engine")
    check = subprocess.run([a.ref_python, "-c", probe], env=ref_env, capture_output=True, text=True)
    if check.returncode:
        last = (check.stderr.strip().splitlines() or ["no output"])[-1]
        sys.exit(f"error: the {kind} reference does not import under {a.ref_python} with PYTHONPATH "
                 f"{ref_env['PYTHONPATH']}: {last}")
    if a.step == "pretrain":
        print(f"pretraining step against the {kind} reference, TINY supernet's three variants, fp32; {a.steps} steps "
              f"a round; {a.rounds} rounds, fresh processes, order alternating")
    else:
        ref = f"K {a.k} × {chunks} chunks" if kind == "v2" else f"{a.steps} eager steps"
        print(f"adapter step against the {kind} reference, {a.config} shape, fp32, PAWN {loss} loss (reference: "
              f"{'plain' if kind == 'v2' else 'legal'}); PAWN K {a.k} × {chunks} chunks, reference {ref}; "
              f"{a.rounds} rounds, fresh processes, order alternating")
    for strategy in (["pretrain"] if a.step == "pretrain" else a.strategies.split(",")):
        for shape in shapes:
            B, T = map(int, shape.split("x"))
            res: dict[str, list[dict]] = {"pawn": [], "reference": []}
            for r in range(a.rounds):
                for side in (("pawn", "reference") if r % 2 == 0 else ("reference", "pawn")):
                    if side == "pawn" and strategy == "pretrain":
                        cmd = [sys.executable, os.path.join(HERE, "joint_step.py"), "--worker", "--seq", str(T),
                               "--tokens", str(B * T), "--steps", str(a.steps)]
                        res[side].append(_run(cmd, pawn_env, f"PAWN pretrain {shape}"))
                    elif side == "pawn":
                        cmd = [sys.executable, os.path.join(HERE, "adapter_step.py"), "--worker", "--strategies",
                               strategy, "--shape", shape, "--loss", loss, "--k", str(a.k), "--chunks", str(chunks),
                               "--config", a.config]
                        res[side].append(_run(cmd, pawn_env, f"PAWN {strategy} {shape}"))
                    else:
                        cmd = [a.ref_python, os.path.abspath(__file__), "--ref-worker", f"{kind}:{strategy}",
                               "--shape", shape, "--steps", str(a.steps), "--k", str(a.k), "--config", a.config]
                        res[side].append(_run(cmd, ref_env, f"reference {strategy} {shape}"))
                    x = res[side][-1]
                    threads = f"  {x['threads']}{' torch threads' if kind == 'v1' else ''}" if "threads" in x else ""
                    print(f"  round {r + 1} {side:<9} {strategy:<10} B{B} T{T}  {x['s'] * 1e3:8.1f} ms/step  "
                          f"{x['cpu'] * 1e3:8.1f} CPU-ms/step  loss {x['loss']:.4f}{threads}", flush=True)
            wall = {k: [x["s"] for x in v] for k, v in res.items()}
            cpu = {k: [x["cpu"] for x in v] for k, v in res.items()}
            med = {k: statistics.median(v) for k, v in wall.items()}
            paired = statistics.median(rw / pw for rw, pw in zip(wall["reference"], wall["pawn"]))
            # process CPU time can read 0 on an accelerator (the host only launches the step): no ratio then
            pairs = [rc / pc for rc, pc in zip(cpu["reference"], cpu["pawn"]) if pc > 0]
            cpu_paired = statistics.median(pairs) if pairs else float("nan")
            print(f"{strategy:<10} B{B:<3} T{T:<4} PAWN {B * T / med['pawn']:9,.0f} tok/s  reference "
                  f"{B * T / med['reference']:9,.0f} tok/s  PAWN/reference {med['reference'] / med['pawn']:.2f}x "
                  f"(paired {paired:.2f}x; CPU time {cpu_paired:.2f}x)", flush=True)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
