"""One accelerator check of PAWN's published pretraining recipe, as a user runs it, in one call.

Run from the repository root on a machine with a GPU or a TPU (never part of CI):

    benchmarks/accel_check.sh                 # large supernet, B 256 × T 512, bf16, pawn's defaults
    benchmarks/accel_check.sh --smoke         # the same sections on a CPU with a toy model (a test runs it)

Sections, each a fresh process of the real CLI or of PAWN's own step, each with a time limit, the JSON
rewritten after each one (so a section that runs out of time still leaves the others):

1. ``doctor``: ``pawn doctor`` (JAX version, backend, devices).
2. ``search``: ``pawn pretrain --supernet large --total-steps 200000 --dry-run`` with an empty plan cache:
   ``--remat auto`` compiles each (remat × accumulation) candidate that fits and times its chunk
   (``pawn.train.step_plan``); the table (memory, compile seconds, tokens/s per candidate, which was
   taken) is read back from the plan cache the search writes.
3. ``train``: the owner's command ``pawn pretrain --supernet large --total-steps 200000`` at its defaults
   (the plan from the cache of section 2) for ``--train-s`` seconds, then Ctrl-C (SIGINT) as a user
   stops it. From its ``metrics.jsonl`` (``pawn.runs``): steady tokens/s (median over chunks after the
   first, which holds the compile), MFU = FLOPs/token × tokens/s ÷ the device's published peak
   (``pawn.bench.step_flops_per_token``, ``pawn.bench.published_peak``); the process's host peak RSS
   (``getrusage`` of the child).
4. ``engine``: random games per second of the Rust engine at the recipe's ply cap on all host cores,
   against the games per second the measured step consumes (B × steps/s): how far ahead the data is.
5. ``profile``: one chunk of the taken plan under ``jax.profiler.trace``; the top ops by device time
   from the trace (``*.trace.json.gz``).
6. ``adapter_ab``: the adapter step against the public v2 code (``benchmarks/reference_ab.py``) at
   B16 T128 and B128 T256, when the v2 tree is given (``--ref-src``, ``--ref-path``).

Results: ``$OUT/accel_check.json`` (or ``--out``) and each section's log beside it.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAWN = [sys.executable, "-c", "import sys; sys.argv[0] = 'pawn'; from pawn.cli import run; run()"]


def _write(res: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".accel_check.json.tmp"
    tmp.write_text(json.dumps(res, indent=2, default=str) + "\n")
    tmp.replace(out / "accel_check.json")


def _run(cmd: list[str], *, log: Path, timeout_s: float, env: dict, sigint_after_s: float | None = None) -> dict:
    """Run ``cmd`` with its output in ``log``; stop it with SIGINT after ``sigint_after_s`` (as a
    user's Ctrl-C), kill its process group at ``timeout_s``. Returns the exit code, wall seconds and
    the process's host peak RSS in GiB (``wait4``'s ``ru_maxrss``, KiB on Linux)."""
    t0 = time.perf_counter()
    timed_out = False
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        stopped = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            el = time.perf_counter() - t0
            if sigint_after_s is not None and not stopped and el > sigint_after_s:
                p.send_signal(signal.SIGINT)
                stopped = True
            if el > timeout_s and not timed_out:
                timed_out = True
                os.killpg(p.pid, signal.SIGKILL)
            time.sleep(0.25)
    p.returncode = os.waitstatus_to_exitcode(status)
    return {"rc": p.returncode, "wall_s": round(time.perf_counter() - t0, 1), "host_peak_rss_gib": round(ru.ru_maxrss / 2 ** 20, 3),
            "timed_out": timed_out, "log": log.name, "tail": log.read_text(errors="replace").splitlines()[-12:]}


def _recipe(a) -> list[str]:
    flags = ["--supernet", a.supernet] if not a.variant else ["--variant", a.variant]
    flags += ["--total-steps", str(a.total_steps)]
    for flag, v in (("--batch-size", a.batch_size), ("--seq-len", a.seq_len), ("--steps-per-chunk", a.steps_per_chunk),
                    ("--dtype", a.dtype)):
        if v is not None:
            flags += [flag, str(v)]
    return flags


def section_search(a, res, out, env) -> None:
    cache = Path(env["PAWN_PLAN_CACHE"])
    if cache.exists():
        cache.unlink()
    r = _run([*PAWN, "pretrain", *_recipe(a), "--dry-run", "--out", str(a.work / "run-dry")], log=out / "search.log",
             timeout_s=a.search_s, env=env)
    plans = json.loads(cache.read_text())["plans"] if cache.exists() else {}
    entry = next(iter(plans.values()), None)
    r["lines"] = [ln for ln in (out / "search.log").read_text(errors="replace").splitlines()
                  if ln.startswith(("step plan:", "memory check:", "compiled step:", "plan:"))]
    if entry is not None:
        r.update(taken={"remat": entry["remat"], "accumulation_steps": entry["accumulation_steps"],
                        "tokens_per_s": entry["tokens_per_s"]}, candidates=entry["candidates"])
    res["search"] = r


def section_train(a, res, out, env) -> None:
    run_dir = a.work / "run"
    # without a searched plan (the search section failed or ran out of time) the run takes the first that fits
    fallback = [] if Path(env["PAWN_PLAN_CACHE"]).exists() or a.train_flags else ["--accumulation-steps", "1"]
    fallback += a.train_flags.split()
    r = _run([*PAWN, "pretrain", *_recipe(a), *fallback, "--out", str(run_dir)], log=out / "train.log",
             timeout_s=a.train_s + a.train_setup_s + 120, env=env, sigint_after_s=a.train_s + a.train_setup_s)
    import shutil

    import numpy as np

    from pawn.runs import open_run

    r["fallback_flags"] = fallback
    if (run_dir / "metrics.jsonl").is_file():
        shutil.copyfile(run_dir / "metrics.jsonl", out / "train_metrics.jsonl")

    try:
        run = open_run(run_dir)
        train = run.train
    except Exception as e:  # noqa: BLE001 - a run that never started is a row of the report
        r["error"] = f"{type(e).__name__}: {e}"
        res["train"] = r
        return
    steady_recs = [t for t in train if not t.fields.get("includes_compile")][1:]  # the chunk after the compile too
    steady = [t.get("tokens_per_s") for t in steady_recs if t.get("tokens_per_s")]
    secs = sum(float(t.get("chunk_wall_s") or t.fields.get("chunk_wall_s") or 0.0) for t in steady_recs)
    waits = [t.get("data_wait_frac") for t in steady_recs if t.get("data_wait_frac") is not None]
    r.update(chunks=len(train), steady_chunks=len(steady), steady_train_s=round(secs, 1), steps=run.last_step,
             data_wait_frac_median=float(np.median(waits)) if waits else None)
    cfg = run.config_record
    mem = (cfg.fields.get("summary") or {}).get("compiled_memory") if cfg is not None else None
    if mem:
        r["plan"] = {k: mem.get(k) for k in ("remat", "accumulation_steps", "peak_bytes")}
        r["plan_source"] = (mem.get("plan_search") or {}).get("source")
    if steady:
        tps = float(np.median(steady))
        r["tokens_per_s"] = tps
        r.update(_mfu(a, res, tps))
    res["train"] = r


def _mfu(a, res: dict, tokens_per_s: float) -> dict:
    """MFU from the device facts read at the start (no backend is started in this process: one
    program at a time holds a TPU, and the sections' own processes need it)."""
    from pawn.bench import published_peak, step_flops_per_token
    from pawn.config import NAMED_CONFIGS, SUPERNETS

    variants = [(NAMED_CONFIGS[a.variant], 1.0)] if a.variant else [(c, 1.0) for c in SUPERNETS[a.supernet][1].values()]
    fpt = step_flops_per_token(variants, a.seq_len or 512)
    dt = a.dtype if a.dtype not in (None, "auto") else ("float32" if res["backend"] == "cpu" else "bfloat16")
    pub = published_peak(res["backend"], res["device"], dt)
    peak = pub[0] * res["devices"] if pub else None
    return {"flops_per_token": fpt, "achieved_flops_per_s": fpt * tokens_per_s, "peak_flops_per_s": peak,
            "peak_source": pub[1] if pub else "no published peak for this device", "dtype": dt,
            "mfu": fpt * tokens_per_s / peak if peak else None}


def section_engine(a, res) -> None:
    from pawn.engine import random_games

    T = a.seq_len or 512
    n = max(256, a.batch_size or 256) * 4
    random_games(64, T, seed=1)  # warm the pool
    t0 = time.perf_counter()
    random_games(n, T, seed=2)
    gps = n / (time.perf_counter() - t0)
    r = {"games_per_s": gps, "games": n, "max_ply": T, "host_cores": os.cpu_count()}
    tps = (res.get("train") or {}).get("tokens_per_s")
    if tps:
        need = tps / T  # games of T plies a second (B games a step of B·T tokens)
        r.update(consumed_games_per_s=need, ahead_x=gps / need)
    res["engine"] = r


PROFILE_WORKER = r'''
import glob, gzip, json, os, sys, time, collections
import jax
from pawn.config import NAMED_CONFIGS, SUPERNETS
from pawn.model import PAWNModel
from pawn.schedules import build_schedule
from pawn.train.loop import TrainProgram, init_state, make_mesh, make_optimizer
from pawn.train.step_plan import timing_chunk, time_chunk
a = json.loads(sys.argv[1])
if a["variant"]:
    stored = NAMED_CONFIGS[a["variant"]]; variants = [(stored, 1.0)]
else:
    stored, vs = SUPERNETS[a["supernet"]]; variants = [(c, 1.0) for c in vs.values()]
sched = build_schedule("cosine", 3e-4, 10 ** 6, 100)
opt = make_optimizer(sched, b1=0.9, b2=0.95, weight_decay=0.01, max_grad_norm=1.0)
dtype = None if a["dtype"] in (None, "auto") else a["dtype"]
prog = TrainProgram(opt, schedule=sched, variants=variants, dtype=dtype, remat=a["remat"], mesh=make_mesh(),
                    accumulation_steps=a["accumulation_steps"])
K, B, T = a["k"], a["batch_size"], a["seq_len"]
host = timing_chunk(K, B, T)
state = prog.place_state(init_state(PAWNModel(stored, jax.random.key(0)), opt))
state, warm = time_chunk(prog, state, host, repeats=1)
tdir = a["trace_dir"]
with jax.profiler.trace(tdir):
    state, secs = time_chunk(prog, state, host, repeats=1)
files = glob.glob(os.path.join(tdir, "**", "*.trace.json.gz"), recursive=True)
ev = json.load(gzip.open(files[0]))["traceEvents"] if files else []
names = {e["pid"]: e["args"].get("name", "") for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
dev_pids = {p for p, n in names.items() if any(s in n for s in ("TPU", "GPU", "/device:"))} or set(names)
tot = collections.Counter(); cnt = collections.Counter()
for e in ev:
    if e.get("ph") == "X" and e.get("pid") in dev_pids and "dur" in e and not e["name"].startswith("$"):
        tot[e["name"]] += e["dur"]; cnt[e["name"]] += 1
all_us = sum(tot.values())
top = [{"op": n, "ms_per_step": us / 1e3 / K, "share": us / all_us if all_us else None, "calls_per_step": cnt[n] / K}
       for n, us in tot.most_common(a["top"])]
print(json.dumps({"chunk_s": secs, "warm_chunk_s": warm, "k": K, "device_processes": sorted(names[p] for p in dev_pids),
                  "op_ms_per_step": all_us / 1e3 / K, "top": top}))
'''


def section_profile(a, res, out, env) -> None:
    taken = (res.get("search") or {}).get("taken") or {"remat": "full", "accumulation_steps": 1}
    args = {"variant": a.variant, "supernet": a.supernet, "dtype": a.dtype, "remat": taken["remat"],
            "accumulation_steps": taken["accumulation_steps"], "k": a.profile_k, "batch_size": a.batch_size or 256,
            "seq_len": a.seq_len or 512, "trace_dir": str(a.work / "trace"), "top": 12}
    log = out / "profile.log"
    r = _run([sys.executable, "-c", PROFILE_WORKER, json.dumps(args)], log=log, timeout_s=a.profile_s, env=env)
    last = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("{")]
    if last:
        r.update(json.loads(last[-1]))
    r.pop("tail", None) if last else None
    res["profile"] = r


