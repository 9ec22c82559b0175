"""Accelerator check of the published recipe: large supernet, batch 256 × 512 plies, bf16, on a GPU or a TPU.

Run from the repository root on a machine with an accelerator (never part of CI):

    PYTHONPATH=src python3 benchmarks/accel_check.py        # or: benchmarks/accel_check.sh

1. Memory: the K-step train chunk is compiled (not run) for remat attention and full (``--modes``), and
   XLA's memory analysis (per device: temp, arguments, outputs, peak) is printed with whether it
   fits this device and the named device sizes (10 % headroom), plus which attention ran (cuDNN or
   XLA). A mode XLA refuses to compile for lack of memory (a TPU refuses at compile time what does
   not fit its HBM) is a row "does not fit: XLA needs 95.0 GiB of 15.7", not an error.
2. Speed: the cheapest mode that fits runs one warm-up chunk and ``--chunks`` timed chunks of
   synthetic games (uniform random move ids, lengths uniform in [T/4, T]; the step's cost does not
   depend on the moves) and reports tokens/s and MFU = model FLOP/s ÷ peak, with model FLOPs from
   ``pawn.bench.FLOPS_FORMULA`` and the peak from ``pawn.bench.published_peak`` (GPU datasheets;
   Google Cloud's TPU pages: v5e 197 TFLOP/s bf16 per chip).

Results go to ``$OUT/accel_check.json`` (or ``--out``). The compiled Rust engine must import: on a
machine without cargo, build a wheel for its Python elsewhere (``maturin build --release -i
python3.12``) and copy ``pawn/_engine*.so`` from it into ``src/pawn/``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np


def _import_pawn() -> str:
    """Import pawn, or exit with one line saying how to build the engine for this Python."""
    try:
        import pawn._engine  # noqa: F401
    except ImportError as e:
        v = f"{sys.version_info.major}.{sys.version_info.minor}"
        sys.exit(f"error: pawn's compiled engine does not import here ({e}); build it for Python {v} on a machine "
                 f"with cargo (`maturin build --release -i python{v}`) and install the wheel, or copy its "
                 f"pawn/_engine*.so into src/pawn/")
    return "compiled engine"


def synthetic_chunk(k: int, batch: int, seq_len: int, seed: int = 0) -> dict[str, np.ndarray]:
    """[K, B, T] packed games of random move ids with lengths uniform in [T/4, T]."""
    from pawn.data.packing import pack_games

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(k):
        toks = rng.integers(0, 1968, (batch, seq_len)).astype(np.int16)
        lengths = rng.integers(seq_len // 4, seq_len + 1, batch)
        out.append(pack_games(toks, lengths, np.zeros(batch, np.uint8), seq_len))
    return {n: np.stack([b[n] for b in out]) for n in out[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--supernet", default="large")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--accumulation-steps", type=int, default=1)
    ap.add_argument("--steps-per-chunk", type=int, default=4)
    ap.add_argument("--chunks", type=int, default=3, help="timed chunks after one warm-up chunk")
    ap.add_argument("--modes", default="attention,full",
                    help="remat modes to compile, comma list (none is left out by default: it cannot fit B 256 × T 512)")
    ap.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/out")
    a = ap.parse_args()
    engine = _import_pawn()

    import jax

    import pawn.model as pm
    from pawn.bench import published_peak, step_flops_per_token
    from pawn.config import SUPERNETS
    from pawn.model import PAWNModel
    from pawn.train.loop import TrainProgram, init_state, make_mesh, make_optimizer
    from pawn.train.memory import GIB, NAMED_DEVICES, compile_chunk, device_memory, fits
    from pawn.train.schedules import build_schedule

    dev = jax.devices()[0]
    res: dict = {"device": dev.device_kind, "backend": jax.default_backend(), "devices": jax.device_count(),
                 "jax": jax.__version__, "engine": engine, "settings": vars(a), "memory": [], "errors": []}
    print(f"{dev.device_kind} ×{jax.device_count()} ({jax.default_backend()}), JAX {jax.__version__}; {engine}", flush=True)
    sup, variants = SUPERNETS[a.supernet]
    vlist = [(c, 1.0) for c in variants.values()]
    sched = build_schedule("constant", 3e-4, 10**9, 0)
    opt = make_optimizer(sched, b1=0.9, b2=0.95, weight_decay=0.01, max_grad_norm=1.0)
    cap, where = device_memory()
    res["capacity"] = {"bytes": cap, "source": where}
    K, B, T = a.steps_per_chunk, a.batch_size, a.seq_len
    programs = {}
    for mode in a.modes.split(","):
        prog = TrainProgram(opt, sched, vlist, a.dtype, mode, make_mesh(), a.accumulation_steps)
        pm.ATTENTION_IMPL.clear()
        t0 = time.perf_counter()
        try:
            _, est = compile_chunk(prog, sup, K, B, T)  # an out-of-memory refusal is a row, not an error
        except Exception as e:  # a cuDNN refusal at compile time: retry with the XLA attention
            if pm.ATTENTION_IMPL.get(a.dtype) != "cudnn":
                raise
            res["errors"].append(f"remat {mode}: cuDNN attention failed to compile ({type(e).__name__}: {str(e)[:300]}); retried with XLA")
            print(res["errors"][-1], flush=True)
            pm.FUSED_ATTENTION = False
            pm.ATTENTION_IMPL.clear()
            prog = TrainProgram(opt, sched, vlist, a.dtype, mode, make_mesh(), a.accumulation_steps)
            _, est = compile_chunk(prog, sup, K, B, T)
        known = est.peak_bytes > 0
        row = {"remat": mode, "attention": pm.ATTENTION_IMPL.get(a.dtype, "?"), **est.to_dict(),
               "compile_s": time.perf_counter() - t0,
               "fits_this_device": not est.refused and cap is not None and fits(est.peak_bytes, cap),
               "fits": {n: (fits(est.peak_bytes, s) if known else None) for n, s in NAMED_DEVICES}}
        res["memory"].append(row)
        if est.refused:
            print(f"memory remat={mode:9s}: {est.verdict()} (XLA refused to compile it, {row['compile_s']:.0f} s)", flush=True)
            continue
        programs[mode] = prog
        print(f"memory remat={mode:9s} attention={row['attention']}: temp {row['temp_gib']:.2f} GiB, peak {row['peak_gib']:.2f} GiB "
              f"(compile {row['compile_s']:.0f} s); fits here ({(cap or 0) / GIB:.0f} GiB): {row['fits_this_device']}; "
              + ", ".join(f"{n}: {v}" for n, v in row["fits"].items()), flush=True)

    chosen = next((r["remat"] for r in res["memory"] if r["fits_this_device"]), None)
    if chosen is None:
        res["speed"] = {"skipped": "no remat mode fits this device"}
        print(res["speed"]["skipped"])
    else:
        prog = programs[chosen]
        state = prog.place_state(init_state(PAWNModel(sup, jax.random.key(0)), opt))
        host = synthetic_chunk(K, B, T)
        samples = []
        for i in range(1 + a.chunks):
            chunk = jax.block_until_ready(prog.place_chunk(host))
            t0 = time.perf_counter()
            state, m = prog.run_chunk(state, chunk)
            jax.block_until_ready((state, m))
            if i:
                samples.append(time.perf_counter() - t0)
        med = float(np.median(samples))
        tps = K * B * T / med
        fpt = step_flops_per_token(vlist, T)
        import jax.numpy as jnp

        pub = published_peak(jax.default_backend(), dev.device_kind, jnp.dtype(pm.resolve_dtype(a.dtype)).name)
        peak = pub[0] * jax.device_count() if pub else None
        res["speed"] = {"remat": chosen, "chunk_s_median": med, "chunk_s": samples, "tokens_per_s": tps,
                        "steps_per_s": K / med, "flops_per_token": fpt, "achieved_flops_per_s": fpt * tps,
                        "peak_flops_per_s": peak, "peak_source": pub[1] if pub else "no published peak for this device",
                        "mfu": fpt * tps / peak if peak else None, "final_loss": float(np.asarray(m["loss"])[-1])}
        s = res["speed"]
        print(f"speed remat={chosen}: {tps:,.0f} tokens/s, {K / med:.2f} steps/s, {fpt * tps / 1e12:.1f} TFLOP/s achieved"
              + (f", MFU {100 * s['mfu']:.1f}% of {peak / 1e12:.1f} TFLOP/s ({s['peak_source']})" if peak else ""), flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "accel_check.json.tmp"
    tmp.write_text(json.dumps(res, indent=2, default=str) + "\n")
    tmp.replace(out / "accel_check.json")
    print(f"wrote {out / 'accel_check.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
