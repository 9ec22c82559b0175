"""Hub ids naming one checkpoint inside a repo folder (``owner/name[@revision]/sub/folder``, the
huggingface_hub ``hf://`` path convention), against the loopback fake Hub (tests/fake_hub.py): a
pushed run's ``checkpoints/step_XXXXXXXX/`` loads like its local copy, only that folder is
downloaded, a missing folder is one line naming what exists, and an adapter pushed to the Hub
loads with its Hub-folder backbone. No network is used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest
from typer.testing import CliRunner

from fake_hub import use_fake_hub
from pawn.checkpoint import CheckpointIntegrityError, is_hub_id, load_checkpoint, save_checkpoint
from pawn.cli import app
from pawn.config import ModelConfig
from pawn.convert import ConversionError
from pawn.evaluate.loading import load_models, resolve_backbone
from pawn.hub.fetch import HubDownloadError, HubRef, fetch_snapshot, parse_hub_ref
from pawn.hub.push import CheckpointUploader
from pawn.model import PAWNModel
from pawn.settings import PretrainConfig
from pawn.train.pretrain import run_pretrain

REPO = "me/pawn-test"
CFG = ModelConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, max_seq_len=64)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    h = use_fake_hub(monkeypatch, tmp_path)
    yield h
    h.stop()


def _tokens(seed=0, T=12):
    t = np.random.default_rng(seed).integers(0, 1968, size=(2, T)).astype(np.int32)
    return t, np.ones_like(t, bool)


def _logits(model) -> np.ndarray:
    return np.asarray(model(*_tokens(), dtype="float32"))


def _push(tmp_path: Path, repo: str, branch: str, checkpoints: dict[str, int]) -> dict[str, Path]:
    """Push small checkpoints (name -> seed) with PAWN's own uploader (files at checkpoints/<name>/)."""
    up = CheckpointUploader(repo, branch=branch, backoff_s=0.05, log=lambda m: None).start()
    out = {}
    for step, (name, seed) in enumerate(checkpoints.items(), 1):
        m = PAWNModel(CFG, jax.random.PRNGKey(seed))
        out[name] = save_checkpoint(tmp_path / "local" / repo / name, m.params(), CFG, run_config={"seq_len": 40})
        up.submit(out[name], step)
    assert [o.status for o in up.close(60)] == ["pushed"] * len(checkpoints)
    return out


# ------------------------------------------------------------------------------ syntax
def test_hub_id_grammar_follows_hf_paths_and_a_local_path_wins(tmp_path, monkeypatch):
    c40 = "0123456789abcdef0123456789abcdef01234567"
    cases = {
        "me/m": HubRef("me/m"),
        "me/m@v1.0": HubRef("me/m", "v1.0"),
        "me/m/checkpoints/step_00000002": HubRef("me/m", None, "checkpoints/step_00000002"),
        "me/m/best/": HubRef("me/m", None, "best"),
        "me/m@v1/best": HubRef("me/m", "v1/best", "", ambiguous=True),  # 'v1/best' could be a branch
        "me/m@run%2Fa/checkpoints/best": HubRef("me/m", "run/a", "checkpoints/best"),
        f"me/m@{c40}/checkpoints/best": HubRef("me/m", c40, "checkpoints/best"),
        "me/m@refs/pr/3/best": HubRef("me/m", "refs/pr/3", "best"),
        "me/m@run/a/checkpoints/best": HubRef("me/m", "run/a/checkpoints/best", "", ambiguous=True),
    }
    for text, want in cases.items():
        assert parse_hub_ref(text) == want, text
        assert is_hub_id(text)
    for bad in ("me/m/../x", "me/m@run/../x", "me/m/a//b", "/abs/path", "./me/m", "me", "me/m@"):
        assert parse_hub_ref(bad) is None and not is_hub_id(bad), bad
    assert parse_hub_ref(f"me/m@{c40}/best").pinned(c40) == f"me/m@{c40}/best"
    assert HubRef("me/m", "run/a", "checkpoints/best").cache_name(c40) == f"{c40}--checkpoints%2Fbest"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "me" / "m" / "best").mkdir(parents=True)
    assert parse_hub_ref("me/m/best") is None and not is_hub_id("me/m/best")  # the local folder wins


