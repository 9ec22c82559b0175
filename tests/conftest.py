"""Shared fixtures. JAX is forced onto the CPU for every test."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _shared_dir() -> Path:
    return Path(os.environ.get("PAWN_SHARED_DIR", REPO_ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The project's shared data folder (``../shared/data`` beside the checkout, or
    ``$PAWN_SHARED_DIR/data``)."""
    d = _shared_dir() / "data"
    if not d.is_dir():
        pytest.skip(f"shared test data not found at {d}; set PAWN_SHARED_DIR")
    return d


@pytest.fixture(scope="session")
def lichess_pgns(shared_data: Path) -> list[Path]:
    """Every Lichess PGN file in the shared data, sorted by name."""
    files = sorted((shared_data / "lichess").glob("*.pgn"))
    assert files, "no PGN files in shared/data/lichess"
    return files
