"""Shared fixtures. JAX is forced onto the CPU for every test.

Tests that read the project's shared data (the published vocabulary, Lichess and UCI files) take
the ``shared_data`` fixture. When the folder is missing they FAIL with one line saying where it was
looked for, so a CI run without the data cannot pass by skipping them. Setting
``PAWN_ALLOW_MISSING_SHARED_DATA=1`` turns that failure into a skip (an explicit, non-default
opt-out for machines that do not have the data).
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest-xdist sets COLUMNS=80 in its workers; PAWN's output to a pipe or file is LOG_WIDTH wide unless
    # COLUMNS is set, so a worker would see tables and lines wrapped where a user's log is not
    os.environ.pop("COLUMNS", None)

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
ALLOW_MISSING_ENV = "PAWN_ALLOW_MISSING_SHARED_DATA"


def _shared_dir() -> Path:
    return Path(os.environ.get("PAWN_SHARED_DIR", REPO_ROOT.parent / "shared"))


def missing_shared_data_message(data_dir: Path) -> str:
    """The one-line failure text when ``data_dir`` (the shared ``data`` folder) does not exist."""
    return (f"shared test data not found at {data_dir}: put the project's shared/ folder beside the checkout "
            f"or set PAWN_SHARED_DIR to the folder that holds data/ ({ALLOW_MISSING_ENV}=1 skips these tests instead)")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The project's shared data folder (``../shared/data`` beside the checkout, or
    ``$PAWN_SHARED_DIR/data``). Fails the test when it is missing, unless
    ``PAWN_ALLOW_MISSING_SHARED_DATA=1`` asks for a skip."""
    d = _shared_dir() / "data"
    if not d.is_dir():
        msg = missing_shared_data_message(d)
        if os.environ.get(ALLOW_MISSING_ENV) == "1":
            pytest.skip(msg)
        pytest.fail(msg, pytrace=False)
    return d


@pytest.fixture(scope="session")
def lichess_pgns(shared_data: Path) -> list[Path]:
    """Every Lichess PGN file in the shared data, sorted by name."""
    files = sorted((shared_data / "lichess").glob("*.pgn"))
    assert files, f"no PGN files in {shared_data / 'lichess'}"
    return files


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
