"""Progress in log files (issue 11): when the output is not a terminal, plain lines every N
seconds (step, loss, tokens/s, ETA) instead of a rich bar that prints once at exit; Ctrl-C in
pretrain is acknowledged at once and a second one stops without a checkpoint."""

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

from pawn.progress import ProgressReporter, format_duration, log_every_s


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_plain_lines_are_throttled_and_carry_step_fields_and_eta():
    buf, clock = io.StringIO(), Clock()
    rep = ProgressReporter("pretrain", 100, fields={"loss": "-", "tok/s": "-"}, every_s=10, stream=buf, clock=clock).start()
    clock.t += 5
    rep.update(10, loss="5.0000", **{"tok/s": "1,000"})    # first update: always written
    clock.t += 4
    rep.update(20, loss="4.0000", **{"tok/s": "1,100"})    # 4 s later: throttled
    clock.t += 7
    rep.update(30, loss="3.0000", **{"tok/s": "1,200"})    # 11 s after the last line: written
    rep.stop()                                             # nothing pending: no extra line
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("pretrain: step 10/100 (10.0%) loss 5.0000, 1,000 tok/s, elapsed 0:00:05, ETA ?")
    # rate since the first update: 20 steps in 11 s → 70 steps left take 38.5 s
    assert lines[1] == "pretrain: step 30/100 (30.0%) loss 3.0000, 1,200 tok/s, elapsed 0:00:16, ETA 0:00:38"


def test_stop_writes_the_last_update_and_the_final_step_is_always_written():
    buf, clock = io.StringIO(), Clock()
    rep = ProgressReporter("eval", 3, unit="batch", every_s=60, stream=buf, clock=clock).start()
    rep.update(1)
    rep.update(2)
    rep.stop()
    assert [ln.split(" (")[0] for ln in buf.getvalue().splitlines()] == ["eval: batch 1/3", "eval: batch 2/3"]
    buf2 = io.StringIO()
    rep = ProgressReporter("eval", 3, every_s=60, stream=buf2, clock=clock).start()
    rep.update(1)
    rep.update(3)
    assert buf2.getvalue().splitlines()[-1].startswith("eval: step 3/3 (100.0%)")


def test_interval_comes_from_the_caller_then_the_environment(monkeypatch):
    monkeypatch.setenv("PAWN_LOG_EVERY_S", "7.5")
    assert log_every_s() == 7.5 and log_every_s(2) == 2.0
    monkeypatch.setenv("PAWN_LOG_EVERY_S", "often")
    with pytest.raises(ValueError, match="PAWN_LOG_EVERY_S"):
        log_every_s()
    monkeypatch.delenv("PAWN_LOG_EVERY_S")
    assert log_every_s() == 30.0
    with pytest.raises(ValueError):
        log_every_s(-1)


def test_a_pipe_is_not_a_terminal_so_plain_lines_are_chosen():
    r, w = os.pipe()
    with os.fdopen(w, "w") as f:
        assert ProgressReporter("x", 1, stream=f).plain
    os.close(r)
    assert format_duration(3725.4) == "1:02:05" and format_duration(None) == "?"


