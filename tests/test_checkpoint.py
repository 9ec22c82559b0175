"""v2 checkpoints (spec model-and-checkpoints.md §5): exact round trip, strict manifest,
atomic replacement."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from pawn.checkpoint import (
    CheckpointError,
    CheckpointIntegrityError,
    IncompleteCheckpointError,
    UnsupportedCheckpointVersionError,
    load_checkpoint,
    load_model,
    save_checkpoint,
    write_manifest,
)
from pawn.config import TOY
from pawn.model import PARAM_NAMES, PAWNModel


@pytest.fixture()
def ckpt(tmp_path):
    model = PAWNModel(TOY, jax.random.key(7))
    path = save_checkpoint(
        tmp_path / "step_00000010", model.params(), TOY,
        run_config={"lr": 3e-4}, optimizer_state={"mu.wq": np.ones((2, 3), np.float32)},
        training_state={"step": 10},
    )
    return model, path


def test_round_trip_is_exact(ckpt):
    model, path = ckpt
    c = load_checkpoint(path)
    assert c.config == TOY
    for name in PARAM_NAMES:
        np.testing.assert_array_equal(c.params[name], np.asarray(getattr(model, name)))
    assert c.run_config == {"lr": 3e-4}
    assert c.training_state == {"step": 10}
    np.testing.assert_array_equal(c.optimizer_state["mu.wq"], np.ones((2, 3), np.float32))
    loaded, cfg = load_model(path)
    assert cfg == TOY
    t = np.arange(20, dtype=np.int32).reshape(2, 10)
    np.testing.assert_array_equal(np.asarray(loaded(t)), np.asarray(model(t)))


def test_layout_and_manifest(ckpt):
    _, path = ckpt
    names = sorted(p.name for p in path.iterdir())
    assert names == [".complete", "config.json", "model.safetensors", "optimizer.safetensors", "training_state.json"]
    man = json.loads((path / ".complete").read_text())
    assert man["format_version"] == 1 and sorted(man["files"]) == names[1:]
    cfg = json.loads((path / "config.json").read_text())
    assert list(cfg["model_config"]) == ["d_model", "n_layers", "n_heads", "d_ff", "vocab_size", "max_seq_len", "n_outcomes", "rope_base"]
    assert not (path.parent / (path.name + ".tmp")).exists()


def test_missing_manifest_is_incomplete(ckpt):
    _, path = ckpt
    (path / ".complete").unlink()
    with pytest.raises(IncompleteCheckpointError, match=r"\.complete"):
        load_checkpoint(path)


def test_missing_file_is_named(ckpt):
    _, path = ckpt
    (path / "optimizer.safetensors").unlink()
    with pytest.raises(CheckpointIntegrityError, match="optimizer.safetensors.*missing"):
        load_checkpoint(path)


def test_extra_unlisted_file_is_refused(ckpt):
    _, path = ckpt
    (path / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(CheckpointIntegrityError, match="metrics.jsonl.*not listed"):
        load_checkpoint(path)


def test_hash_mismatch_is_named(ckpt):
    _, path = ckpt
    data = bytearray((path / "model.safetensors").read_bytes())
    data[-1] ^= 0x01
    (path / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointIntegrityError, match="model.safetensors.*SHA-256"):
        load_model(path)


def test_v1_config_fields_ask_for_conversion(ckpt):
    _, path = ckpt
    cfg = json.loads((path / "config.json").read_text())
    cfg["model_config"]["dropout"] = 0.0
    (path / "config.json").write_text(json.dumps(cfg))
    write_manifest(path)
    with pytest.raises(CheckpointError, match="pawn convert"):
        load_checkpoint(path)


def test_unsupported_format_version(ckpt):
    _, path = ckpt
    cfg = json.loads((path / "config.json").read_text())
    cfg["format_version"] = 2
    (path / "config.json").write_text(json.dumps(cfg))
    write_manifest(path)
    with pytest.raises(UnsupportedCheckpointVersionError):
        load_checkpoint(path)


def test_shape_disagreeing_with_config_is_refused(ckpt, tmp_path):
    model, _ = ckpt
    p = {k: np.asarray(v) for k, v in model.params().items()}
    p["lm_head"] = np.zeros((64, 4284), np.float32)
    path = save_checkpoint(tmp_path / "bad", p, TOY)
    with pytest.raises(CheckpointIntegrityError, match="lm_head"):
        load_checkpoint(path)


def test_overwrite_replaces_atomically_and_recovers_a_crashed_swap(ckpt):
    model, path = ckpt
    # A crash between "rename old aside" and "rename new in" leaves only <name>.bak.
    bak = path.with_name(path.name + ".bak")
    path.rename(bak)
    stale = path.with_name(path.name + ".tmp")
    stale.mkdir()
    (stale / "junk").write_text("x")
    save_checkpoint(path, model.params(), TOY)
    assert load_checkpoint(path).config == TOY
    assert not bak.exists() and not stale.exists()


def test_missing_directory_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "nope")


def test_a_run_directory_points_to_its_checkpoints(ckpt):
    _, path = ckpt
    run = path.parent
    (run / "checkpoints").mkdir()
    with pytest.raises(IncompleteCheckpointError, match="run directory"):
        load_checkpoint(run)