# ------------------------------------------------------------------------------ a pushed run
@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_a_pushed_runs_checkpoint_folders_load_like_the_local_checkpoints(hub, tmp_path, monkeypatch):
    run = tmp_path / "run"
    cfg = PretrainConfig.load(variant="toy", batch_size=4, seq_len=32, val_games=0, steps_per_chunk=2, lr=1e-3, warmup_steps=1,
                              total_steps=4, val_every=4, checkpoint_every=2, out=run, push_to_hub=REPO)
    assert run_pretrain(cfg, progress=False, install_signal_handlers=False).step == 4
    branch = [c.branch for c in hub.commits]
    assert branch == ["run/run", "run/run"] and set(hub.files_at("run/run")) >= {
        "checkpoints/step_00000002/.complete", "checkpoints/step_00000004/model.safetensors", "metrics.jsonl", "README.md"}
    local = {s: run / "checkpoints" / f"step_{s:08d}" for s in (2, 4)}

    # pawn eval on the Hub folder (branch written with its '/' as is) == pawn eval on the local checkpoint.
    reports = {}
    for name, src in (("hub", f"{REPO}@run/run/checkpoints/step_00000002"), ("local", str(local[2]))):
        js = tmp_path / f"{name}.json"
        r = CliRunner().invoke(app, ["eval", src, "--games", "4", "--batch-size", "4", "--json", str(js)])
        assert r.exit_code == 0, r.output
        (reports[name],) = json.loads(js.read_text())["models"]
    a, b = reports["hub"]["random_games"], reports["local"]["random_games"]
    keys = [k for k, v in a.items() if isinstance(v, float)]
    assert "published/loss" in keys and {k: a[k] for k in keys} == {k: b[k] for k in keys}
    # Only that folder's checkpoint files were downloaded: no metrics, card or other step.
    assert hub.downloads and all(p.startswith("checkpoints/step_00000002/") for p in hub.downloads), hub.downloads

    # The exact %2F form, the other step: its own weights (not step 2's), run config kept.
    (lm4,) = load_models(f"{REPO}@run%2Frun/checkpoints/step_00000004")
    ck4 = load_checkpoint(local[4])
    want4 = _logits(PAWNModel(ck4.config, params=ck4.params))
    np.testing.assert_array_equal(_logits(lm4.model), want4)
    ck2 = load_checkpoint(local[2])
    assert not np.allclose(_logits(PAWNModel(ck2.config, params=ck2.params)), want4)
    assert lm4.trained_seq_len == 32 and lm4.source == f"{REPO}@run%2Frun/checkpoints/step_00000004"
    assets = sorted(p.name for p in (tmp_path / "hf-home" / "assets" / "pawn" / "hub" / "me--pawn-test").iterdir())
    commit = hub.commits[-1].oid
    assert assets == [f"{commit}--checkpoints%2Fstep_00000002", f"{commit}--checkpoints%2Fstep_00000004"]

    # Cached: nothing downloaded again; offline, the branch is split with the cache's refs/.
    n = len(hub.downloads)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (again,) = load_models(f"{REPO}@run/run/checkpoints/step_00000004")
    np.testing.assert_array_equal(_logits(again.model), want4)
    assert len(hub.downloads) == n
    monkeypatch.delenv("HF_HUB_OFFLINE")

    # The pushed model card's loading snippet names this Hub id.
    card = hub.files_at("run/run")["README.md"].decode()
    assert f"pawn.load_model('{REPO}@run%2Frun/checkpoints/step_00000004')" in card

    # owner/name/folder on the default branch (a copy of step 2 published to main).
    hub.publish(REPO, {f"ckpts/a/{p.name}": p.read_bytes() for p in local[2].iterdir()})
    (lm2,) = load_models(f"{REPO}/ckpts/a")
    np.testing.assert_array_equal(_logits(lm2.model), _logits(PAWNModel(ck2.config, params=ck2.params)))


