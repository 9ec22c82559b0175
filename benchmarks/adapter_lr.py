"""Learning rate of each adapter strategy on one backbone: a short grid sweep, three seeds.

Usage: python benchmarks/adapter_lr.py BACKBONE --data GAMES --out DIR
       [--strategies lora,film,...] [--lrs 3e-4,1e-3,3e-3,1e-2] [--seeds 0,1,2] [--top 2]
       [--steps 100] [--epochs 1] [--batch-size 32] [--seq-len 128] [--val-games 512] [--test-games 512]
       [--max-extend 2] [--json FILE]

Every run is the CLI a user runs, ``pawn adapt BACKBONE --strategy S --lr LR --seed N --data-seed N
--steps-per-epoch STEPS --epochs EPOCHS ...`` with the strategy's other settings at their defaults, in
``DIR/S/lr{LR}_s{N}``; its figures are read back from the run record (:func:`pawn.runs.open_run`),
so a finished run is never repeated and an interrupted sweep continues where it stopped.

Two stages per strategy:

1. every learning rate of ``--lrs`` with the first seed; when the lowest final val loss is at an
   end of the grid, the grid grows by one half-decade step (×√10 ≈ 3.16) on that side, at most
   ``--max-extend`` times per side (a diverged run, non-finite loss, counts as worst);
2. the ``--top`` learning rates with the lowest stage-1 val loss with every other seed.

The chosen learning rate is the one of stage 2 with the lowest mean final val loss over all seeds.
Printed per strategy: trainable (and movable) parameters, optimizer steps spent, stage-1 val loss
per learning rate, and for the chosen one the mean val loss and val top-1 (legal-masked, move
decisions) over the seeds with a 95 % Student-t interval of the mean (mean ± t_{0.975, n−1} · s /
√n; t = 4.303 for three seeds), and the bare backbone's step-0 figures.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
"""Two-sided 95 % Student-t quantiles t_{0.975, df} by degrees of freedom (any statistics table)."""


def lr_name(lr: float) -> str:
    """``3e-03`` style, the run folder's spelling of a learning rate."""
    return f"{lr:.0e}"


def interval(xs: list[float]) -> tuple[float, float]:
    """``(mean, half-width)`` of the 95 % Student-t interval of the mean of ``xs`` (half-width nan
    for one value)."""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, math.nan
    return m, T975.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / math.sqrt(len(xs))


def read(run_dir: Path):
    """``{loss, top1, step0_loss, step0_top1, steps, trainable, movable, positions}`` of a finished
    run (loss inf when it diverged), or None when the run did not end."""
    from pawn.runs import open_run

    if not (run_dir / "metrics.jsonl").exists():
        return None
    run = open_run(run_dir)
    if run.status.state != "complete":
        return None
    val = run.val
    last, first = val[-1].values, val[0].values
    loss = last.get("loss")
    compute = run.compute or {}
    return {
        "loss": loss if loss is not None and math.isfinite(loss) else math.inf,
        "top1": last.get("top1", math.nan),
        "step0_loss": first.get("loss"), "step0_top1": first.get("top1"),
        "positions": last.get("positions"),
        "optimizer_steps": compute.get("optimizer_steps"), "gradient_batches": compute.get("gradient_batches"),
        "trainable": run.trainable_params, "movable": run.movable_params,
    }


