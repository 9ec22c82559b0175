"""Nothing lost: racing runs on one directory, bursts of signals, a full disk, a UCI clock of
10^400, quotes in PGN tags, unknown manifest versions. Every case drives the real CLI in its
own process (real signals, real files)."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "PAWN_LOG_EVERY_S": "0"}


def _tiny(out: Path, steps: int = 4, chunk: int = 2, *extra: str) -> list[str]:
    return ["pretrain", "--supernet", "tiny", "--total-steps", str(steps), "--steps-per-chunk", str(chunk),
            "--batch-size", "4", "--seq-len", "32", "--val-games", "0", "--checkpoint-every", str(steps),
            "--out", str(out), *extra]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "pawn.cli", *args]


def _after_barrier(barrier: Path, args: list[str]) -> list[str]:
    """The real CLI, started only once ``barrier`` exists (both racers poll the same file)."""
    code = ("import os, runpy, sys, time\n"
            f"while not os.path.exists({str(barrier)!r}): time.sleep(0.001)\n"
            f"sys.argv = ['pawn'] + {args!r}\n"
            "runpy.run_module('pawn.cli', run_name='__main__')\n")
    return [sys.executable, "-c", code]


def _race(tmp_path: Path, args: list[str]) -> list[subprocess.CompletedProcess]:
    barrier = tmp_path / "go"
    procs = [subprocess.Popen(_after_barrier(barrier, args), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    time.sleep(2.0)  # both interpreters up and polling
    barrier.touch()
    out = []
    for p in procs:
        so, se = p.communicate(timeout=600)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, so, se))
    return out


# ------------------------------------------------------------------------------ one run per directory


def _one_run(run: Path, results: list[subprocess.CompletedProcess]) -> None:
    codes = sorted(r.returncode for r in results)
    assert codes == [0, 1], [(r.returncode, r.stderr[-1500:]) for r in results]
    loser = next(r for r in results if r.returncode == 1)
    errors = [ln for ln in (loser.stdout + loser.stderr).splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in loser.stderr, loser.stdout + loser.stderr
    assert str(run) in errors[0] and "another pawn process" in errors[0], errors[0]
    records = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert sum(r.get("type") == "config" for r in records) == 1
    steps = [r["step"] for r in records if r.get("type") == "train"]
    assert steps == sorted(set(steps)), steps  # every step once


def test_two_pretrains_on_one_out_started_at_once_one_runs_the_other_gets_one_line(tmp_path):
    run = tmp_path / "run"
    _one_run(run, _race(tmp_path, _tiny(run)))
    assert (run / "checkpoints" / "step_00000004" / ".complete").is_file()


def test_two_overwrites_of_one_out_started_at_once_move_the_old_run_aside_once(tmp_path):
    run = tmp_path / "run"
    first = subprocess.run(_cli(*_tiny(run)), env=ENV, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    _one_run(run, _race(tmp_path, _tiny(run, 4, 2, "--overwrite")))
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run.old-")]
    assert len(aside) == 1 and (aside[0] / "checkpoints" / "step_00000004" / ".complete").is_file()


# ------------------------------------------------------------------------------ a burst of signals is one request


def _toy(out: Path, chunk: int) -> list[str]:
    return ["pretrain", "--variant", "toy", "--total-steps", "1000000", "--batch-size", "4", "--seq-len", "32",
            "--val-games", "0", "--steps-per-chunk", str(chunk), "--val-every", "1000000", "--checkpoint-every", "1000000",
            "--out", str(out)]


def _wait_for(pred, p: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and not pred():
        assert p.poll() is None, "the run ended before the signal"
        time.sleep(0.1)
    assert pred(), "timed out waiting for the run"


def _training(out: Path):
    return lambda: (out / "metrics.jsonl").exists() and '"train"' in (out / "metrics.jsonl").read_text()


def _kept_a_checkpoint(out: Path, stderr: str) -> int:
    step = json.loads((out / "schedule_health.json").read_text())["actual_total_steps"]
    assert json.loads((out / "schedule_health.json").read_text())["reason_for_stop"] == "sigterm"
    assert step > 0 and (out / "checkpoints" / f"step_{step:08d}" / ".complete").is_file(), stderr[-2000:]
    assert re.search(rf"SIGINT: checkpoint \S+step_{step:08d} written \d+\.\d s after the signal", stderr), stderr[-2000:]
    from pawn.runs import open_run

    status = open_run(out).status  # labelled by the signal received: "stopped · sigint", not "sigterm"
    assert (status.state, status.reason) == ("stopped", "sigint")
    return step


def test_timeout_s_int_signals_the_process_and_its_group_and_a_checkpoint_is_kept(tmp_path):
    out = tmp_path / "run"
    r = subprocess.run(["timeout", "--preserve-status", "-s", "INT", "25", *_cli(*_toy(out, 200))], env=ENV,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "without a checkpoint" not in r.stderr.replace("Ctrl-C again to stop now without a checkpoint", "")
    _kept_a_checkpoint(out, r.stderr)


def test_a_signal_to_the_process_then_to_its_group_is_one_request(tmp_path):
    out = tmp_path / "run"
    p = subprocess.Popen(_cli(*_toy(out, 200)), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        _wait_for(_training(out), p)
        os.kill(p.pid, signal.SIGINT)   # a job scheduler: the process, then its process group
        time.sleep(0.05)
        os.killpg(p.pid, signal.SIGINT)
        so, se = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, se[-2000:]
    assert "taken as the same request" in se and "second Ctrl-C" not in se
    _kept_a_checkpoint(out, se)


def _in_pty(args: list[str]):
    """The real CLI in a pseudo-terminal that is its controlling terminal (Ctrl-C is the
    terminal's own SIGINT to the foreground process group). Returns (process, master fd, output list)."""
    import fcntl
    import pty
    import termios
    import threading

    master, slave = pty.openpty()

    def ctty():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    p = subprocess.Popen(_cli(*args), env={**ENV, "COLUMNS": "200"}, stdin=slave, stdout=slave, stderr=slave,
                         start_new_session=True, preexec_fn=ctty, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []

    def drain():
        while True:
            try:
                b = os.read(master, 4096)
            except OSError:
                return
            if not b:
                return
            chunks.append(b)

    threading.Thread(target=drain, daemon=True).start()
    return p, master, chunks


def _text(chunks: list[bytes]) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))


