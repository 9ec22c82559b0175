"""A deliberate second Ctrl-C stops a run at once without a checkpoint, and still writes its ``end``
record (a stop by the user: reason ``sigterm``, signal ``SIGINT``), so ``pawn report`` and the
dashboard show the run as stopped, not unknown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "PAWN_LOG_EVERY_S": "0"}


def _wait_for(pred, p: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not pred():
        assert p.poll() is None, p.stdout.read().decode(errors="replace")[-3000:]
        assert time.time() < deadline, "timed out"
        time.sleep(0.1)


def test_a_second_ctrl_c_inside_a_chunk_writes_the_end_record_and_the_report_says_stopped(tmp_path):
    from pawn.report.data import summary
    from pawn.runs import open_run

    out = tmp_path / "run"
    # a chunk of 20,000 steps: the first Ctrl-C alone would wait for it; the second finds the
    # process inside the compiled chunk and ends it (exit 130)
    p = subprocess.Popen([sys.executable, "-m", "pawn.cli", "pretrain", "--variant", "toy", "--total-steps", "1000000",
                          "--batch-size", "4", "--seq-len", "32", "--val-games", "0", "--steps-per-chunk", "20000",
                          "--val-every", "1000000", "--checkpoint-every", "1000000", "--out", str(out)],
                         env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_for(lambda: (out / "metrics.jsonl").exists(), p)
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        time.sleep(3.0)  # past the 2 s window in which a second signal is a copy of the first
        p.send_signal(signal.SIGINT)
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = p.stdout.read().decode(errors="replace")
    assert p.returncode == 130, text[-2000:]
    assert not list((out / "checkpoints").glob("step_*[0-9]"))  # stopped at once: no checkpoint
    run = open_run(out)
    assert run.end is not None, text[-2000:]
    assert run.end.fields["reason"] == "sigterm" and run.end.fields["signal"] == "SIGINT"
    st = run.status
    assert (st.state, st.reason) == ("stopped", "sigint")
    # the report and the dashboard read the run's summary: stopped, not unknown
    s = summary(run)
    assert s["state"] == "stopped" and s["reason"] == "sigint"
    r = subprocess.run([sys.executable, "-m", "pawn.cli", "report", str(out), "--out", str(tmp_path / "report.html")],
                       env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    page = Path(tmp_path / "report.html").read_text("utf-8")
    assert '"state": "stopped"' in page or '"state":"stopped"' in page
