"""The live report (:class:`pawn.report.hook.ReportHook`) runs inside the training process at
every validation; it once re-hashed every kept checkpoint each time (SHA-256 of each weights
file). It now reads no checkpoint file: a checkpoint whose bytes no longer match its manifest
shows "not checked" in the live report, while ``pawn report`` still finds it corrupt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pawn.checkpoint import write_manifest
from pawn.train.metrics import MetricsLogger

pytest.importorskip("plotly", reason="the report extra: pip install 'pawn[report]'")


def _run_with_a_corrupt_checkpoint(run_dir: Path) -> Path:
    """A run with one val record and ``checkpoints/step_00000002`` whose weights changed after
    its manifest was written (what hashing would catch)."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"model": "toy"}))
    ck = run_dir / "checkpoints" / "step_00000002"
    ck.mkdir(parents=True)
    (ck / "model.safetensors").write_bytes(b"\0" * 4096)
    write_manifest(ck)
    (ck / "model.safetensors").write_bytes(b"\1" * 4096)
    log = MetricsLogger(run_dir / "metrics.jsonl")
    log.write("train", step=2, loss=2.5, top1=0.1)
    log.write("val", step=2, loss=2.6, top1=0.1)
    log.close()
    return ck


def test_the_live_report_hook_does_not_hash_checkpoints(tmp_path):
    from _report_page import embedded

    from pawn.report import write_report
    from pawn.report.hook import ReportHook

    run_dir = tmp_path / "run"
    _run_with_a_corrupt_checkpoint(run_dir)
    hook = ReportHook(run_dir)
    hook.on_record("val", {})  # what the logger calls after each val record
    (live,) = embedded(run_dir / "report.html")["runs"][0]["checkpoints"]
    assert live["step"] == 2 and live["verified"] is None  # not read: hashing would have found it corrupt
    hook.close()
    assert embedded(run_dir / "report.html")["runs"][0]["checkpoints"][0]["verified"] is None

    (checked,) = embedded(write_report([run_dir], tmp_path / "report.html"))["runs"][0]["checkpoints"]
    assert checked["verified"] is False  # pawn report verifies the manifest
