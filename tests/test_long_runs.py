"""Issue 11's one-line errors and partial results: --dtype spellings, --resume on an exported
variant, a mistyped local path that also looks like a Hub id, and `pawn bench` printing each
section as it finishes and keeping what finished on Ctrl-C."""

from __future__ import annotations

import json

import jax
import pytest
from typer.testing import CliRunner

from pawn.checkpoint import save_checkpoint
from pawn.cli import app
from pawn.config import TOY
from pawn.dtypes import canonical_dtype
from pawn.model import PAWNModel
from pawn.settings import PretrainConfig


def error_lines(res) -> list[str]:
    assert "Traceback" not in res.output, res.output
    return [ln for ln in res.output.splitlines() if ln.startswith("error: ")]


@pytest.mark.parametrize("given, canonical", [("bf16", "bfloat16"), ("BFloat16", "bfloat16"), ("fp32", "float32"),
                                              ("f32", "float32"), ("float32", "float32"), (None, None)])
def test_common_dtype_spellings_map_to_the_canonical_names(given, canonical):
    assert canonical_dtype(given) == canonical


def test_unknown_and_unsupported_dtypes_list_the_valid_names():
    with pytest.raises(ValueError, match=r"unknown dtype 'bf17'; choose one of float32 \(fp32, f32\), bfloat16 \(bf16\)"):
        canonical_dtype("bf17")
    with pytest.raises(ValueError, match="float16 is not supported"):
        canonical_dtype("fp16")
    assert canonical_dtype("auto", allow_auto=True) == "auto"
    with pytest.raises(ValueError):
        canonical_dtype("auto")


def test_pretrain_accepts_bf16_and_stores_the_canonical_name():
    c = PretrainConfig.load(variant="toy", total_steps=2, dtype="bf16")
    assert c.dtype == "bfloat16" and c.model_dump(mode="json")["dtype"] == "bfloat16"


@pytest.fixture(scope="module")
def toy_checkpoint(tmp_path_factory):
    m = PAWNModel(TOY, jax.random.PRNGKey(3))
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "toy", m.params(), TOY)


