"""Adding an adapter strategy is one file plus its test: a module dropped into
``pawn/adapters/strategies/`` (settings on the public :class:`~pawn.adapters.configs.StrategySettings`,
module on the public :class:`~pawn.adapters.base.Adapter`, its row handed to
:func:`~pawn.adapters.table.register`) shows in ``pawn adapt --list-strategies``, in the
``--strategy`` help and in the table, with no other edit. Checked on a copy of the installed
package, through the real CLI in a child process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pawn

LOGIT_BIAS = '''"""A learned bias β [V] on the output logits, zero at init (a test strategy)."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array
from pydantic import Field

from pawn.adapters.base import Adapter
from pawn.adapters.configs import StrategySettings
from pawn.adapters.table import Strategy, choice, register


class LogitBiasConfig(StrategySettings):
    """Settings of the logit bias."""

    bias_scale: float = Field(1.0, gt=0, description="logit_bias: multiplier on the learned bias.")


class LogitBias(Adapter):
    """β float32 [V], added to the logits times ``scale``."""

    beta: Array
    scale: float = eqx.field(static=True)

    def __init__(self, vocab_size: int, scale: float):
        self.beta, self.scale = jnp.zeros((vocab_size,), jnp.float32), float(scale)

    def logits(self, z):
        return z + self.scale * self.beta


ROW = register(Strategy(
    "logit_bias", "a bias on the output logits", "V", LogitBiasConfig,
    lambda s, bb, key: LogitBias(bb.config.vocab_size, s.bias_scale), False,
    module=LogitBias, random_init=False, space={"bias_scale": choice(0.5, 1.0)},
))
'''


def _package_with(tmp_path: Path, name: str, text: str) -> Path:
    """A copy of the imported ``pawn`` package (engine included) with ``text`` as
    ``pawn/adapters/strategies/{name}.py``; returns the folder to put on PYTHONPATH."""
    root = tmp_path / "site"
    shutil.copytree(Path(pawn.__file__).parent, root / "pawn", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "pawn" / "adapters" / "strategies" / f"{name}.py").write_text(text, "utf-8")
    return root


def _pawn(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root), "JAX_PLATFORMS": "cpu", "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "pawn.cli", *args], capture_output=True, text=True, env=env, timeout=300)


def test_a_strategy_file_shows_in_list_strategies_and_the_strategy_help(tmp_path):
    root = _package_with(tmp_path, "logit_bias", LOGIT_BIAS)

    listed = _pawn(root, "adapt", "--list-strategies")
    assert listed.returncode == 0, listed.stderr
    assert "logit_bias" in listed.stdout and "a bias on the output logits" in listed.stdout, listed.stdout

    helped = _pawn(root, "adapt", "--help")
    assert helped.returncode == 0, helped.stderr
    flat = " ".join(helped.stdout.replace("│", " ").split())
    assert "retro-bottleneck, ia3, logit_bias" in flat, flat  # --strategy's help lists the table, new row last
    assert "--bias-scale" in flat  # its setting became a pawn adapt flag

    code = ("from pawn.adapters import STRATEGIES, count_params; from pawn.config import ModelConfig; "
            "print(list(STRATEGIES)[-1], count_params('logit_bias', None, ModelConfig(d_model=32, n_layers=2, n_heads=1, d_ff=64)))")
    env = {**os.environ, "PYTHONPATH": str(root), "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["logit_bias", "1980"], out.stdout + out.stderr


def test_the_strategy_help_names_every_strategy_of_the_table():
    """``--strategy``'s help once listed ten strategies, without ia3."""
    from pawn.adapters import STRATEGIES
    from pawn.train.adapt_config import AdaptSettings

    help_text = AdaptSettings.model_fields["strategy"].description
    assert help_text.endswith(", ".join(STRATEGIES) + ".") and "ia3" in help_text


def test_a_strategy_file_trains_for_one_chunk_through_pawn_adapt(tmp_path, shared_data, tiny_backbone):
    # The drop-in row builds a model the run spine trains: pawn adapt with --strategy logit_bias
    # writes its records and a checkpoint, and its validation moves off the bare backbone's.
    import json

    root = _package_with(tmp_path, "logit_bias", LOGIT_BIAS)
    out = tmp_path / "run"
    pgn = shared_data / "lichess" / "lichess_db_2013-01_first100_reexported_chess.js-benchmark.pgn"
    r = _pawn(root, "adapt", str(tiny_backbone), "--data", str(pgn), "--strategy", "logit_bias",
              "--epochs", "1", "--steps-per-epoch", "2", "--steps-per-chunk", "2", "--batch-size", "4", "--seq-len", "32",
              "--val-games", "8", "--lr", "0.05", "--cache-dir", str(tmp_path / "cache"), "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    config = next(x for x in recs if x["type"] == "config")
    assert config["strategy"] == "logit_bias" and config["trainable_params"] == config["model_config"]["vocab_size"]
    assert [x["step"] for x in recs if x["type"] == "train"] == [2]
    vals = {x["step"]: x for x in recs if x["type"] == "val"}
    assert set(vals) == {0, 2} and vals[2]["loss"] != vals[0]["loss"]  # the bias trained
    step = out / "checkpoints" / "step_00000002"
    assert (step / ".complete").is_file()

    # the saved adapter is the new module's parameter, moved off its zero init, and loads back as it
    from safetensors.numpy import load_file

    saved = load_file(str(step / "adapter.safetensors"))
    assert list(saved) == ["adapter.beta"] and saved["adapter.beta"].shape == (config["model_config"]["vocab_size"],)
    assert float(abs(saved["adapter.beta"]).max()) > 0
    code = ("import sys, numpy as np; from pawn.evaluate.loading import load_adapter_checkpoint; "
            "m = load_adapter_checkpoint(sys.argv[1]).model; b = np.asarray(m.adapter.beta); "
            "print(type(m.adapter).__name__, b.shape[0], float(np.abs(b).max()))")
    env = {**os.environ, "PYTHONPATH": str(root), "JAX_PLATFORMS": "cpu"}
    loaded = subprocess.run([sys.executable, "-c", code, str(step)], capture_output=True, text=True, env=env, timeout=300)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    name, n, peak = loaded.stdout.split()
    assert (name, int(n)) == ("LogitBias", saved["adapter.beta"].shape[0])
    assert float(peak) == pytest.approx(float(abs(saved["adapter.beta"]).max()), rel=1e-6)
