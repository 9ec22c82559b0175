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
    CheckpointTargetError,
    IncompleteCheckpointError,
    UnsupportedCheckpointVersionError,
    atomic_replace_dir,
    check_output_target,
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


def _staging(tmp_path):
    st = tmp_path / "new.tmp"
    st.mkdir()
    (st / "payload").write_text("new")
    return st


def test_atomic_replace_dir_refuses_a_file_target_before_touching_anything(tmp_path):
    st, target = _staging(tmp_path), tmp_path / "afile"
    target.write_text("user data")
    with pytest.raises(CheckpointTargetError, match=r"afile: the target exists and is not a directory"):
        atomic_replace_dir(st, target)
    assert target.read_text() == "user data" and not (tmp_path / "afile.bak").exists()
    assert (st / "payload").read_text() == "new"


def test_atomic_replace_dir_refuses_a_symlink_target_or_backup(tmp_path):
    real = tmp_path / "checkpoints" / "best"
    real.mkdir(parents=True)
    (real / "weights").write_text("keep")
    link = tmp_path / "best"
    link.symlink_to("checkpoints/best")
    st = _staging(tmp_path)
    with pytest.raises(CheckpointTargetError, match="best: the target is a symbolic link"):
        atomic_replace_dir(st, link)
    assert link.is_symlink() and (link / "weights").read_text() == "keep" and not (tmp_path / "best.bak").exists()
    # a symlinked <name>.bak would be "restored" or rmtree'd: refused too
    target = tmp_path / "out"
    (tmp_path / "out.bak").symlink_to("checkpoints/best")
    with pytest.raises(CheckpointTargetError, match="out.bak: its backup sibling is a symbolic link"):
        atomic_replace_dir(st, target)
    assert not target.exists() and (real / "weights").read_text() == "keep"
    # a real directory target is still replaced (rename-aside)
    target = tmp_path / "real"
    target.mkdir()
    (target / "old").write_text("old")
    atomic_replace_dir(st, target)
    assert (target / "payload").read_text() == "new" and not (target / "old").exists() and not st.exists()


def test_save_checkpoint_under_a_file_or_over_a_symlink_changes_nothing(tmp_path):
    model = PAWNModel(TOY, jax.random.key(0))
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CheckpointTargetError, match=r"afile is a file, not a directory"):
        save_checkpoint(tmp_path / "afile" / "ck", model.params(), TOY)
    assert (tmp_path / "afile").read_text() == "x"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to("elsewhere")
    with pytest.raises(CheckpointTargetError, match="symbolic link"):
        save_checkpoint(tmp_path / "link", model.params(), TOY)
    assert (tmp_path / "link").is_symlink() and not any((tmp_path / "elsewhere").iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "elsewhere", "link"]  # no .tmp / .bak left


def test_check_output_target_is_one_rule(ckpt, tmp_path):
    _, path = ckpt  # run_config {"lr": 3e-4}: not made by pawn convert
    assert check_output_target(tmp_path / "missing", {"converted_from": "x"}, "a conversion of x") is None
    (tmp_path / "empty").mkdir()
    assert check_output_target(tmp_path / "empty", {"converted_from": "x"}, "a conversion of x") is None
    user = tmp_path / "userdir"
    user.mkdir()
    (user / "notes.txt").write_text("keep")
    with pytest.raises(CheckpointTargetError, match="userdir: exists and is not a PAWN checkpoint"):
        check_output_target(user, {}, "a merge")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    with pytest.raises(CheckpointTargetError, match=r"run: a run directory \(it has checkpoints\), never a valid output"):
        check_output_target(run, {}, "a merge")
    with pytest.raises(CheckpointTargetError, match="holds a checkpoint that is not a conversion of x .not made by pawn convert"):
        check_output_target(path, {"converted_from": "x"}, "a conversion of x")
    assert check_output_target(path, {"lr": 3e-4, "variant": None}, "the same") == {"lr": 3e-4}
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CheckpointTargetError, match="afile: the output exists and is not a directory"):
        check_output_target(tmp_path / "afile", {}, "a merge")
    assert (user / "notes.txt").read_text() == "keep" and (tmp_path / "afile").read_text() == "x"
