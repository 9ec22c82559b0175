"""Tests that read the shared data fail (not skip) when the data folder is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
ONE_DATA_TEST = "tests/test_vocab.py::test_export_move_vocabulary_matches_file"


def _pytest_with_shared_dir(shared_dir: Path, **extra_env: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PAWN_ALLOW_MISSING_SHARED_DATA"}
    env.update(PAWN_SHARED_DIR=str(shared_dir), **extra_env)
    return subprocess.run([sys.executable, "-m", "pytest", ONE_DATA_TEST, "-q", "-p", "no:cacheprovider"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_shared_data_test_fails_with_the_folder_named_when_the_data_is_missing(tmp_path):
    r = _pytest_with_shared_dir(tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert f"shared test data not found at {tmp_path / 'data'}" in out
    assert "PAWN_SHARED_DIR" in out and "skipped" not in out
    assert "Traceback" not in out


def test_the_explicit_opt_out_turns_the_failure_into_a_skip(tmp_path):
    r = _pytest_with_shared_dir(tmp_path, PAWN_ALLOW_MISSING_SHARED_DATA="1")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "1 skipped" in out and "failed" not in out and "error" not in out
