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
from typing import Optional

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


def _race(tmp_path: Path, args: list[str], other: Optional[list[str]] = None) -> list[subprocess.CompletedProcess]:
    """The CLI with ``args`` and with ``other`` (default: ``args`` again) in two processes, both
    released at one instant by a barrier file; their results in that order."""
    barrier = tmp_path / "go"
    procs = [subprocess.Popen(_after_barrier(barrier, a), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for a in (args, other if other is not None else args)]
    time.sleep(2.0)  # both interpreters up and polling
    barrier.touch()
    out = []
    for p in procs:
        so, se = p.communicate(timeout=600)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, so, se))
    return out


# ------------------------------------------------------------------------------ one run per directory


def _one_run(run: Path, results: list[subprocess.CompletedProcess], also: str = "another pawn process") -> None:
    codes = sorted(r.returncode for r in results)
    assert codes == [0, 1], [(r.returncode, r.stderr[-1500:]) for r in results]
    loser = next(r for r in results if r.returncode == 1)
    errors = [ln for ln in (loser.stdout + loser.stderr).splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in loser.stderr, loser.stdout + loser.stderr
    assert str(run) in errors[0] and ("another pawn process" in errors[0] or also in errors[0]), errors[0]
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


# ------------------------------------------------------------------------------ a full disk


def _mount_prefix() -> list[str]:
    """A private mount namespace where this user may mount a tmpfs: ``unshare -m`` as root,
    ``unshare -rm`` (a user namespace) otherwise."""
    import shutil as _sh

    if _sh.which("unshare") is None:
        pytest.fail("the full-disk tests need util-linux's unshare (to mount a small tmpfs)")
    for prefix in (["unshare", "-m"], ["unshare", "-rm"]):
        if subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix
    pytest.fail("cannot make a mount namespace (neither root nor user namespaces): the full-disk tests mount a tmpfs")


def _on_small_tmpfs(tmp_path: Path, size: str, script: str) -> subprocess.CompletedProcess:
    """Run the shell ``script`` with ``$FS`` a fresh tmpfs of ``size`` mounted in a private mount
    namespace (it goes with the process): copy what should be inspected out to ``$KEEP``."""
    fs, keep = tmp_path / "fs", tmp_path / "keep"
    fs.mkdir()
    keep.mkdir()
    sh = f"set -u; mount -t tmpfs -o size={size} tmpfs {fs} || exit 99; FS={fs}; KEEP={keep}; {script}"
    r = subprocess.run([*_mount_prefix(), "sh", "-c", sh], env=ENV, capture_output=True, text=True, timeout=900)
    assert r.returncode != 99, r.stderr
    return r


def _py() -> str:
    return f"{sys.executable} -m pawn.cli"


def test_disk_full_writing_a_checkpoint_is_one_line_with_the_free_space_and_keeps_the_last_one(tmp_path):
    from pawn.checkpoint import load_checkpoint

    args = " ".join(["pretrain", "--variant", "toy", "--total-steps", "4", "--batch-size", "4", "--seq-len", "32",
                     "--val-games", "0", "--steps-per-chunk", "2", "--val-every", "2", "--checkpoint-every", "2"])
    # 5 MiB: the step-2 checkpoint (≈3.2 MB) fits, the step-4 one beside it does not
    r = _on_small_tmpfs(tmp_path, "5m", f"{_py()} {args} --out $FS/run > $KEEP/out.txt 2>&1; echo $? > $KEEP/rc; "
                                          "cp -a $FS/run $KEEP/run")
    out, rc = (tmp_path / "keep" / "out.txt").read_text(), (tmp_path / "keep" / "rc").read_text().strip()
    assert rc == "1", out[-3000:]
    assert "Traceback" not in out and "SafetensorError" not in out, out[-3000:]
    errors = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, out[-3000:]
    assert re.search(r"checkpoint \S+/checkpoints/step_00000004 \(No space left on device; \d+\.\d [KM]iB free there\)",
                     errors[0]), errors[0]
    assert "step_00000002" in errors[0] and "is intact" in errors[0]
    run = tmp_path / "keep" / "run"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_00000002"]  # no half-written step_4
    assert load_checkpoint(run / "checkpoints" / "step_00000002").training_state["step"] == 2


def test_disk_full_writing_a_report_is_one_line_and_the_old_report_stays(tmp_path):
    src = tmp_path / "src"
    made = subprocess.run(_cli(*_tiny(src, 2, 2)), env=ENV, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-2000:]
    r = _on_small_tmpfs(tmp_path, "1m", f"printf old > $FS/report.html; {_py()} report {src} --out $FS/report.html "
                                          "> $KEEP/out.txt 2>&1; echo $? > $KEEP/rc; cp $FS/report.html $KEEP/; ls -a $FS > $KEEP/ls")
    out, rc = (tmp_path / "keep" / "out.txt").read_text(), (tmp_path / "keep" / "rc").read_text().strip()
    assert rc == "1" and "Traceback" not in out, out[-3000:]
    errors = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "report.html" in errors[0], out[-3000:]
    assert re.search(r"No space left on device; \d+(\.\d)? (bytes|KiB|MiB) free there", errors[0]), errors[0]
    assert (tmp_path / "keep" / "report.html").read_text() == "old"  # nothing replaced
    assert (tmp_path / "keep" / "ls").read_text().split() == [".", "..", "report.html"]  # no staging file left


# ------------------------------------------------------------------------------ pawn uci: absurd clocks


class _Uci:
    """A bare ``pawn uci`` subprocess: lines in, lines out."""

    def __init__(self, ckpt: Path, env: dict | None = None):
        import queue
        import threading

        self.p = subprocess.Popen(_cli("uci", str(ckpt)), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, bufsize=1, env=env or ENV)
        self.q: "queue.Queue[str]" = queue.Queue()
        self.err: list[str] = []
        threading.Thread(target=lambda: [self.q.put(ln.rstrip("\n")) for ln in self.p.stdout], daemon=True).start()
        threading.Thread(target=lambda: [self.err.append(ln) for ln in self.p.stderr], daemon=True).start()

    def send(self, line: str) -> None:
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def until(self, prefix: str, timeout: float = 180.0) -> list[str]:
        import queue

        out, end = [], time.monotonic() + timeout
        while True:
            try:
                line = self.q.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {prefix!r} within {timeout} s (engine alive: {self.p.poll() is None}); "
                                     f"got {out[-5:]}; stderr {''.join(self.err)[-1500:]}") from None
            out.append(line)
            if line.startswith(prefix):
                return out

    def close(self) -> int:
        self.send("quit")
        return self.p.wait(timeout=60)


