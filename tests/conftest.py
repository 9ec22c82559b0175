"""Shared fixtures. JAX is forced onto the CPU for every test.

Tests that read real chess data (the published vocabulary, Lichess and UCI files) take the
``shared_data`` fixture: the repository's copies (``examples/lichess``, ``tests/data``), laid out as the
project's shared data folder, so the default suite runs on a fresh clone with nothing beside it. The
few tests that need data too large for the repository (the TPU-trained backbone) take
``tpu_backbone``: when ``../shared/data`` (or ``$PAWN_SHARED_DIR/data``) lacks it they skip with one
line naming the folder, and fail with that line where ``CI`` is set, so a CI run without the data
cannot pass by skipping them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest-xdist sets COLUMNS=80 in its workers; PAWN's output to a pipe or file is LOG_WIDTH wide unless
    # COLUMNS is set, so a worker would see tables and lines wrapped where a user's log is not
    os.environ.pop("COLUMNS", None)

import pytest


REPO_ROOT = Path(__file__).resolve().parents[1]
LICHESS_SAMPLE = REPO_ROOT / "examples" / "lichess"
"""The repository's Lichess sample: seven ``.pgn.zst`` files (7,321 games of the public Lichess database,
CC0), whose provenance and SHA-256 sums are in its README.md."""
TEST_DATA = REPO_ROOT / "tests" / "data"
"""The repository's other test data: ``searchless_chess_vocabulary.json`` and ``uci/`` (provenance in
``tests/data/README.md``)."""


def in_ci() -> bool:
    """``CI`` is set to something other than empty, ``0``, ``false`` or ``no``, as GitHub Actions, GitLab CI
    and most CI services set it (``CI=true``) and ``.ci/run`` exports it."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _shared_dir() -> Path:
    return Path(os.environ.get("PAWN_SHARED_DIR", REPO_ROOT.parent / "shared"))


def missing_shared_data_message(path: Path, what: str) -> str:
    """The one-line skip (outside CI) or failure (in CI) text when ``path``, inside the shared data folder,
    does not exist; ``what`` says what it is."""
    return (f"shared data not found at {path} ({what}): put the project's shared/ folder beside the checkout "
            f"or set PAWN_SHARED_DIR to the folder that holds data/ (skipped outside CI; fails where CI is set)")


def shared_path(relative: str, what: str) -> Path:
    """``relative`` inside the shared data folder (``../shared/data`` beside the checkout, or
    ``$PAWN_SHARED_DIR/data``): data too large for the repository (the TPU-trained backbone).

    Raises:
        pytest.skip.Exception: it is missing and CI is not set (:func:`in_ci`).
        pytest.fail.Exception: it is missing and CI is set, so a CI run cannot pass by skipping.
    """
    path = _shared_dir() / "data" / relative
    if not path.exists():
        msg = missing_shared_data_message(path, what)
        if in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return path


def lichess_sample_files() -> list[Path]:
    """The ``.pgn.zst`` files of :data:`LICHESS_SAMPLE`, sorted by name."""
    return sorted(LICHESS_SAMPLE.glob("*.pgn.zst"))


def build_test_data(root: Path) -> Path:
    """Lay the repository's test data out under ``root`` as the project's shared folder is laid out, and
    return ``root / "data"``: ``lichess/NAME.pgn`` (each sample file decompressed: byte for byte the
    published file), ``uci/`` and ``searchless_chess_vocabulary.json`` (links to ``tests/data``). The
    shared folder's ``backbones/`` is not there: a test that needs it takes ``tpu_backbone``.

    Raises:
        FileNotFoundError: the repository's sample or test data is missing (a broken checkout).
    """
    import zstandard

    data = root / "data"
    (data / "lichess").mkdir(parents=True)
    files = lichess_sample_files()
    if not files:
        raise FileNotFoundError(f"no .pgn.zst files in {LICHESS_SAMPLE}: the repository's Lichess sample is missing")
    for f in files:
        with open(f, "rb") as src, open(data / "lichess" / f.name[:-len(".zst")], "wb") as dst:
            zstandard.ZstdDecompressor().copy_stream(src, dst)
    for name in ("uci", "searchless_chess_vocabulary.json"):
        if not (TEST_DATA / name).exists():
            raise FileNotFoundError(f"{TEST_DATA / name} is missing: the repository's test data is incomplete")
        (data / name).symlink_to(TEST_DATA / name)
    return data


def copy_of_the_checkout(dest: Path) -> Path:
    """The checkout's files as a fresh clone has them (git's tracked and new unignored files; nothing
    built, no runs), plus the compiled engine where it sits in ``src/pawn`` (this checkout's way of
    having PAWN importable; a clone gets it from ``pip install .``); returns ``dest``.

    Raises:
        pytest.fail.Exception: this checkout is not a git checkout (the copy is made of git's file list).
    """
    if not (REPO_ROOT / ".git").exists():
        pytest.fail(f"{REPO_ROOT} is not a git checkout: the copy is made of git's file list", pytrace=False)
    names = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = REPO_ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    for so in (REPO_ROOT / "src" / "pawn").glob("_engine*.so"):
        shutil.copy2(so, dest / "src" / "pawn" / so.name)
    return dest


