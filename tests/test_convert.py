"""v1 → v2 conversion (spec model-and-checkpoints.md §6, §8) against a NumPy v1 forward."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from pawn.checkpoint import CheckpointTargetError, IncompatibleCheckpointError, load_checkpoint, load_model
from pawn.cli import app
from pawn.convert import (
    PARITY_MAX_TOL,
    PARITY_MEAN_TOL,
    ConversionError,
    convert,
    parity_batch,
    v1_forward_numpy,
    v1_to_v2,
)
from pawn.model import PAWNModel
from v1_checkpoints import random_v1_tensors, v1_model_config, write_v1_checkpoint


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PAWN_CONVERTED_DIR", str(tmp_path / "converted"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize(
    "shape",
    [(128, 2, 2, 512), (160, 3, 2, 640)],  # head_dim 64 and head_dim 80 (like the published large)
    ids=["head_dim64", "head_dim80"],
)
def test_converted_model_matches_numpy_v1_forward(tmp_path, shape):
    cfg = v1_model_config(*shape)
    src = write_v1_checkpoint(tmp_path / "v1", cfg)
    res = convert(str(src))
    print(f"\n{shape}: max |dlogit| = {res.max_abs_dlogit:.3e}")
    assert res.max_abs_dlogit <= PARITY_MAX_TOL and res.mean_abs_dlogit <= PARITY_MEAN_TOL
    assert res.config.n_heads == shape[2] and res.config.head_dim == shape[0] // shape[2]
    # Independently re-check on the on-disk result, rows with PAD keys and an outcome at position 0.
    model, _ = load_model(res.path)
    tokens, mask = parity_batch(512, seed=1)
    assert tokens[4, 0] >= 1969 and not mask[4, -1] and not mask[5, 0]
    ref = v1_forward_numpy(random_v1_tensors(cfg), cfg, tokens, mask)
    ours = np.asarray(model(tokens, mask, dtype="float32"))
    real = mask & (np.cumsum(mask, axis=1) > 0)
    assert np.abs(ours - ref)[real].max() <= PARITY_MAX_TOL


def test_untransposed_weights_are_caught_by_parity(tmp_path):
    cfg = v1_model_config(64, 2, 1, 256)
    t = random_v1_tensors(cfg)
    params = v1_to_v2(t, 2)
    params["wq"] = params["wq"].transpose(0, 2, 1)  # the silent square-matrix trap (spec §8.2)
    model = PAWNModel(__import__("pawn.config", fromlist=["ModelConfig"]).ModelConfig(**{k: v for k, v in cfg.items() if k != "dropout"}), params=params)
    tokens, mask = parity_batch(512)
    diff = np.abs(np.asarray(model(tokens, mask)) - v1_forward_numpy(t, cfg, tokens, mask))[mask].max()
    assert diff > 100 * PARITY_MAX_TOL


def test_legacy_vocabulary_is_refused(tmp_path):
    cfg = v1_model_config(64, 2, 1, 256, vocab_size=4284)
    src = write_v1_checkpoint(tmp_path / "legacy", cfg)
    with pytest.raises(IncompatibleCheckpointError, match="legacy"):
        convert(str(src))


def test_wrong_n_outcomes_is_refused(tmp_path):
    cfg = v1_model_config(64, 2, 1, 256)
    src = write_v1_checkpoint(tmp_path / "o", cfg)
    raw = json.loads((src / "config.json").read_text())
    raw["model_config"]["n_outcomes"] = 5
    (src / "config.json").write_text(json.dumps(raw))
    with pytest.raises(IncompatibleCheckpointError, match="n_outcomes"):
        convert(str(src))


def test_legacy_head_under_a_1980_config_is_a_shape_error(tmp_path):
    cfg = v1_model_config(64, 2, 1, 256)
    t = random_v1_tensors(cfg)
    t["lm_head.weight"] = np.zeros((4284, 64), np.float32)
    src = write_v1_checkpoint(tmp_path / "s", cfg, tensors=t)
    with pytest.raises(ConversionError, match=r"lm_head.weight has shape \(4284, 64\)"):
        convert(str(src))


def test_missing_and_extra_tensors_are_refused(tmp_path):
    cfg = v1_model_config(64, 2, 1, 256)
    t = random_v1_tensors(cfg)
    del t["layers.1.ffn.w_up.weight"]
    with pytest.raises(ConversionError, match="missing tensors.*layers.1.ffn.w_up"):
        convert(str(write_v1_checkpoint(tmp_path / "m", cfg, tensors=t)))
    t = random_v1_tensors(cfg)
    t["layers.2.attn.wq.weight"] = np.zeros((64, 64), np.float32)
    with pytest.raises(ConversionError, match="unexpected tensors"):
        convert(str(write_v1_checkpoint(tmp_path / "e", cfg, tensors=t)))


def test_cache_is_keyed_by_source_and_force_reconverts(tmp_path):
    cfg = v1_model_config(64, 2, 1, 256)
    src = write_v1_checkpoint(tmp_path / "c", cfg)
    first = convert(str(src))
    assert not first.cached and first.path.parent.name == "converted"
    second = convert(str(src))
    assert second.cached and second.path == first.path
    forced = convert(str(src), force=True)
    assert not forced.cached and forced.max_abs_dlogit <= PARITY_MAX_TOL
    assert load_checkpoint(forced.path).config.d_model == 64


def test_existing_foreign_output_directory_is_not_overwritten(tmp_path):
    src = write_v1_checkpoint(tmp_path / "x", v1_model_config(64, 2, 1, 256))
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(CheckpointTargetError, match="refusing to overwrite"):
        convert(str(src), out)
    assert (out / "notes.txt").read_text() == "keep me"


def test_cli_convert_prints_path_and_parity(tmp_path):
    src = write_v1_checkpoint(tmp_path / "cli", v1_model_config(64, 2, 1, 256))
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["convert", str(src), "--output", str(out)])
    assert r.exit_code == 0, r.output
    assert "max / mean |Δlogit|" in r.output and r.output.strip().splitlines()[-1] == str(out)
    dmax, dmean = map(float, re.search(r"(\d\.\d\de-\d\d) / (\d\.\d\de-\d\d)", r.output).groups())
    assert 0 < dmean <= dmax <= PARITY_MAX_TOL


def test_cli_offline_unknown_repo_is_one_line_error():
    r = CliRunner().invoke(app, ["convert", "nobody-here/no-such-pawn"])
    assert r.exit_code == 1
    assert "Traceback" not in r.output
    assert "nobody-here/no-such-pawn" in r.output and "HF_HUB_OFFLINE" in r.output
    # the one line, not repeated inside a table of the one failed source
    assert r.output.count("\n") == 1 and r.output.startswith("error: nobody-here/no-such-pawn: "), r.output


def test_cli_missing_local_source(tmp_path):
    r = CliRunner().invoke(app, ["convert", str(tmp_path / "nothing" / "here")])
    assert r.exit_code == 1 and "not a directory" in r.output


@pytest.mark.parametrize("field,value,needle", [("d_model", "abc", "model_config.d_model must be an integer"),
                                                ("n_layers", None, "model_config.n_layers must be an integer"),
                                                ("d_ff", [1], "model_config.d_ff must be an integer"),
                                                ("n_heads", 3, "divisible")])
def test_malformed_v1_config_values_are_one_line_cli_errors(tmp_path, field, value, needle):
    src = write_v1_checkpoint(tmp_path / "bad", v1_model_config(64, 2, 2, 128))
    raw = json.loads((src / "config.json").read_text())
    raw["model_config"][field] = value
    (src / "config.json").write_text(json.dumps(raw))
    r = CliRunner().invoke(app, ["convert", str(src), "--output", str(tmp_path / "out")])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    assert r.output.startswith("error: ") and "config.json" in r.output and needle in r.output, r.output


def test_output_holding_another_checkpoint_is_neither_reused_nor_replaced(tmp_path):
    import jax

    from pawn.checkpoint import save_checkpoint
    from pawn.config import TOY

    other = save_checkpoint(tmp_path / "trained", PAWNModel(TOY, jax.random.key(0)).params(), TOY, run_config={"lr": 1})
    src = write_v1_checkpoint(tmp_path / "v1", v1_model_config(64, 2, 1, 256))
    for force in (False, True):
        with pytest.raises(CheckpointTargetError, match="not a conversion of"):
            convert(str(src), other, force=force)
    assert load_checkpoint(other).run_config == {"lr": 1}


def test_a_v2_checkpoint_as_source_says_so(tmp_path):
    src = write_v1_checkpoint(tmp_path / "v1", v1_model_config(64, 2, 1, 256))
    v2 = convert(str(src)).path
    import shutil

    shutil.copy(v2 / "model.safetensors", src / "model.safetensors")
    with pytest.raises(ConversionError, match="already a v2 checkpoint"):
        convert(str(src), tmp_path / "again")


def test_cli_mistyped_local_path_names_both_readings(tmp_path, monkeypatch):
    """``pawn convert runs/tinyy`` (offline) said only that the Hub id is not cached; like every
    other command it now says it is no local directory either and suggests the close local name."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "tiny").mkdir(parents=True)
    r = CliRunner().invoke(app, ["convert", "runs/tinyy"], env={"COLUMNS": "400"})
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "error: runs/tinyy: no such local directory (runs/ exists; did you mean runs/tiny?), and as a Hugging Face Hub id:" in r.output


