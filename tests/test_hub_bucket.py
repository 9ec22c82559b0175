"""``--push-to-bucket``: a run's checkpoints, metrics.jsonl and config.json synced to a Hugging Face
storage bucket, against the loopback fake Hub and its Xet storage routes (tests/fake_hub.py). The
uploads and the read-back go through huggingface_hub's bucket API and the real ``hf_xet`` client."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fake_hub import FakeHub, use_fake_hub
from pawn.settings import PretrainConfig
from pawn.train.metrics import read_metrics
from pawn.train.pretrain import TrainingError, run_pretrain

BUCKET = "me/pawn-runs"
SMALL = dict(variant="toy", batch_size=4, seq_len=32, val_games=0, steps_per_chunk=2, lr=1e-3, warmup_steps=1)
RUN = dict(progress=False, install_signal_handlers=False)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    h = use_fake_hub(monkeypatch, tmp_path)
    yield h
    h.stop()


def _read_back(hub: FakeHub, bucket: str, dest: Path) -> dict[str, bytes]:
    """Every file of ``bucket``, downloaded through huggingface_hub (Xet reconstruction from the fake)."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.url, token="hf_fake")
    files = [f for f in api.list_bucket_tree(bucket, recursive=True) if f.type == "file"]
    api.download_bucket_files(bucket, [(f, dest / f.path) for f in files], raise_on_missing_files=True)
    return {f.path: (dest / f.path).read_bytes() for f in files}


def _cfg(out: Path, **over) -> PretrainConfig:
    return PretrainConfig.load(**{**SMALL, "total_steps": 4, "checkpoint_every": 2, "out": out, "push_to_bucket": BUCKET, **over})


def test_pretrain_cli_syncs_checkpoints_metrics_and_config_byte_for_byte(hub, tmp_path):
    from pawn.cli import app

    run = tmp_path / "tiny"
    r = CliRunner().invoke(app, ["pretrain", "--supernet", "tiny", "--total-steps", "4", "--checkpoint-every", "2",
                                 "--batch-size", "4", "--seq-len", "32", "--val-games", "0", "--steps-per-chunk", "2",
                                 "--keep-checkpoints", "2", "--out", str(run), "--push-to-bucket", BUCKET])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output and "New Data Upload" not in r.output  # no upload bars from the worker
    remote = _read_back(hub, BUCKET, tmp_path / "back")
    local = {f"tiny/{p.relative_to(run).as_posix()}": p.read_bytes()
             for p in sorted((run / "checkpoints").rglob("*")) if p.is_file() and not p.relative_to(run).parts[1].startswith(".")}
    ckpts = {k: v for k, v in remote.items() if k.startswith("tiny/checkpoints/")}
    assert ckpts == local and {k.split("/")[2] for k in ckpts} == {"step_00000002", "step_00000004"}
    assert all(f"tiny/checkpoints/{s}/.complete" in ckpts for s in ("step_00000002", "step_00000004"))
    assert remote["tiny/config.json"] == (run / "config.json").read_bytes()
    # metrics.jsonl: the closing sync runs after the end record is written, so the bucket's copy
    # holds every train record and the end record (a bucket copy without it read as a run still
    # going); the local file then gains only hub records (the push outcomes, recorded at close).
    full = (run / "metrics.jsonl").read_bytes()
    sent = remote["tiny/metrics.jsonl"]
    assert full.startswith(sent) and sent.endswith(b"\n")
    sent_recs = [json.loads(x) for x in sent.splitlines()]
    assert [r["step"] for r in sent_recs if r["type"] == "train"] == [2, 4]
    assert [r["type"] for r in sent_recs].count("end") == 1 and sent_recs[-1]["type"] in ("end", "hub")
    tail = [json.loads(x) for x in full[len(sent):].splitlines()]
    assert {r["type"] for r in tail} == {"hub"} and tail[-1]["path_in_bucket"] == "tiny/metrics.jsonl"
    from pawn.runs import open_run

    back = tmp_path / "back-run"
    back.mkdir()
    (back / "metrics.jsonl").write_bytes(sent)
    (back / "config.json").write_bytes(remote["tiny/config.json"])
    assert open_run(back).status.state == "complete"  # the bucket copy reads as a finished run
    recs = [r for r in read_metrics(run / "metrics.jsonl") if r["type"] == "hub"]
    assert [(r["step"], r["status"], r["path_in_bucket"]) for r in recs] == [
        (2, "pushed", "tiny/checkpoints/step_00000002"), (4, "pushed", "tiny/checkpoints/step_00000004"),
        (4, "pushed", "tiny/metrics.jsonl")]
    assert all(r["bucket"] == BUCKET and r["upload_bytes"] > 0 for r in recs)
    assert [b for b, _ in hub.bucket_batches] == [BUCKET] * 3
    assert not (run / "checkpoints" / ".bucket-staging").exists()


