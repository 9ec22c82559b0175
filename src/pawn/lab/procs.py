"""The processes ``pawn lab`` starts, and the ``lab.json`` each leaves in its run directory.

State lives in the run directories only: ``lab.json`` (written atomically before the process
starts and rewritten when it is resumed or seen to exit) holds the process id, the process's
start time in clock ticks since boot (``/proc/PID/stat`` field 22) and the boot's id
(``/proc/sys/kernel/random/boot_id``), a random token the process was started with in its
environment (:data:`TOKEN_ENV`), the run folder it was started for (``run_dir``, also in its
environment, :data:`RUN_DIR_ENV`), the command and argv, the start time (ISO 8601, UTC), the tags
and the visible devices. A lab server that restarts reads them again; there is no lab-wide state
and no recovery step. The process's stdout and stderr go to ``lab.log`` beside it.

Every run starts in its own process group (``start_new_session``), so :func:`stop` reaches the
command and any worker processes it started with one SIGTERM (the trainers checkpoint and exit on
it, spec ``training-and-adapters.md`` §1.10).

A ``lab.json`` is only a claim: a run folder may be copied, downloaded or written by someone
else. A process counts as the run's (:func:`alive`, :func:`stop`) only when it is this server's
own child, or — read from ``/proc`` — it started in this boot at the recorded clock tick, leads
its own process group, and carries the recorded token in its environment; and only for the folder
it was started for: the ``lab.json`` must sit in its recorded ``run_dir`` (a verbatim copy of a
live run's record in another folder names that run's process, which is not this folder's).
Anything else is never signalled.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
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
RUN_DIR_ENV = "PAWN_LAB_RUN_DIR"
"""The environment variable holding the run folder (absolute, links resolved) a started process
was started for, as ``lab.json`` ``run_dir`` records it."""
TOKEN_ENV = "PAWN_LAB_RUN"
"""The environment variable holding the random token (``lab.json`` ``token``) a started process
carries, by which a restarted lab recognises it in ``/proc/PID/environ``."""


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


def boot_id() -> Optional[str]:
    """This boot's id (``/proc/sys/kernel/random/boot_id``), or None without it: start times in
    clock ticks since boot compare only within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _environ_has(pid: int, name: str, value: str) -> bool:
    """Whether ``/proc/PID/environ`` (the environment the process started with) holds
    ``name=value``; False when it cannot be read (another user's process, or no ``/proc``)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{name}={value}".encode() in env.split(b"\0")


def _is_ours(info: dict) -> Optional[bool]:
    """Whether the live process ``info`` names is the one this lab started: True, False (gone, a
    reused pid, or a process the lab never started), or None when ``/proc`` is missing and the
    process is not this server's child (nothing to check it by).

    Checked from ``/proc``: it started in the recorded boot at the recorded clock tick, it leads
    its own process group (``pgid`` = pid, as ``start_new_session`` makes it) and its environment
    holds the recorded token (:data:`TOKEN_ENV`)."""
    pid = info["pid"]
    if info.get("pgid") not in (None, pid):
        return False  # the lab starts every run as the leader of its own group
    folder = info.get(FOLDER_KEY)
    if folder is not None and info.get("run_dir") != folder:
        return False  # a lab.json copied (or moved) from the folder its process was started for
    with _lock:
        child = _children.get(pid)
    if child is not None:
        return child.poll() is None and (folder is None or _resolved(getattr(child, "lab_run_dir")) == folder)
    st = _stat(pid)
    if st is None:
        return False if Path("/proc/self/stat").exists() else None
    state, ticks = st
    if state in ("Z", "X"):
        return False
    token, recorded = info.get("token"), info.get("proc_start")
    if not isinstance(token, str) or not token or not isinstance(recorded, int) or recorded != ticks:
        return False
    if info.get("boot_id") != boot_id():
        return False
    try:
        if os.getpgid(pid) != pid:
            return False
    except OSError:
        return False
    return _environ_has(pid, TOKEN_ENV, token) and (folder is None or _environ_has(pid, RUN_DIR_ENV, folder))


FOLDER_KEY = "_folder"
"""The key :func:`read_lab` adds to what it returns: the folder (absolute, links resolved) the
``lab.json`` was read from, which must equal its ``run_dir`` for its process to count as the
run's (never written back)."""


