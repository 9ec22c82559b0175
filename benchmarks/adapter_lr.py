"""Learning rate of each adapter strategy on one backbone: a short grid sweep, three seeds, and the
chosen rate's figures on the held-out validation and test games with intervals over seeds and games.

Usage: python benchmarks/adapter_lr.py BACKBONE --data GAMES --out DIR
       [--strategies lora,film,...] [--lrs 3e-4,1e-3,3e-3,1e-2] [--seeds 0,1,2] [--top 2]
       [--steps 100] [--epochs 1] [--batch-size 32] [--seq-len 128] [--val-games 512] [--test-games 512]
       [--max-extend 4] [--at-default] [--compare bottleneck:lora] [--json FILE]

Every run is the CLI a user runs, ``pawn adapt BACKBONE --strategy S --lr LR --seed N --data-seed N
--steps-per-epoch STEPS --epochs EPOCHS ...`` with the strategy's other settings at their defaults, in
``DIR/S/lr{LR}_s{N}``; its figures are read back from the run record (:func:`pawn.runs.open_run`),
so a finished run is never repeated and an interrupted sweep continues where it stopped.

Three stages per strategy:

1. every learning rate of ``--lrs`` with the first seed; while the lowest final val loss is at an
   end of the grid, the grid grows by one half-decade step (×√10 ≈ 3.16) on that side, at most
   ``--max-extend`` (4) times per side, the low side first (a diverged run, non-finite loss, counts
   as worst);
2. the ``--top`` learning rates with the lowest stage-1 val loss with every other seed; the chosen
   rate is the one with the lowest mean final val loss over all seeds (``--at-default`` skips stages 1
   and 2: each strategy's own default rate with every seed);
3. the chosen rate's runs on their held-out games: ``pawn eval RUN/best --split val|test --pgn-only
   --json`` (in this process; written as ``RUN/eval_val.json`` and ``RUN/eval_test.json``), whose per-game sums give
   each figure (legal-masked loss and top-1 over every move decision) its 95 % interval over seeds
   and games (:func:`pawn.stats.seeds_and_games`) and each ``--compare A:B`` pair its paired
   difference A − B with a verdict on each split (:func:`pawn.stats.compare`).

Printed: per strategy the trainable (and movable) parameters, optimizer steps spent, the chosen rate,
val and test loss and top-1 and the test excess over a player uniform over the legal moves (loss −
E[ln N_legal] on the same move decisions, nats) with their intervals, and the stage-1 val loss per
learning rate; the backbone alone (its excess with the interval over games) and that uniform player
on the same games; the comparisons. ``--json FILE`` writes all of it, without the per-game sums.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

MAX_EXTEND = 4
"""Most half-decade extensions of the stage-1 grid on each side."""


def lr_name(lr: float) -> str:
    """``3e-03`` style, the run folder's spelling of a learning rate."""
    return f"{lr:.0e}"


def next_lr(lr: float, side: int) -> float:
    """The half-decade grid point (…, 1e-3, 3e-3, 1e-2, …) beside ``lr``: below it for ``side`` 0,
    above it for ``side`` −1."""
    half_decades = round(2 * math.log10(lr)) + (-1 if side == 0 else 1)
    return float(f"{10 ** (half_decades / 2):.0e}")


@dataclass
class Grid:
    """What :func:`grid_search` did: ``visited`` the (lr, seed) runs in order, ``stage1`` lr → the
    first seed's result, ``runs`` finalist lr → its results over the seeds, ``chosen`` the rate."""

    visited: list[tuple[float, int]] = field(default_factory=list)
    stage1: dict[float, dict] = field(default_factory=dict)
    runs: dict[float, list[dict]] = field(default_factory=dict)
    chosen: Optional[float] = None


