"""The run's wall time: the plan's estimate against a measured run, the warning for a run longer
than a day, the terminal bar's ETA, checkpoints by the clock and the Ctrl-C messages."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pawn.cli import app
from pawn.progress import ProgressReporter
from pawn.settings import PretrainConfig
from pawn.train.metrics import read_metrics
from pawn.train.pretrain import PretrainTask, run_pretrain
from pawn.train.walltime import cut_chunk_steps, plan_pretrain


def test_the_plan_names_a_wall_time_within_2x_of_the_measured_one_on_the_tiny_supernet(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["pretrain", "--supernet", "tiny", "--total-steps", "60", "--steps-per-chunk", "20",
                                 "--val-games", "0", "--out", str(out)])
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.output.splitlines() if ln.startswith("expected wall time on this device: this run ≈ "))
    assert "one 20-step chunk ≈ " in line and "the first checkpoint" in line, line
    recs = read_metrics(out / "metrics.jsonl")
    wall = next(x for x in recs if x["type"] == "config")["summary"]["wall_time"]
    measured = sum(x["chunk_wall_s"] for x in recs if x["type"] == "train")  # the memory check compiled the chunk
    ratio = wall["seconds"] / measured
    assert 0.5 <= ratio <= 2.0, (wall, measured)
    assert wall["steps"] == 60 and wall["seconds"] == wall["step_s"] * 60
    # the correction comes once about 5 s of chunks have run (one chunk or two, by this machine's load)
    assert any(re.match(r"measured: (20|40) steps in ", ln) and "the plan said ≈ " in ln for ln in r.output.splitlines()), r.output


def test_a_run_of_years_on_this_cpu_is_warned_about_with_what_would_help_and_its_chunks_are_cut():
    """Issue: ``--supernet large --total-steps 200000 --accumulation-steps 2`` on a 2-core CPU is
    ≈ 31 h a 50-step chunk and ≈ 14 years in all; the plan said only its FLOPs."""
    cfg = PretrainConfig.load(supernet="large", total_steps=200_000, accumulation_steps=2)
    lines: list[str] = []
    k, est = plan_pretrain(cfg, PretrainTask(cfg).cost(start_step=0, end_step=200_000), start_step=0, end_step=200_000, k=cfg.chunk_steps,
                           cut=True, log=lines.append)
    text = "\n".join(lines)
    assert est.too_long and est.total_s > 365 * 86400, text  # years here, whatever the load
    assert re.search(r"this run ≈ [\d.]+ years", text), text
    warn = next(ln for ln in lines if ln.startswith("WARNING: this run would take"))
    assert "more than a day" in warn and "--variant small" in warn and "one TPU v5e chip: ≈ " in warn, warn
    assert "fewer steps (" in warn, warn
    # a 50-step chunk is hours here: cut to the most steps that end within the 30-minute checkpoint
    # interval (one step when a step alone takes longer; how many depends on this machine's load)
    assert cfg.chunk_steps == 50 and 1 <= k < 50 and est.chunk_steps == k, text
    assert k == 1 or k * est.step_s <= 1800, text
    assert f"steps per chunk 50 → {k}" in text, text


def test_cut_chunk_steps_keeps_a_divisor_that_fits_and_the_resume_boundary():
    assert cut_chunk_steps(50, 1.0, 1800) == 50
    assert cut_chunk_steps(50, 100.0, 1800) == 10
    assert cut_chunk_steps(50, 100.0, 1800, start_step=5) == 5
    assert cut_chunk_steps(50, 4000.0, 1800) == 1


def test_the_terminal_bar_shows_the_eta_of_completed_chunks(tmp_path):
    """Chunks of 40-100 s are longer than rich's 30 s estimation window: its column showed
    ``-:--:--`` for a whole run. The bar shows the ETA the log lines compute."""
    from rich.console import Console

    now = [0.0]
    bar = ProgressReporter("pretrain", 500, fields={"loss": "-"}, plain=False, stream=io.StringIO(), clock=lambda: now[0])
    bar.start()
    now[0] = 60.0
    bar.update(50, unit_s=1.2, loss="3.0")  # first chunk: 50 steps timed at 1.2 s a step
    buf = io.StringIO()
    Console(file=buf, width=200).print(bar._bar.get_renderable())
    assert "ETA 0:09:00" in buf.getvalue(), buf.getvalue()  # 450 steps × 1.2 s
    now[0] = 120.0
    bar.update(100, unit_s=1.2, loss="2.9")
    now[0] = 150.0  # half-way through the next chunk: counts down
    buf = io.StringIO()
    Console(file=buf, width=200).print(bar._bar.get_renderable())
    assert "ETA 0:07:30" in buf.getvalue(), buf.getvalue()  # 400 steps × 1.2 s − the 30 s since the update
    bar.stop()


def test_an_expected_step_time_gives_the_bar_an_eta_before_the_first_chunk():
    now = [0.0]
    bar = ProgressReporter("pretrain", 100, plain=True, stream=io.StringIO(), clock=lambda: now[0], expected_unit_s=2.0)
    bar.start()
    now[0] = 10.0
    assert bar.eta_s() == 190.0


def test_checkpoints_by_the_clock(tmp_path):
    out = tmp_path / "clock"
    cfg = PretrainConfig.load(variant="toy", total_steps=30, steps_per_chunk=10, val_games=0, checkpoint_every=30,
                              keep_checkpoints=0, checkpoint_every_minutes=1e-6, out=str(out))
    res = run_pretrain(cfg, progress=False, install_signal_handlers=False, log=lambda m: None)
    assert res.reason == "completed"
    got = sorted(p.name for p in (out / "checkpoints").glob("step_*"))
    assert got == ["step_00000010", "step_00000020", "step_00000030"], got


def test_without_the_clock_only_the_interval_checkpoints(tmp_path):
    out = tmp_path / "noclock"
    cfg = PretrainConfig.load(variant="toy", total_steps=30, steps_per_chunk=10, val_games=0, checkpoint_every=30,
                              keep_checkpoints=0, checkpoint_every_minutes=0, out=str(out))
    run_pretrain(cfg, progress=False, install_signal_handlers=False, log=lambda m: None)
    assert sorted(p.name for p in (out / "checkpoints").glob("step_*")) == ["step_00000030"]


def test_ctrl_c_says_when_the_chunk_ends_what_the_checkpoint_takes_and_what_a_second_loses(tmp_path):
    out = tmp_path / "sigint"
    p = subprocess.Popen([sys.executable, "-m", "pawn.cli", "pretrain", "--variant", "toy", "--total-steps", "2000",
                          "--batch-size", "4", "--seq-len", "32", "--val-games", "0", "--steps-per-chunk", "2",
                          "--val-every", "2000", "--checkpoint-every", "2000", "--out", str(out)],
                         env={**os.environ, "JAX_PLATFORMS": "cpu"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (metrics.exists() and '"train"' in metrics.read_text()):
        time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 0, stderr
    msg = next(ln for ln in stderr.splitlines() if ln.startswith("stopping after"))
    assert re.search(r"it should end at ≈ \d\d:\d\d, in ≈ ", msg), msg
    assert re.search(r"then a checkpoint \(≈ [\d.]+ m?s", msg), msg
    assert "no checkpoint of this run exists yet, so there is nothing to resume" in msg, msg
    health = json.loads((out / "schedule_health.json").read_text())
    assert health["reason_for_stop"] == "sigterm"
    assert (out / "checkpoints" / f"step_{health['actual_total_steps']:08d}").is_dir()


def test_a_sweep_names_trials_times_steps_before_its_first_trial(tmp_path):
    base = tmp_path / "base.toml"
    base.write_text('variant = "toy"\ntotal_steps = 20\nsteps_per_chunk = 10\nval_games = 8\nval_every = 10\n'
                    'checkpoint_every = 20\nbatch_size = 4\nseq_len = 32\nwarmup_steps = 2\n')
    r = CliRunner().invoke(app, ["sweep", "--run-type", "pretrain", "--base-config", str(base), "--trials", "1",
                                 "--out", str(tmp_path / "sw")])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("expected wall time on this device: this sweep (1 trial × 20 steps"))
    # training steps only, and it says so (it was labelled "at most" and ran 3× short of a real sweep)
    assert "each trial's compile, data loading and validations come on top" in lines[at] and "at most" not in lines[at]
    assert at < next(i for i, ln in enumerate(lines) if ln.startswith("trial 0:")), r.output


def test_a_sweep_of_large_supernet_trials_on_this_cpu_is_warned_about():
    from pawn.train.pretrain import PretrainTask
    from pawn.train.walltime import plan_sweep

    lines: list[str] = []
    est = plan_sweep(20, PretrainTask(PretrainConfig.load(supernet="large", total_steps=10_000)).cost(), log=lines.append)
    assert est is not None and est.steps == 200_000 and est.too_long
    warn = next(ln for ln in lines if ln.startswith("WARNING: this sweep (20 trials × 10,000 steps"))
    assert "fewer --trials" in warn and "a smaller --total-steps in --base-config" in warn, warn


def test_ctrl_c_while_the_step_compiles_says_the_first_chunk_runs_first(tmp_path):
    """Before: "stopping after this chunk (a checkpoint is written)" whatever the chunk's length."""
    out = tmp_path / "compiling"
    p = subprocess.Popen([sys.executable, "-m", "pawn.cli", "pretrain", "--variant", "toy", "--total-steps", "2000",
                          "--batch-size", "4", "--seq-len", "32", "--val-games", "0", "--steps-per-chunk", "2",
                          "--val-every", "2000", "--checkpoint-every", "2000", "--out", str(out)],
                         env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    seen = []
    for line in p.stderr:  # the log lines
        seen.append(line)
        if line.startswith("memory check: compiling"):
            break
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=180)
    assert p.returncode == 0, stderr
    msg = next(ln for ln in stderr.splitlines() if ln.startswith("stopping after"))
    assert msg.startswith("stopping after the first chunk, once the train step has compiled"), msg
    assert "steps 0 → 2; it should end at ≈ " in msg and "the chunk under way is lost" in msg, msg
    assert (out / "checkpoints" / "step_00000002").is_dir(), "".join(seen) + stdout


