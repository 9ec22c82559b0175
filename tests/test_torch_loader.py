"""Thin PyTorch loader (spec model-and-checkpoints.md §6.6): same logits as the JAX model on CPU."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the optional extra pawn[torch]; CI installs it

from pawn.checkpoint import CheckpointIntegrityError, save_checkpoint  # noqa: E402
from pawn.config import ModelConfig  # noqa: E402
from pawn.convert import convert, parity_batch  # noqa: E402
from pawn.model import PAWNModel  # noqa: E402
from v1_checkpoints import random_v1_tensors, v1_model_config, write_v1_checkpoint  # noqa: E402


def _scaled_params(cfg: ModelConfig, seed: int = 0) -> dict:
    """Random weights large enough to give |logit| of tens, so an error cannot hide in small values."""
    m = PAWNModel(cfg, jax.random.PRNGKey(seed))
    p = {k: np.asarray(v) * (1.0 if k.endswith("norm") else 2.0) for k, v in m.params().items()}
    rng = np.random.default_rng(seed)
    p["pad_embed"] = rng.standard_normal(p["pad_embed"].shape).astype(np.float32) * 0.05
    for k in ("attn_norm", "ffn_norm", "final_norm"):
        p[k] = (1 + 0.2 * rng.standard_normal(p[k].shape)).astype(np.float32)
    p["lm_head"] = p["lm_head"] * 15
    return p


@pytest.mark.parametrize("shape", [(128, 2, 2, 512), (160, 2, 2, 640)], ids=["hd64", "hd80"])
def test_torch_logits_match_jax_on_cpu(tmp_path, shape):
    import pawn.torch as pt

    cfg = ModelConfig(d_model=shape[0], n_layers=shape[1], n_heads=shape[2], d_ff=shape[3])
    params = _scaled_params(cfg)
    ck = save_checkpoint(tmp_path / "ck", params, cfg)
    tm = pt.load(ck)
    tokens, mask = parity_batch(512, seed=3)  # random actions, an outcome at position 0, PAD keys, a leading PAD
    ours = np.asarray(PAWNModel(cfg, params=params)(tokens, mask, dtype="float32"))
    with torch.no_grad():
        theirs = tm(torch.from_numpy(tokens.astype(np.int64)), torch.from_numpy(mask)).numpy()
    assert theirs.shape == ours.shape == (6, 64, 1980)
    assert np.abs(ours).max() > 20
    real = mask & (np.cumsum(mask, axis=1) > 0)
    diff = np.abs(theirs - ours)
    print(f"\n{shape}: max |dlogit| torch vs JAX {diff[real].max():.2e}")
    assert diff[real].max() <= 1e-4
    assert np.isfinite(theirs).all()
    assert diff[5, 0].max() <= 1e-4  # fully-masked row (leading PAD): attention output 0 in both


def test_state_dict_keys_are_v1_keys_and_a_converted_v1_round_trips(tmp_path, monkeypatch):
    import pawn.torch as pt

    monkeypatch.setenv("PAWN_CONVERTED_DIR", str(tmp_path / "conv"))
    cfg = v1_model_config(64, 2, 1, 256)
    t = random_v1_tensors(cfg, seed=4)
    res = convert(str(write_v1_checkpoint(tmp_path / "v1", cfg, tensors=t)))
    sd = pt.load(res.path).state_dict()
    assert set(sd) == set(t)  # same names as the v1 model.safetensors
    for k, v in t.items():
        np.testing.assert_array_equal(sd[k].numpy(), v)


def test_bad_inputs_are_refused(tmp_path):
    import pawn.torch as pt

    cfg = ModelConfig(d_model=64, n_layers=1, n_heads=1, d_ff=128, max_seq_len=32)
    ck = save_checkpoint(tmp_path / "ck", _scaled_params(cfg), cfg)
    tm = pt.load(ck)
    with pytest.raises(ValueError, match="exceeds max_seq_len 32"):
        tm(torch.zeros(1, 33, dtype=torch.long))
    raw = json.loads((ck / "config.json").read_text())
    (ck / "config.json").write_text(json.dumps(raw | {"extra": 1}))
    with pytest.raises(CheckpointIntegrityError, match="config.json: SHA-256 does not match"):
        pt.load(ck)
