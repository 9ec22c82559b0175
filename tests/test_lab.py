"""``pawn lab``: the MCP server's tools, called in process through the SDK (``server.call_tool``)
against real ``pawn pretrain`` runs started by ``lab_start``, and once over stdio through the SDK's
client. The runs are tiny (toy model, batch 4 × 32 plies); the tests that run one are ``slow``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

pytest.importorskip("mcp", reason="pawn[lab] (the mcp package) is not installed")

from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402

from pawn.lab.server import build_server  # noqa: E402
from pawn.lab.tools import pareto_front  # noqa: E402

TOOL_NAMES = {"lab_schema", "lab_start", "lab_runs", "lab_status", "lab_tail", "lab_compare", "lab_stop", "lab_resume",
              "lab_sweep", "lab_sweep_status", "lab_audit", "lab_log"}
TOY = {"variant": "toy", "batch_size": 4, "seq_len": 32, "val_games": 8}
"""The smallest pretraining run: the toy model on batches of 4 games × 32 plies."""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The lab server, its runs root the session's temporary folder (every test's tmp_path is in it)."""
    return build_server(root=tmp_path_factory.getbasetemp())


def call(server, name: str, **args):
    """The tool's structured result (its JSON dict)."""
    async def go():
        return await server.call_tool(name, args)

    res = asyncio.run(go())
    assert not res.is_error, res
    return res.structured_content


def call_error(server, name: str, **args) -> str:
    """The message of a tool call that must fail (a ToolError: isError over the wire)."""
    async def go():
        return await server.call_tool(name, args)

    with pytest.raises(ToolError) as info:
        asyncio.run(go())
    msg = str(info.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    return msg.removeprefix(f"Error executing tool {name}: ")


def wait_for(server, run: Path, pred, timeout: float = 600.0, every: float = 0.5) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = call(server, "lab_status", run=str(run))
        if pred(st):
            return st
        if time.monotonic() > deadline:
            log = "\n".join(call(server, "lab_log", run=str(run), lines=30)["lines"])
            raise AssertionError(f"timed out; last status {st['state']} {st.get('reason')}; log:\n{log}")
        time.sleep(every)


# ============================================================================ fast
def test_schema_is_generated_from_the_settings_models(server):
    from pawn.settings import PretrainConfig
    from pawn.sweep.settings import SweepSettings
    from pawn.train.adapt_config import AdaptSettings

    for command, model in (("pretrain", PretrainConfig), ("adapt", AdaptSettings), ("sweep", SweepSettings)):
        got = call(server, "lab_schema", command=command)
        assert got["schema"] == model.model_json_schema()
        assert set(got["schema"]["properties"]) == set(model.model_fields)  # every field, e.g. a new one
    assert "is not one of pretrain, adapt, sweep" in call_error(server, "lab_schema", command="train")


def test_bad_config_is_the_cli_message_and_starts_nothing(server, tmp_path, monkeypatch):
    """The message is the CLI's for the same settings in a --config file (with the file named
    ``config``); nothing is written or started."""
    from typer.testing import CliRunner

    from pawn.cli import app

    monkeypatch.delenv("PAWN_LR", raising=False)
    bad = [
        {**TOY, "total_steps": 20, "lr": "fast"},          # a bad value
        {**TOY, "total_steps": 20, "lr_rate": 0.1},        # an unknown field
        {**TOY, "total_steps": 30, "steps_per_chunk": 20},  # a cross-field rule (a multiple of the chunk)
    ]
    for i, cfg in enumerate(bad):
        out = tmp_path / f"run{i}"
        msg = call_error(server, "lab_start", command="pretrain", config=cfg, out=str(out))
        assert not out.exists(), f"{out} was created for a refused config"
        f = tmp_path / f"c{i}.json"
        f.write_text(json.dumps(cfg))
        res = CliRunner().invoke(app, ["pretrain", "--config", str(f), "--out", str(tmp_path / "cli")])
        assert res.exit_code == 2
        cli = " ".join(res.output.split()).removeprefix("error: ")
        assert msg == cli.replace(f"{f}: ", "config: "), (msg, cli)
    assert "config: lr:" in call_error(server, "lab_start", command="pretrain", config=bad[0], out=str(tmp_path / "x"))
    assert "'out' is not a config key" in call_error(server, "lab_start", command="pretrain",
                                                      config={**TOY, "total_steps": 20, "out": "elsewhere"}, out=str(tmp_path / "x"))
    assert "devices:" in call_error(server, "lab_start", command="pretrain", config={**TOY, "total_steps": 20},
                                    out=str(tmp_path / "x"), devices="gpu0")
    assert not (tmp_path / "x").exists()


def test_missing_runs_are_one_line(server, tmp_path):
    assert call_error(server, "lab_status", run=str(tmp_path / "nope")) == f"{tmp_path / 'nope'}: no such run directory"
    assert "not started by pawn lab" in call_error(server, "lab_stop", run=str(tmp_path))
    assert "unknown 'lossy'" in call_error(server, "lab_compare", runs=[str(tmp_path)], metric="lossy")
    assert "no study yet" in call_error(server, "lab_sweep_status", out=str(tmp_path))


def test_pareto_front():
    # (name, trainable params, val loss): b dominates c (fewer params, lower loss); d ties a on loss with more params
    pts = [("a", 100, 3.0), ("b", 200, 2.0), ("c", 300, 2.5), ("d", 150, 3.0), ("e", 1000, 1.5)]
    assert pareto_front(pts) == ["a", "b", "e"]
    assert pareto_front([(n, p, -v) for n, p, v in pts], "max") == ["a", "b", "e"]


def test_missing_extra_is_one_line(monkeypatch):
    from typer.testing import CliRunner

    from pawn.cli import app

    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)  # as if pawn[lab] were not installed
    res = CliRunner().invoke(app, ["lab"])
    assert res.exit_code == 2
    assert " ".join(res.output.split()) == "error: pawn lab needs the MCP SDK: pip install 'pawn[lab]'"