def _resolved(path: Any) -> str:
    return str(Path(path).resolve())


def read_lab(run_dir: Path) -> Optional[dict]:
    """``run_dir/lab.json`` with :data:`FOLDER_KEY` set to ``run_dir`` (resolved), or None when
    absent or unreadable."""
    try:
        data = json.loads((Path(run_dir) / LAB_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    data[FOLDER_KEY] = _resolved(run_dir)
    return data


def write_lab(run_dir: Path, info: dict) -> None:
    """Write ``run_dir/lab.json`` whole or not at all (:func:`pawn.fileio.write_json`), without
    :data:`FOLDER_KEY`."""
    write_json(Path(run_dir) / LAB_FILE, {k: v for k, v in info.items() if k != FOLDER_KEY}, what="lab record")


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
    ``info`` is None (the run was not started by the lab). Only the process the lab started
    counts (see the module's note): a reused pid, a zombie, or a process the ``lab.json`` names
    that the lab never started is gone. Without ``/proc`` (macOS), a process that is not this
    server's child is taken as alive when its pid exists (signal 0); :func:`stop` still refuses it."""
    _reap()
    if not info or not isinstance(info.get("pid"), int):
        return None
    pid = info["pid"]
    if info.get("exit_code") is not None:
        return False
    ours = _is_ours(info)
    if ours is not None:
        return ours
    try:  # no /proc (macOS): signal 0 tells whether the pid exists
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
    token = secrets.token_hex(16)
    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        log = open(run_dir / LOG_FILE, "ab")
    except OSError as e:
        raise LabError(f"{run_dir}: cannot write the run directory ({e.strerror or e})") from None
    folder = _resolved(run_dir)
    env = {**os.environ, **device_env(devices), TOKEN_ENV: token, RUN_DIR_ENV: folder}
    history = list((previous or {}).get("history") or [])
    if previous and previous.get("pid") is not None:
        history.append({k: previous.get(k) for k in ("pid", "argv", "start", "ended", "exit_code", "devices")})
    info: dict[str, Any] = {
        "pid": None, "pgid": None, "proc_start": None, "boot_id": boot_id(), "token": token, "run_dir": folder,
        "command": command, "argv": list(argv), "start": now_iso(),
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
    """Send ``sig`` (SIGTERM: checkpoint and exit) to the process group of the run's process,
    only when that process is the one the lab started (see the module's note; without ``/proc``
    only this server's own children).

    Returns:
        The pid signalled.

    Raises:
        LabError: the run was not started by the lab, its process has already ended, or the
            process its ``lab.json`` names is not one the lab started (nothing is signalled).
    """
    if not info or not isinstance(info.get("pid"), int):
        raise LabError(f"{run_dir}: not started by pawn lab (no {LAB_FILE}); stop it where it runs")
    _reap()
    pid = info["pid"]
    ended = LabError(f"{run_dir}: its process {pid} has already ended")
    if info.get("exit_code") is not None:
        raise ended
    here = _resolved(run_dir)
    if isinstance(info.get("run_dir"), str) and info["run_dir"] != here:
        raise LabError(f"{run_dir}: process {pid} is not one pawn lab started here: its {LAB_FILE} is for the run folder "
                       f"{info['run_dir']}, not {here} (a copy?); nothing was signalled")
    ours = _is_ours(info)
    if not ours:
        st = _stat(pid)
        recorded = info.get("proc_start")
        if ours is False and (st is None or st[0] in ("Z", "X") or (isinstance(recorded, int) and recorded != st[1])):
            raise ended  # gone, or its pid now belongs to a later process
        raise LabError(f"{run_dir}: process {pid} is not one pawn lab started here (its {LAB_FILE} names a process "
                       "without the lab's start record: copied or written elsewhere); nothing was signalled")
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        raise ended from None
    except PermissionError:
        raise LabError(f"{run_dir}: not allowed to signal process {pid}") from None
    return pid


def wait(info: dict, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for the process of ``info`` to end; True when it has."""

    deadline = time.monotonic() + max(0.0, timeout_s)
    while True:
        if not alive(info):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