def test_eval_with_bf16_runs_and_a_bad_dtype_is_one_line(toy_checkpoint, tmp_path):
    out = tmp_path / "e.json"
    r = CliRunner().invoke(app, ["eval", str(toy_checkpoint), "--games", "2", "--max-ply", "8", "--dtype", "bf16", "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["settings"]["dtype"] == "bfloat16"
    r = CliRunner().invoke(app, ["eval", str(toy_checkpoint), "--games", "2", "--dtype", "half"])
    errs = error_lines(r)
    assert r.exit_code == 2 and len(errs) == 1 and "--dtype" in errs[0] and "bfloat16 (bf16)" in errs[0], r.output


def test_resume_on_an_exported_variant_is_one_line(tmp_path):
    m = PAWNModel(TOY, jax.random.PRNGKey(0))
    run_config = {**PretrainConfig.load(supernet="tiny", total_steps=2).model_dump(mode="json"), "supernet": None, "variant": "small",
                  "sliced_from": {"checkpoint": "runs/tiny/checkpoints/step_00000002", "supernet": "tiny"}}
    ck = save_checkpoint(tmp_path / "variants" / "small", m.params(), TOY, run_config=run_config)
    r = CliRunner().invoke(app, ["pretrain", "--resume", str(ck)])
    errs = error_lines(r)
    assert r.exit_code == 1 and len(errs) == 1, r.output
    assert "exported from a finished supernet run" in errs[0] and "runs/tiny/checkpoints/step_00000002" in errs[0]


def test_a_mistyped_local_path_names_both_readings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("PAWN_CONVERTED_DIR", str(tmp_path / "converted"))
    (tmp_path / "runs" / "tiny").mkdir(parents=True)
    r = CliRunner().invoke(app, ["eval", "runs/tyni"])
    errs = error_lines(r)
    assert r.exit_code == 1 and len(errs) == 1, r.output
    msg = errs[0]
    # runs/ is a local folder, so runs/tyni is read as a mistyped local path, not a Hub id
    assert msg.startswith("error: CHECKPOINT runs/tyni: no such checkpoint directory"), msg
    assert "did you mean runs/tiny?" in msg
    r = CliRunner().invoke(app, ["eval", "nobody/nothing"])
    msg = error_lines(r)[0]
    assert "no such local directory, and as a Hugging Face Hub id" in msg and "did you mean" not in msg


def test_bench_prints_each_section_as_it_finishes_and_keeps_them_on_ctrl_c(tmp_path, monkeypatch):
    printed_before_interrupt = []

    def interrupted(s):
        printed_before_interrupt.append(True)
        raise KeyboardInterrupt

    import dataclasses

    from pawn.bench.section import SECTIONS, discover

    discover()
    monkeypatch.setitem(SECTIONS, "concurrency", dataclasses.replace(SECTIONS["concurrency"], run=lambda s, ctx: interrupted(s)))
    out = tmp_path / "bench.json"
    r = CliRunner().invoke(app, ["bench", "--quick", "--only", "engine,concurrency", "--json", str(out)])
    assert r.exit_code == 130, r.output
    assert printed_before_interrupt
    # the estimate up front, the engine table, then one error line saying what was kept
    assert r.output.index("roughly") < r.output.index("workload") < r.output.index("error: interrupted during concurrency")
    errs = error_lines(r)
    assert errs == [f"error: interrupted during concurrency; kept engine (tables above, {out})"], r.output
    rep = json.loads(out.read_text())
    assert rep["completed_sections"] == ["engine"] and rep["interrupted"] == "concurrency"
    assert rep["engine"]["threads"][0]["random_games"]["games"] == 200 and "concurrency" not in rep


def test_bench_estimate_scales_with_concurrency_and_model_size():
    from pawn.bench import BenchSettings, estimate_seconds

    base = estimate_seconds(BenchSettings(), ["concurrency", "step"])
    four = estimate_seconds(BenchSettings(concurrency=4), ["concurrency", "step"])
    # rows of 1, 2, 3, 4 processes on 2 cores cost 1 + 1 + 1.5 + 2 one-process rows; 1 and 2: 1 + 1
    assert four["concurrency"] == pytest.approx(base["concurrency"] * 5.5 / 2)
    assert four["step"] == base["step"]
    large = estimate_seconds(BenchSettings(supernet="large", batch_size=256, seq_len=512), ["step"])
    assert large["step"] > 100 * base["step"]


def test_ctrl_c_in_eval_probe_generate_exits_130_saying_what_is_on_disk(tmp_path, monkeypatch):
    import pawn.engine

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(pawn.engine, "random_games", interrupted)
    out = tmp_path / "g.parquet"
    r = CliRunner().invoke(app, ["generate", "--random", "--games", "4", "--out", str(out)])
    assert r.exit_code == 130, r.output
    errs = error_lines(r)
    assert len(errs) == 1 and "interrupted (Ctrl-C)" in errs[0] and "written whole or not at all" in errs[0], r.output
    assert not out.exists()


def test_run_summary_counts_by_hand_for_the_toy_model():
    from pawn.train.summary import run_summary, summary_lines

    # toy: N = 267,392 (see test_bench); FLOPs/token at T = 32: 6N + 12·L·T·d = 1,604,352 + 12·2·32·64 = 1,653,504
    s = run_summary(TOY, [("toy", TOY)], label="variant toy", batch_size=4, seq_len=32, start_step=2, end_step=8,
                    total_steps=10, steps_per_chunk=2, devices=1, processes=1, backend="cpu", dtype="float32")
    assert s["variants"]["toy"] == {"config": "d64_L2_F256", "params": 267_392, "flops_per_token": 1_653_504}
    assert s["tokens_per_step"] == 128 and s["steps_this_run"] == 6 and s["tokens_this_run"] == 768
    assert s["flops_this_run"] == 768 * 1_653_504
    lines = summary_lines(s)
    assert lines[0] == "model: variant toy (267 k stored params): toy d64_L2_F256 267 k params"
    assert "steps 2 → 8 of 10 = 768 tokens; 1.65 M FLOPs/token = 1.27 G FLOPs in all" in lines[1]
    assert lines[2] == "devices: 1 × cpu (1 process), compute dtype float32, 2 steps per compiled chunk"
    one = run_summary(TOY, [("toy", TOY)], label="variant toy", batch_size=4, seq_len=32, start_step=0, end_step=1,
                      total_steps=1, steps_per_chunk=1, devices=1, processes=1, backend="cpu", dtype="float32")
    assert summary_lines(one)[2].endswith(", 1 step per compiled chunk")  # was "1 steps per compiled chunk"


def test_console_script_leaves_an_interrupted_run_with_os_exit_130(monkeypatch):
    """``pawn`` (``pawn.cli:run``) ends an exit-130 run with ``os._exit`` (native compiler threads
    left by a Ctrl-C during compilation crashed interpreter teardown with SIGSEGV); other exits
    stay ordinary ``SystemExit``s."""
    import os

    import pawn.cli as cli

    class Exited(Exception):
        pass

    def fake_exit(code):
        raise Exited(code)

    monkeypatch.setattr(os, "_exit", fake_exit)
    monkeypatch.setattr(cli, "app", lambda: (_ for _ in ()).throw(SystemExit(130)))
    with pytest.raises(Exited) as e:
        cli.run()
    assert e.value.args == (130,)
    monkeypatch.setattr(cli, "app", lambda: (_ for _ in ()).throw(SystemExit(2)))
    with pytest.raises(SystemExit) as e2:
        cli.run()
    assert e2.value.code == 2


def test_bench_dtype_takes_the_same_spellings_as_the_other_commands():
    r = CliRunner().invoke(app, ["bench", "--only", "memory", "--dtype", "fp16"])
    assert r.exit_code == 2
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "float16 is not supported" in errors[0] and "bfloat16 (bf16)" in errors[0], r.output


def _sigterm_bench_at(args: list[str], line: str, timeout_s: float) -> tuple[str, str, str]:
    """Run ``pawn bench --quick ARGS`` as a real process, send it SIGTERM once its stderr shows
    ``line``; return (stderr up to then, stdout, the rest of stderr) after asserting exit code 130."""
    import os
    import signal
    import subprocess
    import sys
    import time

    p = subprocess.Popen([sys.executable, "-m", "pawn.cli", "bench", "--quick", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    seen = ""
    t0 = time.monotonic()
    while line not in seen and time.monotonic() - t0 < timeout_s:
        got = p.stderr.readline()
        if not got:
            break
        seen += got
    assert line in seen, seen
    p.send_signal(signal.SIGTERM)
    stdout, rest = p.communicate(timeout=300)
    assert p.returncode == 130, seen + rest
    return seen, stdout, rest


def test_bench_keeps_the_finished_sections_on_sigterm(tmp_path):
    # A SIGTERM (closed terminal, Slurm limit) during a later section wrote no --json at all (issue 26).
    out = tmp_path / "bench.json"
    seen, stdout, rest = _sigterm_bench_at(["--only", "engine,step", "--json", str(out)], "pawn bench: step (2/2", 300)
    assert f"error: interrupted during step; kept engine (tables above, {out})" in rest, rest
    rep = json.loads(out.read_text())
    assert rep["completed_sections"] == ["engine"] and rep["interrupted"] == "step" and "step" not in rep
    assert rep["engine"]["threads"][0]["random_games"]["games"] == 200


@pytest.mark.slow
def test_bench_concurrency_says_which_count_runs_and_keeps_its_finished_rows_on_sigterm(tmp_path):
    # The concurrency section sat for minutes with no sub-progress, and a stop inside it kept no
    # row (issue 26): now each process count is announced, and the finished counts are kept.
    out = tmp_path / "bench.json"
    seen, stdout, rest = _sigterm_bench_at(["--only", "concurrency", "--concurrency", "2", "--json", str(out)],
                                           "pawn bench: concurrency: 2 processes (2/2)", 600)
    assert "pawn bench: concurrency: 1 process (1/2)" in seen, seen
    assert f"error: interrupted during concurrency; kept the finished rows of concurrency (tables above, {out})" in rest, rest
    rep = json.loads(out.read_text())
    assert rep["interrupted"] == "concurrency" and rep["completed_sections"] == []
    c = rep["concurrency"]
    assert c["partial"] is True and [r["processes"] for r in c["rows"]] == [1] and c["rows"][0]["aggregate_tokens_per_s"] > 0
    assert "concurrency: independent training processes" in stdout  # the partial table was printed
