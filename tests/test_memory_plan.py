"""The memory plan (issue 26): the plan is printed before the first compile, remat modes are
ranked by an analytic estimate so the likeliest is compiled first, compiling stops at the first
that fits, and ``--resume auto`` on a finished run answers before any compile."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pawn.config import SUPERNETS, TOY
from pawn.model import REMAT_MODES
from pawn.settings import PretrainConfig
from pawn.train import memory as memmod

sys.path.insert(0, str(Path(__file__).parent))
from test_memory import _program  # noqa: E402

B, T, K = 64, 64, 2


def test_analytic_estimate_counts_layers_state_and_logits():
    # TOY: d 64, L 2, H 1?, F 256; exact element counts of the docstring's formulas
    d, F, H, L = TOY.d_model, TOY.d_ff, TOY.n_heads, TOY.n_layers
    one = 9 * d + 3 * F + H
    assert memmod.layer_activation_elements(TOY, "none") == L * one
    assert memmod.layer_activation_elements(TOY, "attention") == L * (5 * d + H) + one
    assert memmod.layer_activation_elements(TOY, "full") == L * d + one
    from pawn.config import param_count

    got = memmod.analytic_step_bytes([TOY], TOY, batch_size=B, seq_len=T, n_devices=1, accumulation_steps=2,
                                     compute_bytes=4, remat="full")
    assert got == 20 * param_count(TOY) + (B // 2) * T * ((L * d + one) * 4 + 2 * TOY.vocab_size * 4)
    # the published supernet: the ranking is none > attention > full, and full is within 1.3x of
    # XLA:CPU's 22.1 GiB (fp32, 256 x 512) measured for it
    sup, variants = SUPERNETS["large"]
    est = {m: memmod.analytic_step_bytes(list(variants.values()), sup, batch_size=256, seq_len=512, n_devices=1,
                                         accumulation_steps=1, compute_bytes=4, remat=m) for m in REMAT_MODES}
    assert est["none"] > est["attention"] > est["full"]
    assert 22.1 <= est["full"] / memmod.GIB <= 1.3 * 22.1


def test_plan_order_starts_at_the_first_mode_whose_estimate_fits():
    a = {"none": 300, "attention": 200, "full": 100}
    assert memmod.plan_remat_order(a, None) == ["none", "attention", "full"]
    assert memmod.plan_remat_order(a, int(400 / 0.9)) == ["none", "attention", "full"]
    assert memmod.plan_remat_order(a, int(250 / 0.9)) == ["attention", "full"]
    assert memmod.plan_remat_order(a, int(50 / 0.9)) == ["full"]  # nothing fits: one compile, then the refusal


def _run_check(monkeypatch, usable_bytes: float, candidates=REMAT_MODES):
    events: list[str] = []
    real = memmod.compile_chunk

    def recording(program, *a, **kw):  # the real compile, recorded
        events.append(f"COMPILE {program.remat}")
        return real(program, *a, **kw)

    monkeypatch.setattr(memmod, "compile_chunk", recording)
    monkeypatch.setattr(memmod, "device_memory", lambda: (int(usable_bytes / (1 - memmod.HEADROOM)) + 1, "test device"))
    prog = _program(1, "none")
    try:
        out = memmod.check_step_memory(prog, TOY, k=K, batch_size=B, seq_len=T, remat_candidates=list(candidates),
                                       log=events.append)
    except memmod.InsufficientMemoryError as e:
        return events, e
    return events, out


def test_plan_is_printed_before_the_first_compile_and_compiling_stops_at_the_first_fit(monkeypatch):
    # XLA:CPU for TOY, B 64, T 64: none 186 MB, attention 117 MB, full 109 MB; analytic: 114 / 103 / 94 MB
    events, (mode, est, info) = _run_check(monkeypatch, 150e6)
    assert events[0].startswith("memory check: compiling the train step from shapes")
    assert events[1].startswith("memory plan: analytic estimate per device (remat none ≈0.1 GiB")
    assert events[2] == "COMPILE none"
    compiles = [e for e in events if e.startswith("COMPILE")]
    assert compiles == ["COMPILE none", "COMPILE attention"]  # full is never compiled
    assert mode == "attention" and list(info["tried"]) == ["none", "attention"]
    assert any(e.startswith("memory check: remat none needs 0.2 GiB per device") and e.endswith("does not fit") for e in events)


@pytest.mark.slow  # compiles the toy step (~20 s each on a shared CPU)
def test_nothing_fits_costs_one_compile(monkeypatch):
    events, err = _run_check(monkeypatch, 100e6)  # every analytic estimate but full is over: only full is compiled
    assert isinstance(err, memmod.InsufficientMemoryError)
    assert [e for e in events if e.startswith("COMPILE")] == ["COMPILE full"]
    assert "remat full" in str(err)
    assert "compiling full first" in events[1]


@pytest.mark.slow  # compiles the toy step (~20 s each on a shared CPU)
def test_a_calibrated_estimate_moves_on_to_the_mode_that_fits(monkeypatch):
    # analytic attention (103 MB) fits 110 MB, none (114) does not: attention is compiled first (117: no),
    # then full (109: fits); none, calibrated by attention's ratio (114 x 1.13 = 130 MB), is not compiled
    events, (mode, _, info) = _run_check(monkeypatch, 110e6)
    assert [e for e in events if e.startswith("COMPILE")] == ["COMPILE attention", "COMPILE full"]
    assert mode == "full"


@pytest.mark.slow  # compiles the toy step (~20 s each on a shared CPU)
def test_resume_auto_on_a_finished_run_says_nothing_to_do_before_compiling(tmp_path, monkeypatch):
    from pawn.train.pretrain import run_pretrain

    conf = dict(variant="toy", batch_size=4, seq_len=32, val_games=0, steps_per_chunk=2, total_steps=2, checkpoint_every=2,
                val_every=2, out=tmp_path / "run")
    done = run_pretrain(PretrainConfig.load(**conf), progress=False, install_signal_handlers=False)
    assert done.reason == "completed"
    compiled: list[str] = []
    real = memmod.compile_chunk
    monkeypatch.setattr(memmod, "compile_chunk", lambda *a, **kw: compiled.append("x") or real(*a, **kw))
    msgs: list[str] = []
    again = run_pretrain(PretrainConfig.load(resume="auto", out=tmp_path / "run"), log=msgs.append, progress=False,
                         install_signal_handlers=False)
    assert compiled == []
    assert (again.reason, again.step, again.checkpoint) == ("resume_no_op", 2, tmp_path / "run" / "checkpoints" / "step_00000002")
    assert msgs[-1] == f"{tmp_path / 'run' / 'checkpoints' / 'step_00000002'}: at step 2 of 2; no step left to run"
    assert not any(m.startswith("memory check") for m in msgs)


def test_suggested_batch_sizes_are_sizes_users_pick():
    assert [memmod.round_batch(b) for b in (177, 210, 146, 64, 7, 2, 1)] == [160, 192, 128, 64, 7, 2, 1]
    assert memmod.round_batch(177, 3) == 168  # a multiple of 3 devices × micro-batches and of 8
    assert memmod.round_batch(2, 4) == 0  # nothing at most 2 splits four ways


def test_schedule_health_says_where_the_schedule_ends(tmp_path):
    import json

    from pawn.schedules import build_schedule
    from pawn.train.lifecycle import write_schedule_health

    for name, want in (("cosine", 0.1), ("wsd", 0.0), ("constant", 1.0), ("one_cycle", 1e-4), ("infinite", 0.0)):
        h = write_schedule_health(tmp_path / "h.json", build_schedule(name, 1e-3, 1000, 50), 1000, "completed")
        assert json.loads((tmp_path / "h.json").read_text())["decays_to_ratio"] == want == h["decays_to_ratio"], name
