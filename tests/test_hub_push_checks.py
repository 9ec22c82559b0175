"""``--push-to-hub`` checks its token and the Hub's reachability once, up front, in one line (issue
26): without a token it said nothing about it, and without network it retried DNS for ~60 s.
Loopback fake Hub and a closed loopback port; no network."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fake_hub import use_fake_hub
from pawn.cli import app
from pawn.hub import push
from v1_checkpoints import v1_model_config, write_v1_checkpoint

REPO = "me/push-checks"


@pytest.fixture
def env(monkeypatch, tmp_path):
    h = use_fake_hub(monkeypatch, tmp_path, token=None)
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))  # no stored login
    monkeypatch.setattr(push, "_REACHED", set(), raising=False)
    yield h
    h.stop()


def _dead_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error: ")]


def test_no_token_is_said_before_any_work(env, tmp_path):
    src = write_v1_checkpoint(tmp_path / "v1", v1_model_config(16, 1, 2, 32))
    r = CliRunner().invoke(app, ["convert", str(src), "--push-to-hub", REPO])
    assert r.exit_code == 1, r.output
    assert _errors(r.output) == [f"error: --push-to-hub {REPO}: no Hugging Face token is configured; log in with "
                                 "`hf auth login` or set HF_TOKEN to a token with write access"], r.output
    assert not (tmp_path / "converted").exists() and env.requests == []
    r = CliRunner().invoke(app, ["pretrain", "--variant", "toy", "--total-steps", "4", "--out", str(tmp_path / "run"),
                                 "--push-to-hub", REPO])
    assert r.exit_code == 1 and "no Hugging Face token is configured" in r.output and not (tmp_path / "run").exists()


def test_an_unreachable_hub_is_one_line_without_retries(env, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_fake")
    dead = _dead_endpoint()
    monkeypatch.setenv("HF_ENDPOINT", dead)
    r = CliRunner().invoke(app, ["pretrain", "--variant", "toy", "--total-steps", "4", "--out", str(tmp_path / "run"),
                                 "--push-to-hub", REPO])
    assert r.exit_code == 1, r.output
    (err,) = _errors(r.output)
    assert err.startswith(f"error: --push-to-hub {REPO}: the Hub at {dead} cannot be reached (") and "`hf upload`" in err, err
    assert "retry" not in r.output and not (tmp_path / "run").exists()


def test_a_reachable_hub_with_a_token_passes_with_one_request(env, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_fake")
    push.check_can_push(REPO)
    push.check_can_push(REPO)  # once per endpoint and process
    assert env.requests == [("GET", f"/api/models/{REPO}")]