def test_a_403_stops_syncing_with_one_message_and_training_ends_normally(hub, tmp_path):
    hub.bucket_faults = [403]
    lines: list[str] = []
    run = tmp_path / "run"
    res = run_pretrain(_cfg(run, total_steps=6), log=lines.append, **RUN)
    assert res.reason == "completed" and res.step == 6 and (run / "checkpoints" / "step_00000006" / ".complete").exists()
    assert hub.bucket_calls == 1 and hub.buckets == {BUCKET: {}}
    errors = [m for m in lines if m.startswith("ERROR: hub")]
    assert len(errors) == 1 and "HTTP 403" in errors[0] and "storage quota" in errors[0] and "\n" not in errors[0]
    assert "hf buckets sync" in errors[0]
    recs = [r for r in read_metrics(run / "metrics.jsonl") if r["type"] == "hub"]
    ckpts = [r for r in recs if "/checkpoints/" in r["path_in_bucket"]]
    assert [(r["step"], r["status"]) for r in ckpts] == [(2, "failed"), (4, "not_pushed"), (6, "not_pushed")]
    # the closing metrics sync is queued only while syncing has not stopped; when queued, it is not sent
    assert all(r["status"] == "not_pushed" for r in recs if r not in ckpts)
    assert all("pushing stopped" in r["error"] for r in recs[1:])


def test_checkpoints_after_a_stop_are_reported_in_the_order_they_were_taken(hub, tmp_path):
    # A checkpoint taken after syncing stopped (403) was reported at once, while the one queued before
    # the stop waited for the worker: hub records 2, 6, 4 under load. The worker's stop message is
    # held here until the next checkpoint has been handed over, the instant that ordering needs.
    import threading

    from pawn.hub.bucket import BucketUploader

    hub.bucket_faults = [403]
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.jsonl").write_text("")
    ckpts = []
    for step in (2, 4, 6):
        d = run / "checkpoints" / f"step_{step:08d}"
        d.mkdir()
        (d / "model.safetensors").write_bytes(bytes([step]) * 64)
        (d / ".complete").write_text("")
        ckpts.append((d, step))
    stopped, handed = threading.Event(), threading.Event()

    def log(msg: str) -> None:
        if msg.startswith("ERROR: hub"):  # in the worker, just after the stop
            stopped.set()
            assert handed.wait(30)

    up = BucketUploader(BUCKET, run_dir=run, log=log, backoff_s=0.01).start()
    up.submit(*ckpts[0])
    up.submit(*ckpts[1])  # queued while step 2 is in flight (or waiting)
    assert stopped.wait(60)
    up.submit(*ckpts[2])  # after the stop, before the worker has looked at step 4
    handed.set()
    out = up.close(30)
    assert [(o.step, o.status) for o in out if "/checkpoints/" in o.path_in_repo] == [(2, "failed"), (4, "not_pushed"), (6, "not_pushed")]
    assert all("pushing stopped" in (o.error or "") for o in out[1:])
    assert ckpts[2][0].is_dir() and (ckpts[2][0] / "model.safetensors").read_bytes() == bytes([6]) * 64  # never staged, never removed


def test_no_permission_to_create_the_bucket_refuses_before_the_run_writes(hub, tmp_path):
    hub.bucket_create_status = 403
    with pytest.raises(TrainingError, match=r"--push-to-bucket me/pawn-runs: cannot create the bucket: HTTP 403.*hf auth login") as e:
        run_pretrain(_cfg(tmp_path / "run"), **RUN)
    assert "\n" not in str(e.value) and not (tmp_path / "run").exists()


