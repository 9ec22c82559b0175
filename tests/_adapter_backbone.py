"""The small backbone and token batch the adapter tests share (``test_adapters``, ``test_ia3``,
``test_rosa``): import ``CFG`` and the fixtures ``bb`` and ``tokens`` into a test module."""

from __future__ import annotations

import jax
import pytest

from pawn.config import ModelConfig
from pawn.model import PAWNModel

CFG = ModelConfig(d_model=32, n_layers=3, n_heads=2, d_ff=64, max_seq_len=64)


@pytest.fixture(scope="module")
def bb():
    """A randomly initialised PAWN backbone of shape :data:`CFG` (key 0)."""
    return PAWNModel(CFG, jax.random.PRNGKey(0))


@pytest.fixture(scope="module")
def tokens():
    """int32 [2, 10] random move tokens; row 1 ends in a PAD tail (positions 7–9 = 1968)."""
    t = jax.random.randint(jax.random.PRNGKey(1), (2, 10), 0, 1968)
    return t.at[1, 7:].set(1968)


def small_adapt_args(backbone, shared_data, tmp_path, out, *extra: str) -> list[str]:
    """``pawn adapt`` arguments of a seconds-long run on ``backbone`` (one epoch of 4-game batches
    of 32 positions from the shared Lichess sample, 8 validation games, its cache under
    ``tmp_path``) writing ``out``; ``extra`` adds the strategy and its flags."""
    return ["adapt", str(backbone), *extra, "--data", str(shared_data / "lichess"), "--elo-min", "1200", "--elo-max", "2200",
            "--epochs", "1", "--batch-size", "4", "--seq-len", "32", "--val-games", "8",
            "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]
