"""benchmarks/accel_check.sh --smoke: the accelerator check's every section end to end on this CPU with
a toy model (the script a session with a device runs, in one call), and its JSON read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT


@pytest.mark.slow
def test_accel_check_smoke_runs_every_section_and_writes_its_json(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    p = subprocess.run(["bash", str(REPO_ROOT / "benchmarks" / "accel_check.sh"), "--smoke",
                        "--sections", "doctor,search,train,engine,profile,adapter_ab"],
                       capture_output=True, text=True, env=env, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads((tmp_path / "accel_check.json").read_text())
    assert res["backend"] == "cpu" and any(ln.startswith("backend") for ln in res["doctor"])
    search = res["search"]
    assert search["rc"] == 0 and len(search["candidates"]) == 3, search
    best = max((c for c in search["candidates"] if c["tokens_per_s"]), key=lambda c: c["tokens_per_s"])
    assert (search["taken"]["remat"], search["taken"]["accumulation_steps"]) == (best["remat"], best["accumulation_steps"])
    train = res["train"]
    # the owner's command ran, stopped by SIGINT as a user stops it, on the plan the search cached
    assert train["rc"] == 0 and train["plan_source"] == "cache" and train["plan"]["remat"] == best["remat"], train
    assert train["steady_chunks"] >= 2 and train["tokens_per_s"] > 0 and train["host_peak_rss_gib"] > 0.1
    assert train["flops_per_token"] == 1653504  # the toy model's 6·N + attention FLOPs a token (summary of the run)
    assert res["engine"]["games_per_s"] > 0 and res["engine"]["ahead_x"] > 0
    prof = res["profile"]
    assert prof["rc"] == 0 and prof["top"] and prof["op_ms_per_step"] > 0
    assert not any(t["op"].startswith("$") for t in prof["top"])  # device (XLA) ops, not Python frames
    assert "skipped" in res["adapter_ab"]  # no v2 tree given
