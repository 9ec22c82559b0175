"""Hub push (spec training-and-adapters.md §1.11) and model cards, against a loopback fake Hub
(tests/fake_hub.py): no network is used."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fake_hub import use_fake_hub
from pawn.checkpoint import load_checkpoint, save_checkpoint, verify_manifest
from pawn.config import ModelConfig, param_count
from pawn.hub.card import model_card
from pawn.hub.push import CheckpointUploader, HubPushHook, metrics_prefix
from pawn.settings import PretrainConfig, fields_with
from pawn.train.metrics import read_metrics
from pawn.train.pretrain import TrainingError, run_pretrain

SMALL = dict(variant="toy", batch_size=4, seq_len=32, val_games=0, steps_per_chunk=2, lr=1e-3, warmup_steps=1)
RUN = dict(progress=False, install_signal_handlers=False)
REPO = "me/pawn-test"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    h = use_fake_hub(monkeypatch, tmp_path)
    yield h
    h.stop()


def _cfg(out: Path, **over) -> PretrainConfig:
    return PretrainConfig.load(**{**SMALL, "total_steps": 8, "val_every": 4, "checkpoint_every": 2, "out": out,
                                  "push_to_hub": REPO, **over})


def _ts(rec: dict) -> float:
    return dt.datetime.fromisoformat(rec["timestamp"]).timestamp()


def _materialise(files: dict[str, bytes], prefix: str, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for path, data in files.items():
        if path.startswith(prefix + "/"):
            (dest / path[len(prefix) + 1:]).write_bytes(data)
    return dest


def _small_checkpoint(path: Path, seed: int = 0) -> Path:
    from pawn.model import PARAM_NAMES, param_shapes

    cfg = ModelConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32)
    rng = np.random.default_rng(seed)
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in param_shapes(cfg).items()}
    assert set(params) == set(PARAM_NAMES)
    return save_checkpoint(path, params, cfg)


# ------------------------------------------------------------------------------ pretraining pushes
def test_pretrain_pushes_every_checkpoint_in_order_as_whole_commits_while_training_continues(hub, tmp_path):
    hub.commit_delay_s = 1.0  # each commit is in flight for a second
    run = tmp_path / "run"
    res = run_pretrain(_cfg(run, keep_checkpoints=1), **RUN)  # rotation deletes step_2 while it is still uploading
    assert res.reason == "completed" and res.step == 8
    branch = "run/run"
    commits = [c for c in hub.commits if c.branch == branch]
    assert [c.summary for c in commits] == [f"checkpoints/step_{s:08d} (step {s})" for s in (2, 4, 6, 8)]
    assert hub.repos == {REPO: {"private": False}} and branch in hub.branches[REPO]
    # Training did not wait for the network: the next chunk was logged while commit 1 was held.
    train = {r["step"]: r for r in read_metrics(run / "metrics.jsonl") if r["type"] == "train"}
    assert _ts(train[4]) < commits[0].answered and _ts(train[8]) < commits[1].answered
    assert all(r["checkpoint_wall_s"] < 0.5 for r in train.values())  # a 1 s commit never counts in a step
    # Each commit is a whole checkpoint: its files verify against the manifest it carries.
    for i, (c, step) in enumerate(zip(commits, (2, 4, 6, 8))):
        d = _materialise(c.files, f"checkpoints/step_{step:08d}", tmp_path / f"remote{i}")
        assert set(verify_manifest(d)) == {"model.safetensors", "config.json", "optimizer.safetensors", "training_state.json"}
        ck = load_checkpoint(d)
        assert ck.training_state["step"] == step
        metrics = [json.loads(x) for x in c.files["metrics.jsonl"].decode().splitlines()]
        steps = [r["step"] for r in metrics if r["type"] == "train"]
        assert max(steps) == step and steps == sorted(steps)  # cut after the checkpoint's step
        assert c.files["README.md"].startswith(b"---\n") and f"optimizer step {step:,}".encode() in c.files["README.md"]
    last = load_checkpoint(run / "checkpoints" / "step_00000008")
    remote = load_checkpoint(tmp_path / "remote3")
    assert all(np.array_equal(last.params[k], remote.params[k]) for k in last.params)
    # Every outcome is a hub record with the commit id the server gave.
    recs = [r for r in read_metrics(run / "metrics.jsonl") if r["type"] == "hub"]
    assert [(r["step"], r["status"], r["commit"]) for r in recs] == [(s, "pushed", c.oid) for s, c in zip((2, 4, 6, 8), commits)]
    assert all(r["repo"] == REPO and r["branch"] == branch for r in recs)
    assert not (run / "checkpoints" / ".hub-staging").exists()


def test_dropped_connections_are_retried_and_reported(hub, tmp_path):
    hub.commit_faults = ["drop", "drop", None, 503, 503]
    logs: list[str] = []
    written: list[tuple] = []
    up = CheckpointUploader(REPO, branch="main", backoff_s=0.05, max_attempts=2, log=logs.append).start()
    hook = HubPushHook(up, write=lambda kind, **f: written.append((kind, f)))
    up.max_attempts = 3
    hook.on_checkpoint(_small_checkpoint(tmp_path / "ck" / "step_00000001"), 1)
    hook.close(30)
    up2 = CheckpointUploader(REPO, branch="main", backoff_s=0.05, max_attempts=2, log=logs.append).start()
    hook2 = HubPushHook(up2, write=lambda kind, **f: written.append((kind, f)))
    hook2.on_checkpoint(_small_checkpoint(tmp_path / "ck" / "step_00000002", 1), 2)  # two 503s: gives up
    hook2.on_checkpoint(_small_checkpoint(tmp_path / "ck" / "step_00000003", 2), 3)  # still tried afterwards
    hook2.close(30)
    assert [(k, f["status"], f.get("attempts")) for k, f in written] == [("hub", "pushed", 3), ("hub", "failed", 2), ("hub", "pushed", 1)]
    assert written[0][1]["commit"] == hub.commits[0].oid
    assert "503" in written[1][1]["error"] and "gave up after 2 tries" in written[1][1]["error"]
    assert sum("retry" in m and "RemoteProtocolError" in m for m in logs) == 2
    assert hub.commit_calls == 6 and len(hub.commits) == 2


def test_a_403_stops_pushing_with_one_message_and_training_ends_normally(hub, tmp_path, capsys):
    hub.commit_faults = [403]
    lines: list[str] = []
    run = tmp_path / "run"
    res = run_pretrain(_cfg(run), log=lines.append, **RUN)
    assert res.reason == "completed" and res.step == 8 and (run / "checkpoints" / "step_00000008" / ".complete").exists()
    assert hub.commit_calls == 1 and hub.commits == []
    errors = [m for m in lines if m.startswith("ERROR: hub")]
    assert len(errors) == 1 and "HTTP 403" in errors[0] and "storage quota" in errors[0] and "\n" not in errors[0]
    recs = [r for r in read_metrics(run / "metrics.jsonl") if r["type"] == "hub"]
    assert [(r["step"], r["status"]) for r in recs] == [(2, "failed"), (4, "not_pushed"), (6, "not_pushed"), (8, "not_pushed")]
    assert all("pushing stopped" in r["error"] for r in recs[1:])


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_sigterm_waits_for_the_in_flight_upload(hub, tmp_path):
    hub.commit_delays = {0: 3.0}  # the first checkpoint's commit is in flight for 3 s
    run = tmp_path / "run"
    lines: list[str] = []

    def send_sigterm():
        while hub.commit_calls == 0:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=send_sigterm, daemon=True).start()
    res = run_pretrain(_cfg(run, total_steps=100_000, keep_checkpoints=2), log=lines.append, progress=False, install_signal_handlers=True)
    returned = time.time()
    assert res.reason == "sigterm"
    first = hub.commits[0]
    assert first.summary == "checkpoints/step_00000002 (step 2)" and first.answered <= returned
    recs = [r for r in read_metrics(run / "metrics.jsonl") if r["type"] == "hub"]
    assert recs[0]["step"] == 2 and recs[0]["status"] == "pushed" and recs[0]["commit"] == first.oid
    # Everything queued behind it was pushed within the exit wait, ending with the SIGTERM checkpoint.
    assert all(r["status"] == "pushed" for r in recs) and recs[-1]["step"] == res.step
    assert hub.commits[-1].summary.endswith(f"(step {res.step})")


def test_bounded_exit_wait_reports_in_flight_and_queued_and_the_commit_lands_whole(hub, tmp_path):
    hub.commit_delays = {0: 2.0}
    logs: list[str] = []
    up = CheckpointUploader(REPO, branch="main", backoff_s=0.05, log=logs.append).start()
    for s in (1, 2, 3):
        up.submit(_small_checkpoint(tmp_path / "ck" / f"step_{s:08d}", s), s)
    while hub.commit_calls == 0:
        time.sleep(0.01)
    t = time.monotonic()
    out = up.close(0.3)
    assert time.monotonic() - t < 1.8
    assert sorted((o.step, o.status) for o in out) == [(1, "unconfirmed"), (2, "not_pushed"), (3, "not_pushed")]
    assert any("hf upload" in m and "not pushed" in m for m in logs)
    time.sleep(2.2)
    assert len(hub.commits) == 1 and hub.commit_calls == 1  # the in-flight one landed, whole; nothing after it
    d = _materialise(hub.commits[0].files, "checkpoints/step_00000001", tmp_path / "remote")
    verify_manifest(d)


# ------------------------------------------------------------------------------ refusals
def test_offline_mode_is_refused_at_start_in_one_line(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(TrainingError, match="HF_HUB_OFFLINE=1 is set") as e:
        run_pretrain(_cfg(tmp_path / "run"), **RUN)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "run").exists() and hub.requests == []
    from pawn.cli import app

    r = CliRunner().invoke(app, ["pretrain", "--variant", "toy", "--total-steps", "4", "--out", str(tmp_path / "r2"),
                                 "--push-to-hub", REPO])
    assert r.exit_code == 1 and "HF_HUB_OFFLINE=1 is set" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["pretrain", "--variant", "toy", "--total-steps", "4", "--push-to-hub", "no-owner"])
    assert r.exit_code == 2 and "owner/name" in r.output


def test_no_permission_to_create_the_repo_refuses_before_the_run_writes(hub, tmp_path):
    hub.create_status = 403
    with pytest.raises(TrainingError, match=r"cannot create the repo .*HTTP 403.*hf auth login") as e:
        run_pretrain(_cfg(tmp_path / "run"), **RUN)
    assert "\n" not in str(e.value) and not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------ metrics prefix
def test_metrics_prefix_cuts_at_the_first_later_train_or_val_record(tmp_path):
    p = tmp_path / "metrics.jsonl"
    lines = [{"type": "config"}, {"type": "train", "step": 2}, {"type": "hub", "step": 9}, "not json",
             {"type": "val", "step": 2}, {"type": "train", "step": 4}, {"type": "train", "step": 2}]
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines) + '{"type": "train", "st')
    got = metrics_prefix(p, 2).decode().splitlines()
    assert got[:3] == [json.dumps(lines[0]), json.dumps(lines[1]), json.dumps(lines[2])] and got[3] == "not json"
    assert len(got) == 5  # stops before step 4 (the later step-2 line is not reached); torn line excluded
    assert metrics_prefix(p, 4).decode().count("\n") == 7 and metrics_prefix(tmp_path / "none", 1) == b""


# ------------------------------------------------------------------------------ model cards and convert
def test_model_card_has_hub_metadata_parameter_count_recipe_and_eval(tmp_path):
    from huggingface_hub import ModelCard

    cfg = ModelConfig(d_model=64, n_layers=2, n_heads=4, d_ff=256)
    report = {"settings": {"games": 128, "seed": 7}, "models": [{"name": "toy", "random_games": {"published/top1": 0.0731, "published/legal_rate": 0.9412}}]}  # as pawn eval writes
    text = model_card(cfg, run_config={"variant": "toy", "total_steps": 100, "lr": 3e-4, "batch_size": 4}, step=50,
                      last_val={"type": "val", "schema": 2, "step": 50, "loss": 3.25, "top1": 0.125}, eval_report=report, datasets=["me/games"])
    card = ModelCard(text)
    assert card.data.library_name == "pawn" and card.data.license == "gpl-3.0" and card.data.datasets == ["me/games"]
    assert {"pawn", "chess"} <= set(card.data.tags)
    assert f"{param_count(cfg):,}" in text and param_count(cfg) == 267_392
    assert "| `lr` | 0.0003 |" in text and "| `Loss (nats)` | 3.2500 |" in text and "| `Top-1` | 12.50% |" in text
    assert "| toy | 7.31% |" in text and "94.12%" in text and "128 random games, seed 7" in text


def test_convert_writes_a_card_and_pushes_the_converted_checkpoint_as_one_commit(hub, tmp_path):
    from huggingface_hub import ModelCard

    from pawn.cli import app
    from v1_checkpoints import v1_model_config, write_v1_checkpoint

    src = write_v1_checkpoint(tmp_path / "v1", v1_model_config(32, 2, 4, 64))
    out = tmp_path / "conv"
    r = CliRunner().invoke(app, ["convert", str(src), "-o", str(out), "--push-to-hub", "me/converted", "--hub-private"])
    assert r.exit_code == 0, r.output
    assert set(verify_manifest(out)) == {"model.safetensors", "config.json", "README.md"}
    assert hub.repos["me/converted"] == {"private": True}
    (c,) = hub.commits
    assert c.branch == "main" and f"commit {c.oid}" in r.output
    assert set(c.files) == {"model.safetensors", "config.json", "README.md", ".complete"}
    assert all(c.files[n] == (out / n).read_bytes() for n in c.files)
    card = ModelCard(c.files["README.md"].decode())
    assert card.data.library_name == "pawn" and "converted-from-v1" in card.data.tags
    assert f"{param_count(load_checkpoint(out).config):,}" in card.text


def test_convert_push_is_refused_offline_before_converting(hub, tmp_path, monkeypatch):
    from pawn.cli import app
    from v1_checkpoints import v1_model_config, write_v1_checkpoint

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    src = write_v1_checkpoint(tmp_path / "v1", v1_model_config(32, 2, 4, 64))
    r = CliRunner().invoke(app, ["convert", str(src), "-o", str(tmp_path / "conv"), "--push-to-hub", "me/converted"])
    assert r.exit_code == 1 and "HF_HUB_OFFLINE=1" in r.output and not (tmp_path / "conv").exists()


def test_adapt_pushes_its_checkpoints_with_the_adapter_weights(hub, tmp_path, shared_data):
    """``pawn adapt --push-to-hub``: the same trainer hook as pretraining; each adapter checkpoint
    (adapter.safetensors, its config and manifest) lands as one commit, outcomes as hub records."""
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
    s = AdaptSettings.load(backbone=str(bb), strategy="film", data=str(shared_data / "lichess"), elo_min=1200, elo_max=2200,
                           epochs=2, steps_per_epoch=2, batch_size=8, seq_len=64, val_games=32, data_seed=3,
                           cache_dir=str(tmp_path / "cache"), out=str(tmp_path / "adapt"), push_to_hub=REPO)
    res = run_adapt(s, log=lambda m: None, progress=False, install_signal_handlers=False)
    assert res.reason in ("completed", "step_limit")
    commits = [c for c in hub.commits if c.branch == "run/adapt"]
    assert commits and all("adapter.safetensors" in " ".join(c.files) for c in commits), [c.files for c in commits]
    recs = [r for r in read_metrics(tmp_path / "adapt" / "metrics.jsonl") if r["type"] == "hub"]
    assert recs and {r["status"] for r in recs} == {"pushed"} and len(recs) == len(commits)
    # the pushed bytes are the trained adapter: they load to the local checkpoint's tensors, which moved off the identity
    from safetensors.numpy import load as load_bytes
    from safetensors.numpy import load_file

    last = commits[-1]
    (name,) = [n for n in last.files if n.endswith("/adapter.safetensors")]
    local = tmp_path / "adapt" / name
    pushed, want = load_bytes(last.files[name]), load_file(str(local))
    assert want and set(pushed) == set(want)
    for k in want:
        np.testing.assert_array_equal(pushed[k], want[k], err_msg=k)
    # the identity FiLM has every gamma 1 and every beta 0
    assert any(not np.allclose(v, 1.0 if "gamma" in k else 0.0) for k, v in want.items()), "the adapter never trained"
    d = _materialise(last.files, name.rpartition("/")[0], tmp_path / "pulled")
    from pawn.adapters.io import load_adapter

    la = load_adapter(d, backbone_dir=bb)  # manifest hashes verified; the recorded backbone matches
    assert la.model.strategy == "film"


def test_adapt_refuses_offline_push_before_any_work(hub, tmp_path, monkeypatch):
    from pawn.train.adapt import run_adapt
    from pawn.train.adapt_config import AdaptSettings

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    s = AdaptSettings.load(backbone=str(tmp_path / "no-bb"), strategy="film", data=str(tmp_path / "no-data"),
                           out=str(tmp_path / "adapt"), push_to_hub=REPO)
    with pytest.raises(TrainingError, match="HF_HUB_OFFLINE=1 is set"):
        run_adapt(s, log=lambda m: None, progress=False, install_signal_handlers=False)
    assert not (tmp_path / "adapt").exists() and hub.requests == []


def test_a_field_tagged_recipe_shows_in_the_pushed_card_with_no_list_edited(hub, tmp_path):
    """The card's training recipe was a name list in pawn.hub.card; it is now the run settings'
    fields tagged RECIPE, passed from the trainer's hub start down to the pushed card."""
    from pydantic import Field

    from pawn.model import param_shapes
    from pawn.settings import RECIPE, facts
    from pawn.train.adapt_config import AdaptSettings
    from pawn.train.spine import start_hub

    class WithKnob(PretrainConfig):
        knob_ratio: float = Field(0.25, json_schema_extra=facts(RECIPE))
        quiet_knob: float = 0.5  # not tagged: recorded, not shown

    run = tmp_path / "run"
    cfg = WithKnob.load(**SMALL, total_steps=8, out=run, push_to_hub=REPO)
    mcfg = ModelConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32)
    params = {k: np.zeros(s, np.float32) for k, s in param_shapes(mcfg).items()}
    ckpt = save_checkpoint(run / "checkpoints" / "step_00000002", params, mcfg, run_config=cfg.model_dump(mode="json"))
    hook = start_hub(cfg, run, True, log=lambda m: None)
    hook.pusher.on_checkpoint(ckpt, 2)
    hook.pusher.close()
    (c,) = hub.commits
    card = c.files["README.md"].decode()
    assert "| `knob_ratio` | 0.25 |" in card and "quiet_knob" not in card
    assert "| `lr` | 0.001 |" in card and "| `variant` | toy |" in card and "| `total_steps` | 8 |" in card
    assert "| `out` |" not in card and "| `push_to_hub` |" not in card  # recorded, not tagged
    # an adapter run's card shows the same rows as before the tags (the old list's adapter fields)
    s = AdaptSettings.load(strategy="lora")  # a run's config: lr is the strategy's, never unset
    text = model_card(mcfg, run_config=s.model_dump(mode="json"), recipe_fields=fields_with(AdaptSettings, RECIPE))
    shown = {line.split("`")[1] for line in text.splitlines() if line.startswith("| `")} - {*mcfg.to_json_dict(), "head_dim", "parameters"}
    assert shown == {"batch_size", "seq_len", "lr", "lr_schedule", "warmup_frac", "min_lr_ratio", "weight_decay", "beta1",
                     "beta2", "max_grad_norm", "dtype", "seed", "val_games", "val_every"}  # variant, warmup_steps: None
