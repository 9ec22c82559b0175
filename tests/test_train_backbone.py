"""benchmarks/train_backbone.sh --smoke: the real `pawn pretrain` on a CPU, then the bf16 parts,
the curve and the summary it writes, and the parts joined back into a checkpoint that loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from jax.numpy import bfloat16
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import train_backbone  # noqa: E402

PART = 200_000


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("backbone")
    # the pawn this test imports (installed, or on PYTHONPATH) is the one the script runs
    env = {**os.environ, "PYTHON": sys.executable, "PART_BYTES": str(PART), "OUT": str(tmp / "out")}
    p = subprocess.run(["bash", str(REPO / "benchmarks" / "train_backbone.sh"), "--smoke", "--run-dir", str(tmp / "run")],
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return tmp, json.loads(p.stdout.strip().splitlines()[-1])


def test_smoke_run_writes_at_most_eight_files_with_parts_no_larger_than_the_cap(smoke):
    tmp, summary = smoke
    out = tmp / "out"  # from $OUT: no --out given
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8
    parts = sorted((out / "backbone").glob("model.bf16.safetensors.part-*"))
    # the toy model: 267,392 bf16 parameters plus the safetensors header, cut at 200,000 bytes
    assert len(parts) == summary["parts"] == 3
    assert all(p.stat().st_size <= PART for p in parts) and parts[0].stat().st_size == PART
    assert sum(p.stat().st_size for p in parts) == summary["bf16_bytes"]
    assert summary["params"] == 267_392 and summary["steps"] == 20 and summary["stop_reason"] == "completed"
    assert summary["smoke"] is True and summary["pretrain_exit_code"] == 0
    assert json.loads((out / "summary.json").read_text()) == summary


def test_curve_has_one_row_per_validation_with_the_excess_over_uniform(smoke):
    tmp, _ = smoke
    c = json.loads((tmp / "out" / "curve.json").read_text())
    rows = c["val"]
    assert [r["step"] for r in rows] == [10, 20]
    assert [r["tokens"] for r in rows] == [10 * 8 * 32, 20 * 8 * 32]
    for r in rows:
        # excess = legal-masked loss − E[ln N_legal] over the same positions, inside its interval
        assert r["excess_nats"] == pytest.approx(r["legal_masked_loss_all_moves"] - r["uniform_legal_loss"], abs=1e-9)
        assert r["excess_nats_lo"] < r["excess_nats"] < r["excess_nats_hi"]
        assert 0 <= r["legal_rate"] <= 1
        # a random game's position has about 20-40 legal moves: E[ln N] lies between ln 10 and ln 60
        assert np.log(10) < r["uniform_legal_loss"] < np.log(60)


def test_joined_parts_load_as_the_best_checkpoint_rounded_to_bf16(smoke, tmp_path):
    from pawn.checkpoint import load_checkpoint

    tmp, summary = smoke
    ck = train_backbone.join(tmp / "out" / "backbone", tmp_path / "ckpt")
    got = load_checkpoint(ck)
    ref = load_checkpoint(summary["checkpoint"])
    assert got.config == ref.config and got.run_config == ref.run_config
    changed = 0
    for k, v in ref.params.items():
        want = np.asarray(v, np.float32).astype(bfloat16).astype(np.float32)
        np.testing.assert_array_equal(got.params[k], want)
        changed += int((want != v).sum())
    assert changed > 0  # really bf16: fp32 weights do not survive unrounded


def test_join_refuses_an_altered_part(smoke, tmp_path):
    import shutil

    tmp, _ = smoke
    parts = tmp_path / "parts"
    shutil.copytree(tmp / "out" / "backbone", parts)
    p = parts / "model.bf16.safetensors.part-01"
    b = bytearray(p.read_bytes())
    b[100] ^= 1
    p.write_bytes(bytes(b))
    with pytest.raises(train_backbone.ExportError, match="part-01: SHA-256 differs"):
        train_backbone.join(parts, tmp_path / "ckpt")
    assert not (tmp_path / "ckpt").exists()


def test_split_parts_cuts_consecutive_pieces():
    assert train_backbone.split_parts(b"abcdefg", 3) == [b"abc", b"def", b"g"]
    assert train_backbone.split_parts(b"abcdef", 3) == [b"abc", b"def"]
    with pytest.raises(ValueError, match="at least 1 byte"):
        train_backbone.split_parts(b"a", 0)


def test_export_refuses_more_files_than_an_accelerator_call_returns(smoke, tmp_path):
    tmp, _ = smoke
    with pytest.raises(train_backbone.ExportError, match=r"more than 8"):
        train_backbone.export(tmp / "run", tmp_path / "o", part_bytes=50_000)  # 11 parts + 4 files