def section_adapter_ab(a, res, out, env) -> None:
    if not a.ref_src:
        res["adapter_ab"] = {"skipped": "no --ref-src (the public v2 tree) given"}
        return
    env = {**env, "JAX_PLATFORMS": res["backend"]}  # reference_ab.py defaults to the CPU
    cmd = [sys.executable, str(HERE / "reference_ab.py"), "--ref-src", a.ref_src, "--ref-python", sys.executable,
           "--ref-path", a.ref_path or "", "--step", "adapter", "--strategies", "lora,bottleneck", "--shape", a.ab_shapes,
           "--rounds", str(a.ab_rounds), "--steps", str(a.ab_steps)]
    r = _run(cmd, log=out / "adapter_ab.log", timeout_s=a.ab_s, env=env)
    r["tail"] = (out / "adapter_ab.log").read_text(errors="replace").splitlines()[-24:]
    res["adapter_ab"] = r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="toy model, tiny shapes, short limits: the CPU test of this script")
    ap.add_argument("--supernet", default="large")
    ap.add_argument("--variant", default=None)
    ap.add_argument("--total-steps", type=int, default=200000)
    ap.add_argument("--batch-size", type=int, default=None, help="default: pawn pretrain's (256)")
    ap.add_argument("--seq-len", type=int, default=None, help="default: pawn pretrain's (512)")
    ap.add_argument("--steps-per-chunk", type=int, default=None, help="default: pawn pretrain's")
    ap.add_argument("--dtype", default=None, help="default: pawn pretrain's (auto: bf16 on an accelerator)")
    ap.add_argument("--sections", default="doctor,search,train,engine,profile,adapter_ab")
    ap.add_argument("--search-s", type=float, default=330)
    ap.add_argument("--train-s", type=float, default=75, help="seconds of training after --train-setup-s")
    ap.add_argument("--train-setup-s", type=float, default=60, help="start-up and compile allowance before --train-s")
    ap.add_argument("--train-flags", default="", help="further pawn pretrain flags for the train section (e.g. a plan)")
    ap.add_argument("--profile-s", type=float, default=90)
    ap.add_argument("--profile-k", type=int, default=2)
    ap.add_argument("--ref-src", default=None)
    ap.add_argument("--ref-path", default=None)
    ap.add_argument("--ab-shapes", default="16x128,128x256")
    ap.add_argument("--ab-rounds", type=int, default=2)
    ap.add_argument("--ab-steps", type=int, default=16)
    ap.add_argument("--ab-s", type=float, default=150)
    ap.add_argument("--commit", default=os.environ.get("PAWN_COMMIT", ""))
    ap.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/out")
    ap.add_argument("--work", default=None, help="runs, traces and JAX's compilation cache (default: a temp folder)")
    a = ap.parse_args()
    import tempfile

    a.work = Path(a.work or tempfile.mkdtemp(prefix="pawn-accel-")).resolve()
    if a.smoke:
        a.variant, a.total_steps, a.batch_size, a.seq_len, a.steps_per_chunk = "toy", 10 ** 7, 8, 32, 2
        a.search_s, a.train_s, a.train_setup_s, a.profile_s, a.ab_s, a.ab_steps = 240, 8, 25, 120, 120, 4
        a.ab_shapes = "4x32"
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "160", "PAWN_PLAN_CACHE": str(out / "step_plans.json")}
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(a.work / "jax-cache"))  # the train section reuses the search's compile
    res: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": a.commit, "settings": vars(a)}
    # The device facts from a child process: a TPU is held by one process at a time, so this one never
    # starts a JAX backend (the sections' processes need the chip).
    probe = subprocess.run([sys.executable, "-c", "import jax, json; d = jax.devices(); print(json.dumps({'device': "
                            "d[0].device_kind, 'backend': jax.default_backend(), 'devices': len(d), 'jax': jax.__version__}))"],
                           capture_output=True, text=True, env=env, timeout=300)
    facts = [ln for ln in probe.stdout.splitlines() if ln.startswith("{")]
    if not facts:
        raise SystemExit(f"error: JAX does not start here: {probe.stderr.strip()[-800:]}")
    res.update(json.loads(facts[-1]))
    print(f"{res['device']} ×{res['devices']} ({res['backend']}), JAX {res['jax']}", flush=True)
    sections = a.sections.split(",")
    t_all = time.perf_counter()
    for name in sections:
        t0 = time.perf_counter()
        try:
            if name == "doctor":
                p = subprocess.run([*PAWN, "doctor"], capture_output=True, text=True, env=env, timeout=120)
                res["doctor"] = p.stdout.splitlines()
            elif name == "search":
                section_search(a, res, out, env)
            elif name == "train":
                section_train(a, res, out, env)
            elif name == "engine":
                section_engine(a, res)
            elif name == "profile":
                section_profile(a, res, out, env)
            elif name == "adapter_ab":
                section_adapter_ab(a, res, out, env)
            else:
                raise SystemExit(f"error: unknown section {name!r}")
        except Exception as e:  # noqa: BLE001 - one failed section is a row; the others still run
            res[name] = {**(res.get(name) or {}), "error": f"{type(e).__name__}: {e}"}
        res.setdefault("section_s", {})[name] = round(time.perf_counter() - t0, 1)
        print(f"[{name}] {time.perf_counter() - t0:.0f} s: " + json.dumps(res.get(name), default=str)[:600], flush=True)
        _write(res, out)
    res["total_s"] = round(time.perf_counter() - t_all, 1)
    _write(res, out)
    print(f"wrote {out / 'accel_check.json'} ({res['total_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
