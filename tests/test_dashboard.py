"""``pawn dashboard``, as a real subprocess: it answers HTTP on localhost with the report of every run
under ROOT, rebuilds it when a metrics.jsonl is newer, says so in one line when the port is taken,
and exits 0 on SIGINT (Ctrl-C)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Optional

import pytest
from _report_page import browser_page, page_data

REPO = Path(__file__).resolve().parents[1]
V1_RUNS = REPO / "tests" / "data" / "runs_v1"
pytest.importorskip("plotly", reason="the report extra: pip install 'pawn[report]'")


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.status, r.read().decode("utf-8")


def _start(root: Path, *args: str, env: Optional[dict] = None) -> subprocess.Popen:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "pawn.cli", "dashboard", str(root), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


@contextlib.contextmanager
def _serving(root: Path, *args: str, env: Optional[dict] = None):
    """``pawn dashboard ROOT ARGS`` as a real process for the ``with`` block; at its end the
    process gets SIGINT (Ctrl-C) and must exit 0; killed whatever happens."""
    proc = _start(root, *args, env=env)
    try:
        yield proc
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
        assert proc.returncode == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_dashboard_serves_rebuilds_and_stops_on_sigint(tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(V1_RUNS, root)
    with _serving(root, "--port", "0") as proc:  # ends with Ctrl-C and exit 0
        line = proc.stdout.readline()
        m = re.match(r"pawn dashboard: http://localhost:(\d+)/ ", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        base = f"http://127.0.0.1:{m.group(1)}"
        code, html = _get(base + "/")
        d = page_data(html)
        assert code == 200 and sorted(r["label"] for r in d["runs"]) == ["adapt-lora", "tiny"]
        code, stamp1 = _get(base + "/stamp")
        assert code == 200 and d["live"]["stamp"] == stamp1 and d["live"]["stamp_url"] == "/stamp"
        # one run's page
        _, one = _get(base + "/run/adapt-lora")
        assert [r["label"] for r in page_data(one)["runs"]] == ["adapt-lora"]
        # a newer metrics.jsonl: a new stamp and a rebuilt page with the new record
        metrics = root / "adapt-lora" / "metrics.jsonl"
        last_val = [json.loads(x) for x in metrics.read_text().splitlines() if '"val"' in x][-1]
        last_val["step"] += 1
        last_val["val_loss"] = 0.5
        with open(metrics, "a") as f:
            f.write(json.dumps(last_val) + "\n")
        _, stamp2 = _get(base + "/stamp")
        assert stamp2 != stamp1
        d2 = page_data(_get(base + "/")[1])
        lora = next(r for r in d2["runs"] if r["label"] == "adapt-lora")
        assert d2["live"]["stamp"] == stamp2 and lora["series"]["val/loss"]["y"][-1] == 0.5
        assert lora["summary"]["best_val_loss"] == 0.5
        # the port is taken: one line, exit 1
        second = _start(root, "--port", m.group(1))
        out, err = second.communicate(timeout=120)
        assert second.returncode == 1 and err.strip() == (
            f"error: port {m.group(1)} on 127.0.0.1 is taken (another dashboard or server?); choose another with --port")
        with pytest.raises(urllib.error.HTTPError) as e:
            _get(base + "/run/nope")
        assert e.value.code == 404


def test_dashboard_of_a_missing_folder_is_one_line(tmp_path):
    from typer.testing import CliRunner

    from pawn.cli import app

    r = CliRunner().invoke(app, ["dashboard", str(tmp_path / "nope"), "--port", "0"])
    assert r.exit_code == 1 and r.output.strip() == f"error: {tmp_path / 'nope'}: not a directory"


def test_sweep_without_optuna_dashboard_names_the_extra(tmp_path, monkeypatch):
    import importlib.util

    from pawn.report import ReportError
    from pawn.report.server import start_optuna_dashboard

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "optuna_dashboard" else real(n, *a))
    with pytest.raises(ReportError, match=r"pip install 'pawn\[dashboard\]'"):
        start_optuna_dashboard(tmp_path, "127.0.0.1", 0)


def test_sweep_is_handed_to_optuna_dashboard(tmp_path):
    pytest.importorskip("optuna_dashboard", reason="the dashboard extra: pip install 'pawn[dashboard]'")
    import socket

    import optuna

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    study = optuna.create_study(study_name="lora", storage=f"sqlite:///{sweep / 'study.db'}", direction="minimize")
    study.add_trial(optuna.trial.create_trial(params={"lr": 1e-3}, distributions={
        "lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}, value=3.25))
    root = tmp_path / "runs"
    shutil.copytree(V1_RUNS, root)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with _serving(root, "--port", "0", "--sweep", str(sweep), "--sweep-port", str(free)) as proc:
        line = proc.stdout.readline()
        assert line.startswith(f"optuna-dashboard: sqlite:///{(sweep / 'study.db').resolve()} on http://localhost:{free}/"), (
            line, proc.stderr.read() if proc.poll() is not None else "")
        deadline = time.time() + 60
        while True:
            try:
                code, body = _get(f"http://127.0.0.1:{free}/api/studies")
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
        assert code == 200 and [s["study_name"] for s in json.loads(body)["study_summaries"]] == ["lora"]


def test_the_served_page_in_a_headless_browser_has_no_console_error(tmp_path):
    """What a user sees at http://localhost:PORT/ in Chromium: the runs table and a run's charts,
    with no console error (a browser's own /favicon.ico request got a 404, an error in the console,
    before the page declared an icon)."""
    root = tmp_path / "runs"
    shutil.copytree(V1_RUNS, root)
    with _serving(root, "--port", "0") as proc:
        m = re.match(r"pawn dashboard: http://localhost:(\d+)/ ", proc.stdout.readline())
        assert m
        with browser_page() as (page, errors):
            page.goto(f"http://127.0.0.1:{m.group(1)}/")
            page.wait_for_selector("#page-runs tbody tr")
            assert sorted(page.locator("#page-runs tbody tr td:nth-child(2)").all_inner_texts()) == ["adapt-lora", "tiny"]
            page.locator("#page-runs a", has_text=re.compile(r"^tiny$")).click()
            page.wait_for_selector("#run-plots .js-plotly-plot")
            page.wait_for_timeout(500)
        assert errors == []


def _request(base: str, path: str, headers: Optional[dict] = None) -> tuple[int, str]:
    """(status, body) of GET ``base + path`` with these headers (``Host`` included), errors too."""
    import http.client
    import urllib.parse

    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8")
    finally:
        conn.close()


def _port(proc: subprocess.Popen) -> int:
    line = proc.stdout.readline()
    m = re.match(r"pawn dashboard: http://localhost:(\d+)/ ", line)
    assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
    return int(m.group(1))


def test_dashboard_answers_only_its_host_names(tmp_path):
    """What a DNS-rebinding page sends — its own name as Host, its own origin — gets 421 / 403,
    not the report; the bound names (127.0.0.1, localhost) are answered, and --allow-host (here
    PAWN_DASHBOARD_ALLOW_HOST) adds a name."""
    root = tmp_path / "runs"
    shutil.copytree(V1_RUNS, root)
    with _serving(root, "--port", "0") as proc:
        port = _port(proc)
        base = f"http://127.0.0.1:{port}"
        for path in ("/", "/stamp", "/run/tiny"):
            code, body = _request(base, path, {"Host": f"attacker.example:{port}"})
            assert code == 421 and "pawn-data" not in body and "attacker.example" in body, (path, code)
        code, body = _request(base, "/", {"Host": f"127.0.0.1:{port}", "Origin": "http://attacker.example"})
        assert code == 403 and "pawn-data" not in body
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            code, body = _request(base, "/", {"Host": host, "Origin": f"http://{host}"})
            assert code == 200 and len(page_data(body)["runs"]) == 2, host
    with _serving(root, "--port", "0", env={"PAWN_DASHBOARD_ALLOW_HOST": "pawn.example.org"}) as proc:
        port = _port(proc)
        base = f"http://127.0.0.1:{port}"
        assert _request(base, "/stamp", {"Host": f"pawn.example.org:{port}"})[0] == 200
        assert _request(base, "/stamp", {"Host": f"attacker.example:{port}"})[0] == 421


def test_links_out_of_the_root_are_not_followed(tmp_path):
    """A link inside ROOT to a file outside it (an eval report, a PGN, a run's eval*.json) is not
    followed, as a link to a folder outside is not: neither on the page nor at /run/LINK."""
    root, outside = tmp_path / "runs", tmp_path / "outside"
    shutil.copytree(V1_RUNS, root)
    outside.mkdir()
    private = {"checkpoint": "private-model", "settings": {}, "models": [{"name": "private", "random_games": {"published/top1": 0.5}}]}
    (outside / "eval-private.json").write_text(json.dumps(private))
    (outside / "private.pgn").write_text('[Event "private-outside"]\n[Result "*"]\n\n1. e4 e5 *\n')
    (root / "linked-eval.json").symlink_to(outside / "eval-private.json")
    (root / "tiny" / "eval-linked.json").symlink_to(outside / "eval-private.json")
    (root / "linked.pgn").symlink_to(outside / "private.pgn")
    (root / "linked-folder").symlink_to(outside, target_is_directory=True)
    (root / "games.pgn").write_text('[Event "kept-inside"]\n[Result "*"]\n\n1. d4 d5 *\n')
    with _serving(root, "--port", "0") as proc:
        base = f"http://127.0.0.1:{_port(proc)}"
        code, html = _get(base + "/")
        assert code == 200
        assert "private-model" not in html and "private-outside" not in html
        d = page_data(html)
        assert [g["headers"]["Event"] for g in d["games"]] == ["kept-inside"]
        assert d["evals"] == []
        tiny = next(r for r in d["runs"] if r["label"] == "tiny")
        assert [Path(e["path"]).name for e in tiny["evals"] if e["kind"] != "unreadable"] == ["eval.json"]
        assert [(Path(e["path"]).name, e["report"]["cannot read"]) for e in tiny["evals"] if e["kind"] == "unreadable"] == [
            ("eval-linked.json", f"{root / 'tiny' / 'eval-linked.json'}: a symbolic link out of {(root / 'tiny').resolve()}; not read")]
        assert "outside" not in json.dumps(tiny["evals"])  # where the link leads is not shown
        for path in ("/run/linked.pgn", "/run/linked-eval.json", "/run/linked-folder", "/run/tiny/eval-linked.json"):
            code, body = _request(base, path, {"Host": base.removeprefix("http://")})
            assert code == 404 and "private-" not in body, path


@contextlib.contextmanager
def _server_object(root: Path, lines: list):
    """The dashboard's real server object (:func:`pawn.report.server.make_server`) serving on a
    loopback port in a thread; yields (server, base URL)."""
    import threading

    from pawn.report.server import make_server

    server = make_server(root, "127.0.0.1", 0, log=lines.append)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_nul_byte_in_the_url_is_404(tmp_path, capfd):
    """A NUL byte in the path (``%00``) is a 404, not a dropped connection and a traceback."""
    root = tmp_path / "runs"
    shutil.copytree(V1_RUNS, root)
    with _server_object(root, []) as (server, base):
        for path in ("/run/a%00b", "/run/%00", "/run/tiny%00/x"):
            code, body = _request(base, path, {"Host": base.removeprefix("http://")})
            assert code == 404, path
        assert _request(base, "/run/tiny", {"Host": base.removeprefix("http://")})[0] == 200
    assert "Traceback" not in capfd.readouterr().err


def test_one_page_per_folder_and_a_bounded_cache(tmp_path):
    """The real server object on a loopback port: 40 spellings of one folder build one page (each
    had built and kept its own ≈ 5 MiB page); at most MAX_PAGES pages are kept, least recently
    served dropped first."""
    root = tmp_path / "runs"
    shutil.copytree(V1_RUNS, root)
    lines: list[str] = []
    with _server_object(root, lines) as (server, base):
        base = f"http://127.0.0.1:{server.server_address[1]}"
        spellings = [f"/run/{'./' * k}adapt-lora" for k in range(20)] + [f"/run/adapt-lora{'/.' * k}/" for k in range(10)]
        spellings += [f"/run/tiny/../{'/' * k}adapt-lora" for k in range(1, 6)] + [f"/run/%61dapt-lor%61{'/' * k}" for k in range(5)]
        assert len(set(spellings)) == 40
        for path in spellings:
            code, html = _request(base, path, {"Host": base.removeprefix("http://")})
            assert code == 200 and [r["label"] for r in page_data(html)["runs"]] == ["adapt-lora"], path
        built = [x for x in lines if "built" in x]
        assert len(built) == 1 and built[0].startswith("pawn dashboard: built /run/adapt-lora "), lines
        # while it builds, the log says so: the request, then each run read
        assert lines[:2] == ["pawn dashboard: building /run/adapt-lora for its first request",
                             f"pawn dashboard: reading run 1/1: {root / 'adapt-lora'} (0 s so far)"], lines
        from pawn.report.server import MAX_PAGES

        assert len(server.report_cache) == 1
        for i in range(MAX_PAGES + 1):
            shutil.copytree(V1_RUNS / "adapt-lora", root / "many" / f"r{i}")
        for i in range(MAX_PAGES + 1):
            assert _request(base, f"/run/many/r{i}", {"Host": base.removeprefix("http://")})[0] == 200
        assert len(server.report_cache) == MAX_PAGES
        before = len(lines)
        assert _request(base, "/run/adapt-lora", {"Host": base.removeprefix("http://")})[0] == 200
        built_again = [x for x in lines[before:] if "built" in x]
        assert len(built_again) == 1  # the least recently served page was dropped: built again


def _odd_eval_files(run: Path) -> dict[str, str]:
    """Entries named ``eval*.json`` in ``run`` that are no report to read (a copied or downloaded
    run): a dangling link, a link loop, a FIFO, a link to /dev/zero. Returns name → the words the
    page's one line about it must hold."""
    (run / "eval-dangling.json").symlink_to(run / "gone.json")
    (run / "eval-loop.json").symlink_to(run / "eval-loop.json")
    os.mkfifo(run / "eval-fifo.json")
    (run / "eval-zero.json").symlink_to("/dev/zero")
    return {"eval-dangling.json": "a symbolic link to a file that does not exist; not read",
            "eval-loop.json": "a symbolic link loop; not read", "eval-fifo.json": "a FIFO (named pipe), not a regular file; not read",
            "eval-zero.json": f"a symbolic link out of {run.resolve()}; not read"}


def _check_odd_evals(d: dict, run: Path, expected: dict[str, str]) -> None:
    tiny = next(r for r in d["runs"] if r["label"] == "tiny")
    good = [e for e in tiny["evals"] if e["kind"] != "unreadable"]
    bad = {Path(e["path"]).name: e["report"]["cannot read"] for e in tiny["evals"] if e["kind"] == "unreadable"}
    assert [Path(e["path"]).name for e in good] == ["eval.json"] and good[0]["report"]["models"]
    assert sorted(bad) == sorted(expected)
    for name, words in expected.items():
        assert bad[name].startswith(f"{run / name}: ") and words in bad[name] and "\n" not in bad[name], (name, bad[name])


def test_odd_eval_files_in_a_run_are_one_line_each_not_the_page(tmp_path):
    """A dangling link, a link loop, a FIFO and a link to /dev/zero named eval*.json in a run: the
    report (``pawn report``) and the dashboard's / and /run/<run> still come, at once, each odd
    file one line on the run's eval cards; the run's real eval.json is shown as before."""
    root = tmp_path / "runs"
    shutil.copytree(V1_RUNS, root)
    expected = _odd_eval_files(root / "tiny")
    out = tmp_path / "report.html"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    r = subprocess.run([sys.executable, "-m", "pawn.cli", "report", str(root), "-o", str(out)], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    _check_odd_evals(page_data(out.read_text()), root / "tiny", expected)
    with _serving(root, "--port", "0") as proc:
        base = f"http://127.0.0.1:{_port(proc)}"
        for path in ("/", "/run/tiny"):
            code, html = _request(base, path, {"Host": base.removeprefix("http://")})
            assert code == 200, (path, html[-2000:])
            _check_odd_evals(page_data(html), root / "tiny", expected)


def _http(port: int, method: str, path: str, headers: dict) -> tuple[int, str]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, headers=headers)
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        conn.close()


def _wait_http(port: int) -> None:
    deadline = time.time() + 60
    while True:
        try:
            _http(port, "GET", "/api/meta", {"Host": f"127.0.0.1:{port}"})
            return
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.3)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_trial_study(sweep: Path) -> None:
    import optuna

    sweep.mkdir()
    study = optuna.create_study(study_name="lora", storage=f"sqlite:///{sweep / 'study.db'}", direction="minimize")
    study.add_trial(optuna.trial.create_trial(params={"lr": 1e-3}, distributions={
        "lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}, value=3.25))


def test_the_served_study_obeys_the_host_rule_and_is_read_only(tmp_path):
    """optuna-dashboard beside the page (``--sweep``): what a DNS-rebinding page sends — its own
    name as Host, its own Origin — gets 421 / 403, not the study; and from this machine's own
    names the study is read (200) but not deleted, renamed or noted (405): ``study.db`` keeps the
    study and its trial. ``--sweep-writable`` lets the same DELETE through."""
    pytest.importorskip("optuna_dashboard", reason="the dashboard extra: pip install 'pawn[dashboard]'")
    import optuna

    sweep = tmp_path / "sweep"
    _one_trial_study(sweep)
    root = tmp_path / "runs"
    shutil.copytree(V1_RUNS, root)
    free = _free_port()
    with _serving(root, "--port", "0", "--sweep", str(sweep), "--sweep-port", str(free)) as proc:
        line = proc.stdout.readline()
        assert line.rstrip().endswith(f"on http://localhost:{free}/ (read-only)"), line
        _wait_http(free)
        own = {"Host": f"127.0.0.1:{free}"}
        for method in ("GET", "DELETE"):
            code, body = _http(free, method, "/api/studies", {"Host": f"attacker.example:{free}"})
            assert code == 421 and "lora" not in body and "attacker.example" in body, (method, code, body)
            code, body = _http(free, method, "/api/studies/1", {**own, "Origin": "http://attacker.example"})
            assert code == 403 and "lora" not in body, (method, code, body)
        code, body = _http(free, "GET", "/api/studies", {**own, "Origin": f"http://localhost:{free}"})
        assert code == 200 and [s["study_name"] for s in json.loads(body)["study_summaries"]] == ["lora"]
        for method, path in (("DELETE", "/api/studies/1"), ("POST", "/api/studies/1/rename"),
                             ("PUT", "/api/studies/1/note"), ("POST", "/api/studies")):
            code, body = _http(free, method, path, {**own, "Content-Type": "application/json"})
            assert code == 405 and "read-only" in body and "--sweep-writable" in body, (method, path, code, body)
    study = optuna.load_study(study_name="lora", storage=f"sqlite:///{sweep / 'study.db'}")
    assert [t.value for t in study.trials] == [3.25]
    free = _free_port()
    with _serving(root, "--port", "0", "--sweep", str(sweep), "--sweep-port", str(free), "--sweep-writable") as proc:
        assert "(read-only)" not in proc.stdout.readline()
        _wait_http(free)
        assert _http(free, "DELETE", "/api/studies/1", {"Host": f"attacker.example:{free}"})[0] == 421
        assert _http(free, "DELETE", "/api/studies/1", {"Host": f"localhost:{free}"})[0] == 204
    assert optuna.get_all_study_names(f"sqlite:///{sweep / 'study.db'}") == []