def grid_search(objective: Callable[[float, int], dict], lrs: list[float], seeds: list[int], *, top: int = 2,
                max_extend: int = MAX_EXTEND) -> Grid:
    """Stages 1 and 2 of the module docstring on any ``objective(lr, seed) -> {"loss": float, ...}``
    (the val loss of one run; ``inf`` for a diverged run).

    Raises:
        ValueError: no learning rate or no seed.
    """
    if not lrs or not seeds:
        raise ValueError("need at least one learning rate and one seed")
    g = Grid()

    def run(lr: float, seed: int) -> dict:
        g.visited.append((lr, seed))
        return objective(lr, seed)

    for lr in sorted(lrs):
        g.stage1[lr] = run(lr, seeds[0])
    for side in (0, -1):
        for _ in range(max_extend):
            ordered = sorted(g.stage1)
            best = min(ordered, key=lambda lr: g.stage1[lr]["loss"])
            if best != ordered[side] or not math.isfinite(g.stage1[best]["loss"]):
                break
            nxt = next_lr(best, side)
            g.stage1[nxt] = run(nxt, seeds[0])
    ranked = sorted(g.stage1, key=lambda lr: g.stage1[lr]["loss"])
    finalists = [lr for lr in ranked[:top] if math.isfinite(g.stage1[lr]["loss"])]
    for lr in finalists:
        g.runs[lr] = [g.stage1[lr]] + [run(lr, s) for s in seeds[1:]]
    mean_loss = {lr: statistics.fmean(r["loss"] for r in rs) for lr, rs in g.runs.items()}
    g.chosen = min(mean_loss, key=mean_loss.get) if mean_loss else None
    return g


def run_dir(a, strategy: str, lr: float, seed: int) -> Path:
    return a.out / strategy / f"lr{lr_name(lr)}_s{seed}"


def read(path: Path):
    """``{loss, top1, step0_loss, step0_top1, steps, trainable, movable, positions}`` of a finished
    run (loss inf when it diverged), or None when the run did not end."""
    from pawn.runs import open_run

    if not (path / "metrics.jsonl").exists():
        return None
    run = open_run(path)
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
        "trainable": run.trainable_params, "movable": run.movable_params, "dir": str(path),
    }


def train(a, strategy: str, lr: float, seed: int) -> dict:
    """Run (or re-read) one ``pawn adapt``; a failed run is ``{"loss": inf, "error": ...}``."""
    out = run_dir(a, strategy, lr, seed)
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


def held_out(run: Path, split: str) -> dict:
    """The ``held_out`` block of ``pawn eval RUN/best --split SPLIT --pgn-only --json RUN/eval_SPLIT.json``
    (run once; the command runs in this process, so the evaluations of one strategy share their
    compiled steps).

    Raises:
        RuntimeError: the evaluation failed.
    """
    from pawn.cli import app

    js = run / f"eval_{split}.json"
    if not js.exists():
        try:
            app(["eval", str(run / "best"), "--split", split, "--pgn-only", "--json", str(js)], standalone_mode=False)
        except SystemExit as e:
            if e.code:
                raise RuntimeError(f"pawn eval {run / 'best'} --split {split}: exit {e.code}") from None
        if not js.exists():
            raise RuntimeError(f"pawn eval {run / 'best'} --split {split}: wrote no {js}")
    return json.loads(js.read_text())["models"][0]["held_out"]


def per_game(blocks: list[dict]):
    """Stack the per-game sums of one arm's seeds: ``(legal_nll, legal_hits, n_moves)``, float [S, G].

    Raises:
        ValueError: the seeds were scored on different games.
    """
    import numpy as np

    n = [b["per_game"]["n_moves"] for b in blocks]
    if any(x != n[0] for x in n):
        raise ValueError("the seeds' held-out games differ (a different source or split rule)")
    return tuple(np.array([b["per_game"][k] for b in blocks], float) for k in ("legal_nll", "legal_hits", "n_moves"))


def figures(blocks: list[dict]) -> dict:
    """Loss, top-1 and the excess over the uniform-over-legal player (legal-masked, every move
    decision; the excess is loss − E[ln N_legal] on the same positions, nats) of one arm over seeds
    and games, each a :meth:`pawn.stats.Interval.to_dict` (the excess only when the blocks carry
    ``per_game.ln_n_legal``)."""
    import numpy as np

    from pawn.stats import seeds_and_games

    nll, hits, n = per_game(blocks)
    out = {"loss": seeds_and_games(nll, n).to_dict(), "top1": seeds_and_games(hits, n).to_dict()}
    if all("ln_n_legal" in b["per_game"] for b in blocks):
        ln_n = np.array([b["per_game"]["ln_n_legal"] for b in blocks], float)
        out["excess"] = seeds_and_games(nll - ln_n, n).to_dict()
    return out


