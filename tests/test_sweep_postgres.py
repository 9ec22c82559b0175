"""`pawn sweep` across machines on a real PostgreSQL server (the session's throw-away cluster,
``postgres_server`` in conftest.py): workers with sweep folders of their own (as on separate
machines, so no file lock joins them) share one study through the database; workers released at
one instant finish exactly N trials, none run twice; a worker SIGKILLed mid-trial has its trial
failed by the heartbeat and retried by another; a database restart is waited out, a database that
stays down is one line; a wrong password or an unreachable server is one line naming the URL
without the password; ``pawn report`` and ``pawn dashboard --sweep`` read the study."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from _postgres import PASSWORD, wait_until_down
from test_sweep import _sweep_cmd
from test_sweep_race import SPACE, _Runner

N_WORKERS = 6


def _db(server, request) -> str:
    """A fresh database on the server for this test; its URL (with the password)."""
    name = re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:50]
    return server.create_database(name)


def _env() -> dict:
    return {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join(sys.path)}


def _pawn(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pawn.cli", *args], capture_output=True, text=True, env=_env(),
                          timeout=timeout)


def _study(url: str, name: str = "pretrain") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=url)


def _shown(url: str) -> str:
    """``url`` with its password as PAWN prints it (``***``)."""
    return re.sub(r"(//[^:/@]+):[^@/]*@", r"\1:***@", url)


# ------------------------------------------------------------------ one line: wrong password, no database, no server
def test_a_wrong_password_no_database_or_no_server_is_one_line_without_the_password(postgres_server, tmp_path):
    """``pawn sweep --storage postgresql://…`` that cannot log in, names a database that does not
    exist, or reaches no server: one line naming the URL with the password hidden, exit 2, at once
    and before any trial (a server that never answered is a wrong URL, not one to wait for)."""
    from pawn.sweep.storage import CONNECT_TIMEOUT_S  # noqa: F401 -- the driver's connect timeout exists

    wrong = postgres_server.url(password="not-the-password")
    nodb = postgres_server.url(database="no_such_database")
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens there once the socket is closed
    down = postgres_server.url(port=closed)
    cases = [(wrong, "password authentication failed"), (nodb, 'database "no_such_database" does not exist'),
             (down, "Connection refused")]
    for url, words in cases:
        t0 = time.monotonic()
        r = _pawn("sweep", "--run-type", "pretrain", "--trials", "1", "--storage", url, "--compilation-cache", "none",
                  "--out", str(tmp_path / "sw"))
        took = time.monotonic() - t0
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
        assert lines[0].startswith("error: ") and _shown(url) in lines[0] and words in lines[0], lines[0]
        assert lines[0].startswith(f"error: --storage {_shown(url)}: cannot open (OperationalError: "), lines[0]
        assert PASSWORD not in r.stdout + r.stderr and "not-the-password" not in r.stdout + r.stderr
        assert took < 60, took  # not the default --db-retry-s (300 s)
    assert not list((tmp_path / "sw").glob("trial*"))  # no trial was started


# ------------------------------------------------------------------ workers on several machines at one instant
def _machine(barrier, url: str, out: Path, trials: int, log_file: Path) -> None:
    """One worker "on its own machine": its own sweep folder, the shared database study."""
    from pawn.sweep.settings import SweepSettings
    from pawn.sweep.study import run_worker

    s = SweepSettings.load(run_type="pretrain", trials=trials, pruner="none", out=out, storage=url,
                           compilation_cache="none", heartbeat_s=1, grace_s=60)
    barrier.wait()
    run_worker(s, log=lambda m: None, runner=_Runner(log_file, seconds=0.3), space=dict(SPACE))


def test_workers_of_several_machines_released_at_one_instant_finish_exactly_n(postgres_server, request, tmp_path):
    """Six workers, each with its own sweep folder (their file locks join nothing, as on six
    machines), released by one Barrier on a fresh PostgreSQL study: the study is created once and
    ends with exactly N complete trials, each trained once."""
    url = _db(postgres_server, request)
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(N_WORKERS)
    log_file = tmp_path / "runs.txt"
    n = 5
    procs = [ctx.Process(target=_machine, args=(barrier, url, tmp_path / f"machine{i}", n, log_file))
             for i in range(N_WORKERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0] * N_WORKERS
    runs = [line.split()[1] for line in log_file.read_text().splitlines()]
    assert len(runs) == len(set(runs)) == n, runs
    assert optuna.get_all_study_names(url) == ["pretrain"]
    assert [t.state for t in _study(url).trials] == [TrialState.COMPLETE] * n


# ------------------------------------------------------------------ pawn report and pawn dashboard --sweep
def test_report_and_dashboard_read_a_study_on_postgres(postgres_server, request, tmp_path):
    """``pawn report URL`` shows the study's trials, and ``pawn dashboard ROOT --sweep URL`` hands it
    to optuna-dashboard (read-only); neither prints nor embeds the password; a wrong one is one line."""
    pytest.importorskip("plotly", reason="the report extra: pip install 'pawn[report]'")
    from _report_page import page_data

    url = _db(postgres_server, request)
    study = optuna.create_study(study_name="lora", storage=url, direction="minimize")
    for lr, v in ((1e-3, 3.25), (2e-3, 3.0)):
        study.add_trial(optuna.trial.create_trial(params={"lr": lr}, value=v, distributions={
            "lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}))
    out = tmp_path / "report.html"
    r = _pawn("report", url, "-o", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    html = out.read_text()
    (s,) = page_data(html)["studies"]
    assert (s["name"], s["storage"], s["best"]) == ("lora", _shown(url), 1) and [t["value"] for t in s["trials"]] == [3.25, 3.0]
    assert PASSWORD not in html
    r = _pawn("report", postgres_server.url(password="wrong"), "-o", str(tmp_path / "x.html"))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "password authentication failed" in r.stderr
    assert "wrong" not in r.stderr.replace("password authentication", "") and not (tmp_path / "x.html").exists()

    pytest.importorskip("optuna_dashboard", reason="the dashboard extra: pip install 'pawn[dashboard]'")
    from test_dashboard import _free_port, _http, _serving, _wait_http

    root = tmp_path / "runs"
    root.mkdir()
    free = _free_port()
    with _serving(root, "--port", "0", "--sweep", url, "--sweep-port", str(free)) as proc:
        line = proc.stdout.readline()
        assert line.startswith(f"optuna-dashboard: {_shown(url)} on http://localhost:{free}/ (read-only)"), line
        _wait_http(free)
        code, body = _http(free, "GET", "/api/studies", {"Host": f"localhost:{free}"})
        assert code == 200 and [x["study_name"] for x in json.loads(body)["study_summaries"]] == ["lora"]
        assert _http(free, "DELETE", "/api/studies/1", {"Host": f"localhost:{free}"})[0] == 405
    assert len(_study(url, "lora").trials) == 2


# ------------------------------------------------------------------ real pawn sweep processes (slow)
def _machine_cmd(tmp_path: Path, name: str, trials: int, *extra: str, steps: int = 8) -> list[str]:
    """The toy pretraining sweep of ``test_sweep`` as run on machine ``name``: its own folder
    (base config, space and ``--out``), no pruner (every trial that ends is COMPLETE)."""
    (tmp_path / name).mkdir(exist_ok=True)
    return _sweep_cmd(tmp_path / name / "sw", trials, *extra, "--pruner", "none", steps=steps)


def _gate(release: Path, cmd: list[str]) -> list[str]:
    """``cmd`` (a ``python -m pawn.cli …`` line) as a process that imports PAWN's CLI, then waits
    for ``release`` to exist before it runs: processes started one after another are released at
    one instant by creating that file."""
    code = ("import os, sys, time, runpy\nimport pawn.cli, pawn.sweep.study\n"
            f"while not os.path.exists({str(release)!r}): time.sleep(0.005)\n"
            f"sys.argv = ['pawn'] + {cmd[3:]!r}\nrunpy.run_module('pawn.cli', run_name='__main__')\n")
    return [sys.executable, "-c", code]


def _release(procs: list, release: Path) -> None:
    time.sleep(3)  # every process has imported PAWN and waits (the gate's import is its slow part)
    release.touch()


@pytest.mark.slow
def test_three_pawn_sweep_processes_on_one_postgres_study_finish_exactly_n(postgres_server, request, tmp_path):
    """Three ``pawn sweep`` processes, each with its own --out, released at one instant on one
    PostgreSQL study: exactly N trials complete, no trial's parameters or run folder twice, no
    trial left RUNNING, and each worker's summary names the storage without the password."""
    url = _db(postgres_server, request)
    n, release = 4, tmp_path / "go"
    procs = [subprocess.Popen(_gate(release, _machine_cmd(tmp_path, f"m{i}", n, "--storage", url, "--seed", str(i),
                                                        "--compilation-cache", "none")),
                              env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    _release(procs, release)
    results = [p.communicate(timeout=900) for p in procs]
    for p, (o, e) in zip(procs, results):
        assert p.returncode == 0, _why(e)
        assert PASSWORD not in o + e and f"storage: {_shown(url)} (study pretrain)" in o
    trials = _study(url).trials
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == n and not any(t.state == TrialState.RUNNING for t in trials), [(t.number, t.state) for t in trials]
    dirs = [t.user_attrs["run_dir"] for t in done]
    assert len(set(dirs)) == n and len({json.dumps(t.params, sort_keys=True) for t in done}) == n
    assert len({t.user_attrs["worker"] for t in done}) >= 2  # the work was shared


def _why(stderr: str) -> str:
    """A failed worker's stderr, short: its lines outside a traceback box, and each frame's
    ``file:line in function`` of a rich traceback."""
    keep = [ln for ln in stderr.splitlines() if not ln.lstrip().startswith(("│", "╭", "╰")) or re.search(r"\.py:\d+", ln)]
    return "\n".join(keep)[-4000:]


def _wait_for(url: str, pred, timeout: float = 600) -> list:
    deadline = time.monotonic() + timeout
    while True:
        try:
            trials = _study(url).trials
            if pred(trials):
                return trials
        except Exception:  # no study yet
            pass
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


@pytest.mark.slow
def test_a_worker_killed_mid_trial_is_failed_by_heartbeat_and_retried_by_another(postgres_server, request, tmp_path):
    """Two ``pawn sweep`` processes (their own --out) on one PostgreSQL study; one is SIGKILLed in
    the middle of a trial. The other fails that trial once its heartbeat is older than --grace-s,
    retries it with the same parameters, and the study ends with exactly N complete."""
    url = _db(postgres_server, request)
    n = 3
    hb = ["--heartbeat-s", "1", "--grace-s", "4", "--storage", url, "--compilation-cache", "none"]
    cmds = [_machine_cmd(tmp_path, f"m{i}", n, *hb, "--seed", str(i), steps=300) for i in range(2)]
    victim = subprocess.Popen(cmds[0], env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    trials = _wait_for(url, lambda ts: any(t.state == TrialState.RUNNING and "run_dir" in t.user_attrs
                                           and t.user_attrs.get("worker", "").endswith(f":{victim.pid}") for t in ts))
    killed = next(t for t in trials if t.state == TrialState.RUNNING and t.user_attrs.get("worker", "").endswith(f":{victim.pid}"))
    other = subprocess.Popen(cmds[1], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1)
    victim.kill()  # SIGKILL mid-trial: nothing is recorded
    victim.wait()
    o, e = other.communicate(timeout=900)
    assert other.returncode == 0, _why(e)
    trials = _study(url).trials
    assert trials[killed.number].state == TrialState.FAIL
    retry = [t for t in trials if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE and retry[0].params == killed.params
    assert sum(t.state == TrialState.COMPLETE for t in trials) == n and not any(t.state == TrialState.RUNNING for t in trials)
    assert f"trials [{killed.number}] had no heartbeat for over --grace-s" in o + e


@pytest.mark.slow
def test_a_database_restart_is_waited_out_and_a_database_that_stays_down_is_one_line(postgres_server, request, tmp_path):
    """Two ``pawn sweep`` processes on one PostgreSQL study; the server is stopped mid-sweep (its
    connections cut) and started again 4 s later: both wait, say so in a line each, go on and the
    study ends with exactly N complete. Stopped again for good under a worker with --db-retry-s 5:
    that worker stops with one line naming the URL without the password (exit 2)."""
    url = _db(postgres_server, request)
    n = 4
    hb = ["--heartbeat-s", "1", "--grace-s", "60", "--storage", url, "--compilation-cache", "none"]
    procs = [subprocess.Popen(_machine_cmd(tmp_path, f"m{i}", n, *hb, "--seed", str(i), steps=200),
                              env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        # both workers have opened the study (each holds a trial) and one trial is running: a worker
        # that has not opened it yet would be refused at start, as designed, not wait the restart out
        _wait_for(url, lambda ts: all(any(f"{os.sep}m{i}{os.sep}" in str(t.user_attrs.get("run_dir", "")) for t in ts)
                                      for i in range(2))
                  and any(t.state == TrialState.RUNNING and "run_dir" in t.user_attrs for t in ts))
        postgres_server.stop("fast")
        wait_until_down(postgres_server.port)
        time.sleep(4)
        postgres_server.start()
        results = [p.communicate(timeout=900) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (o, e) in zip(procs, results):
        assert p.returncode == 0, _why(e)
        assert PASSWORD not in o + e
    said = "".join(e for _, e in results)
    assert f"database {_shown(url)} does not answer" in said and f"database {_shown(url)} answers again after" in said, said[-3000:]
    trials = _study(url).trials
    assert sum(t.state == TrialState.COMPLETE for t in trials) == n and not any(t.state == TrialState.RUNNING for t in trials)

    p = subprocess.Popen(_machine_cmd(tmp_path, "late", n + 2, *hb, "--db-retry-s", "5", steps=200), env=_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(url, lambda ts: any(t.state == TrialState.RUNNING and "run_dir" in t.user_attrs for t in ts))
        postgres_server.stop("fast")
        o, e = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
        postgres_server.start()
    last = e.strip().splitlines()[-1]
    assert p.returncode == 2 and "Traceback" not in e, _why(e)
    assert last.startswith(f"error: database {_shown(url)} did not answer for ") and "(--db-retry-s 5)" in last, last
    assert PASSWORD not in o + e


def test_what_a_worker_waits_for_and_what_it_reports_at_once():
    """The errors of a server that is down for a while (a dropped or refused connection, the
    "roll back first" of a session whose connection dropped, as Optuna re-raises it) are waited
    for; a refused login, a missing database, a constraint or a plain bug are not."""
    import sqlalchemy.exc as sa

    from pawn.sweep.storage import transient

    def wrapped(e: BaseException) -> BaseException:
        try:
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from e
        except optuna.exceptions.StorageInternalError as outer:
            return outer

    def op(msg: str) -> sa.OperationalError:
        return sa.OperationalError("SELECT 1", {}, Exception(msg))

    waited = [op("server closed the connection unexpectedly"), op('connection to server at "10.0.0.5", port 5432 failed: '
              "Connection refused"), op("terminating connection due to administrator command"),
              op("FATAL: the database system is starting up"),
              wrapped(sa.PendingRollbackError("Can't reconnect until invalid transaction is rolled back."))]
    at_once = [op('FATAL: password authentication failed for user "pawn"'), op('FATAL: database "x" does not exist'),
               op('could not translate host name "db.nowhere" to address: Name or service not known'),
               wrapped(sa.IntegrityError("INSERT", {}, Exception("duplicate key"))), ValueError("a bug"),
               wrapped(sa.ProgrammingError("SELECT", {}, Exception('relation "studies" does not exist')))]
    assert [transient(e) for e in waited] == [True] * len(waited)
    assert [transient(e) for e in at_once] == [False] * len(at_once)