def test_offline_unreachable_and_bad_ids_are_refused_at_start_in_one_line(hub, tmp_path, monkeypatch):
    from pawn.cli import app

    r = CliRunner().invoke(app, ["pretrain", "--variant", "toy", "--total-steps", "4", "--push-to-bucket", "no-owner"])
    assert r.exit_code == 2 and "--push-to-bucket" in r.output and "owner/name" in r.output
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(TrainingError, match=r"--push-to-bucket me/pawn-runs: the Hub at .* cannot be reached") as e:
        run_pretrain(_cfg(tmp_path / "run"), **RUN)
    assert "\n" not in str(e.value) and not (tmp_path / "run").exists()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = CliRunner().invoke(app, ["pretrain", "--variant", "toy", "--total-steps", "4", "--out", str(tmp_path / "r2"),
                                 "--push-to-bucket", BUCKET])
    assert r.exit_code == 1 and "HF_HUB_OFFLINE=1 is set" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "r2").exists() and hub.requests == []


def test_adapt_syncs_its_adapter_checkpoints_to_the_bucket_next_to_a_hub_push(hub, tmp_path, shared_data):
    """``pawn adapt --push-to-hub R --push-to-bucket B``: both pushes run from one run; the bucket
    holds every adapter checkpoint the run kept, byte for byte, and each push writes its own hub records."""
    import jax
    import numpy as np

    from pawn.checkpoint import save_checkpoint
    from pawn.config import ModelConfig
    from pawn.model import PAWNModel
    from pawn.train.adapt import run_adapt
    from pawn.train.adapt_config import AdaptSettings

    cfg = ModelConfig(d_model=32, n_layers=2, n_heads=1, d_ff=64)
    bb = tmp_path / "bb"
    save_checkpoint(bb, {k: np.asarray(v) for k, v in PAWNModel(cfg, jax.random.PRNGKey(1)).params().items()}, cfg,
                    run_config={"prepend_outcome": False, "seq_len": 128})
    run = tmp_path / "adapt"
    s = AdaptSettings.load(backbone=str(bb), strategy="film", data=str(shared_data / "lichess"), elo_min=1200, elo_max=2200,
                           epochs=2, steps_per_epoch=2, batch_size=8, seq_len=64, val_games=32, data_seed=3,
                           cache_dir=str(tmp_path / "cache"), out=str(run), push_to_hub="me/adapter", push_to_bucket=BUCKET)
    res = run_adapt(s, log=lambda m: None, progress=False, install_signal_handlers=False)
    assert res.reason in ("completed", "step_limit")
    remote = _read_back(hub, BUCKET, tmp_path / "back")
    local = {f"adapt/{p.relative_to(run).as_posix()}": p.read_bytes()
             for p in sorted((run / "checkpoints").rglob("*")) if p.is_file() and not p.relative_to(run).parts[1].startswith(".")}
    assert local and {k: v for k, v in remote.items() if k.startswith("adapt/checkpoints/")} == local
    assert any(k.endswith("/adapter.safetensors") for k in local)
    assert remote["adapt/config.json"] == (run / "config.json").read_bytes()
    assert (run / "metrics.jsonl").read_bytes().startswith(remote["adapt/metrics.jsonl"])
    recs = [r for r in read_metrics(run / "metrics.jsonl") if r["type"] == "hub"]
    to_repo, to_bucket = [r for r in recs if "repo" in r], [r for r in recs if "bucket" in r]
    assert to_repo and len(to_repo) == len([c for c in hub.commits if c.branch == "run/adapt"])
    assert len(to_bucket) == len(to_repo) + 1 and {r["status"] for r in recs} == {"pushed"}
    assert not (run / "checkpoints" / ".bucket-staging").exists() and not (run / "checkpoints" / ".hub-staging").exists()


def test_a_refused_xet_token_stops_syncing_like_a_403(hub, tmp_path):
    """hf_xet reports the Hub's 401 on the Xet token request as a ConnectionError; it is a
    permanent error (one message, syncing stops), not a network hiccup retried for minutes."""
    hub.xet_token_status = 401
    lines: list[str] = []
    run = tmp_path / "run"
    res = run_pretrain(_cfg(run), log=lines.append, **RUN)
    assert res.reason == "completed" and res.step == 4
    assert not any("retry" in m for m in lines) and hub.buckets == {BUCKET: {}}
    errors = [m for m in lines if m.startswith("ERROR: hub")]
    assert len(errors) == 1 and "401 Unauthorized" in errors[0] and "\n" not in errors[0]
    recs = [r for r in read_metrics(run / "metrics.jsonl") if r["type"] == "hub" and "/checkpoints/" in r["path_in_bucket"]]
    assert [(r["step"], r["status"], r["attempts"]) for r in recs] == [(2, "failed", 1), (4, "not_pushed", 0)]