@pytest.fixture(scope="module")
def toy_ckpt(tmp_path_factory) -> Path:
    import jax

    from pawn.checkpoint import save_checkpoint
    from pawn.config import TOY
    from pawn.model import PAWNModel

    m = PAWNModel(TOY, jax.random.PRNGKey(5))
    return save_checkpoint(tmp_path_factory.mktemp("uci") / "toy", m.params(), TOY,
                           run_config={"prepend_outcome": False, "seq_len": 64})


def test_uci_go_with_clocks_of_10_pow_400_is_clamped_and_always_answered(toy_ckpt):
    import chess

    huge = "1" + "0" * 400
    e = _Uci(toy_ckpt)
    try:
        e.send("uci")
        e.until("uciok")
        e.send("isready")
        e.until("readyok")
        board = chess.Board()
        board.push_uci("e2e4")
        for go in (f"go movetime {huge}", f"go wtime {huge} btime {huge} winc {huge} binc {huge} movestogo {huge}",
                   f"go movetime -{huge}", f"go wtime -{huge} btime -{huge}"):
            e.send("position startpos moves " + " ".join(m.uci() for m in board.move_stack))
            e.send(go)
            lines = e.until("bestmove", timeout=120)
            assert any("out of range; taken as" in ln for ln in lines), lines
            move = chess.Move.from_uci(lines[-1].split()[1])
            assert move in board.legal_moves, lines[-1]
            board.push(move)
        e.send("isready")
        e.until("readyok")  # still alive and answering
        assert e.close() == 0
    finally:
        if e.p.poll() is None:
            e.p.kill()


# ------------------------------------------------------------------------------ pawn play: PGN tags


def _pgn_unescape(value: str) -> str:
    """A PGN string token's text (PGN standard §7: ``\\\\`` and ``\\"`` are escapes)."""
    return re.sub(r'\\(["\\])', r"\1", value)


