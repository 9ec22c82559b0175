"""``jax.distributed.initialize`` whose failure to join is a Python exception, not a process abort.

jaxlib's distributed-runtime client, created by ``jax.distributed.initialize``, reports a failed
``connect()`` (a process that never reaches the coordinator within ``initialization_timeout``)
through its error callback, whose default is ``LOG(QFATAL)``: the process aborts (exit 134, a C++
stack trace), so no Python ``except`` ever runs (issue 25). :func:`initialize` passes a callback of
its own while the client is created (``jax._src.distributed._jax.get_distributed_runtime_client``,
``missed_heartbeat_callback``), so the failed connect raises, and sends file descriptor 2 to a
temporary file for the duration of the call, so the coordination service's multi-line C++ log of
the failure does not reach the terminal; on success that log is written to stderr as it was.

After joining, a process whose peer dies is still ended by jaxlib (exit 134, as JAX does without
this module); its message is then ``std::bad_cast`` (the callback cannot be handed the status)
instead of jaxlib's "another task died" line: look at the other processes' logs.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from typing import Iterator

import jax

_REASON = re.compile(r"(DEADLINE_EXCEEDED|UNAVAILABLE|ABORTED|INTERNAL|FAILED_PRECONDITION|ALREADY_EXISTS|INVALID_ARGUMENT)[^\n]*")


@contextlib.contextmanager
def _stderr_to_file() -> Iterator[list[str]]:
    """Point fd 2 at a temporary file inside the block; yields a list that holds the captured text
    afterwards."""
    out: list[str] = []
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out.append(tmp.read().decode("utf-8", "replace"))


@contextlib.contextmanager
def _client_error_callback() -> Iterator[None]:
    """While inside, distributed-runtime clients are created with an error callback, so a failed
    ``connect()`` raises instead of aborting the process (see the module docstring). A jaxlib
    without that entry point is left as it is."""
    try:
        from jax._src import distributed as _d

        make = _d._jax.get_distributed_runtime_client
    except (ImportError, AttributeError):  # pragma: no cover - another jaxlib layout
        yield
        return

    def with_callback(*args, **kwargs):
        kwargs.setdefault("missed_heartbeat_callback", lambda *_: None)
        return make(*args, **kwargs)

    _d._jax.get_distributed_runtime_client = with_callback
    try:
        yield
    finally:
        _d._jax.get_distributed_runtime_client = make


SLURM_VARS: tuple[str, ...] = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")
"""The variables ``srun`` sets for each task that JAX's Slurm detection reads (all must be set;
``jax/_src/clusters/slurm_cluster.py``): the job id (the coordinator port), the step's node list
(its first node is the coordinator), the number of tasks, the task's rank and its rank on its node."""


def slurm_coordinator(env=None) -> str | None:
    """The coordinator address JAX's own Slurm detection picks for this task, ``NODE:PORT`` (the
    first node of ``SLURM_STEP_NODELIST``; port ``$JAX_COORDINATOR_PORT``, else 61440 +
    ``SLURM_JOB_ID`` mod 4096), when ``srun`` started this process as one of several tasks
    (every :data:`SLURM_VARS` set and ``SLURM_NTASKS`` > 1); None otherwise (no Slurm step, a
    step of one task, which needs no coordinator, or a ``SLURM_NTASKS`` that is not a number).
    ``jax.distributed.initialize`` given this address reads the process count, the rank and the
    local device from the same variables.

    Args:
        env: the environment to look at (default ``os.environ``); JAX's address parser reads
            ``os.environ``, so pass ``os.environ`` or a mapping equal to it on ``SLURM_*``.
    """
    env = os.environ if env is None else env
    if not all(env.get(v) for v in SLURM_VARS) or not env["SLURM_NTASKS"].isdigit() or int(env["SLURM_NTASKS"]) < 2:
        return None
    from jax._src.clusters.slurm_cluster import SlurmCluster  # JAX's own detection (it reads os.environ)

    return SlurmCluster.get_coordinator_address(None, env.get("JAX_COORDINATOR_PORT"))


def failure_reason(error: BaseException, log: str, num_processes=None) -> str:
    """One line for a failed join: the first status line (``DEADLINE_EXCEEDED: …``) of the
    captured runtime log, else of the exception; when neither has one (the client's error reaches
    Python as ``std::bad_cast``), that not every process reached the coordinator."""
    for text in (log, str(error)):
        m = _REASON.search(text)
        if m:
            return " ".join(m.group().split())[:200]
    who = f"all {num_processes} processes" if num_processes else "every process"
    return f"{who} did not reach the coordinator in time (the runtime said: {' '.join(str(error).split())[:120] or type(error).__name__})"


def initialize(timeout_s: int, **kwargs) -> None:
    """``jax.distributed.initialize(**kwargs, initialization_timeout=timeout_s)``; a failure to
    join raises instead of aborting the process.

    Args:
        timeout_s: seconds every process has to reach the coordinator.
        **kwargs: ``coordinator_address``, ``num_processes``, ``process_id``, ... as for
            ``jax.distributed.initialize``.

    Raises:
        RuntimeError: the processes did not all join; the message is one line
            (:func:`failure_reason`) with the runtime's status, e.g. ``DEADLINE_EXCEEDED: …``.
    """
    failed = None
    with _stderr_to_file() as log:
        try:
            with _client_error_callback():
                jax.distributed.initialize(**kwargs, initialization_timeout=int(timeout_s))
        except Exception as e:
            failed = e
            _drop_failed_state()  # (its log stays in the captured file)
    if failed is not None:
        n = kwargs.get("num_processes")
        raise RuntimeError(failure_reason(failed, log[0] if log else "", n)) from None
    if log and log[0]:
        sys.stderr.write(log[0])


def _drop_failed_state() -> None:
    """Shut down the half-made client and service of a failed join now (their errors and logs go
    to the captured stderr) and forget them, so JAX's exit hook has nothing left to shut down
    (it printed a traceback and the runtime's multi-line log after the one-line error)."""
    try:
        from jax._src import distributed as _d

        state = _d.global_state
    except (ImportError, AttributeError):  # pragma: no cover - another jax layout
        return
    for part in ("client", "service"):
        obj = getattr(state, part, None)
        if obj is not None:
            with contextlib.suppress(Exception):
                obj.shutdown()
            setattr(state, part, None)