def sweep(a, strategy: str) -> dict:
    """All three stages for one strategy; returns its record (see the module docstring)."""
    from pawn.adapters.registry import STRATEGIES

    lrs = [STRATEGIES[strategy].lr] if a.at_default else a.lrs
    g = grid_search(lambda lr, seed: train(a, strategy, lr, seed), lrs, a.seeds,
                    top=1 if a.at_default else a.top, max_extend=0 if a.at_default else a.max_extend)
    rec = {"strategy": strategy, "stage1": {lr_name(lr): g.stage1[lr]["loss"] for lr in sorted(g.stage1)},
           "finalists": {lr_name(lr): [r["loss"] for r in rs] for lr, rs in g.runs.items()}, "lr": g.chosen}
    if g.chosen is None:
        return rec
    rs = g.runs[g.chosen]
    rec.update({k: rs[0].get(k) for k in ("trainable", "movable", "optimizer_steps", "gradient_batches",
                                          "step0_loss", "step0_top1", "positions")})
    rec["seeds"] = len(rs)
    rec["dirs"] = [r["dir"] for r in rs]
    rec["held_out"] = {}
    for split in ("val", "test"):
        blocks = [held_out(Path(d), split) for d in rec["dirs"]]
        rec["held_out"][split] = {**figures(blocks), "blocks": blocks}
    return rec


def compare_pair(ra: dict, rb: dict, split: str) -> dict:
    """A − B of two strategies' chosen runs (same seeds, same games) on ``split``: loss and top-1,
    each :meth:`pawn.stats.Comparison.to_dict` with its verdict."""
    from pawn.stats import compare

    na, ha, n = per_game(ra["held_out"][split]["blocks"])
    nb, hb, n_b = per_game(rb["held_out"][split]["blocks"])
    names = (ra["strategy"], rb["strategy"])
    return {"loss": compare(na, nb, n, den_b=n_b, higher_is_better=False, names=names).to_dict(),
            "top1": compare(ha, hb, n, den_b=n_b, higher_is_better=True, names=names).to_dict()}


def _iv(d: dict, scale: float = 1.0, fmt: str = ".3f") -> str:
    e, lo, hi = (format(d[k] * scale, fmt) for k in ("estimate", "lo", "hi"))
    return f"{e} [{lo}, {hi}]"