def test_clock_checkpoints_are_at_most_the_interval_apart():
    """--checkpoint-every-minutes 30 with 27-minute chunks: a checkpoint after every chunk (the next
    one would end 54 min after the last), not after every second chunk (54 min apart); with
    10-minute chunks, one every 3 chunks (30 min), not 4."""
    from types import SimpleNamespace

    from pawn.train.lifecycle import StopFlag
    from pawn.train.clock import WallClockHook
    from pawn.train.walltime import first_checkpoint_steps

    assert first_checkpoint_steps(0, 1000, every_steps=None, every_s=1800, step_s=27 * 60 / 5, chunk_steps=5) == 5
    assert first_checkpoint_steps(0, 1000, every_steps=None, every_s=1800, step_s=60, chunk_steps=10) == 30
    for chunk_min, want in ((27, [5, 10, 15, 20]), (10, [30, 60])):
        now = [0.0]
        saved: list[int] = []

        class Ck:  # records where the hook asks for a checkpoint and tells it back, as the Checkpointer's event does
            def save(self, step, ctx=None):
                saved.append(step)
                hook.on_event(SimpleNamespace(kind="interval", step=step, path=None))

        hook = WallClockHook(Ck(), StopFlag(install=False), start_step=0, end_step=1000, estimate=None, every_s=1800.0,
                             checkpoint_s_guess=1.0, precompiled=True, clock=lambda: now[0])
        k = 5 if chunk_min == 27 else 10
        for step in range(k, 4 * k + 1 if chunk_min == 27 else 7 * k + 1, k):
            now[0] += chunk_min * 60
            hook.on_chunk(SimpleNamespace(step=step, result=SimpleNamespace(step=step, step_start=step - k,
                                                                            chunk_wall_s=chunk_min * 60.0, tokens=1,
                                                                            includes_compile=False)))
        assert saved == want, (chunk_min, saved)


