"""Where a compiled train step's time goes, op by op, from XLA's own profile: PAWN's adapter chunk or
pretraining joint step, and optionally the v2 reference's counterpart, side by side.

Usage: python benchmarks/xla_profile.py [--step adapter|pretrain] [--strategy lora|bottleneck]
       [--shape 16x128] [--config tiny|base] [--steps 8] [--k 4] [--top 12]
       [--ref-src REF_V2 --ref-python PY [--ref-path DIR]]

Each side runs in a fresh process that builds the step exactly as ``adapter_step.py --loss plain`` /
``joint_step.py`` (PAWN) and ``reference_ab.py`` (v2) time it, warms it up, then records
``jax.profiler`` traces of the timed steps while XLA dumps the optimized HLO. The trace gives each
executed HLO op (a fusion, a dot, a copy …) with its duration; the HLO gives each dot's operand
shapes, hence its FLOPs (2 · output elements · contracted size). Printed per side: op time a step
split into matmuls (dots and the fusions built around one) and everything else, the wall time a step
(op time exceeds it when independent ops run at once on the cores), the matmul FLOPs a step and
their rate, and the ``--top`` matmul classes (output shape, contracted size): op time, calls a step
and GFLOP/s of op time. Op durations of ops that overlap are each the op's own wall span, so a rate
is per op, not of the machine. Fresh processes; run on a quiet machine, figures are for this
machine only. JAX_PLATFORMS chooses the backend (cpu by default; op names differ on a GPU).
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# ----------------------------------------------------------------------------- workers (one per process)


def _trace(out_dir: str):
    import jax

    return jax.profiler.trace(out_dir, create_perfetto_trace=True)


def pawn_worker(a) -> dict:
    """Build, warm and trace PAWN's step; returns the traced step count and wall seconds a step."""
    sys.path.insert(0, HERE)
    B, T = map(int, a.shape.split("x"))
    if a.step == "pretrain":
        from joint_step import build as build_joint

        run, _ = build_joint(T, B * T)
        with _trace(a.trace_dir):
            s = run(a.steps)[0]
        return {"steps": a.steps, "s": s}
    from adapter_step import build as build_adapter

    run = build_adapter(a.strategy, B, T, a.k, "plain", a.config)
    n = -(-a.steps // a.k)
    with _trace(a.trace_dir):
        s = run(n)[0]
    return {"steps": n * a.k, "s": s}


def v2_worker(a) -> dict:
    """Build, warm and trace the v2 reference's step (runs under the reference's interpreter)."""
    sys.path.insert(0, HERE)
    import reference_ab as R

    B, T = map(int, a.shape.split("x"))
    if a.step == "pretrain":
        import jax

        step, state, batch = R.reference_v2_pretrain_setup(B, T)
        for _ in range(2):
            state, m = step(state, batch)
        jax.block_until_ready(m)
        with _trace(a.trace_dir):
            t0 = time.perf_counter()
            for _ in range(a.steps):
                state, m = step(state, batch)
            jax.block_until_ready(m)
            s = (time.perf_counter() - t0) / a.steps
        return {"steps": a.steps, "s": s}
    timed = R._timed_chunks
    traced: dict = {}

    def traced_chunks(scan, state, chunk, K, steps):
        import jax

        state, m = scan(state, chunk)  # compile outside the trace
        jax.block_until_ready(m)
        with _trace(a.trace_dir):
            res = timed(scan, state, chunk, K, steps)  # one more warm chunk, then ⌈steps / K⌉ timed
        traced["steps"] = (-(-steps // K) + 1) * K
        return res

    R._timed_chunks = traced_chunks
    res = R.reference_v2_worker(a.strategy, B, T, a.steps, a.k, a.config)
    return {"steps": traced["steps"], "s": res["s"]}


# ----------------------------------------------------------------------------- analysis


def _shape(s: str) -> list[int] | None:
    m = re.match(r"\w+\[([\d,]*)\]", s)
    return [int(x) for x in m.group(1).split(",") if x] if m else None


def _step_module(hlo_dir: str) -> str:
    files = glob.glob(os.path.join(hlo_dir, "*.cpu_after_optimizations.txt")) or \
        glob.glob(os.path.join(hlo_dir, "*after_optimizations.txt"))
    if not files:
        sys.exit(f"error: XLA wrote no optimized HLO into {hlo_dir}")
    return open(max(files, key=os.path.getsize)).read()  # the step is by far the largest module


def _dot_flops(name: str, hlo: str) -> tuple[int, tuple[int, ...], int] | None:
    """``(FLOPs of one call, output shape, contracted size)`` of op ``name`` if it is a dot or a
    fusion around one, else None."""
    m = re.search(r"^\s*(?:ROOT )?%?" + re.escape(name) + r" = (\S+) (fusion|dot)\((.*?)\)(.*)$", hlo, re.M)
    if not m:
        return None
    if m.group(2) == "fusion":
        calls = re.search(r"calls=%?([\w.\-]+)", m.group(4))
        body_m = calls and re.search(r"^%?" + re.escape(calls.group(1)) + r" .*?\{\n(.*?)\n\}", hlo, re.M | re.S)
        if not body_m:
            return None
        body = body_m.group(1)
        lines = [ln for ln in body.splitlines() if " dot(" in ln]
        if not lines:
            return None
        line, scope = lines[0], body
    else:
        line, scope = m.group(0), hlo
    dm = re.search(r"= (\w+\[[\d,]*\])\S* dot\(%?([\w.\-]+), %?([\w.\-]+)\), (.*)", line)
    if not dm:
        return None
    lhs = re.search(r"^\s*%?" + re.escape(dm.group(2)) + r" = (\w+\[[\d,]*\])", scope, re.M)
    contract = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", dm.group(4))
    out, lhs_shape = _shape(dm.group(1)), lhs and _shape(lhs.group(1))
    if out is None or not lhs_shape or not contract:
        return None
    k = math.prod(lhs_shape[int(i)] for i in contract.group(1).split(",") if i)
    return 2 * math.prod(out) * k, tuple(out), k


def analyse(trace_dir: str, hlo_dir: str, steps: int, wall_s: float, top: int, label: str) -> None:
    """Print one side's op-time split and matmul table."""
    files = sorted(glob.glob(os.path.join(trace_dir, "**", "*.json.gz"), recursive=True))
    if not files:
        sys.exit(f"error: no profiler trace under {trace_dir}")
    d = json.load(gzip.open(files[-1]))
    events = d["traceEvents"] if isinstance(d, dict) else d
    hlo = _step_module(hlo_dir)
    # control flow (while, conditional, call) spans the ops of its body, which are counted themselves
    shape = r"(?:\((?:[^()]|\([^()]*\))*\)|\S+)"  # an array shape or a (possibly nested) tuple of them
    opcode = dict(re.findall(r"^\s*(?:ROOT )?%?([\w.\-]+) = " + shape + r" ([\w\-]+)\(", hlo, re.M))
    ops = {n for n, o in opcode.items() if o not in ("while", "conditional", "call")}
    dur: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e.get("name") in ops:
            dur[e["name"]] += e.get("dur", 0)
            calls[e["name"]] += 1
    mm_t = other_t = 0.0
    mm_flops = 0
    classes: dict = collections.defaultdict(lambda: [0.0, 0, 0])
    dots = {name: _dot_flops(name, hlo) for name in dur}
    others: collections.Counter = collections.Counter()
    for name, t in dur.items():
        f = dots[name]
        if f is None:
            other_t += t
            others[re.sub(r"\.\d+$", "", name)] += t
            continue
        flops, out, k = f
        mm_t += t
        mm_flops += flops * calls[name]
        c = classes[(out, k)]
        c[0] += t
        c[1] += calls[name]
        c[2] += flops * calls[name]
    us = 1e3 * steps  # µs of trace time → ms a step
    print(f"\n{label}: {steps} traced steps, wall {wall_s * 1e3:.1f} ms/step")
    print(f"  op time {(mm_t + other_t) / us:8.1f} ms/step = matmuls {mm_t / us:.1f} + other {other_t / us:.1f}")
    print(f"  matmul FLOPs {mm_flops / steps / 1e9:.2f} GFLOP/step, {mm_flops / max(mm_t, 1e-9) / 1e3:.1f} GFLOP/s of "
          f"matmul op time, {mm_flops / steps / wall_s / 1e9:.1f} GFLOP/s of wall time")
    print(f"  {'output shape':>22} {'K':>5} {'ms/step':>8} {'calls/step':>10} {'GFLOP/s':>8}")
    for (out, k), (t, n, fl) in sorted(classes.items(), key=lambda x: -x[1][0])[:top]:
        print(f"  {str(list(out)):>22} {k:5d} {t / us:8.1f} {n / steps:10.1f} {fl / max(t, 1e-9) / 1e3:8.1f}")
    print("  largest other op kinds: " + ", ".join(f"{k} {v / us:.1f}" for k, v in others.most_common(6)) + " (ms/step)")


# ----------------------------------------------------------------------------- driver


def _side(cmd: list[str], env: dict, what: str, top: int) -> None:
    with tempfile.TemporaryDirectory(prefix="pawn-xla-profile-") as tmp:
        trace_dir, hlo_dir = os.path.join(tmp, "trace"), os.path.join(tmp, "hlo")
        env = {**env, "XLA_FLAGS": f"{env.get('XLA_FLAGS', '')} --xla_dump_to={hlo_dir} --xla_dump_hlo_as_text".strip()}
        out = subprocess.run(cmd + ["--trace-dir", trace_dir], env=env, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"error: {what} failed:\n{out.stderr[-2000:]}")
        res = json.loads(out.stdout.strip().splitlines()[-1])
        analyse(trace_dir, hlo_dir, res["steps"], res["s"], top, what)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step", default="adapter", choices=["adapter", "pretrain"])
    p.add_argument("--strategy", default="lora", choices=["lora", "bottleneck"])
    p.add_argument("--shape", default="16x128", help="BxT")
    p.add_argument("--config", default="tiny", choices=["tiny", "base"], help="adapter backbone shape")
    p.add_argument("--steps", type=int, default=8,
                   help="timed steps (adapter: rounded up to whole chunks; v2's adapter trace also holds one more "
                        "warm-up chunk, and every per-step figure divides by the steps traced)")
    p.add_argument("--k", type=int, default=4, help="adapter steps per compiled chunk")
    p.add_argument("--top", type=int, default=12, help="matmul classes shown per side")
    p.add_argument("--ref-src", help="the v2 reference's source tree (holds pawn/adapter_trainer.py)")
    p.add_argument("--ref-python", help="an interpreter with the reference's dependencies")
    p.add_argument("--ref-path", default="", help="extra PYTHONPATH for the reference (its chess_engine package)")
    p.add_argument("--worker", choices=["pawn", "v2"], help=argparse.SUPPRESS)
    p.add_argument("--trace-dir", help=argparse.SUPPRESS)
    a = p.parse_args()
    if not re.fullmatch(r"[1-9]\d*x[1-9]\d*", a.shape):
        sys.exit(f"error: --shape takes BxT with B, T ≥ 1 (e.g. 16x128), got {a.shape!r}")
    if min(a.steps, a.k, a.top) < 1:
        sys.exit(f"error: --steps, --k and --top must be ≥ 1, got {a.steps}, {a.k}, {a.top}")
    if a.worker:
        print(json.dumps(pawn_worker(a) if a.worker == "pawn" else v2_worker(a)))
        return
    if a.step == "pretrain" and a.config != "tiny":
        sys.exit("error: --config picks the adapter's backbone; --step pretrain always times the TINY supernet")
    from pawn.config import TINY_SUPERNET, VARIANTS

    max_t = (TINY_SUPERNET if a.step == "pretrain" or a.config == "tiny" else VARIANTS["base"]).max_seq_len
    if int(a.shape.split("x")[1]) > max_t:
        sys.exit(f"error: --shape {a.shape}: T must be ≤ {max_t} (the model's max_seq_len)")
    if bool(a.ref_src) != bool(a.ref_python):
        sys.exit("error: --ref-src and --ref-python go together")
    if a.ref_src and not os.path.isfile(os.path.join(a.ref_src, "pawn", "adapter_trainer.py")):
        sys.exit(f"error: --ref-src {a.ref_src}: no pawn/adapter_trainer.py there (give the v2 reference's tree)")
    platform = os.environ.get("JAX_PLATFORMS") or "cpu"
    env = {**os.environ, "JAX_PLATFORMS": platform, "OPENBLAS_NUM_THREADS": "1"}
    if a.ref_src:
        if not (os.path.isfile(a.ref_python) and os.access(a.ref_python, os.X_OK)):
            sys.exit(f"error: --ref-python {a.ref_python}: not an executable file")
        ref_env = {**env, "PYTHONPATH": os.pathsep.join(x for x in (os.path.abspath(a.ref_src), a.ref_path) if x)}
        probe = subprocess.run([a.ref_python, "-c", "import jax, pawn.adapter_trainer, pawn.trainer, pawn.model"],
                               env=ref_env, capture_output=True, text=True)
        if probe.returncode:
            last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            sys.exit(f"error: the v2 reference does not import under {a.ref_python} with PYTHONPATH "
                     f"{ref_env['PYTHONPATH']}: {last}")
    common = ["--step", a.step, "--strategy", a.strategy, "--shape", a.shape, "--config", a.config,
              "--steps", str(a.steps), "--k", str(a.k)]
    what = "pretrain joint step, TINY supernet" if a.step == "pretrain" else f"{a.strategy} adapter step, {a.config}"
    loss = "" if a.step == "pretrain" else ", plain loss" + (" on both sides" if a.ref_src else "")
    print(f"{what}, B × T {a.shape}, fp32{loss}, {platform}")
    _side([sys.executable, os.path.abspath(__file__), "--worker", "pawn", *common], env, "PAWN", a.top)
    if a.ref_src:
        _side([a.ref_python, os.path.abspath(__file__), "--worker", "v2", *common], ref_env, "v2 reference", a.top)


if __name__ == "__main__":
    main()