def test_cli_convert_output_file_or_symlink_is_one_line_and_untouched(tmp_path):
    src = write_v1_checkpoint(tmp_path / "s", v1_model_config(64, 2, 1, 256))
    (tmp_path / "afile").write_text("mine")
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "notes.txt").write_text("keep")
    (tmp_path / "link").symlink_to("real")
    for out, msg in (("afile", "afile: the output exists and is not a directory"), ("link", "link: the output is a symbolic link")):
        r = CliRunner().invoke(app, ["convert", str(src), "--output", str(tmp_path / out)])
        assert r.exit_code == 1 and msg in r.output and "Traceback" not in r.output, r.output
    assert (tmp_path / "afile").read_text() == "mine" and (tmp_path / "link").is_symlink()
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "link", "real", "s"]


def test_cli_a_failed_source_beside_a_converted_one_is_one_line_and_one_row(tmp_path):
    # The failed source's error was printed, then repeated word for word in the table.
    src = write_v1_checkpoint(tmp_path / "ok", v1_model_config(64, 2, 1, 256))
    r = CliRunner().invoke(app, ["convert", str(src), "nobody-here/no-such-pawn"], terminal_width=400)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.output.count("nobody-here/no-such-pawn: no such local directory") == 1, r.output
    row = next(line for line in r.output.splitlines() if line.startswith("│ nobody-here/no-such-pawn"))
    assert "failed (error above)" in row and "max / mean |Δlogit|" in r.output
