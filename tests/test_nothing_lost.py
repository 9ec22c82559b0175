"""Nothing lost: racing runs on one directory, bursts of signals, a full disk, a UCI clock of
10^400, quotes in PGN tags, unknown manifest versions. Every case drives the real CLI in its
own process (real signals, real files)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "PAWN_LOG_EVERY_S": "0"}


def _tiny(out: Path, steps: int = 4, chunk: int = 2, *extra: str) -> list[str]:
    return ["pretrain", "--supernet", "tiny", "--total-steps", str(steps), "--steps-per-chunk", str(chunk),
            "--batch-size", "4", "--seq-len", "32", "--val-games", "0", "--checkpoint-every", str(steps),
            "--out", str(out), *extra]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "pawn.cli", *args]


def _after_barrier(barrier: Path, args: list[str]) -> list[str]:
    """The real CLI, started only once ``barrier`` exists (both racers poll the same file)."""
    code = ("import os, runpy, sys, time\n"
            f"while not os.path.exists({str(barrier)!r}): time.sleep(0.001)\n"
            f"sys.argv = ['pawn'] + {args!r}\n"
            "runpy.run_module('pawn.cli', run_name='__main__')\n")
    return [sys.executable, "-c", code]


def _race(tmp_path: Path, args: list[str]) -> list[subprocess.CompletedProcess]:
    barrier = tmp_path / "go"
    procs = [subprocess.Popen(_after_barrier(barrier, args), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    time.sleep(2.0)  # both interpreters up and polling
    barrier.touch()
    out = []
    for p in procs:
        so, se = p.communicate(timeout=600)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, so, se))
    return out


# ------------------------------------------------------------------------------ one run per directory


def _one_run(run: Path, results: list[subprocess.CompletedProcess]) -> None:
    codes = sorted(r.returncode for r in results)
    assert codes == [0, 1], [(r.returncode, r.stderr[-1500:]) for r in results]
    loser = next(r for r in results if r.returncode == 1)
    errors = [ln for ln in (loser.stdout + loser.stderr).splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in loser.stderr, loser.stdout + loser.stderr
    assert str(run) in errors[0] and "another pawn process" in errors[0], errors[0]
    records = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert sum(r.get("type") == "config" for r in records) == 1
    steps = [r["step"] for r in records if r.get("type") == "train"]
    assert steps == sorted(set(steps)), steps  # every step once


def test_two_pretrains_on_one_out_started_at_once_one_runs_the_other_gets_one_line(tmp_path):
    run = tmp_path / "run"
    _one_run(run, _race(tmp_path, _tiny(run)))
    assert (run / "checkpoints" / "step_00000004" / ".complete").is_file()


def test_two_overwrites_of_one_out_started_at_once_move_the_old_run_aside_once(tmp_path):
    run = tmp_path / "run"
    first = subprocess.run(_cli(*_tiny(run)), env=ENV, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    _one_run(run, _race(tmp_path, _tiny(run, 4, 2, "--overwrite")))
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run.old-")]
    assert len(aside) == 1 and (aside[0] / "checkpoints" / "step_00000004" / ".complete").is_file()
