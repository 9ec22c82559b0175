"""The test data lives in the repository: the Lichess sample decompresses to the files its README lists,
the default suite runs from a copy of the checkout with no ``../shared`` beside it, and the tests that need
the shared folder's backbone skip outside CI and fail in CI, naming the folder."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard
from conftest import LICHESS_SAMPLE, REPO_ROOT, TEST_DATA, copy_of_the_checkout, lichess_sample_files, shared_path

ONE_DATA_TEST = "tests/test_vocab.py::test_export_move_vocabulary_matches_file"
ONE_BACKBONE_TEST = "tests/test_eval.py::test_eval_on_the_shared_backbone_prints_legal_masked_top1_within_its_ceiling"


def _readme_table() -> dict[str, tuple[int, str]]:
    """``{file name: (games, SHA-256 of the PGN)}`` from the table of examples/lichess/README.md."""
    rows = re.findall(r"^\| `([^`]+)` \| .*? \| ([\d,]+) \| `([0-9a-f]{64})` \|$",
                      (LICHESS_SAMPLE / "README.md").read_text("utf-8"), re.M)
    return {f"{name}.pgn.zst": (int(games.replace(",", "")), sha) for name, games, sha in rows}


def test_the_lichess_sample_is_the_files_its_readme_lists():
    """Each ``.pgn.zst`` decompresses to the PGN whose SHA-256 and game count the README gives; the
    README lists every file; 7,321 games in under 2 MB."""
    table = _readme_table()
    files = lichess_sample_files()
    assert sorted(table) == [f.name for f in files] and len(files) == 7
    for f in files:
        pgn = zstandard.ZstdDecompressor().stream_reader(f.open("rb")).read()
        assert (pgn.count(b"\n[Event ") + pgn.startswith(b"[Event "), hashlib.sha256(pgn).hexdigest()) == table[f.name], f.name
    assert sum(g for g, _ in table.values()) == 7321
    assert sum(f.stat().st_size for f in files) < 2 * 2**20


@pytest.fixture
def shared_folder() -> Path:
    """The shared ``data`` folder beside the checkout (skipped outside CI when it is missing)."""
    return shared_path("lichess", "the shared Lichess files").parent


def test_the_test_data_is_the_shared_folders_files(shared_data, shared_folder):
    """The Lichess files, the vocabulary and the UCI files the tests read are byte for byte those of the
    shared folder (checked where it is; in CI always)."""
    shared = shared_folder
    for rel in [f"lichess/{f.name[:-4]}" for f in lichess_sample_files()] + [
            "searchless_chess_vocabulary.json", *(f"uci/{p.name}" for p in (TEST_DATA / "uci").iterdir())]:
        assert (shared_data / rel).read_bytes() == (shared / rel).read_bytes(), rel
    assert sorted(p.name for p in (shared / "lichess").glob("*.pgn")) == sorted(p.name for p in (shared_data / "lichess").iterdir())


def _pytest(test: str, shared_dir: Path, ci: bool, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")}
    env["PAWN_SHARED_DIR"] = str(shared_dir)
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", *test.split(), "-q", "-rs", "-n", "0", "-p", "no:cacheprovider"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_without_the_shared_folder_the_backbone_test_skips_and_the_data_tests_pass(tmp_path):
    r = _pytest(f"{ONE_DATA_TEST} {ONE_BACKBONE_TEST}", tmp_path, ci=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "1 passed, 1 skipped" in out and "failed" not in out and "Traceback" not in out
    skip = next(ln for ln in out.splitlines() if ln.startswith("SKIPPED"))
    assert skip.endswith(f"shared data not found at {tmp_path / 'data' / 'backbones' / 'tiny-tpu-3k'} (the TPU-trained "
                         "backbone tiny-tpu-3k): put the project's shared/ folder beside the checkout or set PAWN_SHARED_DIR "
                         "to the folder that holds data/ (skipped outside CI; fails where CI is set)"), skip


def test_in_ci_the_backbone_test_fails_naming_the_folder(tmp_path):
    r = _pytest(f"{ONE_DATA_TEST} {ONE_BACKBONE_TEST}", tmp_path, ci=True)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert out.strip().splitlines()[-1].startswith("1 passed, 1 error in "), out
    assert f"\nshared data not found at {tmp_path / 'data' / 'backbones' / 'tiny-tpu-3k'} (the TPU-trained" in out
    assert "ERROR at setup of test_eval_on_the_shared_backbone" in out and "Traceback" not in out


def _subset_plugin(folder: Path) -> Path:
    """A pytest plugin that keeps only the tests taking one of the data fixtures."""
    folder.mkdir()
    (folder / "data_tests_only.py").write_text(
        "def pytest_collection_modifyitems(config, items):\n"
        "    keep = [i for i in items if {'shared_data', 'lichess_pgns', 'tpu_backbone'} & set(getattr(i, 'fixturenames', ()))]\n"
        "    config.hook.pytest_deselected(items=[i for i in items if i not in keep])\n"
        "    items[:] = keep\n")
    return folder


QUICK_DATA_TESTS = f"tests/test_vocab.py tests/test_pgn.py tests/test_uci.py tests/test_pgn_dialects.py {ONE_BACKBONE_TEST}"
"""The quick data-reading tests (the vocabulary, the Lichess files against python-chess, the UCI files) and
the backbone test, run from the copy by the default suite; the slow test runs every data-reading test."""


def _run_in_copy(tmp_path: Path, tests: str, workers: int) -> tuple[subprocess.CompletedProcess, Path]:
    clone = copy_of_the_checkout(tmp_path / "clone")
    plugin = _subset_plugin(tmp_path / "plugin")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")}
    nowhere = tmp_path / "no-shared"
    env.update(PAWN_SHARED_DIR=str(nowhere), PYTHONPATH=os.pathsep.join(filter(None, [str(plugin), str(clone / "src")
               if list((clone / "src" / "pawn").glob("_engine*.so")) else None])))
    r = subprocess.run([sys.executable, "-m", "pytest", *tests.split(), "-p", "data_tests_only", "-p", "no:cacheprovider",
                        "-q", "-rs", "-n", str(workers), *(["--dist", "loadfile"] if workers else [])],
                       cwd=clone, env=env, capture_output=True, text=True, timeout=3600)
    assert not (tmp_path / "shared").exists() and not nowhere.exists()
    return r, nowhere


def _check_run(r: subprocess.CompletedProcess, nowhere: Path) -> None:
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    summary = out.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary) and "failed" not in summary and "error" not in summary, summary
    skips = [ln for ln in out.splitlines() if ln.startswith("SKIPPED")]
    assert skips and all(f"shared data not found at {nowhere / 'data'}" in ln for ln in skips), skips


def test_the_data_tests_pass_from_a_copy_of_the_checkout_with_no_shared_folder(tmp_path):
    """A copy of the checkout with nothing beside it (``PAWN_SHARED_DIR`` names a folder that does not
    exist): the quick data-reading tests pass, and the backbone test skips with the one reason."""
    _check_run(*_run_in_copy(tmp_path, QUICK_DATA_TESTS, workers=0))
