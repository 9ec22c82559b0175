"""Hub checkpoints when the Hub is down or the local cache is damaged (issue 25), against the loopback
fake Hub (tests/fake_hub.py; no network): the commit actually used is recorded in eval / play / probe
JSON and a fallback to an older cached commit is one warning line; ``pawn convert --force`` downloads
again; a cached file failing its size/format or hash check is downloaded once more before giving up,
and the final error says how to clear the cache."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest
from typer.testing import CliRunner

from fake_hub import use_fake_hub
from pawn.checkpoint import CheckpointIntegrityError, save_checkpoint
from pawn.cli import app
from pawn.config import ModelConfig
from pawn.convert import v1_forward_numpy
from pawn.evaluate.loading import load_models
from pawn.hub import fetch
from pawn.model import PAWNModel
from v1_checkpoints import random_v1_tensors, v1_model_config, write_v1_checkpoint

CFG = ModelConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, max_seq_len=64)
V1 = v1_model_config(16, 1, 2, 32)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    h = use_fake_hub(monkeypatch, tmp_path)
    monkeypatch.setattr(fetch, "_WARNED", set(), raising=False)
    yield h
    h.stop()


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}


def _v2(tmp_path: Path, seed: int) -> dict[str, bytes]:
    m = PAWNModel(CFG, jax.random.PRNGKey(seed))
    return _files(save_checkpoint(tmp_path / f"v2-{seed}", m.params(), CFG, run_config={"seq_len": 40}))


def _batch():
    t = np.random.default_rng(7).integers(0, 1968, size=(2, 12)).astype(np.int32)
    return t, np.ones_like(t, bool)


def _logits(model):
    return np.asarray(model(*_batch(), dtype="float32"))


def _blob(tmp_path: Path, repo: str, name: str = "model.safetensors") -> Path:
    snaps = tmp_path / "hf-home" / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots"
    (link,) = snaps.glob(f"*/{name}")
    return Path(os.path.realpath(link))


def _flip_data_bytes(path: Path) -> None:
    """Same size, valid header, other tensor values (a copy damaged in place)."""
    data = bytearray(path.read_bytes())
    for i in range(len(data) - 64, len(data) - 32):
        data[i] ^= 0x55
    path.write_bytes(bytes(data))


def _warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("warning:") and "Hub cannot be reached" in line]


# ------------------------------------------------------------------------------ Hub unreachable
def _dead_endpoint() -> str:
    """A loopback URL nothing listens on (connection refused: the Hub is down)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_unreachable_hub_uses_the_cached_commit_says_so_once_and_every_json_records_it(hub, tmp_path, monkeypatch):
    repo = "me/down"
    first = hub.publish(repo, _v2(tmp_path, 1))
    (lm,) = load_models(repo)
    assert lm.hub == {"id": repo, "commit": first, "pinned": f"{repo}@{first}", "from_cache": None}
    second = hub.publish(repo, _v2(tmp_path, 2))  # the Hub moves on; the cache still has `first`
    (lm2,) = load_models(repo)
    assert lm2.hub["commit"] == second and lm2.hub["from_cache"] is None
    hub.publish(repo, _v2(tmp_path, 3))  # ... and on again; then it goes down
    monkeypatch.setenv("HF_ENDPOINT", _dead_endpoint())

    out = tmp_path / "eval.json"
    r = CliRunner().invoke(app, ["eval", repo, "--games", "2", "--max-ply", "8", "--batch-size", "2", "--json", str(out)])
    assert r.exit_code == 0, r.output
    (w,) = _warnings(r.output)  # exactly one line
    assert w.startswith(f"warning: {repo}: the Hub cannot be reached (") and f"using commit {second[:12]} from the local cache" in w
    rec = json.loads(out.read_text())["hub"]
    assert rec["commit"] == second and rec["pinned"] == f"{repo}@{second}" and rec["from_cache"]

    getattr(fetch, "_WARNED", set()).clear()  # each command is its own process
    out = tmp_path / "play.json"
    r = CliRunner().invoke(app, ["play", repo, "--vs", repo, "--games", "1", "--temperatures", "0", "--max-ply", "4",
                                 "--concurrency", "1", "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert len(_warnings(r.output)) == 1, r.output  # once, though both players name the same checkpoint
    cfg = json.loads(out.read_text())["config"]
    assert cfg["hub"]["commit"] == second and cfg["vs_hub"]["commit"] == second

    getattr(fetch, "_WARNED", set()).clear()
    out = tmp_path / "probe.json"
    r = CliRunner().invoke(app, ["probe", repo, "--games", "4", "--val-games", "2", "--max-ply", "8", "--epochs", "0",
                                 "--probe", "is_check", "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert len(_warnings(r.output)) == 1, r.output
    assert json.loads(out.read_text())["hub"]["commit"] == second


def test_a_local_checkpoint_records_no_hub_commit(tmp_path):
    ck = save_checkpoint(tmp_path / "ck", PAWNModel(CFG, jax.random.PRNGKey(0)).params(), CFG)
    (lm,) = load_models(str(ck))
    assert lm.hub is None


# ------------------------------------------------------------------------------ damaged cache
def test_convert_force_downloads_again_and_repairs_a_same_size_corrupted_v1_file(hub, tmp_path):
    repo = "me/v1"
    hub.publish(repo, _files(write_v1_checkpoint(tmp_path / "a", V1, seed=1)))
    want = v1_forward_numpy(random_v1_tensors(V1, 1), V1, *_batch())
    r = CliRunner().invoke(app, ["convert", repo])
    assert r.exit_code == 0, r.output
    n = hub.downloads.count("model.safetensors")
    _flip_data_bytes(_blob(tmp_path, repo))

    r = CliRunner().invoke(app, ["convert", repo, "--force"])
    assert r.exit_code == 0, r.output
    assert hub.downloads.count("model.safetensors") == n + 1  # --force downloaded it again
    (lm,) = load_models(repo)
    np.testing.assert_allclose(_logits(lm.model), want, atol=1e-4)  # converted from the good bytes

    # without --force: a new conversion checks the cached bytes against their Hub hash and re-fetches once
    _flip_data_bytes(_blob(tmp_path, repo))
    for d in (tmp_path / "converted").iterdir():
        shutil.rmtree(d)
    (lm,) = load_models(repo)
    assert hub.downloads.count("model.safetensors") == n + 2
    np.testing.assert_allclose(_logits(lm.model), want, atol=1e-4)


def test_a_truncated_cached_file_is_downloaded_again_once(hub, tmp_path, monkeypatch):
    repo = "me/trunc"
    hub.publish(repo, _v2(tmp_path, 1))
    (lm,) = load_models(repo)
    want = _logits(lm.model)
    blob = _blob(tmp_path, repo)
    os.truncate(blob, blob.stat().st_size - 100)
    n = len(hub.downloads)
    (again,) = load_models(repo)  # was: "truncated or partial download", never repaired
    assert "model.safetensors" in hub.downloads[n:]
    np.testing.assert_array_equal(_logits(again.model), want)

    blob = _blob(tmp_path, repo)
    os.truncate(blob, blob.stat().st_size - 100)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointIntegrityError) as e:
        load_models(repo)
    msg = str(e.value)
    assert "cannot be downloaded again now (offline)" in msg and f"`hf cache rm model/{repo}`" in msg and "\n" not in msg


def test_a_file_damaged_on_the_hub_is_fetched_twice_then_refused_with_the_cache_hint(hub, tmp_path):
    repo = "me/bad"
    files = _v2(tmp_path, 1)
    files["model.safetensors"] = files["model.safetensors"] + b"junk"  # header no longer ends at the file end
    hub.publish(repo, files)
    r = CliRunner().invoke(app, ["eval", repo, "--games", "2"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    (err,) = [line for line in r.output.splitlines() if line.startswith("error: ")]
    assert "also after downloading it again" in err and f"hf cache rm model/{repo}" in err, err
    assert hub.downloads.count("model.safetensors") == 2


def test_a_v2_copy_failing_its_sha256_is_downloaded_again_once(hub, tmp_path):
    repo = "me/sha"
    hub.publish(repo, _v2(tmp_path, 4))
    (lm,) = load_models(repo)
    want = _logits(lm.model)
    _flip_data_bytes(_blob(tmp_path, repo))  # same size: only the manifest's SHA-256 sees it
    (again,) = load_models(repo)
    np.testing.assert_array_equal(_logits(again.model), want)
    assert hub.downloads.count("model.safetensors") == 2