@pytest.fixture(scope="session")
def shared_data(tmp_path_factory) -> Path:
    """The test data, laid out as the project's shared ``data`` folder (see :func:`build_test_data`), all
    of it from the repository: ``lichess/`` (the seven Lichess PGN files), ``uci/`` and the vocabulary,
    so a test that takes this fixture needs nothing beside the checkout. Made once per session."""
    return build_test_data(tmp_path_factory.mktemp("shared"))


@pytest.fixture(scope="session")
def lichess_pgns(shared_data: Path) -> list[Path]:
    """Every Lichess PGN file of the test data (the repository's sample, decompressed), sorted by name."""
    files = sorted((shared_data / "lichess").glob("*.pgn"))
    assert files, f"no PGN files in {shared_data / 'lichess'}"
    return files


@pytest.fixture(scope="session")
def tpu_backbone() -> Path:
    """``backbones/tiny-tpu-3k`` of the shared data folder: the TPU-trained backbone (2.77 M parameters,
    11 MB), too large for the repository. Skips outside CI when it is missing, fails in CI
    (:func:`shared_path`)."""
    return shared_path("backbones/tiny-tpu-3k", "the TPU-trained backbone tiny-tpu-3k")


@pytest.fixture(autouse=True)
def _own_plan_cache(tmp_path_factory, monkeypatch):
    """`--remat auto` keeps its measured plan in the user's cache (pawn.train.step_plan.cache_path):
    each test gets a cache of its own, so a plan an earlier test (or this machine) found never
    changes what a test sees. A test that sets PAWN_PLAN_CACHE itself overrides it."""
    monkeypatch.setenv("PAWN_PLAN_CACHE", str(tmp_path_factory.mktemp("plan-cache") / "step_plans.json"))


@pytest.fixture(autouse=True)
def _hf_offline_follows_the_environment(monkeypatch):
    """huggingface_hub reads HF_HUB_OFFLINE once, at its first import: a test that imported it
    under ``HF_HUB_OFFLINE=1`` would leave every later test offline. Each test starts with the
    library's flag equal to the environment's."""
    import sys

    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        value = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", value)


@pytest.fixture(scope="session")
def tiny_backbone(tmp_path_factory) -> Path:
    """A random-init v2 checkpoint (d_model 32, 2 layers, 1 head, d_ff 64; pure moves, trained
    context 128) for adapter tests: made once per session."""
    import jax
    import numpy as np

    from pawn.checkpoint import save_checkpoint
    from pawn.config import ModelConfig
    from pawn.model import PAWNModel

    cfg = ModelConfig(d_model=32, n_layers=2, n_heads=1, d_ff=64)
    d = tmp_path_factory.mktemp("tiny-backbone") / "bb"
    m = PAWNModel(cfg, jax.random.PRNGKey(1))
    save_checkpoint(d, {k: np.asarray(v) for k, v in m.params().items()}, cfg,
                    run_config={"prepend_outcome": False, "seq_len": 128})
    return d


ALLOW_MISSING_POSTGRES_ENV = "PAWN_ALLOW_MISSING_POSTGRES"


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server for this test session (:mod:`tests._postgres`: a cluster in a
    temporary folder from the machine's own ``postgresql`` package, on a free loopback port),
    stopped and removed at the end, and the ``psycopg2`` driver (the test extra). Fails when the
    server binaries or the driver are missing, unless ``PAWN_ALLOW_MISSING_POSTGRES=1`` asks for a
    skip (a machine without the package)."""
    import importlib.util
    import shutil

    from _postgres import start_server

    def missing(msg: str):
        if os.environ.get(ALLOW_MISSING_POSTGRES_ENV) == "1":
            pytest.skip(msg)
        pytest.fail(f"{msg} ({ALLOW_MISSING_POSTGRES_ENV}=1 skips these tests instead)", pytrace=False)

    if importlib.util.find_spec("psycopg2") is None:
        missing("the PostgreSQL driver psycopg2 is not installed: pip install 'pawn[test]' (psycopg2-binary)")
    try:
        server = start_server()
    except FileNotFoundError as e:
        missing(str(e))
    try:
        yield server
    finally:
        try:
            server.stop("immediate")
        except Exception:  # already stopped by a test that failed half way
            pass
        shutil.rmtree(server.home, ignore_errors=True)


@pytest.fixture(autouse=True)
def _environment_restored():
    """A command run in-process (typer's CliRunner) may set variables for its own child processes
    (``pawn bench`` sets ``XLA_PYTHON_CLIENT_PREALLOCATE``); in a real run the process then ends.
    Each test leaves ``os.environ`` as it found it, so no later test sees them."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)
