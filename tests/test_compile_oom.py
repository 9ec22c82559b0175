"""A TPU refuses at compile time a program that does not fit its HBM (XLA raises a
``RESOURCE_EXHAUSTED`` status from ``Lowered.compile()``), where CPUs and GPUs compile it and
report its size. Every command that compiles the train step treats that refusal as a row that
does not fit, never a traceback: the memory plan of ``pawn pretrain`` / ``pawn bench --only step``
moves on to the next remat mode or refuses in one line, and ``pawn bench --only memory`` prints a
row "does not fit: XLA needs 95.0 GiB of 15.7".

XLA:CPU never refuses, so these tests raise XLA's own exception type (``jax.errors.JaxRuntimeError``)
carrying the messages XLA:TPU prints, at the one call that compiles (``TrainProgram.compile``); every
other part (the real compile of the other modes, the plan, the CLI and its table) runs as it is.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import pytest
from typer.testing import CliRunner

from pawn.config import TOY
from pawn.train import memory as memmod
from pawn.train.loop import TrainProgram

sys.path.insert(0, str(Path(__file__).parent))
from test_memory import _program  # noqa: E402

# XLA:TPU's two phrasings, as it prints them (the second from a newer XLA)
TPU_OLD = ("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. "
           "Used 21.95G of 15.48G hbm. Exceeded hbm capacity by 6.47G.\n\nTotal hbm usage >= 22.47G:\n"
           "    reserved        530.00M\n    program          21.95G\n    arguments            0B\n")
TPU_NEW = ("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. "
           "HLO temporaries (95.03G) exceeds available HBM (15.75G).")
G = 2 ** 30


def test_both_xla_phrasings_give_the_sizes_in_binary_units():
    assert memmod.parse_compile_oom(TPU_OLD) == (int(21.95 * G), int(15.48 * G))
    assert memmod.parse_compile_oom(TPU_NEW) == (int(95.03 * G), int(15.75 * G))
    assert memmod.parse_compile_oom("RESOURCE_EXHAUSTED: out of memory") == (None, None)
    est = memmod.MemoryEstimate.from_refusal(TPU_NEW)
    assert est.verdict() == "does not fit: XLA needs 95.0 GiB of 15.8"
    assert est.refused.startswith("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error") and "\n" not in est.refused
    assert memmod.MemoryEstimate.from_refusal("RESOURCE_EXHAUSTED: out of memory").verdict() == \
        "does not fit: XLA needs more than the device has"
    assert memmod.MemoryEstimate(1, 2, 0, 3, 0).verdict() == ""  # a compiled program is no refusal


def _refuse(monkeypatch, modes: set[str], message: str = TPU_NEW):
    """XLA refuses ``modes`` at compile time (its own exception type and message); the others compile."""
    real = TrainProgram.compile

    def compile_(self, *a, **kw):
        if self.remat in modes:
            raise jax.errors.JaxRuntimeError(message)
        return real(self, *a, **kw)

    monkeypatch.setattr(TrainProgram, "compile", compile_)


def test_compile_chunk_returns_a_refusal_and_re_raises_any_other_error(monkeypatch):
    _refuse(monkeypatch, {"none"})
    compiled, est = memmod.compile_chunk(_program(1, "none"), TOY, 2, 8, 32)
    assert compiled is None and est.refused and est.peak_bytes == int(95.03 * G)
    _refuse(monkeypatch, {"none"}, "INVALID_ARGUMENT: some other compile error")
    with pytest.raises(jax.errors.JaxRuntimeError, match="INVALID_ARGUMENT"):
        memmod.compile_chunk(_program(1, "none"), TOY, 2, 8, 32)


def test_the_plan_moves_past_a_refused_mode_to_one_that_compiles(monkeypatch):
    _refuse(monkeypatch, {"none"})
    monkeypatch.setattr(memmod, "device_memory", lambda: (int(15.75 * G), "test device"))
    lines: list[str] = []
    mode, est, info = memmod.check_step_memory(_program(1, "none"), TOY, k=2, batch_size=8, seq_len=32,
                                               remat_candidates=["none", "attention"], log=lines.append)
    assert mode == "attention" and not est.refused and est.peak_bytes > 0
    assert any(ln.startswith("memory check: remat none does not fit: XLA needs 95.0 GiB of 15.8") for ln in lines), lines


def test_pretrain_refuses_in_one_line_when_xla_refuses_every_mode(tmp_path, monkeypatch):
    from pawn.cli import app

    _refuse(monkeypatch, {"none", "attention", "full"})
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["pretrain", "--variant", "toy", "--total-steps", "2", "--batch-size", "8", "--seq-len", "32",
                                 "--steps-per-chunk", "2", "--val-games", "0", "--remat", "full", "--out", str(out)])
    assert r.exit_code == 1, r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in r.output, r.output
    assert "does not fit: XLA refused to compile it (remat full" in errors[0] and "95.0 GiB per device" in errors[0], errors
    assert not out.exists()


def test_bench_memory_prints_a_refused_mode_as_a_row(tmp_path, monkeypatch):
    import json

    from pawn.cli import app

    _refuse(monkeypatch, {"none", "attention"})
    out = tmp_path / "bench.json"
    r = CliRunner().invoke(app, ["bench", "--only", "memory", "--variant", "toy", "--batch-size", "8", "--seq-len", "32",
                                 "--steps-per-chunk", "2", "--remat", "auto", "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert "does not fit: XLA needs" in r.output and "Traceback" not in r.output, r.output
    rows = {row["remat"]: row for row in json.loads(out.read_text())["memory"]["rows"]}
    assert rows["none"]["fits_this_device"] is False and rows["none"]["verdict"] == "does not fit: XLA needs 95.0 GiB of 15.8"
    assert rows["full"].get("refused") is None and rows["full"]["peak_bytes"] > 0
