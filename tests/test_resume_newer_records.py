"""``--resume auto`` of a checkpoint whose saved chunk records carry a metric this PAWN does not
register (written by a newer PAWN, or with a plugin metric registered by ``pawn.metrics.register``
that is not loaded now): the resume goes on, the records come back without that key, and one
warning line names it."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pawn.checkpoint import write_manifest
from pawn.cli import app
from pawn.runs import open_run

TOY = ["--variant", "toy", "--batch-size", "4", "--seq-len", "32", "--val-games", "0", "--steps-per-chunk", "2",
       "--checkpoint-every", "2", "--total-steps", "6"]


def _killed_after_the_step_2_checkpoint_of_a_newer_pawn(run: Path) -> dict:
    """The run as a newer PAWN left it when killed right after writing ``step_00000002``: no later
    checkpoint, no record from step 2 on, and the checkpoint's chunk records carry a metric and a
    per-variant metric unknown here (its manifest rewritten as that PAWN writes it)."""
    import shutil

    shutil.rmtree(run / "checkpoints" / "step_00000004")
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join(ln for ln in lines if json.loads(ln).get("step") is None or json.loads(ln)["step"] < 2))
    ck = run / "checkpoints" / "step_00000002"
    ts = json.loads((ck / "training_state.json").read_text())
    train = next(r for r in ts["chunk_records"] if r["type"] == "train")
    train["future_metric"] = 0.25
    train["variants"] = {"toy": {"loss": train["loss"], "future_metric": 0.5}}
    (ck / "training_state.json").write_text(json.dumps(ts))
    write_manifest(ck)
    return train


def test_resume_auto_keeps_going_when_the_saved_records_carry_an_unknown_metric(tmp_path):
    run = tmp_path / "run"
    r = CliRunner().invoke(app, ["pretrain", *TOY, "--pause-after-steps", "4", "--out", str(run)])
    assert r.exit_code == 0, r.output
    saved = _killed_after_the_step_2_checkpoint_of_a_newer_pawn(run)
    r = CliRunner().invoke(app, ["pretrain", "--resume", "auto", "--out", str(run)])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output and "is not a metric" not in r.output
    warnings = [ln for ln in r.output.splitlines() if "future_metric" in ln]
    assert len(warnings) == 1 and warnings[0].startswith("WARNING: ")
    assert "future_metric, variants.toy.future_metric" in warnings[0]
    assert "restored 1 record(s) of step 2" in r.output
    train = {rec.step: rec for rec in open_run(run).train}
    assert sorted(train) == [2, 4, 6]
    assert train[2].get("loss") == saved["loss"] and train[2].get("loss", "toy") == saved["loss"]
    assert "future_metric" not in train[2].values and "future_metric" not in train[2].fields
    assert "future_metric" not in train[2].variants["toy"]