def test_pawn_play_escapes_quotes_in_engine_names_and_the_pgn_reads_back(tmp_path, toy_ckpt):
    import io

    import chess.pgn

    name = 'Fake "quoted" \\ engine'
    fake = Path(__file__).with_name("fake_uci.py")
    pgn = tmp_path / "games.pgn"
    r = subprocess.run(_cli("play", str(toy_ckpt), "--vs", f"uci:{sys.executable} {fake}", "--games", "2",
                            "--temperatures", "0", "--max-ply", "12", "--pgn-out", str(pgn)),
                       env={**ENV, "FAKE_UCI_NAME": name}, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    text = pgn.read_text("utf-8")
    tags = [ln for ln in text.splitlines() if ln.startswith("[")]
    assert tags
    for line in tags:  # every tag is one well-formed PGN string token (§7: \\ and \" escapes)
        assert re.fullmatch(r'\[[A-Za-z0-9_]+ "(?:[^"\\]|\\["\\])*"\]', line), line
    f, games = io.StringIO(text), []
    while (g := chess.pgn.read_game(f)) is not None:  # python-chess reads it back, every game whole
        assert not g.errors, g.errors
        games.append(g)
    assert len(games) == 2 and all(len(list(g.mainline_moves())) > 0 for g in games)
    sides = sorted(_pgn_unescape(g.headers[s]) for g in games for s in ("White", "Black"))
    assert sides.count(name) == 2, sides


# ------------------------------------------------------------------------------ checkpoints a PAWN cannot read rightly


def test_a_manifest_with_an_unknown_format_version_is_refused_in_one_line(tmp_path, toy_ckpt):
    import shutil

    ck = tmp_path / "ck"
    shutil.copytree(toy_ckpt, ck)
    man = json.loads((ck / ".complete").read_text())
    man["format_version"] = 99
    (ck / ".complete").write_text(json.dumps(man))
    r = subprocess.run(_cli("eval", str(ck), "--games", "4"), env=ENV, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Traceback" not in out, out[-3000:]
    errors = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and ".complete" in errors[0] and "format_version 99" in errors[0], out[-3000:]


def test_init_from_a_pure_moves_checkpoint_into_a_prepend_outcome_run_is_refused(tmp_path):
    src = tmp_path / "src"
    made = subprocess.run(_cli(*_tiny(src, 2, 2)), env=ENV, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-2000:]
    ck = src / "checkpoints" / "step_00000002"
    out = tmp_path / "run"
    r = subprocess.run(_cli(*_tiny(out, 2, 2, "--init-from", str(ck), "--prepend-outcome")), env=ENV,
                       capture_output=True, text=True, timeout=600)
    text = r.stdout + r.stderr
    assert r.returncode == 1 and "Traceback" not in text, text[-3000:]
    errors = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "pure-moves layout" in errors[0] and "--prepend-outcome" in errors[0], text[-3000:]
    assert not (out / "metrics.jsonl").exists()  # refused before the run wrote anything


def test_uci_compiles_what_the_first_moves_need_before_readyok(toy_ckpt):
    """GUIs wait for ``readyok``; a first move that compiles afterwards falls back to a random
    move under any short clock. JAX's own compile log (JAX_LOG_COMPILES) shows that nothing the
    first moves run (the full forward, ``logits_at``) compiles after ``readyok``."""
    e = _Uci(toy_ckpt, env={**ENV, "JAX_LOG_COMPILES": "1"})
    try:
        e.send("uci")
        e.until("uciok")
        e.send("isready")
        e.until("readyok")
        time.sleep(0.5)
        n_err = len(e.err)
        moves: list[str] = []
        for _ in range(6):
            e.send("position startpos" + (" moves " + " ".join(moves) if moves else ""))
            e.send("go")  # no clock: the engine waits for the model, whatever it compiles
            lines = e.until("bestmove")
            assert not any("fallback" in ln for ln in lines), lines
            moves.append(lines[-1].split()[1])
        assert e.close() == 0
        late = [ln for ln in e.err[n_err:] if "Compiling jit(logits_at)" in ln]
        assert late == [], late[:3]
    finally:
        if e.p.poll() is None:
            e.p.kill()


def test_two_adapts_on_one_out_started_at_once_one_runs_the_other_gets_one_line(tiny_backbone, shared_data, tmp_path):
    run = tmp_path / "run"
    args = ["adapt", str(tiny_backbone), "--strategy", "bottleneck", "--bottleneck-dim", "8", "--data",
            str(shared_data / "lichess"), "--elo-min", "1200", "--elo-max", "2200", "--epochs", "1", "--steps-per-epoch", "4",
            "--steps-per-chunk", "2", "--batch-size", "16", "--seq-len", "96", "--val-games", "96", "--data-seed", "7",
            "--cache-dir", str(tmp_path / "cache"), "--out", str(run)]
    # the shared cache is built first, so that both racers reach the run directory at once
    warm = subprocess.run(_cli(*args[:-2], "--out", str(tmp_path / "warm")), env=ENV, capture_output=True, text=True,
                          timeout=600)
    assert warm.returncode == 0, warm.stderr[-2000:]
    # adapt checks the directory just before it writes, so the loser mostly meets the finished
    # check ("already holds this run"); when both pass it at once, the lock refuses the second
    _one_run(run, _race(tmp_path, args), also="already holds this run")


def test_the_run_dir_lock_names_its_holder_and_a_later_run_of_the_same_process_takes_it_over(tmp_path):
    from pawn.train.rundir import RunDirLock

    d = tmp_path / "run"
    first = RunDirLock.acquire(d)
    probe = ("import sys; from pathlib import Path; from pawn.train.rundir import RunDirLock, RunDirError\n"
             f"try:\n    RunDirLock.acquire(Path({str(d)!r}))\nexcept RunDirError as e:\n    print(e); sys.exit(1)\n")
    r = subprocess.run([sys.executable, "-c", probe], env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and f"another pawn process (pid {os.getpid()})" in r.stdout, r.stdout + r.stderr
    second = RunDirLock.acquire(d)  # e.g. a sweep retrying a trial whose run failed before releasing it
    assert second.held and not first.held
    second.release()
    r = subprocess.run([sys.executable, "-c", probe], env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
