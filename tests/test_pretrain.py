"""`pawn pretrain` end to end on CPU: loss falls, exact resume, signals, NaN stop, multi-device
equality, metrics format."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pawn.checkpoint import load_checkpoint, load_model
from pawn.settings import PretrainConfig
from pawn.train.metrics import read_metrics
from pawn.train.pretrain import TrainingError, run_pretrain

SMALL = dict(variant="toy", batch_size=4, seq_len=32, val_games=0, steps_per_chunk=2, lr=1e-3, warmup_steps=1)


def cfg(tmp_path: Path, **over) -> PretrainConfig:
    base = dict(SMALL, total_steps=8, val_every=4, checkpoint_every=4, out=tmp_path / "run")
    base.update(over)
    return PretrainConfig.load(**base)


def train_losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if r["type"] == "train"}


def test_tiny_supernet_loss_decreases_and_variants_are_exported(tmp_path):
    c = PretrainConfig.load(supernet="tiny", total_steps=24, batch_size=8, seq_len=48, val_games=0,
                            steps_per_chunk=6, val_every=12, checkpoint_every=12, lr=2e-3, warmup_steps=2,
                            out=tmp_path / "tiny")
    res = run_pretrain(c, progress=False, install_signal_handlers=False)
    assert res.reason == "completed" and res.step == 24
    from pawn.runs import open_run

    recs = open_run(res.run_dir).train
    first, last = recs[0], recs[-1]
    for name in ("small", "base", "large"):
        assert last.get("loss", name) < first.get("loss", name) - 0.3, (name, first.variants, last.variants)
    assert set(res.variant_checkpoints) == {"small", "base", "large"}
    model, config = load_model(res.variant_checkpoints["base"])
    assert (config.d_model, config.n_layers) == (128, 3)
    from pawn.evaluate.loading import load_models

    # A variant checkpoint is one model, not a supernet to slice again.
    assert [m.config for m in load_models(res.variant_checkpoints["large"])] == [c.model_configs()[0]]
    assert len(load_models(res.checkpoint)) == 3
    assert load_checkpoint(res.variant_checkpoints["base"]).run_config["variant"] == "base"
    health = json.loads((res.run_dir / "schedule_health.json").read_text())
    assert health["reason_for_stop"] == "completed" and health["actual_total_steps"] == 24


def test_metrics_file_parses_line_by_line_with_typed_records(tmp_path):
    res = run_pretrain(cfg(tmp_path, total_steps=4, val_every=4, checkpoint_every=4), progress=False, install_signal_handlers=False)
    lines = (res.run_dir / "metrics.jsonl").read_text().splitlines()
    recs = [json.loads(line) for line in lines]  # every line is a complete JSON object
    assert [r["type"] for r in recs] == ["config", "train", "train", "end"]
    assert recs[-1]["reason"] == "completed" and recs[-1]["step"] == 4
    assert recs[-1]["compute"] == {"optimizer_steps": 4}  # what the run spent
    from pawn.runs import SCHEMA_VERSION

    for r in recs[1:-1]:
        for key in ("step", "schema", "timestamp", "elapsed", "loss", "lr", "grad_norm", "top1", "tokens_per_s", "data_wait_s", "mem"):
            assert key in r, key
        assert r["schema"] == SCHEMA_VERSION and r["mem"]["peak_rss_gb"] > 0 and "variants" not in r  # one model: no per-variant block
    assert recs[0]["run_config"]["variant"] == "toy"


def test_resume_reproduces_the_uninterrupted_run_exactly(tmp_path):
    full = run_pretrain(cfg(tmp_path / "a"), progress=False, install_signal_handlers=False)
    paused = run_pretrain(cfg(tmp_path / "b", pause_after_steps=4), progress=False, install_signal_handlers=False)
    assert paused.reason == "paused" and paused.step == 4
    resumed = run_pretrain(PretrainConfig.load(total_steps=8, resume="auto", out=tmp_path / "b" / "run"),
                           progress=False, install_signal_handlers=False)
    assert resumed.reason == "completed" and resumed.step == 8
    assert train_losses(full.run_dir) == train_losses(resumed.run_dir)
    a, b = load_checkpoint(full.checkpoint), load_checkpoint(resumed.checkpoint)
    for name in a.params:
        np.testing.assert_array_equal(a.params[name], b.params[name], err_msg=name)
    for name in a.optimizer_state:
        np.testing.assert_array_equal(a.optimizer_state[name], b.optimizer_state[name], err_msg=name)
    # resuming a finished run does nothing
    again = run_pretrain(PretrainConfig.load(total_steps=8, resume=str(resumed.run_dir)), progress=False, install_signal_handlers=False)
    assert again.reason == "resume_no_op"


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_resume_without_total_steps_reads_it_from_the_checkpoint(tmp_path):
    """The README's ``pawn pretrain --resume auto --out DIR`` and the stop message's
    ``--resume DIR`` give no --total-steps: the stored run supplies it."""
    paused = run_pretrain(cfg(tmp_path, pause_after_steps=4), progress=False, install_signal_handlers=False)
    res = run_pretrain(PretrainConfig.load(resume="auto", out=paused.run_dir), progress=False, install_signal_handlers=False)
    assert res.reason == "completed" and res.step == 8
    with pytest.raises(TrainingError, match="needs --total-steps"):
        run_pretrain(PretrainConfig.load(resume="auto", out=tmp_path / "empty"), progress=False, install_signal_handlers=False)
    assert not (tmp_path / "empty").exists()


def test_resume_refuses_changed_settings(tmp_path):
    run_pretrain(cfg(tmp_path, total_steps=4, val_every=4, checkpoint_every=4), progress=False, install_signal_handlers=False)
    with pytest.raises(TrainingError, match="lr"):
        run_pretrain(PretrainConfig.load(total_steps=4, val_every=4, checkpoint_every=4, lr=0.5, resume="auto", out=tmp_path / "run"),
                     progress=False, install_signal_handlers=False)


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_resume_without_optimizer_state_warns_loudly(tmp_path):
    paused = run_pretrain(cfg(tmp_path, pause_after_steps=4), progress=False, install_signal_handlers=False)
    ck = paused.checkpoint
    (ck / "optimizer.safetensors").unlink()
    from pawn.checkpoint import write_manifest

    write_manifest(ck)
    msgs = []
    res = run_pretrain(PretrainConfig.load(total_steps=8, resume=str(ck)), log=msgs.append, progress=False, install_signal_handlers=False)
    assert res.step == 8
    assert any("WARNING" in m and "no optimizer state" in m for m in msgs)


def test_nan_loss_stops_without_a_checkpoint(tmp_path, monkeypatch):
    import jax.numpy as jnp

    import pawn.train.loop as loop

    real = loop.joint_loss

    def poisoned(model, batch, variants, **kw):
        loss, aux = real(model, batch, variants, **kw)
        return loss * jnp.nan, aux

    monkeypatch.setattr(loop, "joint_loss", poisoned)
    with pytest.raises(TrainingError, match="loss became nan at step 0"):
        run_pretrain(cfg(tmp_path), progress=False, install_signal_handlers=False)
    assert not list((tmp_path / "run" / "checkpoints").glob("step_*"))
    assert json.loads((tmp_path / "run" / "schedule_health.json").read_text())["reason_for_stop"] == "exception"


def _cli_run(args, env=None, **kw):
    return subprocess.Popen([sys.executable, "-m", "pawn.cli", *args], env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_sigterm_finishes_the_chunk_checkpoints_and_exits_zero(tmp_path):
    out = tmp_path / "sig"
    p = _cli_run(["pretrain", "--variant", "toy", "--total-steps", "2000", "--batch-size", "4", "--seq-len", "32",
                  "--val-games", "0", "--steps-per-chunk", "2", "--val-every", "2000", "--checkpoint-every", "2000",
                  "--out", str(out)])
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (metrics.exists() and '"train"' in metrics.read_text()):
        time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 0, stderr
    assert "stopped by signal" in stdout
    health = json.loads((out / "schedule_health.json").read_text())
    assert health["reason_for_stop"] == "sigterm"
    step = health["actual_total_steps"]
    assert step % 2 == 0 and 0 < step < 2000
    ck = load_checkpoint(out / "checkpoints" / f"step_{step:08d}")
    assert ck.training_state["step"] == step


@pytest.mark.slow
def test_four_devices_give_the_same_losses_as_one(tmp_path):
    code = (
        "import json, sys; from pathlib import Path;"
        "from pawn.settings import PretrainConfig; from pawn.train.pretrain import run_pretrain;"
        "from pawn.train.metrics import read_metrics;"
        "c = PretrainConfig.load(variant='toy', batch_size=8, seq_len=32, val_games=0, steps_per_chunk=2, total_steps=4,"
        " val_every=4, checkpoint_every=4, lr=1e-3, warmup_steps=1, out=Path(sys.argv[1]));"
        "run_pretrain(c, progress=False, install_signal_handlers=False);"
        "print(json.dumps([r['loss'] for r in read_metrics(c.out / 'metrics.jsonl') if r['type'] == 'train']))"
    )
    results = {}
    for n in (1, 4):
        env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={n}", "JAX_PLATFORMS": "cpu"}
        r = subprocess.run([sys.executable, "-c", code, str(tmp_path / f"d{n}")], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        results[n] = json.loads(r.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(results[4], results[1], rtol=1e-5)
    cfg4 = json.loads((tmp_path / "d4" / "metrics.jsonl").read_text().splitlines()[0])
    assert cfg4["devices"] == 4


def test_validation_records_carry_the_registry_metrics(tmp_path):
    from pawn.runs import SCHEMA_VERSION, open_run

    res = run_pretrain(cfg(tmp_path, total_steps=4, val_every=4, checkpoint_every=4, val_games=12),
                       progress=False, install_signal_handlers=False)
    val = open_run(res.run_dir).val
    assert len(val) == 1 and val[0].step == 4 and val[0].schema == SCHEMA_VERSION
    for key in ("loss", "top1", "top5", "legal_rate", "late_legal_rate", "completion_rate"):
        assert key in val[0].values, key
    assert 0.0 <= val[0].values["legal_rate"] <= 1.0
    assert 6.0 < val[0].values["loss"] < 9.0  # near ln(1980) = 7.59 for a barely trained toy


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_on_disk_corpus_trains_exactly_like_fresh_games(tmp_path):
    fresh = run_pretrain(cfg(tmp_path / "fresh", total_steps=4, val_every=4, checkpoint_every=4), progress=False, install_signal_handlers=False)
    corpus = tmp_path / "corpus"
    disk = run_pretrain(cfg(tmp_path / "disk", total_steps=4, val_every=4, checkpoint_every=4, corpus_dir=corpus),
                        progress=False, install_signal_handlers=False)
    assert json.loads((corpus / "corpus.json").read_text())["n_games"] == 16
    assert train_losses(fresh.run_dir) == train_losses(disk.run_dir)


def test_signal_during_the_last_chunk_still_completes_the_run(tmp_path, monkeypatch):
    """A stop request that arrives while the final chunk runs must not mark a finished run as
    stopped (a supernet run would then skip exporting its variants, and resume is a no-op)."""
    import types

    import pawn.train.spine as spine_mod  # the spine installs every run's stop flag

    monkeypatch.setattr(spine_mod, "StopFlag", lambda install: types.SimpleNamespace(requested="SIGTERM", restore=lambda: None))
    res = run_pretrain(cfg(tmp_path, total_steps=2, val_every=2, checkpoint_every=2), progress=False, install_signal_handlers=False)
    assert res.reason == "completed" and res.step == 2
    assert json.loads((res.run_dir / "schedule_health.json").read_text())["reason_for_stop"] == "completed"


def test_out_pointing_at_a_file_is_a_one_line_error(tmp_path):
    from typer.testing import CliRunner

    from pawn.cli import app

    blocker = tmp_path / "a_file"
    blocker.write_text("keep me")
    for out in (blocker, blocker / "run"):
        r = CliRunner().invoke(app, ["pretrain", "--variant", "toy", "--total-steps", "2", "--out", str(out)])
        assert r.exit_code == 1 and r.output.startswith("error: --out") and "is a file" in r.output, r.output
        assert isinstance(r.exception, SystemExit)
    assert blocker.read_text() == "keep me"


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_resume_ignores_laptop_preset_values_the_user_never_typed(tmp_path):
    run_pretrain(PretrainConfig.load(variant="toy", total_steps=4, batch_size=4, seq_len=32, val_games=0,
                                     steps_per_chunk=2, val_every=2, checkpoint_every=2, pause_after_steps=2,
                                     out=tmp_path / "run"), progress=False, install_signal_handlers=False)
    # --variant toy brings preset val_every=100 etc.; they were not typed, so they are no conflict.
    res = run_pretrain(PretrainConfig.load(variant="toy", resume="auto", out=tmp_path / "run"), progress=False,
                       install_signal_handlers=False)
    assert res.reason == "completed" and res.step == 4


@pytest.mark.slow
def test_two_processes_through_jax_distributed_match_one(tmp_path):
    """Two CPU processes joined by jax.distributed (env vars, as the README documents) each build
    their half of every batch; the losses equal a single-process run's."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = ["pretrain", "--variant", "toy", "--total-steps", "4", "--batch-size", "8", "--seq-len", "32",
            "--val-games", "0", "--steps-per-chunk", "2", "--val-every", "4", "--checkpoint-every", "4",
            "--lr", "1e-3", "--warmup-steps", "1"]
    env = {"JAX_PLATFORMS": "cpu", "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2"}
    procs = [_cli_run([*args, "--out", str(tmp_path / "multi")], env={**env, "JAX_PROCESS_ID": str(i)}) for i in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    single = _cli_run([*args, "--out", str(tmp_path / "single")], env={"JAX_PLATFORMS": "cpu"})
    out, err = single.communicate(timeout=300)
    assert single.returncode == 0, err[-2000:]
    multi, one = train_losses(tmp_path / "multi"), train_losses(tmp_path / "single")
    assert list(multi) == [2, 4]
    np.testing.assert_allclose([multi[s] for s in multi], [one[s] for s in multi], rtol=1e-5)
    config = read_metrics(tmp_path / "multi" / "metrics.jsonl")[0]
    assert config["processes"] == 2 and config["devices"] == 2