def _pretrain_cmd(out: Path, steps: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pawn.cli", "pretrain", "--variant", "toy", "--total-steps", str(steps), "--batch-size", "4",
            "--seq-len", "32", "--val-games", "0", "--steps-per-chunk", "2", "--val-every", str(steps),
            "--checkpoint-every", str(steps), "--out", str(out), *extra]


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_pretrain_into_a_pipe_prints_plain_progress_lines_not_a_bar(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PAWN_LOG_EVERY_S": "0"}
    r = subprocess.run(_pretrain_cmd(tmp_path / "run", 6), env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("pretrain: step")]
    assert [int(re.match(r"pretrain: step (\d+)/6", ln).group(1)) for ln in lines] == [2, 4, 6], r.stdout
    for ln in lines:
        assert re.search(r"loss \d+\.\d{4}, [\d,]+ tok/s, elapsed \d:\d\d:\d\d, ETA (\d:\d\d:\d\d|\?)$", ln), ln
    assert "━" not in r.stdout + r.stderr  # no rich bar in a log file
    # --log-every-s beats the environment: one line for the first chunk and one for the last
    r = subprocess.run(_pretrain_cmd(tmp_path / "run2", 6, "--log-every-s", "3600"), env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [ln.split(" (")[0] for ln in r.stdout.splitlines() if ln.startswith("pretrain: step")] == ["pretrain: step 2/6", "pretrain: step 6/6"]


def _wait_for_training(p: subprocess.Popen, out: Path, timeout: float = 180) -> None:
    metrics = out / "metrics.jsonl"
    deadline = time.time() + timeout
    while time.time() < deadline and not (metrics.exists() and '"train"' in metrics.read_text()):
        assert p.poll() is None, p.communicate()[1][-2000:]
        time.sleep(0.2)


def test_ctrl_c_is_acknowledged_then_the_chunk_finishes_with_a_checkpoint(tmp_path):
    out = tmp_path / "run"
    p = subprocess.Popen(_pretrain_cmd(out, 4000), env={**os.environ, "JAX_PLATFORMS": "cpu"},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_training(p, out)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 0, stderr[-2000:]
    assert "stopping after this chunk" in stderr and "Ctrl-C again to stop now without a checkpoint" in stderr
    assert "stopped by signal" in stdout
    step = json.loads((out / "schedule_health.json").read_text())["actual_total_steps"]
    assert 0 < step < 4000 and (out / "checkpoints" / f"step_{step:08d}" / ".complete").exists()


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_second_ctrl_c_stops_at_once_without_a_checkpoint(tmp_path):
    out = tmp_path / "run"
    # long chunks (20,000 toy steps: many seconds even on a fast machine), so both signals land
    # inside the first chunk and the first Ctrl-C alone would wait for it
    cmd = _pretrain_cmd(out, 40000)
    cmd[cmd.index("--steps-per-chunk") + 1] = "20000"
    p = subprocess.Popen(cmd, env={**os.environ, "JAX_PLATFORMS": "cpu"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while time.time() < deadline and not (out / "metrics.jsonl").exists():  # run directory written: the loop is starting
        assert p.poll() is None, p.communicate()[1][-2000:]
        time.sleep(0.2)
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    time.sleep(2.5)  # past the burst window: a second request, not a copy of the first (lifecycle.BURST_WINDOW_S)
    t0 = time.time()
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, stderr[-2000:]
    assert time.time() - t0 < 20, "the second Ctrl-C did not stop the run promptly"
    assert "stopping after this chunk" in stderr and "without a checkpoint" in stderr
    assert "Traceback" not in stderr
    assert not list((out / "checkpoints").glob("step_*[0-9]"))


def test_heartbeat_writes_still_running_lines_only_when_not_a_terminal():
    from pawn.progress import Heartbeat

    buf = io.StringIO()
    with Heartbeat("pawn bench", every_s=0.05, stream=buf, plain=True) as hb:
        hb.status = "concurrency (roughly 0:02:00)"
        time.sleep(0.4)
    n = len(buf.getvalue().splitlines())
    assert n >= 2, buf.getvalue()
    assert re.fullmatch(r"pawn bench: still running, concurrency \(roughly 0:02:00\), elapsed 0:00:00", buf.getvalue().splitlines()[-1])
    time.sleep(0.2)
    assert len(buf.getvalue().splitlines()) == n  # stopped with the block
    quiet = io.StringIO()
    with Heartbeat("x", every_s=0.05, stream=quiet, plain=False):
        time.sleep(0.2)
    with Heartbeat("x", every_s=0, stream=quiet, plain=True):
        time.sleep(0.1)
    assert quiet.getvalue() == ""


def test_eval_into_a_pipe_says_it_is_alive(tmp_path):
    """A command without a step counter prints a heartbeat in a log file (PAWN_LOG_EVERY_S)."""
    import jax

    from pawn.checkpoint import save_checkpoint
    from pawn.config import TOY
    from pawn.model import PAWNModel

    ck = save_checkpoint(tmp_path / "toy", PAWNModel(TOY, jax.random.PRNGKey(0)).params(), TOY)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PAWN_LOG_EVERY_S": "0.5"}
    r = subprocess.run([sys.executable, "-m", "pawn.cli", "eval", str(ck), "--games", "8", "--max-ply", "16"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    beats = [ln for ln in r.stdout.splitlines() if ln.startswith("pawn eval: still running, elapsed ")]
    assert beats, r.stdout  # start-up, loading and compiling take well over half a second


def test_plain_lines_keep_coming_while_one_long_unit_of_work_runs():
    """A compiled chunk can take minutes: the log still gets a line every ``every_s`` seconds
    between two updates, with the latest figures (a reporter that only writes on update fails)."""
    from pawn.progress import ProgressReporter

    buf = io.StringIO()
    rep = ProgressReporter("pretrain", 100, fields={"loss": "-"}, every_s=0.2, stream=buf, plain=True).start()
    rep.update(10, loss="3.5000")
    time.sleep(1.1)  # one long chunk, no update
    n_between = len(buf.getvalue().splitlines())
    rep.update(100, loss="2.0000")
    rep.stop()
    lines = buf.getvalue().splitlines()
    assert n_between >= 4, lines
    assert all(ln.startswith("pretrain: step 10/100 (10.0%) loss 3.5000") for ln in lines[1:n_between])
    assert lines[-1].startswith("pretrain: step 100/100 (100.0%) loss 2.0000")


def test_eta_between_updates_counts_down_instead_of_growing():
    """Between two updates (inside a long chunk) the ETA is the last estimate less the time since
    it: 10 units in 10 s with 80 left is 80 s, and 5 s later 75 s (not 80 / (10 / 15) = 120 s);
    once the chunk in flight is late, the units after it (70 s)."""
    from pawn.progress import ProgressReporter

    t = [0.0]
    rep = ProgressReporter("pretrain", 100, every_s=1e9, stream=io.StringIO(), plain=True, clock=lambda: t[0]).start()
    rep.update(10)
    t[0] = 10.0
    rep.update(20)
    assert rep.eta_s() == 80.0
    t[0] = 15.0
    assert rep.eta_s() == 75.0
    t[0] = 30.0  # the chunk of 10 should have ended at 20 s: the 70 units after it still take 70 s
    assert rep.eta_s() == 70.0
    t[0] = 200.0  # (it said 0:00:00 here, with work left)
    assert rep.eta_s() == 70.0


def test_eta_appears_after_the_first_timed_chunk():
    """Issue 26: the line repeated ``ETA ?`` until a second chunk ended; a timed first chunk
    (``unit_s``, its own seconds per step) gives the ETA at once."""
    buf, clock = io.StringIO(), Clock()
    rep = ProgressReporter("pretrain", 200, every_s=10, stream=buf, clock=clock).start()
    clock.t += 120  # first chunk: 50 steps, 100 s of them timed (the rest was compile)
    rep.update(50, unit_s=2.0)
    assert buf.getvalue().splitlines()[-1].endswith("ETA 0:05:00")  # 150 steps × 2 s
    clock.t += 30  # a ticker line between updates counts down
    assert rep.line().endswith("ETA 0:04:30")
    plain = ProgressReporter("adapt", 200, every_s=10, stream=io.StringIO(), clock=clock).start()
    plain.update(50)  # an untimed first chunk (it includes the compile): no rate yet
    assert plain.line().endswith("ETA ?")


def test_note_writes_a_line_between_progress_lines():
    buf, clock = io.StringIO(), Clock()
    rep = ProgressReporter("pretrain", 10, every_s=0, stream=buf, clock=clock).start()
    rep.update(5)
    rep.note("validation at step 5: toy loss 1.0000")
    rep.update(10)
    lines = buf.getvalue().splitlines()
    assert lines[1] == "validation at step 5: toy loss 1.0000"
    assert lines[0].startswith("pretrain: step 5/10") and lines[2].startswith("pretrain: step 10/10")


@pytest.mark.slow  # a real pretrain run (~1-2 min on a shared CPU); CI runs -m slow
def test_validation_results_are_printed_as_lines_in_a_log(tmp_path):
    """Each validation is a line in a non-TTY log when it happens, with the figures of its
    ``val`` record in metrics.jsonl; and the ETA is known after the first chunk (the memory
    check compiled it)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PAWN_LOG_EVERY_S": "0"}
    cmd = [sys.executable, "-m", "pawn.cli", "pretrain", "--variant", "toy", "--total-steps", "4", "--batch-size", "4",
           "--seq-len", "32", "--val-games", "8", "--steps-per-chunk", "2", "--val-every", "2",
           "--checkpoint-every", "4", "--out", str(tmp_path / "run")]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout.splitlines()
    from pawn.runs import open_run

    vals = open_run(tmp_path / "run").val
    assert [v.step for v in vals] == [2, 4]
    shown = [ln for ln in out if ln.startswith("validation at step")]
    assert len(shown) == 2, r.stdout
    for ln, v in zip(shown, vals):
        assert ln.startswith(f"validation at step {v.step}: toy loss {v.values['loss']:.4f}, "
                             f"top-1 {100 * v.values['top1']:.1f}%"), ln
    # printed when it happens: after step 2's progress line, before step 4's
    i2 = next(i for i, ln in enumerate(out) if ln.startswith("pretrain: step 2/4"))
    i4 = next(i for i, ln in enumerate(out) if ln.startswith("pretrain: step 4/4"))
    assert i2 < out.index(shown[0]) < i4
    assert not out[i2].endswith("ETA ?"), out[i2]


def test_a_line_before_the_first_chunk_says_it_is_compiling_not_dashes():
    # A user saw "step 0/300 (0.0%) joint loss -, - tok/s, elapsed 0:00:30, ETA ?" while XLA compiled.
    buf, clock = io.StringIO(), Clock()
    rep = ProgressReporter("pretrain", 300, fields={"joint loss": "-", "tok/s": "-"}, every_s=10, stream=buf,
                           clock=clock).start()
    clock.t += 30
    assert rep.line() == "pretrain: step 0/300 (0.0%) compiling and running the first steps, elapsed 0:00:30"
    rep.update(50, **{"joint loss": "20.1000", "tok/s": "6,000"})
    assert rep.line().startswith("pretrain: step 50/300 (16.7%) joint loss 20.1000, 6,000 tok/s, elapsed 0:00:30")


def test_within_a_chunk_the_progress_moves_and_a_late_last_chunk_is_not_eta_zero():
    """An adapter run of 16 steps in chunks of 8: between the updates the line and the bar move
    at the measured rate (never past the chunk's end), and a last chunk running late shows
    ``ETA ?``, not ``ETA 0:00:00`` at step 8 of 16."""
    buf, clock = io.StringIO(), Clock()
    rep = ProgressReporter("adapt", 16, fields={"loss": "-"}, every_s=10, stream=buf, clock=clock,
                           expected_unit_s=0.5).start()
    clock.t += 20
    rep.update(8, loss="3.0000")  # the first chunk (with its compile): no timing of its own
    clock.t += 2  # 2 s at the expected 0.5 s per step: 4 steps into the second chunk
    assert rep.in_flight() == 12 and rep.eta_s() == 2.0
    assert rep.line().startswith("adapt: step 8/16 (50.0%; ≈12 by now) loss 3.0000, elapsed 0:00:22, ETA 0:00:02")
    clock.t += 30  # far past the expected end: at most one step short of the chunk's end, and no ETA
    assert rep.in_flight() == 15 and rep.eta_s() is None
    assert rep.line().endswith("ETA ?")
    rep.update(16, loss="2.0000")
    assert rep.in_flight() == 16 and rep.line().startswith("adapt: step 16/16 (100.0%) loss 2.0000")


def test_the_terminal_bar_moves_within_a_chunk():
    clock = Clock()
    rep = ProgressReporter("pretrain", 100, every_s=10, stream=io.StringIO(), plain=False, clock=clock)
    rep.start()
    rep.update(10)
    clock.t += 10
    rep.update(20, unit_s=1.0)  # 1 s per step, chunks of 10
    clock.t += 4.5
    rep.tick_bar()
    assert rep._bar.tasks[0].completed == 24
    clock.t += 60
    rep.tick_bar()
    assert rep._bar.tasks[0].completed == 29  # never the chunk's end before the update says so
    rep.stop()