def table(recs: list[dict]) -> str:
    """The results as a Markdown table (95 % intervals over seeds and games in brackets)."""
    lines = ["| strategy | trainable (movable) | optimizer steps (gradient batches) | lr | val loss | val top-1 % | test loss | "
             "test top-1 % | test excess over uniform (nats) | stage-1 val loss by lr (seed 0) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in recs:
        if r["lr"] is None:
            lines.append(f"| {r['strategy']} | | | every run failed | | | | | | |")
            continue
        h = r["held_out"]
        params = f"{r['trainable']:,}" + (f" ({r['movable']:,})" if r["movable"] != r["trainable"] else "")
        s1 = ", ".join(f"{k}: {v:.3f}" if math.isfinite(v) else f"{k}: diverged" for k, v in r["stage1"].items())
        ex = _iv(h["test"]["excess"], 1, "+.3f") if "excess" in h["test"] else "—"
        lines.append(f"| {r['strategy']} | {params} | {r['optimizer_steps']} ({r['gradient_batches']}) | {lr_name(r['lr'])} | "
                     f"{_iv(h['val']['loss'])} | {_iv(h['val']['top1'], 100, '.2f')} | {_iv(h['test']['loss'])} | "
                     f"{_iv(h['test']['top1'], 100, '.2f')} | {ex} | {s1} |")
    return "\n".join(lines)


def comparison_table(comps: dict) -> str:
    """The ``--compare`` pairs as a Markdown table: A − B per split with its interval, the seeds' t and the verdict."""
    lines = ["| A − B | split | loss difference | verdict | top-1 difference (pp) | verdict |", "|---|---|---:|---|---:|---|"]
    for pair, by in comps.items():
        for split in ("val", "test"):
            c = by[split]
            lo, t1 = c["loss"], c["top1"]
            lines.append(f"| {pair} | {split} | {_iv(lo['interval'], 1, '+.3f')} (t {lo['seeds']['t']:.1f}) | {lo['verdict']} | "
                         f"{_iv(t1['interval'], 100, '+.2f')} (t {t1['seeds']['t']:.1f}) | {t1['verdict']} |")
    return "\n".join(lines)


def references(recs: list[dict]) -> dict:
    """The backbone alone and the uniform-over-legal player on each split's held-out games (from the
    first strategy's evaluations: every run scores the same games, and neither reference depends on
    a seed, so the backbone's excess carries the bootstrap interval over games ``pawn eval`` wrote):
    ``{split: {n_games, n_positions, backbone: {loss, top1, excess: {estimate, lo, hi}}, uniform: {loss, top1}}}``."""
    first = next((r for r in recs if r.get("held_out")), None)
    if first is None:
        return {}
    out = {}
    for split in ("val", "test"):
        b = first["held_out"][split]["blocks"][0]
        bb = b.get("backbone") or {}
        out[split] = {"n_games": b["n_games"], "n_positions": b["n_positions"],
                      "backbone": {"loss": bb.get("loss_legal_masked_all_moves", math.nan),
                                   "top1": bb.get("top1_legal_masked_all_moves", math.nan),
                                   "excess": {"estimate": bb.get("excess_nats_all_moves", math.nan),
                                              "lo": bb.get("excess_nats_lo", math.nan), "hi": bb.get("excess_nats_hi", math.nan)}},
                      "uniform": {"loss": b["uniform_loss_all_moves"], "top1": b["uniform_top1_all_moves"]}}
    return out


def reference_lines(refs: dict) -> list[str]:
    """One printed line per split of :func:`references`."""
    out = []
    for split, f in refs.items():
        bb, u = f["backbone"], f["uniform"]
        out.append(f"{split} ({f['n_games']} games, {f['n_positions']:,} move decisions): backbone alone loss {bb['loss']:.3f}, "
                   f"top-1 {100 * bb['top1']:.2f} %, excess over uniform {_iv(bb['excess'], 1, '+.3f')} nats; "
                   f"uniform over the legal moves loss {u['loss']:.3f}, top-1 {100 * u['top1']:.2f} %")
    return out


def parser() -> argparse.ArgumentParser:
    """The command line of the module docstring's usage."""
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
    p.add_argument("--max-extend", type=int, default=MAX_EXTEND, help="most grid extensions per side")
    p.add_argument("--at-default", action="store_true", help="no grid: each strategy's own default rate, every seed")
    p.add_argument("--compare", default="bottleneck:lora", help="comma list of A:B pairs compared on val and test")
    p.add_argument("--json", type=Path, default=None)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    a = parser().parse_args(argv)
    a.lrs = [float(x) for x in a.lrs.split(",")]
    a.seeds = [int(x) for x in a.seeds.split(",")]
    from pawn.adapters.registry import STRATEGIES
    from pawn.fileio import write_json

    names = list(STRATEGIES) if a.strategies is None else a.strategies.split(",")
    recs = []
    for s in names:
        print(f"{s}:", flush=True)
        recs.append(sweep(a, s))
    by = {r["strategy"]: r for r in recs if r.get("held_out")}
    comps = {}
    for pair in filter(None, a.compare.split(",")):
        x, y = pair.split(":")
        if x in by and y in by:
            comps[f"{x} − {y}"] = {split: compare_pair(by[x], by[y], split) for split in ("val", "test")}
    refs = references(recs)
    for line in reference_lines(refs):
        print(line)
    print(table(recs))
    if comps:
        print()
        print(comparison_table(comps))
    if a.json is not None:
        slim = [{k: v for k, v in r.items() if k != "held_out"} | ({"held_out": {sp: {k: v for k, v in h.items() if k != "blocks"}
                                                                              for sp, h in r["held_out"].items()}}
                                                                   if r.get("held_out") else {}) for r in recs]
        write_json(a.json, {"strategies": slim, "comparisons": comps, "references": refs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
