"""``checkpoints/.hub-staging`` (hard-linked snapshots of checkpoints being pushed) never outlives
the push (issue 25): an upload still unconfirmed when the exit wait ends used to leave its snapshot
forever once the process exited. Real child processes against the loopback fake Hub; no network."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fake_hub import FakeHub

CHILD = textwrap.dedent("""
    import sys, jax
    from pathlib import Path
    from pawn.checkpoint import save_checkpoint
    from pawn.config import ModelConfig
    from pawn.hub.push import CheckpointUploader
    from pawn.model import PAWNModel

    cfg = ModelConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32)
    ck = save_checkpoint(Path(sys.argv[1]) / "checkpoints" / "step_00000002", PAWNModel(cfg, jax.random.PRNGKey(0)).params(), cfg)
    up = CheckpointUploader("me/staging", branch="main", backoff_s=0.05, log=lambda m: print(m, flush=True)).start()
    up.submit(ck, 2)
    for o in up.close(float(sys.argv[2])):
        print("outcome", o.status, flush=True)
    print("staged at exit:", sorted(p.name for p in (ck.parent / ".hub-staging").iterdir()), flush=True)
""")


@pytest.fixture
def hub():
    h = FakeHub().start()
    yield h
    h.stop()


def _child(hub: FakeHub, run: Path, wait_s: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": "hf_fake", "HF_HOME": str(run.parent / "hf-home"),
           "JAX_PLATFORMS": "cpu"}
    env.pop("HF_HUB_OFFLINE", None)
    return subprocess.run([sys.executable, "-c", CHILD, str(run), str(wait_s)], env=env, capture_output=True, text=True, timeout=240)


def test_an_unconfirmed_push_leaves_no_staging_copy_after_exit(hub, tmp_path):
    hub.commit_delay_s = 8.0  # the commit is still in flight when the 0.5 s exit wait ends
    run = tmp_path / "run"
    r = _child(hub, run, 0.5)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "outcome unconfirmed" in r.stdout, r.stdout
    assert "staged at exit: ['000000-step_00000002']" in r.stdout  # kept while the upload reads it
    assert not (run / "checkpoints" / ".hub-staging").exists(), list((run / "checkpoints" / ".hub-staging").rglob("*"))
    assert "removed the staging copy of checkpoints/step_00000002 (the process exited before its upload was confirmed)" in r.stdout, r.stdout
    assert (run / "checkpoints" / "step_00000002" / "model.safetensors").is_file()  # the checkpoint itself stays


def test_a_push_resolved_after_the_exit_wait_removes_its_copy_then(hub, tmp_path):
    hub.commit_delay_s = 2.0
    run = tmp_path / "run"
    stale = run / "checkpoints" / ".hub-staging" / "000007-step_00000001"  # left by a killed earlier process
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"x")
    child = CHILD.replace('print("staged at exit:"', 'import time; time.sleep(4); print("staged at exit:"')
    child = child.replace("sorted(p.name for p in (ck.parent / \".hub-staging\").iterdir())",
                          "(ck.parent / \".hub-staging\").exists()")
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": "hf_fake", "HF_HOME": str(tmp_path / "hf-home"), "JAX_PLATFORMS": "cpu"}
    env.pop("HF_HUB_OFFLINE", None)
    r = subprocess.run([sys.executable, "-c", child, str(run), "0.2"], env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "removed 1 staging copy left in" in r.stdout and "by an earlier run" in r.stdout, r.stdout
    assert "outcome unconfirmed" in r.stdout
    assert "its upload ended after the exit wait: pushed" in r.stdout, r.stdout
    assert "staged at exit: False" in r.stdout  # gone before exit, once the commit was confirmed
    assert [c.summary for c in hub.commits] == ["checkpoints/step_00000002 (step 2)"]
