"""pawn.fileio: output files are checked before any work, with one line naming the flag and path."""

from __future__ import annotations

import os
import stat

import numpy as np

import pytest

from pawn.fileio import OutputPathError, check_output_file


def test_check_output_file_names_a_file_on_the_way_not_file_exists(tmp_path):
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(OutputPathError) as e:
        check_output_file(tmp_path / "afile" / "sub" / "x.json", "--json")
    assert str(e.value) == f"--json {tmp_path / 'afile' / 'sub' / 'x.json'}: {tmp_path / 'afile'} is a file, not a directory"
    assert (tmp_path / "afile").read_text() == "mine"
    (tmp_path / "d").mkdir()
    with pytest.raises(OutputPathError, match="is a directory, not a file"):
        check_output_file(tmp_path / "d", "--json")
    assert check_output_file(tmp_path / "new" / "x.json", "--json") == tmp_path / "new" / "x.json"
    assert (tmp_path / "new").is_dir() and not list((tmp_path / "new").iterdir())


def test_safetensors_files_get_the_umask_mode_not_0600(tmp_path):
    """safetensors' save_file leaves 0600; checkpoints, adapter weights and the game-cache index
    were unreadable to the other users of a shared machine."""
    import numpy as np

    from pawn.fileio import save_safetensors

    old = os.umask(0o022)
    try:
        p = save_safetensors({"a": np.zeros(3, np.float32)}, tmp_path / "x.safetensors")
        assert stat.S_IMODE(p.stat().st_mode) == 0o644
        os.umask(0o027)
        q = save_safetensors({"a": np.zeros(3, np.float32)}, tmp_path / "y.safetensors")
        assert stat.S_IMODE(q.stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_a_saved_checkpoint_is_readable_by_others(tmp_path):
    import jax

    from pawn.checkpoint import save_checkpoint
    from pawn.config import ModelConfig
    from pawn.model import PAWNModel

    old = os.umask(0o022)
    try:
        cfg = ModelConfig(d_model=32, n_layers=1, n_heads=1, d_ff=64)
        m = PAWNModel(cfg, jax.random.PRNGKey(0))
        d = save_checkpoint(tmp_path / "ck", {k: np.asarray(v) for k, v in m.params().items()}, cfg,
                            optimizer_state={"x": np.zeros(2, np.float32)})
    finally:
        os.umask(old)
    for name in ("model.safetensors", "optimizer.safetensors"):
        assert stat.S_IMODE((d / name).stat().st_mode) == 0o644, name


def test_save_safetensors_round_trips_a_transposed_array(tmp_path):
    """safetensors 0.8 wrote a non-contiguous array's raw memory: a transposed (2, 3) came back as
    the (3, 2) reshape of the original order. The helper makes every array contiguous first."""
    from safetensors.numpy import load_file

    from pawn.fileio import save_safetensors

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = a.T
    s = a[:, ::2]
    assert not t.flags.c_contiguous and not s.flags.c_contiguous
    got = load_file(str(save_safetensors({"t": t, "s": s, "a": a}, tmp_path / "x.safetensors")))
    np.testing.assert_array_equal(got["t"], np.array([[0, 3], [1, 4], [2, 5]], np.float32))
    np.testing.assert_array_equal(got["s"], np.array([[0, 2], [3, 5]], np.float32))
    np.testing.assert_array_equal(got["a"], a)
