"""``--distributed-timeout-s`` with real processes (issue 25): the coordinator of a 2-process run
whose second process never starts, and a second process whose coordinator never starts, each end
with the one ``error:`` line and exit code 1 after the timeout; jaxlib used to abort them (exit 134,
a C++ stack trace). No mock of ``jax.distributed.initialize``: see ``pawn.train.distributed``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

ARGS = ["pretrain", "--variant", "toy", "--total-steps", "2", "--batch-size", "4", "--seq-len", "32", "--val-games", "0",
        "--steps-per-chunk", "2", "--distributed-timeout-s", "3"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # two JAX processes waiting out a timeout: ~30 s on a shared 2-core machine
def test_a_process_that_never_joins_is_one_error_line_and_exit_1(tmp_path):
    procs = []
    for pid in (0, 1):  # each alone: the other process of the pair never starts
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{_free_port()}",
               "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(pid)}
        procs.append(subprocess.Popen([sys.executable, "-m", "pawn.cli", *ARGS, "--out", str(tmp_path / f"p{pid}")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for pid, p in enumerate(procs):
        out, err = p.communicate(timeout=240)
        lines = [line for line in (out + err).splitlines() if line.strip()]
        assert p.returncode == 1, (p.returncode, err[-3000:])
        assert len(lines) == 1, lines
        assert lines[0].startswith("error: jax.distributed could not join the coordinator 127.0.0.1:"), lines
        assert "within 3 s (raise --distributed-timeout-s" in lines[0] and "DEADLINE_EXCEEDED" in lines[0], lines
        assert not (tmp_path / f"p{pid}" / "metrics.jsonl").exists()