@pytest.mark.slow  # one tiny RoSA run through the CLI
def test_a_rosa_plan_counts_its_warm_up_and_mask_batches(tmp_path, tiny_backbone, shared_data):
    """The RoSA family runs --rosa-warmup-steps warm-up steps and --mask-samples gradient batches
    before its main steps; the plan counted the main steps only (2 where 7 batches ran)."""
    r = CliRunner().invoke(app, ["adapt", str(tiny_backbone), "--strategy", "rosa", "--data", str(shared_data / "lichess"),
                                 "--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "4", "--seq-len", "32",
                                 "--val-games", "8", "--rosa-warmup-steps", "3", "--mask-samples", "2", "--data-seed", "7",
                                 "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    plan = next(ln for ln in r.output.splitlines() if ln.startswith("expected wall time on this device: this run"))
    assert plan.startswith("expected wall time on this device: this run (2 main steps + 3 RoSA warm-up steps + "
                           "2 mask-scoring batches; compile and validation not counted) ≈ "), plan
    assert "(7 steps of ≈ " in plan, plan
    assert "spent 5 optimizer steps (2 main + 3 RoSA warm-up) and 2 mask-scoring batches: 7 gradient batches" in r.output


def test_a_rosa_sweep_plan_counts_each_trials_warm_up_and_mask_batches(tiny_backbone):
    from pawn.config import ModelConfig
    from pawn.train.adapt_config import AdaptSettings
    from pawn.train.adapt import AdaptTask
    from pawn.train.walltime import plan_sweep

    lines: list[str] = []
    cfg = AdaptSettings.load(strategy="retro-sparse", epochs=1, steps_per_epoch=2, rosa_warmup_steps=3, mask_samples=2,
                             batch_size=4, seq_len=32)
    cost = AdaptTask(cfg).cost(backbone_config=ModelConfig(d_model=32, n_layers=2, n_heads=1, d_ff=64))
    est = plan_sweep(2, cost, log=lines.append)
    assert est is not None and est.steps == 2 * 7
    assert lines[0].startswith("expected wall time on this device: this sweep (2 trials × 7 steps (each: 3 RoSA warm-up "
                               "steps and 2 mask-scoring batches, then the main steps); "), lines[0]