def _pretrain_cli(out: Path, *extra: str, seed: int = 1, steps: int = 4):
    from pawn.cli import app

    return CliRunner().invoke(app, ["pretrain", "--variant", "toy", "--total-steps", str(steps), "--checkpoint-every", "2",
                                    "--batch-size", "4", "--seq-len", "32", "--val-games", "0", "--steps-per-chunk", "2",
                                    "--seed", str(seed), "--out", str(out), "--push-to-bucket", BUCKET, *extra])


def test_a_second_run_into_an_existing_bucket_starts_even_when_the_409_has_no_url(hub, tmp_path):
    """The fake answers a second creation as the Hub does (409 with the bucket's url, which
    ``create_bucket(exist_ok=True)`` reads); PAWN must not need that field: with it left out, a
    second run (another folder name) still syncs into the existing bucket."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi(endpoint=hub.url, token="hf_fake")
    api.create_bucket(BUCKET)
    with pytest.raises(HfHubHTTPError) as e:
        api.create_bucket(BUCKET)
    assert e.value.response.status_code == 409 and e.value.response.json()["url"] == f"{hub.url}/buckets/{BUCKET}"
    assert api.create_bucket(BUCKET, exist_ok=True).url == f"{hub.url}/buckets/{BUCKET}"
    hub.bucket_conflict_url = False
    first, second = _pretrain_cli(tmp_path / "a" / "first"), _pretrain_cli(tmp_path / "b" / "second", seed=2)
    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    assert "KeyError" not in second.output
    back = _read_back(hub, BUCKET, tmp_path / "back")
    for run in (tmp_path / "a" / "first", tmp_path / "b" / "second"):
        assert back[f"{run.name}/config.json"] == (run / "config.json").read_bytes()


def test_two_runs_into_one_bucket_folder_the_second_is_refused_at_start_and_a_resume_continues(hub, tmp_path):
    """``a/run`` and ``b/run`` both default to the folder ``run/`` of one bucket: the second is
    refused at start in one line naming the folder and the other run's id, before it writes
    anything, and the bucket keeps only a's files; ``--resume auto`` of a continues its folder."""
    a, b = tmp_path / "a" / "run", tmp_path / "b" / "run"
    r = _pretrain_cli(a, "--pause-after-steps", "2")
    assert r.exit_code == 0, r.output
    from pawn.runs import open_run

    a_id = open_run(a).identity.run_id
    assert a_id and len(a_id) == 32
    before = dict(hub.buckets[BUCKET])
    r = _pretrain_cli(b, seed=2)
    assert r.exit_code == 1, r.output
    err = [ln for ln in r.output.splitlines() if "another run" in ln]
    assert len(err) == 1 and f"hf://buckets/{BUCKET}/run holds another run's files (run id {a_id}" in err[0]
    assert "Traceback" not in r.output and not b.exists()
    assert hub.buckets[BUCKET] == before
    r = _pretrain_cli(a, "--resume", "auto")
    assert r.exit_code == 0, r.output
    assert open_run(a).identity.run_id == a_id  # kept on resume
    ids = {json.loads(x).get("run_id") for x in (a / "metrics.jsonl").read_bytes().splitlines() if b'"config"' in x[:40]}
    assert ids == {a_id}
    back = _read_back(hub, BUCKET, tmp_path / "back")
    assert back["run/checkpoints/step_00000004/.complete"] == (a / "checkpoints" / "step_00000004" / ".complete").read_bytes()
    assert back["run/config.json"] == (a / "config.json").read_bytes()


def test_a_bucket_folder_with_files_of_no_pawn_run_is_refused_at_start(hub, tmp_path):
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.url, token="hf_fake")
    api.create_bucket(BUCKET)
    api.batch_bucket_files(BUCKET, add=[(b"my notes", "run/notes.txt")])
    r = _pretrain_cli(tmp_path / "run")
    assert r.exit_code == 1, r.output
    assert (f"--push-to-bucket {BUCKET}: hf://buckets/{BUCKET}/run holds 1 file not written by a PAWN run (no readable "
            "metrics.jsonl), and this run would mix its files into it") in r.output
    assert set(hub.buckets[BUCKET]) == {"run/notes.txt"} and not (tmp_path / "run").exists()
