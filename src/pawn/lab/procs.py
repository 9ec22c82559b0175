"""The processes ``pawn lab`` starts, and the ``lab.json`` each leaves in its run directory.

State lives in the run directories only: ``lab.json`` (written atomically before the process
starts and rewritten when it is resumed or seen to exit) holds the process id, the process's
start time in clock ticks since boot (``/proc/PID/stat`` field 22, so a reused pid is never taken
for the run), the command and argv, the start time (ISO 8601, UTC), the tags and the visible
devices. A lab server that restarts reads them again; there is no lab-wide state and no recovery
step. The process's stdout and stderr go to ``lab.log`` beside it.

Every run starts in its own process group (``start_new_session``), so :func:`stop` reaches the
command and any worker processes it started with one SIGTERM (the trainers checkpoint and exit on
it, spec ``training-and-adapters.md`` §1.10).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from pawn.errors import PawnError
from pawn.fileio import write_json
from pawn.runs import LAB_FILE  # lab.json: the name pawn.runs.Run.lab reads

LOG_FILE = "lab.log"
"""The started process's stdout and stderr (appended to on resume)."""
CONFIG_FILE = "lab-config.json"
"""The validated settings a run was started with, passed to the command as ``--config``."""


class LabError(PawnError):
    """A lab request that cannot be done (one line naming the run directory or the argument)."""


_children: dict[int, subprocess.Popen] = {}
_lock = threading.Lock()


def now_iso() -> str:
    """The current time, ISO 8601 in UTC with milliseconds (as the run records write it)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _stat(pid: int) -> Optional[tuple[str, int]]:
    """(state letter, start time in clock ticks since boot) of ``pid`` from ``/proc``, or None
    when there is no such process (or no ``/proc``)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2:].split()  # fields 3.. (the command name may hold spaces)
    try:
        return rest[0], int(rest[19])
    except (IndexError, ValueError):
        return None


def proc_start_ticks(pid: int) -> Optional[int]:
    """The start time of ``pid`` in clock ticks since boot (``/proc/PID/stat`` field 22), or None."""
    s = _stat(pid)
    return s[1] if s else None


