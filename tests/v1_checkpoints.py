"""Build v1-format (PyTorch layout) checkpoints for tests: random values in every tensor, norm
scales and the PAD vector included, so a transposition or stacking mistake cannot hide."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from pawn.convert import v1_tensor_shapes


def v1_model_config(d_model: int, n_layers: int, n_heads: int, d_ff: int, **over) -> dict:
    cfg = {"vocab_size": 1980, "max_seq_len": 512, "n_outcomes": 11, "d_model": d_model,
           "n_layers": n_layers, "n_heads": n_heads, "d_ff": d_ff, "dropout": 0.0, "rope_base": 10000.0}
    cfg.update(over)
    return cfg


def random_v1_tensors(cfg: dict, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in v1_tensor_shapes(cfg).items():
        if name.endswith("norm.weight"):
            out[name] = (1.0 + 0.2 * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[name] = (0.05 * rng.standard_normal(shape)).astype(np.float32)
    return out


def write_v1_checkpoint(directory: Path, cfg: dict, tensors: dict[str, np.ndarray] | None = None, seed: int = 0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tensors = random_v1_tensors(cfg, seed) if tensors is None else tensors
    save_file(tensors, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(
        {"format_version": 1, "checkpoint_type": "pretrain", "model_config": cfg,
         "training_config": {"lr": 0.0003, "prepend_outcome": False}}, indent=2))
    (directory / "README.md").write_text("model card (ignored by the converter)\n")
    return directory