def test_stdio_client_lists_the_tools(tmp_path):
    """``pawn lab`` over stdio, driven by the SDK's own client: the tools are listed, a call
    works and a bad request comes back as a one-line tool error."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "JAX_PLATFORMS": "cpu"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "pawn.cli", "lab"], env=env, cwd=str(tmp_path))

    async def go():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                schema = await session.call_tool("lab_schema", {"command": "pretrain"})
                bad = await session.call_tool("lab_status", {"run": "no/such/run"})
                return tools, schema, bad

    tools, schema, bad = asyncio.run(go())
    assert {t.name for t in tools.tools} == TOOL_NAMES
    from pawn.settings import PretrainConfig

    assert schema.structured_content["schema"] == PretrainConfig.model_json_schema()
    # the SDK names the tool; the rest is PAWN's one line
    assert bad.is_error and [c.text for c in bad.content] == ["Error executing tool lab_status: no/such/run: no such run directory"]


@pytest.mark.slow
def test_http_serves_the_same_tools(tmp_path):
    """``pawn lab --http HOST:PORT --dir DIR``: streamable HTTP at /mcp, paths relative to DIR; a bad
    HOST:PORT is one line; importing the CLI does not import the SDK."""
    import socket

    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "runs").mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "pawn.cli", "lab", "--http", f"127.0.0.1:{port}", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode()
                assert time.monotonic() < deadline, "pawn lab --http did not listen"
                time.sleep(0.2)

        async def go():
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await session.list_tools(), await session.call_tool("lab_runs", {"root": "runs"})

        tools, runs = asyncio.run(go())
        assert {t.name for t in tools.tools} == TOOL_NAMES
        assert runs.structured_content == {"root": "runs", "runs": []}
    finally:
        proc.terminate()
        proc.wait(30)
    bad = subprocess.run([sys.executable, "-m", "pawn.cli", "lab", "--http", "8765"], capture_output=True, text=True)
    assert (bad.returncode, bad.stderr.strip()) == (
        2, "error: --http '8765': expected HOST:PORT with a port in 0..65535 (0 = any free port), e.g. 127.0.0.1:8765")
    # the core install does not need the SDK: the CLI and the lab's tools import without it
    code = "import sys, pawn.cli, pawn.lab.tools; sys.exit('mcp' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def _lab_over_stdio(root: Path, calls: list[tuple[str, dict]]) -> list:
    """``pawn lab --dir ROOT`` as a real process over stdio (the SDK's client): the results of
    ``calls`` (tool name, arguments), in order."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "JAX_PLATFORMS": "cpu"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "pawn.cli", "lab", "--dir", str(root)], env=env,
                                   cwd=str(root.parent))

    async def go():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return [await session.call_tool(name, args) for name, args in calls]

    return asyncio.run(go())


