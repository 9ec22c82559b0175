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

import pytest
from _report_page import browser_page, page_data

REPO = Path(__file__).resolve().parents[1]
V1_RUNS = REPO / "tests" / "data" / "runs_v1"
pytest.importorskip("plotly", reason="the report extra: pip install 'pawn[report]'")


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.status, r.read().decode("utf-8")


def _start(root: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "pawn.cli", "dashboard", str(root), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


@contextlib.contextmanager
def _serving(root: Path, *args: str):
    """``pawn dashboard ROOT ARGS`` as a real process for the ``with`` block; at its end the
    process gets SIGINT (Ctrl-C) and must exit 0; killed whatever happens."""
    proc = _start(root, *args)
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