def read_lab(run_dir: Path) -> Optional[dict]:
    """``run_dir/lab.json``, or None when absent or unreadable."""
    try:
        data = json.loads((Path(run_dir) / LAB_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_lab(run_dir: Path, info: dict) -> None:
    """Write ``run_dir/lab.json`` whole or not at all (:func:`pawn.fileio.write_json`)."""
    write_json(Path(run_dir) / LAB_FILE, info, what="lab record")


def _reap() -> None:
    """Collect the exit codes of this server's finished children (no zombies) into their
    ``lab.json`` (``exit_code``, ``ended``)."""
    with _lock:
        done = [(pid, p) for pid, p in _children.items() if p.poll() is not None]
        for pid, _ in done:
            del _children[pid]
    for pid, p in done:
        run_dir = Path(getattr(p, "lab_run_dir"))
        info = read_lab(run_dir)
        if info is not None and info.get("pid") == pid and info.get("exit_code") is None:
            info.update(exit_code=p.returncode, ended=now_iso())
            write_lab(run_dir, info)


def alive(info: Optional[dict]) -> Optional[bool]:
    """Whether the process a ``lab.json`` names still runs: True, False, or None when
    ``info`` is None (the run was not started by the lab). A pid whose start time differs from
    the recorded one (the pid was reused) counts as gone; so does a zombie."""
    _reap()
    if not info or not isinstance(info.get("pid"), int):
        return None
    pid = info["pid"]
    if info.get("exit_code") is not None:
        return False
    with _lock:
        child = _children.get(pid)
    if child is not None:
        return child.poll() is None
    st = _stat(pid)
    if st is None:
        if Path("/proc/self/stat").exists():
            return False
        try:  # no /proc (macOS): signal 0 tells whether the pid exists
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state, ticks = st
    if state in ("Z", "X"):
        return False
    recorded = info.get("proc_start")
    return recorded is None or recorded == ticks


def device_env(devices: Any) -> dict[str, str]:
    """The environment that makes only ``devices`` visible to a started run.

    ``devices``: None (inherit), a list of accelerator indices (``[0, 1]``), a comma string
    (``"0,1"``), or ``"cpu"`` (no accelerator: ``JAX_PLATFORMS=cpu``). Indices go to
    ``CUDA_VISIBLE_DEVICES`` (NVIDIA) and ``HIP_VISIBLE_DEVICES`` (AMD), which JAX honours.

    Raises:
        LabError: a value that is neither of these.
    """
    if devices is None:
        return {}
    if isinstance(devices, str) and devices.strip().lower() == "cpu":
        return {"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": ""}
    items = devices.split(",") if isinstance(devices, str) else list(devices) if isinstance(devices, (list, tuple)) else None
    if items is None:
        raise LabError(f"devices: expected a list of accelerator indices, a comma list or 'cpu', got {devices!r}")
    idx = []
    for d in items:
        s = str(d).strip()
        if not s.isdigit():
            raise LabError(f"devices: {d!r} is not an accelerator index (use e.g. [0, 1], \"0,1\" or \"cpu\")")
        idx.append(s)
    if not idx:
        raise LabError("devices: empty list (give accelerator indices, or 'cpu')")
    vis = ",".join(idx)
    return {"CUDA_VISIBLE_DEVICES": vis, "HIP_VISIBLE_DEVICES": vis}


def pawn_argv(command: str, *args: str) -> list[str]:
    """The argv that runs ``pawn COMMAND ARGS`` with this interpreter (``python -m pawn.cli``)."""
    return [sys.executable, "-m", "pawn.cli", command, *args]


def spawn(run_dir: Path, command: str, argv: Sequence[str], *, tags: Sequence[str] = (), devices: Any = None,
          previous: Optional[dict] = None) -> dict:
    """Start ``argv`` in its own process group with its output appended to ``run_dir/lab.log``
    and record it in ``run_dir/lab.json`` (written before the process runs, then with its pid).

    Args:
        run_dir: the run (or sweep) directory; created if missing.
        command: ``pretrain``, ``adapt`` or ``sweep``. argv: the full argv (:func:`pawn_argv`).
        tags: free labels kept in ``lab.json`` (``lab_runs(tag=...)`` filters on them).
        devices: see :func:`device_env`.
        previous: the ``lab.json`` of the run being resumed (its earlier starts are kept under
            ``history``).

    Returns:
        The new ``lab.json`` content.

    Raises:
        LabError: the directory or log cannot be written, or the process cannot start.
    """
    env = {**os.environ, **device_env(devices)}
    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        log = open(run_dir / LOG_FILE, "ab")
    except OSError as e:
        raise LabError(f"{run_dir}: cannot write the run directory ({e.strerror or e})") from None
    history = list((previous or {}).get("history") or [])
    if previous and previous.get("pid") is not None:
        history.append({k: previous.get(k) for k in ("pid", "argv", "start", "ended", "exit_code", "devices")})
    info: dict[str, Any] = {
        "pid": None, "pgid": None, "proc_start": None, "command": command, "argv": list(argv), "start": now_iso(),
        "tags": list(tags), "devices": devices, "log": LOG_FILE, "cwd": os.getcwd(), "host": os.uname().nodename,
        "exit_code": None, "ended": None, "history": history,
    }
    with log:
        log.write(f"--- pawn lab {info['start']}: {' '.join(argv)}\n".encode())
        log.flush()
        try:
            p = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True, close_fds=True)
        except OSError as e:
            raise LabError(f"{run_dir}: cannot start {argv[0]} ({e.strerror or e})") from None
    p.lab_run_dir = str(run_dir)  # type: ignore[attr-defined]
    with _lock:
        _children[p.pid] = p
    info.update(pid=p.pid, pgid=p.pid, proc_start=proc_start_ticks(p.pid))
    write_lab(run_dir, info)
    return info


def stop(run_dir: Path, info: Optional[dict], sig: int = signal.SIGTERM) -> int:
    """Send ``sig`` (SIGTERM: checkpoint and exit) to the process group of the run's process.

    Returns:
        The pid signalled.

    Raises:
        LabError: the run was not started by the lab, or its process has already ended.
    """
    if not info or not isinstance(info.get("pid"), int):
        raise LabError(f"{run_dir}: not started by pawn lab (no {LAB_FILE}); stop it where it runs")
    if not alive(info):
        raise LabError(f"{run_dir}: its process {info['pid']} has already ended")
    try:
        os.killpg(info.get("pgid") or info["pid"], sig)
    except ProcessLookupError:
        raise LabError(f"{run_dir}: its process {info['pid']} has already ended") from None
    except PermissionError:
        raise LabError(f"{run_dir}: not allowed to signal process {info['pid']}") from None
    return info["pid"]


def wait(info: dict, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for the process of ``info`` to end; True when it has."""

    deadline = time.monotonic() + max(0.0, timeout_s)
    while True:
        if not alive(info):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
