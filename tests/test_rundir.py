"""One run per directory (issue 11): a directory holding another run is never written to unless
the run is resumed (--resume) or the user starts over (--overwrite, which moves the old run
aside); re-feeding a run's config.json into its own --out is a one-line error naming the flags."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pawn.cli import app
from pawn.settings import PretrainConfig
from pawn.train.metrics import read_metrics
from pawn.train.pretrain import TrainingError, run_pretrain
from pawn.train.rundir import RunDirError, aside_name, check_run_dir, run_markers

SMALL = dict(variant="toy", batch_size=4, seq_len=32, val_games=0, steps_per_chunk=2, lr=1e-3, warmup_steps=1)
ARGS = ["pretrain", "--variant", "toy", "--batch-size", "4", "--seq-len", "32", "--val-games", "0",
        "--steps-per-chunk", "2", "--warmup-steps", "1"]


def quiet(c: PretrainConfig, **kw):
    return run_pretrain(c, progress=False, install_signal_handlers=False, **kw)


def fake_run(d: Path, step: int = 4) -> Path:
    """A directory that looks like a finished run (config.json, metrics, one complete checkpoint)."""
    (d / "checkpoints" / f"step_{step:08d}").mkdir(parents=True)
    (d / "checkpoints" / f"step_{step:08d}" / ".complete").write_text("{}")
    (d / "config.json").write_text(json.dumps({"variant": "toy", "total_steps": step}))
    (d / "metrics.jsonl").write_text('{"type": "config"}\n')
    return d


def test_new_and_empty_directories_are_fine_and_a_run_is_recognised(tmp_path):
    assert not check_run_dir(tmp_path / "new").move_aside
    (tmp_path / "empty").mkdir()
    assert not check_run_dir(tmp_path / "empty").move_aside
    run = fake_run(tmp_path / "run")
    assert run_markers(run) == ["config.json", "metrics.jsonl", "checkpoints"]


def test_a_directory_with_a_run_is_refused_naming_both_flags(tmp_path):
    run = fake_run(tmp_path / "run")
    with pytest.raises(RunDirError) as e:
        check_run_dir(run, new_config={"variant": "small"})
    msg = str(e.value)
    assert "\n" not in msg and f"--resume {run}" in msg and "--overwrite" in msg and "step 4" in msg


def test_same_config_refed_says_it_is_this_run(tmp_path):
    run = fake_run(tmp_path / "run")
    stored = json.loads((run / "config.json").read_text())
    with pytest.raises(RunDirError, match="already holds this run .*--config.*--resume"):
        check_run_dir(run, new_config={**stored, "out": str(run), "resume": None})


def test_other_files_are_no_run_and_are_never_moved(tmp_path):
    (tmp_path / "slurm-123.out").write_text("mine")  # e.g. the job's log, created before pawn starts
    for overwrite in (False, True):
        plan = check_run_dir(tmp_path, overwrite=overwrite)
        assert plan.prepare() is None
    assert (tmp_path / "slurm-123.out").read_text() == "mine"


def test_resume_and_overwrite_together_are_refused(tmp_path):
    with pytest.raises(RunDirError, match="not both"):
        check_run_dir(tmp_path, resume="auto", overwrite=True)


def test_resume_into_another_runs_directory_is_refused(tmp_path):
    a, b = fake_run(tmp_path / "a"), fake_run(tmp_path / "b")
    ck = a / "checkpoints" / "step_00000004"
    assert check_run_dir(a, resume=str(ck), resume_from=ck).continues
    with pytest.raises(RunDirError, match="holds another run"):
        check_run_dir(b, resume=str(ck), resume_from=ck)


def test_overwrite_moves_the_old_run_aside_and_never_deletes(tmp_path):
    run = fake_run(tmp_path / "run")
    plan = check_run_dir(run, overwrite=True)
    moved = plan.prepare()
    assert moved.parent == tmp_path and moved.name.startswith("run.old-")
    assert not run.exists() and (moved / "checkpoints" / "step_00000004" / ".complete").exists()


def test_aside_names_never_collide(tmp_path):
    now = _dt.datetime(2026, 1, 2, 3, 4, 5)
    run = tmp_path / "run"
    first = aside_name(run, now)
    assert first.name == "run.old-20260102-030405"
    first.mkdir()
    assert aside_name(run, now).name == "run.old-20260102-030405-2"


def test_config_refed_into_the_same_out_is_a_one_line_error_and_changes_nothing(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(app, [*ARGS, "--total-steps", "4", "--val-every", "4", "--checkpoint-every", "4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    before = {p.relative_to(out): p.stat().st_mtime_ns for p in out.rglob("*")}
    metrics = (out / "metrics.jsonl").read_text()
    r = CliRunner().invoke(app, ["pretrain", "--config", str(out / "config.json")])
    assert r.exit_code == 1, r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "already holds this run" in errors[0] and "--resume" in errors[0] and "--overwrite" in errors[0], r.output
    assert {p.relative_to(out): p.stat().st_mtime_ns for p in out.rglob("*")} == before
    assert (out / "metrics.jsonl").read_text() == metrics


def test_overwrite_starts_a_clean_run_and_keeps_the_old_one_beside_it(tmp_path):
    out = tmp_path / "run"
    first = quiet(PretrainConfig.load(**SMALL, total_steps=8, val_every=4, checkpoint_every=4, out=out))
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000004", "step_00000008"]
    msgs = []
    res = run_pretrain(PretrainConfig.load(**SMALL, total_steps=2, val_every=2, checkpoint_every=2, out=out),
                       log=msgs.append, progress=False, install_signal_handlers=False, overwrite=True)
    assert res.step == 2
    # the new run directory holds only the new run: one config record, its own checkpoints
    recs = read_metrics(out / "metrics.jsonl")
    assert [r["type"] for r in recs].count("config") == 1 and max(r["step"] for r in recs if r["type"] == "train") == 2
    assert recs[0]["summary"]["tokens_this_run"] == 2 * 4 * 32 and recs[0]["summary"]["dtype"] == "float32"
    assert any(m.startswith("model: variant toy") for m in msgs), msgs  # the start-of-run summary
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000002"]
    old = [p for p in tmp_path.iterdir() if p.name.startswith("run.old-")]
    assert len(old) == 1 and sorted(p.name for p in (old[0] / "checkpoints").iterdir()) == ["step_00000004", "step_00000008"]
    assert any(str(old[0]) in m and "aside" in m for m in msgs), msgs
    assert first.checkpoint.name == "step_00000008"


def test_refused_run_directory_is_left_untouched_by_the_library_call(tmp_path):
    out = tmp_path / "run"
    quiet(PretrainConfig.load(**SMALL, total_steps=2, val_every=2, checkpoint_every=2, out=out))
    with pytest.raises(TrainingError, match="holds another run"):
        quiet(PretrainConfig.load(**SMALL, total_steps=4, val_every=2, checkpoint_every=2, out=out))
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000002"]


def test_resume_auto_over_a_run_without_checkpoint_moves_the_leftovers_aside(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"type": "config", "step": 0}\n')  # a run that died before its first checkpoint
    res = quiet(PretrainConfig.load(**SMALL, total_steps=2, val_every=2, checkpoint_every=2, out=out, resume="auto"))
    assert res.step == 2
    assert [r["type"] for r in read_metrics(out / "metrics.jsonl")].count("config") == 1
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("run.old-")]) == 1


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_a_resumed_runs_config_json_refed_does_not_rewind_it(tmp_path):
    out = tmp_path / "run"
    quiet(PretrainConfig.load(**SMALL, total_steps=8, val_every=2, checkpoint_every=2, pause_after_steps=2, out=out))
    quiet(PretrainConfig.load(resume="auto", out=out, pause_after_steps=4))
    stored = json.loads((out / "config.json").read_text())
    assert stored["resume"] is None and stored["pause_after_steps"] is None and stored["total_steps"] == 8
    with pytest.raises(TrainingError, match="already holds this run"):
        quiet(PretrainConfig.load(config_file=out / "config.json"))
    assert max(r["step"] for r in read_metrics(out / "metrics.jsonl") if r["type"] == "train") == 4


def test_a_run_killed_before_its_first_checkpoint_is_started_over_not_resumed(tmp_path):
    """The advice for a directory whose run wrote no checkpoint: while it runs, that another
    process is writing it; once it is dead (a kill, a double Ctrl-C), --overwrite — never
    --resume RUN, which has nothing to continue (the old advice)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    args = [*ARGS, "--total-steps", "100000", "--checkpoint-every", "100000", "--checkpoint-every-minutes", "0",
            "--out", str(out)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PAWN_LOG_EVERY_S": "0"}
    p = subprocess.Popen([sys.executable, "-m", "pawn.cli", *args], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while '"type": "train"' not in ((out / "metrics.jsonl").read_text() if (out / "metrics.jsonl").exists() else ""):
            assert p.poll() is None and time.monotonic() < deadline, p.stderr.read() if p.poll() is not None else "timeout"
            time.sleep(0.2)
        live = CliRunner().invoke(app, args)
        assert live.exit_code == 1, live.output
        errors = [ln for ln in live.output.splitlines() if ln.startswith("error: ")]
        assert errors == [f"error: --out {out}: another pawn process (pid {p.pid}) is writing this run directory now "
                          "(no checkpoint yet); wait for it to end, or choose another --out"], live.output
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(60)
    assert not (out / "checkpoints").exists() or not any((out / "checkpoints").glob("step_*"))
    dead = CliRunner().invoke(app, args)
    assert dead.exit_code == 1, dead.output
    (line,) = [ln for ln in dead.output.splitlines() if ln.startswith("error: ")]
    assert "wrote no complete checkpoint" in line and "nothing to resume" in line and "--overwrite" in line, line
    assert "--resume" not in line, line
    resumed = CliRunner().invoke(app, [*ARGS, "--resume", str(out), "--out", str(out)])
    assert resumed.exit_code != 0  # what the old advice led to
    again = CliRunner().invoke(app, [*args[:-4], "--total-steps", "4", "--checkpoint-every", "4", "--out", str(out), "--overwrite"])
    assert again.exit_code == 0, again.output
    assert f"moved the old run in {out} aside" in again.output
    assert (out / "checkpoints" / "step_00000004" / ".complete").is_file()