def test_a_missing_folder_or_branch_is_one_line_naming_what_exists(hub, tmp_path):
    _push(tmp_path, REPO, "run/r1", {"step_00000002": 1, "step_00000004": 2})
    r = CliRunner().invoke(app, ["eval", f"{REPO}@run/r1/checkpoints/step_00000099", "--games", "2"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    # (huggingface_hub's own progress bar may precede it; the command's error is one line)
    lines = [ln for ln in r.output.strip().splitlines() if "Fetching 0 files" not in ln]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines == errors, r.output
    msg = errors[0]
    assert f"{REPO}@run/r1 (commit {hub.commits[-1].oid[:12]}) has no checkpoint in folder 'checkpoints/step_00000099'" in msg
    assert "checkpoint folders there: checkpoints/step_00000002, checkpoints/step_00000004" in msg
    with pytest.raises(HubDownloadError, match=r"no branch or tag 'run/nope/checkpoints' or 'run/nope' or 'run' in me/pawn-test "
                                               r"\(branches and tags: run/r1\)"):
        fetch_snapshot(f"{REPO}@run/nope/checkpoints/step_00000002")
    with pytest.raises(ConversionError, match=r"no such local directory.*no such model repository"):
        load_models("me/absent/checkpoints/best")
    assert not any(p.startswith("checkpoints/") for p in hub.downloads)  # nothing was fetched for the bad ids


def test_a_partial_folder_download_is_refused(hub, tmp_path, monkeypatch):
    _push(tmp_path, REPO, "main", {"step_00000002": 1, "step_00000004": 2})
    hub.truncate["checkpoints/step_00000004/model.safetensors"] = 100
    with pytest.raises(ConversionError, match=r"me/pawn-test/checkpoints/step_00000004.*download failed, nothing loaded"):
        load_models(f"{REPO}/checkpoints/step_00000004")
    del hub.truncate["checkpoints/step_00000004/model.safetensors"]
    load_models(f"{REPO}/checkpoints/step_00000004")
    blob = max((tmp_path / "hf-home" / "hub" / "models--me--pawn-test" / "blobs").iterdir(), key=lambda p: p.stat().st_size)
    blob.write_bytes(blob.read_bytes()[:-50])  # a crashed copy into the cache
    shutil.rmtree(tmp_path / "hf-home" / "assets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointIntegrityError, match=r"step_00000004/model.safetensors: safetensors data is"):
        fetch_snapshot(f"{REPO}/checkpoints/step_00000004")


# ------------------------------------------------------------------------------ adapters
def test_an_adapter_on_the_hub_loads_with_its_hub_folder_backbone(hub, tmp_path):
    from pawn.adapters import build_adapted
    from pawn.adapters.io import load_backbone, save_adapter

    bb_local = _push(tmp_path, REPO, "run/bb", {"step_00000002": 3, "step_00000004": 4})
    bb_id = f"{REPO}@run/bb/checkpoints/step_00000004"
    bb, ref, _ = load_backbone(resolve_backbone(bb_id), source=bb_id)
    model = build_adapted("lora", {"layers": [0]}, bb, jax.random.PRNGKey(1))
    tr, fr = eqx.partition(model, model.trainable_filter())
    tr = jax.tree_util.tree_map(lambda x: x + 0.05, tr)
    model = eqx.combine(tr, fr)
    best = save_adapter(tmp_path / "adapter" / "best", model, ref, run_config={"strategy": "lora", "seq_len": 40})
    up = CheckpointUploader("me/adapter", branch="run/a", log=lambda m: None).start()
    up.submit(best, 7)
    assert [o.status for o in up.close(60)] == ["pushed"]
    want = np.asarray(model(_tokens()[0], dtype="float32"))
    shutil.rmtree(tmp_path / "adapter")
    shutil.rmtree(tmp_path / "local")  # nothing local is left: adapter and backbone both come from the Hub
    (lm,) = load_models("me/adapter@run/a/checkpoints/best")
    assert lm.name == f"lora:{CFG.name}" and lm.trained_seq_len == 40
    np.testing.assert_array_equal(np.asarray(lm.model(_tokens()[0], dtype="float32")), want)
    assert not np.allclose(want, np.asarray(bb(*_tokens(), dtype="float32")))
    cfg = json.loads(hub.files_at("run/a")["checkpoints/best/config.json"])
    assert cfg["adapter"]["backbone"]["source"] == bb_id
    assert bb_local  # pushed from local copies that are gone now