def test_ctrl_c_twice_in_a_pty_within_the_window_still_writes_the_checkpoint(tmp_path):
    out = tmp_path / "run"
    p, master, chunks = _in_pty(_toy(out, 200))
    try:
        _wait_for(_training(out), p)
        os.write(master, b"\x03")
        time.sleep(0.3)
        os.write(master, b"\x03")
        p.wait(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    time.sleep(0.5)
    text = _text(chunks)
    assert p.returncode == 0, text[-2000:]
    assert "taken as the same request" in text
    _kept_a_checkpoint(out, text.replace("\r", ""))


def test_a_deliberate_second_ctrl_c_in_a_pty_later_still_stops_at_once(tmp_path):
    out = tmp_path / "run"
    p, master, chunks = _in_pty(_toy(out, 20000))  # a chunk of many seconds: the first Ctrl-C alone waits for it
    try:
        _wait_for(lambda: (out / "metrics.jsonl").exists(), p)
        time.sleep(1.0)
        os.write(master, b"\x03")
        time.sleep(3.0)  # past the 2 s burst window
        os.write(master, b"\x03")
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    time.sleep(0.5)
    text = _text(chunks)
    assert p.returncode == 130, text[-2000:]
    assert "second Ctrl-C: stopping now without a checkpoint" in text and "Traceback" not in text
    assert not list((out / "checkpoints").glob("step_*[0-9]"))
