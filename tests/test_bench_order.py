"""`pawn bench --concurrency N`: the concurrency section, the one asked for, runs first, with a
note saying so; without the flag the usual order stands."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from pawn.bench.settings import BenchSettings, concurrency_first, parse_only


def test_concurrency_moves_first_only_when_it_was_asked_for():
    every = parse_only(None)
    assert concurrency_first(every, BenchSettings.load(None)) == (every, None)
    assert concurrency_first(every, BenchSettings.load(None, quick=True)) == (every, None)  # the preset's 2 is no request
    order, note = concurrency_first(every, BenchSettings.load(None, concurrency=4))
    assert order == ["concurrency"] + [n for n in every if n != "concurrency"]
    assert note.startswith("pawn bench: --concurrency 4 given: the concurrency section runs first")
    assert concurrency_first(["concurrency"], BenchSettings.load(None, concurrency=4)) == (["concurrency"], None)


def test_the_cli_starts_with_the_concurrency_section_and_says_so(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    p = subprocess.Popen([sys.executable, "-m", "pawn.cli", "bench", "--quick", "--concurrency", "3", "--only",
                          "engine,concurrency"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=tmp_path)
    lines, deadline = [], time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            lines.append(line.strip())
            if line.startswith("pawn bench: ") and "(1/2" in line:
                break
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=120)
    assert any(ln.startswith("pawn bench: --concurrency 3 given: the concurrency section runs first") for ln in lines), lines
    assert lines[-1].startswith("pawn bench: concurrency (1/2, roughly"), lines


@pytest.mark.slow  # one spawned training process under a pseudo-terminal: ~30 s on a loaded 2-core machine
def test_spawned_processes_print_nothing_after_the_spinner_in_a_terminal(tmp_path):
    """In a terminal, what the concurrency section's training processes print (here JAX's compile
    log) must not land on the spinner's line: it went straight to the terminal, after the spinner
    text and on the same line, and stayed there in the scrollback."""
    import pty
    import re

    master, slave = pty.openpty()
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TERM": "xterm", "JAX_LOG_COMPILES": "1"}
    p = subprocess.Popen([sys.executable, "-m", "pawn.cli", "bench", "--quick", "--only", "concurrency", "--concurrency", "1"],
                         stdin=slave, stdout=slave, stderr=slave, env=env, cwd=tmp_path)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert p.wait(timeout=300) == 0
    os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))
    frames = [f for f in re.split(r"\r|\n", text) if "pawn bench: concurrency: 1 process" in f]
    assert frames, text[-2000:]
    assert all(f.rstrip().endswith("into the section)") for f in frames), [f for f in frames if "section)" not in f[-20:]][:2]
    assert "Finished tracing" not in text and "Compiling jit(" not in text


def test_a_spawned_process_writes_to_an_unlinked_file_whose_tail_an_error_carries(tmp_path):
    """What a concurrency process prints (Python or native writes to fds 1 and 2) goes to a file
    that no longer has a name, never to the terminal; its last lines are read back for an error."""
    out = tmp_path / "tail.txt"
    code = ("import os, sys, tempfile\n"
            "from pawn.bench.concurrency import _output_to_file, _tail\n"
            "fd = _output_to_file()\n"
            "print('one', flush=True); print('two', file=sys.stderr, flush=True); os.write(2, b'native three\\n')\n"
            "left = [p for p in os.listdir(tempfile.gettempdir()) if p.startswith('pawn-bench-child-') and os.stat(os.path.join(tempfile.gettempdir(), p)).st_ino == os.fstat(fd).st_ino]\n"
            "open(sys.argv[1], 'w').write(_tail(fd) + '\\n' + str(left))\n")
    r = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", (r.stdout, r.stderr)
    assert out.read_text().splitlines() == ["one | two | native three", "[]"]