def _error_text(res) -> str:
    assert res.is_error, res
    return res.content[0].text


def _reap(pid: int, timeout: float = 60.0) -> int:
    """Wait for this test's child ``pid`` to end; its wait status."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        assert time.monotonic() < deadline, f"process {pid} did not end"
        time.sleep(0.05)


def test_stop_signals_only_processes_the_lab_started(tmp_path):
    """``lab_stop`` through a real ``pawn lab`` process on run folders whose ``lab.json`` names a
    process the lab never started (copied from elsewhere; forged with its exact start tick and
    boot; a real lab run's record pointed at another process group): nothing is signalled and that
    process survives. The run a lab did start (``procs.spawn``, as ``lab_start`` does) is stopped
    by this other lab process, which recognises it from ``/proc``."""
    import signal

    from pawn.lab import procs

    root = tmp_path / "runs"
    root.mkdir()
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    victim = subprocess.Popen(sleeper, start_new_session=True)  # leads its own group, as a lab run does
    genuine = None
    try:
        ticks = procs.proc_start_ticks(victim.pid)
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        assert ticks is not None
        forged = {
            "copied": {"pid": victim.pid, "pgid": victim.pid, "command": "pretrain", "exit_code": None},
            "exact": {"pid": victim.pid, "pgid": victim.pid, "proc_start": ticks, "boot_id": boot,
                      "token": "0" * 32, "command": "pretrain", "exit_code": None},
        }
        genuine = procs.spawn(root / "genuine", "pretrain", sleeper)
        forged["regrouped"] = {**genuine, "pgid": victim.pid}
        for name, info in forged.items():
            (root / name).mkdir()
            (root / name / "lab.json").write_text(json.dumps(info))
        results = _lab_over_stdio(root, [("lab_stop", {"run": name}) for name in forged] + [("lab_stop", {"run": "genuine"})])
        assert victim.poll() is None, "lab_stop killed a process the lab never started"
        for name, res in zip(forged, results):
            assert "is not one pawn lab started here" in _error_text(res) and "nothing was signalled" in _error_text(res), name
        stopped = results[-1]
        assert not stopped.is_error and stopped.structured_content["pid"] == genuine["pid"], stopped
        status = _reap(genuine["pid"])
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
        genuine = None
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()
        if genuine is not None:
            os.kill(genuine["pid"], signal.SIGKILL)
            _reap(genuine["pid"])


def test_paths_outside_the_runs_root_are_refused(tmp_path, monkeypatch):
    """Every path a tool is given must resolve inside the runs root (``pawn lab --dir``): ``..``,
    an absolute path elsewhere and a link to a folder outside are refused before anything is
    written or started, and nothing outside is read; paths inside still work."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "lab.log").write_text("a line outside the root\n")
    (root / "inside").mkdir()
    (root / "inside" / "lab.log").write_text("a line inside\n")
    (root / "link").symlink_to(outside, target_is_directory=True)
    monkeypatch.chdir(root)  # as pawn lab --dir ROOT does
    srv = build_server()  # its root: the working directory
    where = f"outside the lab's runs root {root}"
    cfg = {**TOY, "total_steps": 20}
    for out in ("../x", str(tmp_path / "x"), "link/run", "inside/../../x", "link/../x"):  # link/..: outside's parent
        # devices="gpu0" would fail later: the root is checked first, nothing is validated, written or started
        msg = call_error(srv, "lab_start", command="pretrain", config=cfg, out=out, devices="gpu0")
        assert msg.startswith(f"out {out!r}: resolves to ") and where in msg, msg
    assert not (tmp_path / "x").exists() and not (outside / "run").exists()
    for tool, args in (("lab_log", {"run": "link"}), ("lab_log", {"run": str(outside)}), ("lab_status", {"run": "../outside"}),
                       ("lab_tail", {"run": "link"}), ("lab_stop", {"run": "link"}), ("lab_runs", {"root": ".."}),
                       ("lab_compare", {"runs": ["inside", "link"]}), ("lab_audit", {"run": "link"}),
                       ("lab_sweep_status", {"out": "link"}), ("lab_sweep_status", {"out": "inside", "storage": "../s.db"})):
        assert where in call_error(srv, tool, **args), (tool, args)
    msg = call_error(srv, "lab_sweep", out="sw", config={"run_type": "pretrain", "trials": 1, "storage": "../study.db"})
    assert msg.startswith("config: storage '../study.db': resolves to ") and where in msg, msg
    assert not (root / "sw").exists() and not (tmp_path / "study.db").exists()
    assert call(srv, "lab_log", run="inside")["lines"] == ["a line inside"]
    (outside / "lab.json").write_text(json.dumps({"pid": os.getpid(), "command": "pretrain", "tags": []}))
    (root / "inside" / "lab.json").symlink_to(outside / "lab.json")  # a record linked from outside: not listed
    assert call(srv, "lab_runs", root=".")["runs"] == []
    # the real CLI: --dir is the root
    (res,) = _lab_over_stdio(root, [("lab_log", {"run": "../outside"})])
    assert where in _error_text(res)


def _free_port(host: str = "127.0.0.1") -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _lab_http(root: Path, hostport: str, env: Optional[dict] = None):
    """``pawn lab --http HOSTPORT --dir ROOT`` as a real process, listening; yields it (stderr piped)."""
    import socket

    host, port = hostport.rsplit(":", 1)
    proc = subprocess.Popen([sys.executable, "-m", "pawn.cli", "lab", "--http", hostport, "--dir", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + 120
        probe = "127.0.0.1" if host == "0.0.0.0" else host
        while True:
            try:
                socket.create_connection((probe, int(port)), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                assert time.monotonic() < deadline, "pawn lab --http did not listen"
                time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        proc.wait(30)


def _initialize(addr: str, port: int, host_header: str, origin: Optional[str] = None) -> int:
    """The HTTP status of an MCP ``initialize`` POSTed to ``http://ADDR:PORT/mcp`` with this Host (and Origin)."""
    import http.client

    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
    headers = {"Host": host_header, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if origin is not None:
        headers["Origin"] = origin
    conn = http.client.HTTPConnection(addr, port, timeout=60)
    try:
        conn.request("POST", "/mcp", body, headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def test_http_answers_only_its_host_names(tmp_path):
    """``pawn lab --http 127.0.0.2:P`` (a loopback address the SDK's own list lacks) refuses a
    forged Host (421) and Origin (403) — what a DNS-rebinding page sends — and answers its own
    names; ``--allow-host`` (here PAWN_LAB_ALLOW_HOST) adds one; served on every interface it
    warns that the lab has no authentication."""
    port = _free_port("127.0.0.2")
    with _lab_http(tmp_path, f"127.0.0.2:{port}"):
        assert _initialize("127.0.0.2", port, "attacker.example") == 421
        assert _initialize("127.0.0.2", port, f"attacker.example:{port}") == 421
        assert _initialize("127.0.0.2", port, f"127.0.0.2:{port}", origin="http://attacker.example") == 403
        assert _initialize("127.0.0.2", port, f"127.0.0.2:{port}") == 200
        assert _initialize("127.0.0.2", port, f"localhost:{port}", origin=f"http://localhost:{port}") == 200
    port = _free_port()
    with _lab_http(tmp_path, f"0.0.0.0:{port}", env={"PAWN_LAB_ALLOW_HOST": "pawn.example.org"}) as proc:
        assert _initialize("127.0.0.1", port, f"pawn.example.org:{port}", origin="https://pawn.example.org") == 200
        assert _initialize("127.0.0.1", port, f"attacker.example:{port}") == 421
        assert _initialize("127.0.0.1", port, f"127.0.0.1:{port}") == 200
    warning = proc.stderr.read().splitlines()[0]
    assert warning.startswith(f"warning: pawn lab serves http://0.0.0.0:{port}/mcp without authentication"), warning
    bad = subprocess.run([sys.executable, "-m", "pawn.cli", "lab", "--http", f"127.0.0.1:{port}", "--allow-host", "http://x:1"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --allow-host 'http://x:1': expected a host name"), bad.stderr


def test_http_port_0_serves_a_free_port_and_prints_the_address(tmp_path):
    """``pawn lab --http 127.0.0.1:0`` was refused ("expected HOST:PORT") and a real port started
    silently; now port 0 serves a port the system picks and, once listening, one stderr line gives
    the address served, which answers; a taken port is one line, exit 2."""
    import re
    import socket

    proc = subprocess.Popen([sys.executable, "-m", "pawn.cli", "lab", "--http", "127.0.0.1:0", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()  # blocks until the server listens (or the process ends: "")
        m = re.fullmatch(r"pawn lab: MCP over HTTP at http://127\.0\.0\.1:(\d+)/mcp \(runs under (.+); Ctrl-C stops\)\n", line)
        assert m and Path(m[2]) == tmp_path.resolve(), (line, proc.poll())
        port = int(m[1])
        assert port != 0 and _initialize("127.0.0.1", port, f"127.0.0.1:{port}") == 200
        with socket.socket() as sock:  # the port is really the lab's: another bind to it fails
            with pytest.raises(OSError):
                sock.bind(("127.0.0.1", port))
        taken = subprocess.run([sys.executable, "-m", "pawn.cli", "lab", "--http", f"127.0.0.1:{port}"],
                               capture_output=True, text=True, timeout=120)
        assert taken.returncode == 2 and taken.stderr.startswith(
            f"error: --http 127.0.0.1:{port}: cannot listen there (Address already in use)"), taken.stderr
    finally:
        proc.terminate()
        proc.wait(30)


# ============================================================================ slow: real runs
@pytest.fixture(scope="module")
def finished_run(server, tmp_path_factory):
    """A 60-step toy pretraining started with lab_start, tailed with a byte cursor while it
    writes (every 20 ms) until it is complete. Returns (run dir, the records the tail returned,
    the polls that returned records before the run was complete)."""
    root = tmp_path_factory.mktemp("lab")
    run = root / "toy"
    started = call(server, "lab_start", command="pretrain", out=str(run), tags=["toy", "tail"],
                   config={**TOY, "total_steps": 60, "steps_per_chunk": 10, "val_every": 20, "checkpoint_every": 20})
    assert started["pid"] > 0 and (run / "lab.json").is_file()
    lab = json.loads((run / "lab.json").read_text())
    assert lab["pid"] == started["pid"] and lab["command"] == "pretrain" and lab["tags"] == ["toy", "tail"]
    got, cursor, live_polls = [], 0, 0
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if not (run / "metrics.jsonl").exists():
            time.sleep(0.1)
            continue
        res = call(server, "lab_tail", run=str(run), since=cursor, fields=["loss", "elapsed"])
        assert res["since"] == cursor
        got.extend(res["records"])
        cursor = res["next"]
        if res["records"] and res["state"] != "complete":
            live_polls += 1
        st = call(server, "lab_status", run=str(run))
        if st["state"] == "complete" and st["health"]["process"] == "gone":
            break
        assert st["state"] in ("running", "starting", "complete"), st  # complete while the process exits
        time.sleep(0.02)
    res = call(server, "lab_tail", run=str(run), since=cursor)
    got.extend(res["records"])
    assert res["next"] == cursor or not res["records"]
    return run, got, live_polls


@pytest.mark.slow
def test_tail_cursor_never_repeats_nor_drops(finished_run):
    from pawn.runs import open_run

    run, got, live_polls = finished_run
    everything, end = open_run(run).records(0)
    assert [r["offset"] for r in got] == [r.offset for r in everything]  # each record once, in order
    assert end == (run / "metrics.jsonl").stat().st_size
    assert live_polls >= 2, "the tail never caught the run while it was writing"
    train = [r for r in got if r["type"] == "train"]
    assert [r["step"] for r in train] == [10, 20, 30, 40, 50, 60]
    assert all(set(r) <= {"type", "step", "offset", "loss", "elapsed", "variants"} for r in got)


@pytest.mark.slow
def test_status_reaches_complete_and_audits(server, finished_run):
    run, _, _ = finished_run
    st = call(server, "lab_status", run=str(run))
    assert (st["state"], st["reason"], st["step"], st["total_steps"], st["progress"]) == ("complete", "completed", 60, 60, 1.0)
    assert st["health"]["ok"] and st["health"]["nonfinite_steps"] == [] and not st["health"]["stalled"]
    assert [c["step"] for c in st["checkpoints"]] == [20, 40, 60] and all(c["verified"] for c in st["checkpoints"])
    assert st["last_val"]["step"] == 60 and st["last_train"]["step"] == 60
    audit = call(server, "lab_audit", run=str(run))
    assert audit["ok"], audit
    assert [c["ok"] for c in audit["checks"]] == [True, True, True, None]
    rows = call(server, "lab_runs", root=str(run.parent), tag="tail")["runs"]
    assert [(r["run"], r["state"], r["step"]) for r in rows] == [(str(run), "complete", 60)]
    assert call(server, "lab_runs", root=str(run.parent), tag="other")["runs"] == []
    assert "finished 60 steps" in "\n".join(call(server, "lab_log", run=str(run), lines=100)["lines"])
    from pawn.runs import open_run

    val = {v.step: v.values for v in open_run(run).val}
    at40 = call(server, "lab_compare", runs=[str(run)], metric="top1", at=45)["rows"][0]
    assert (at40["step"], at40["value"], at40["trainable_params"]) == (40, val[40]["top1"], 267392)
    kept = call(server, "lab_compare", runs=[str(run)])["rows"][0]
    best = json.loads((run / "checkpoints" / "best" / "training_state.json").read_text())["step"]
    assert (kept["step"], kept["value"], kept["of"]) == (best, val[best]["loss"], "best checkpoint")


@pytest.mark.slow
def test_occupied_out_is_refused_and_starts_nothing(server, finished_run):
    run, _, _ = finished_run
    before = (run / "lab.json").read_bytes()
    msg = call_error(server, "lab_start", command="pretrain", out=str(run),
                     config={**TOY, "total_steps": 20, "val_every": 10, "checkpoint_every": 10})
    assert msg.startswith(f"--out {run} holds another run (checkpoints up to step 60)"), msg
    assert (run / "lab.json").read_bytes() == before  # no new process recorded


@pytest.mark.slow
def test_stop_checkpoints_and_resume_finishes(server, tmp_path, finished_run):
    run = tmp_path / "stopme"
    cfg = {**TOY, "total_steps": 1000, "steps_per_chunk": 20, "val_every": 500, "checkpoint_every": 100}
    first = call(server, "lab_start", command="pretrain", config=cfg, out=str(run), tags=["stop"])
    wait_for(server, run, lambda s: s["state"] == "running" and (s["step"] or 0) >= 20, every=0.1)
    stopped = call(server, "lab_stop", run=str(run), wait_s=300)
    assert stopped["ended"] and stopped["pid"] == first["pid"]
    st = call(server, "lab_status", run=str(run))
    assert (st["state"], st["reason"], st["health"]["process"]) == ("stopped", "sigterm", "gone"), st
    assert 20 <= st["step"] < 1000
    ck = st["checkpoints"][-1]
    assert ck["step"] == st["step"] and ck["verified"]  # the SIGTERM checkpoint, at the last step done
    assert "still running" not in json.dumps(st)
    assert "already ended" in call_error(server, "lab_stop", run=str(run))

    resumed = call(server, "lab_resume", run=str(run))
    assert resumed["from_step"] == ck["step"] and resumed["pid"] != first["pid"]
    assert "still running" in call_error(server, "lab_resume", run=str(run))
    done = wait_for(server, run, lambda s: s["state"] != "running" and s["health"]["process"] == "gone")
    assert (done["state"], done["reason"], done["step"]) == ("complete", "completed", 1000), done
    lab = json.loads((run / "lab.json").read_text())
    assert lab["pid"] == resumed["pid"] and lab["exit_code"] == 0 and lab["tags"] == ["stop"]
    assert [h["pid"] for h in lab["history"]] == [first["pid"]]
    assert "--resume" in lab["argv"]
    assert call(server, "lab_audit", run=str(run))["ok"]
    assert "already complete" in call_error(server, "lab_resume", run=str(run))
    # the same model trained 1000 steps beats 60 steps at the same parameter count: it alone is on the front
    cmp = call(server, "lab_compare", runs=[str(finished_run[0]), str(run)], metric="loss")
    assert [r["trainable_params"] for r in cmp["rows"]] == [267392, 267392]
    assert cmp["rows"][1]["value"] < cmp["rows"][0]["value"] and cmp["pareto"] == [str(run)]


@pytest.mark.slow
def test_sweep_status_counts_and_best(server, tmp_path):
    """lab_sweep starts ``pawn sweep`` (2 toy pretraining trials); lab_sweep_status reads the
    study through Optuna: the best trial's value is its run's best val loss as pawn.runs reads it."""
    from pawn.runs import open_run

    base = tmp_path / "base.json"
    base.write_text(json.dumps({**TOY, "total_steps": 20, "val_every": 10, "checkpoint_every": 20, "warmup_steps": 0}))
    out = tmp_path / "sweep"
    call(server, "lab_sweep", out=str(out), tags=["sw"],
         config={"run_type": "pretrain", "trials": 2, "pruner": "none", "seed": 0, "base_config": str(base)})
    deadline = time.monotonic() + 900
    while True:
        st = call(server, "lab_sweep_status", out=str(out))
        assert st["state"] in ("starting", "running", "ended"), st
        if st["process"] == "gone":
            break
        assert time.monotonic() < deadline, st
        time.sleep(2)
    assert (st["state"], st["study"], st["direction"], st["trials"]) == ("ended", "pretrain", "minimize", 2)
    assert st["counts"]["COMPLETE"] == 2 and st["counts"]["FAIL"] == 0
    values = [t["value"] for t in st["top"]]
    assert values == sorted(values) and st["best"] == st["top"][0]
    assert st["best"]["value"] == pytest.approx(open_run(st["best"]["run_dir"]).best_val_loss)
    rows = call(server, "lab_runs", root=str(out))["runs"]
    assert [(r["kind"], r["state"]) for r in rows] == [("sweep", "ended"), ("pretrain", "complete"), ("pretrain", "complete")]
    assert call(server, "lab_runs", root=str(out), tag="sw")["runs"][0]["run"] == str(out)


@pytest.mark.slow
def test_two_adapter_runs_compare_on_the_pareto_front(server, tmp_path, tiny_backbone, lichess_pgns):
    """Two ``pawn adapt`` runs started through the lab (LoRA r=2, bottleneck d=8) on the same
    backbone and games: one row each, read from the runs; the smaller one is on the front, the
    larger one only when its val loss is lower."""
    from pawn.runs import open_run

    games = tmp_path / lichess_pgns[0].name  # the runs root holds every path a config names
    shutil.copy2(lichess_pgns[0], games)
    common = {"backbone": str(tiny_backbone), "data": str(games), "epochs": 2, "steps_per_epoch": 4,
              "batch_size": 8, "seq_len": 64, "val_games": 50, "max_games": 400}
    runs = {}
    for name, cfg in (("lora", {"strategy": "lora", "lora_rank": 2}), ("bottleneck", {"strategy": "bottleneck", "bottleneck_dim": 8})):
        runs[name] = tmp_path / name
        call(server, "lab_start", command="adapt", out=str(runs[name]), config={**common, **cfg}, tags=["adapters"])
    for run in runs.values():
        st = wait_for(server, run, lambda s: s["state"] not in ("running", "starting") and s["health"]["process"] == "gone")
        assert (st["state"], st["step"], st["total_steps"]) == ("complete", 8, 8), st
    cmp = call(server, "lab_compare", runs=[str(runs["lora"]), str(runs["bottleneck"])], metric="loss")
    rows = {r["strategy"]: r for r in cmp["rows"]}
    for name, run in runs.items():
        r = open_run(run)
        assert rows[name]["trainable_params"] == r.trainable_params > 0
        assert rows[name]["value"] == r.best_val_loss and rows[name]["of"] == "best checkpoint"
    small, large = sorted(rows.values(), key=lambda x: x["trainable_params"])
    assert small["trainable_params"] < large["trainable_params"]
    assert cmp["pareto"] == [small["run"]] + ([large["run"]] if large["value"] < small["value"] else [])
    assert {r["run"] for r in call(server, "lab_runs", root=str(tmp_path), kind="adapt", tag="adapters")["runs"]} == {
        str(p) for p in runs.values()}


def test_stop_names_the_run_folder_its_process_was_started_for(tmp_path):
    """A verbatim copy of a live run's ``lab.json`` (token, start tick and all) in another folder:
    ``lab_stop`` on the copy, through a real ``pawn lab`` process, refuses in one line and the run
    lives on; ``lab_stop`` on the run's own folder stops it."""
    import signal

    from pawn.lab import procs

    root = tmp_path / "runs"
    root.mkdir()
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    genuine = procs.spawn(root / "genuine", "pretrain", sleeper)
    try:
        (root / "copy").mkdir()
        shutil.copy2(root / "genuine" / "lab.json", root / "copy" / "lab.json")
        listed = _lab_over_stdio(root, [("lab_stop", {"run": "copy"}), ("lab_runs", {"root": "."}),
                                        ("lab_stop", {"run": "genuine"})])
        msg = _error_text(listed[0])
        assert "is not one pawn lab started here" in msg and f"is for the run folder {(root / 'genuine').resolve()}" in msg \
            and "nothing was signalled" in msg, msg
        assert genuine["run_dir"] == str((root / "genuine").resolve())
        rows = {Path(r["run"]).name: r["state"] for r in listed[1].structured_content["runs"]}
        # no records yet: alive is "starting", gone is "failed" — the copy's record names no live process of its own
        assert rows == {"genuine": "starting", "copy": "failed"}, rows
        stopped = listed[2]
        assert not stopped.is_error and stopped.structured_content["pid"] == genuine["pid"], stopped
        status = _reap(genuine["pid"])
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
        genuine = None
    finally:
        if genuine is not None:
            os.kill(genuine["pid"], signal.SIGKILL)
            _reap(genuine["pid"])


def test_path_settings_in_a_config_are_held_to_the_runs_root(tmp_path):
    """Every path-valued setting of a ``lab_start`` / ``lab_sweep`` config (a pretraining corpus
    folder, an adapter's cache, a sweep's compilation cache, storage and JSON output) that
    resolves outside ``pawn lab --dir`` — absolute, through ``..``, or through a link — is refused
    in one line through a real ``pawn lab`` process, and nothing is started or written inside or
    outside; a database URL as storage is no path and passes this check."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside, target_is_directory=True)
    toy = {**TOY, "total_steps": 20}
    adapt = {"strategy": "lora", "backbone": "bb", "data": "games.pgn"}
    sweep = {"run_type": "pretrain", "trials": 1}
    cases = [
        ("lab_start", {"command": "pretrain", "out": "p1", "config": {**toy, "corpus_dir": str(outside / "corpus")}}, "corpus_dir"),
        ("lab_start", {"command": "pretrain", "out": "p2", "config": {**toy, "corpus_dir": "../outside/corpus"}}, "corpus_dir"),
        ("lab_start", {"command": "pretrain", "out": "p3", "config": {**toy, "corpus_dir": "link/corpus"}}, "corpus_dir"),
        ("lab_start", {"command": "pretrain", "out": "p4", "config": {**toy, "init_from": str(outside)}}, "init_from"),
        ("lab_start", {"command": "adapt", "out": "a1", "config": {**adapt, "cache_dir": str(outside / "cache")}}, "cache_dir"),
        ("lab_start", {"command": "adapt", "out": "a2", "config": {**adapt, "data": str(outside / "games.pgn")}}, "data"),
        ("lab_sweep", {"out": "s1", "config": {**sweep, "compilation_cache": str(outside / "jax")}}, "compilation_cache"),
        ("lab_sweep", {"out": "s2", "config": {**sweep, "storage": f"sqlite:///{outside / 'study.db'}"}}, "storage"),
        ("lab_sweep", {"out": "s3", "config": {**sweep, "json_out": "link/trials.json"}}, "json_out"),
        ("lab_sweep", {"out": "s4", "config": {**sweep, "base_config": str(outside / "base.toml")}}, "base_config"),
    ]
    results = _lab_over_stdio(root, [(tool, args) for tool, args, _ in cases])
    where = f"outside the lab's runs root {root}"
    for (tool, args, key), res in zip(cases, results):
        msg = _error_text(res)
        assert f"config: {key} " in msg and where in msg and "nothing was done" in msg, (key, msg)
    assert sorted(p.name for p in root.iterdir()) == ["link"] and list(outside.iterdir()) == []
    from pawn.lab import tools

    assert tools._config_path("storage", "postgresql://u:pw@db.example/pawn") is None
    assert tools._config_path("compilation_cache", "none") is None
    assert set(tools.path_fields("sweep")) >= {"data", "storage", "compilation_cache", "json_out", "space", "base_config"}
    assert set(tools.path_fields("pretrain")) >= {"corpus_dir", "init_from"}
    assert set(tools.path_fields("adapt")) >= {"backbone", "data", "cache_dir", "init_from"}