def train(a, strategy: str, lr: float, seed: int) -> dict:
    """Run (or re-read) one ``pawn adapt``; a failed run is ``{"loss": inf, "error": ...}``."""
    out = a.out / strategy / f"lr{lr_name(lr)}_s{seed}"
    got = read(out)
    if got is not None:
        return got
    cmd = ["pawn", "adapt", str(a.backbone), "--strategy", strategy, "--data", str(a.data), "--out", str(out),
           "--overwrite", "--lr", repr(lr), "--seed", str(seed), "--data-seed", str(seed),
           "--steps-per-epoch", str(a.steps), "--epochs", str(a.epochs), "--batch-size", str(a.batch_size),
           "--seq-len", str(a.seq_len), "--val-games", str(a.val_games), "--test-games", str(a.test_games)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    got = read(out)
    if got is None:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"exit {p.returncode}"]
        print(f"  {strategy} lr {lr_name(lr)} seed {seed}: failed: {tail[0]}", flush=True)
        return {"loss": math.inf, "top1": math.nan, "error": tail[0]}
    print(f"  {strategy} lr {lr_name(lr)} seed {seed}: val loss {got['loss']:.4f}, top-1 {100 * got['top1']:.2f} % "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return got


def sweep(a, strategy: str) -> dict:
    """Both stages for one strategy; returns its record (see the module docstring)."""
    seeds = a.seeds
    lrs = sorted(a.lrs)
    stage1 = {lr: train(a, strategy, lr, seeds[0]) for lr in lrs}
    for side in (0, -1):
        for _ in range(a.max_extend):
            ordered = sorted(stage1)
            best = min(ordered, key=lambda lr: stage1[lr]["loss"])
            if best != ordered[side] or not math.isfinite(stage1[best]["loss"]):
                break
            half_decades = round(2 * math.log10(best)) + (-1 if side == 0 else 1)  # the grid 1e-4, 3e-4, 1e-3, ...
            nxt = float(f"{10 ** (half_decades / 2):.0e}")
            stage1[nxt] = train(a, strategy, nxt, seeds[0])
    ranked = sorted(stage1, key=lambda lr: stage1[lr]["loss"])
    finalists = [lr for lr in ranked[:a.top] if math.isfinite(stage1[lr]["loss"])]
    runs = {lr: [stage1[lr]] + [train(a, strategy, lr, s) for s in seeds[1:]] for lr in finalists}
    mean_loss = {lr: statistics.fmean(r["loss"] for r in rs) for lr, rs in runs.items()}
    chosen = min(mean_loss, key=mean_loss.get) if mean_loss else None
    rec = {"strategy": strategy, "stage1": {lr_name(lr): stage1[lr]["loss"] for lr in sorted(stage1)},
           "finalists": {lr_name(lr): [r["loss"] for r in rs] for lr, rs in runs.items()}, "lr": chosen}
    if chosen is not None:
        rs = runs[chosen]
        rec.update({k: rs[0].get(k) for k in ("trainable", "movable", "optimizer_steps", "gradient_batches",
                                              "step0_loss", "step0_top1", "positions")})
        rec["loss"] = interval([r["loss"] for r in rs])
        rec["top1"] = interval([r["top1"] for r in rs])
        rec["seeds"] = len(rs)
    return rec


def uniform_reference(a) -> dict:
    """What a player uniform over the legal moves scores on the runs' validation games (the tail
    ``--val-games`` of ``--data`` at ``--seq-len``, the positions ``pawn adapt`` validates under
    its legal mask: the move decisions): top-1 ``E[1/N_legal]`` and loss ``E[ln N_legal]`` (nats),
    with ``N_legal`` the legal moves of each position, from the engine."""
    import numpy as np

    from pawn.data.layout import Layout
    from pawn.data.lichess import LichessFilters, load_corpus
    from pawn.data.lichess_batches import ValidationBatches
    from pawn.vocab import NUM_ACTIONS

    corpus = load_corpus(str(a.data), LichessFilters(None, None, 10, None), split="train", val_games=a.val_games,
                         test_games=a.test_games, warn=lambda m: None)
    inv, logn, n = 0.0, 0.0, 0
    for b in ValidationBatches(corpus.val, Layout.of(False), a.seq_len, a.batch_size, ("targets", "loss_mask")):
        counts = np.unpackbits(b["legal"], axis=-1).sum(-1).astype(np.float64)  # [B, T] legal moves
        decision = b["loss_mask"] & (b["targets"] < NUM_ACTIONS) & (counts > 0)
        inv += float((1.0 / counts[decision]).sum())
        logn += float(np.log(counts[decision]).sum())
        n += int(decision.sum())
    return {"top1": inv / n, "loss": logn / n, "positions": n}


def table(recs: list[dict]) -> str:
    """The results as a Markdown table."""
    lines = ["| strategy | trainable (movable) | optimizer steps (gradient batches) | lr | val loss | val top-1 | "
             "stage-1 val loss by lr (seed 0) |", "|---|---:|---:|---:|---:|---:|---|"]
    for r in recs:
        if r["lr"] is None:
            lines.append(f"| {r['strategy']} | | | every run failed | | | |")
            continue
        lm, lh = r["loss"]
        tm, th = r["top1"]
        params = f"{r['trainable']:,}" + (f" ({r['movable']:,})" if r["movable"] != r["trainable"] else "")
        s1 = ", ".join(f"{k}: {v:.3f}" if math.isfinite(v) else f"{k}: diverged" for k, v in r["stage1"].items())
        lines.append(f"| {r['strategy']} | {params} | {r['optimizer_steps']} ({r['gradient_batches']}) | "
                     f"{lr_name(r['lr'])} | {lm:.3f} ± {lh:.3f} | {100 * tm:.2f} ± {100 * th:.2f} % | {s1} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("backbone", type=Path)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--strategies", default=None, help="comma list (default: every strategy of the table)")
    p.add_argument("--lrs", default="3e-4,1e-3,3e-3,1e-2")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--top", type=int, default=2)
    p.add_argument("--steps", type=int, default=100, help="steps per epoch (validation after each epoch)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--val-games", type=int, default=512)
    p.add_argument("--test-games", type=int, default=512)
    p.add_argument("--max-extend", type=int, default=3)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    a.lrs = [float(x) for x in a.lrs.split(",")]
    a.seeds = [int(x) for x in a.seeds.split(",")]
    if a.strategies is None:
        from pawn.adapters.registry import STRATEGIES

        names = list(STRATEGIES)
    else:
        names = a.strategies.split(",")
    recs = []
    for s in names:
        print(f"{s}:", flush=True)
        recs.append(sweep(a, s))
        if a.json is not None:
            a.json.write_text(json.dumps(recs, indent=1))
    u = uniform_reference(a)
    print(f"uniform over the legal moves: val loss {u['loss']:.3f}, val top-1 {100 * u['top1']:.2f} % over "
          f"{u['positions']:,} move decisions")
    if a.json is not None:
        a.json.write_text(json.dumps({"uniform": u, "strategies": recs}, indent=1))
    first = next((r for r in recs if r.get("step0_loss") is not None), None)
    if first is not None:
        print(f"backbone alone (step 0): val loss {first['step0_loss']:.3f}, val top-1 {100 * first['step0_top1']:.2f} % "
              f"over {first['positions']:,} move decisions")
    print(table(recs))


if __name__ == "__main__":
    sys.exit(main())
