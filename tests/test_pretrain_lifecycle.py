"""The pretraining trainer under real use (issue 9): chunk timing apart from validation and
checkpoint time, the best-val checkpoint, compound early stopping, train accuracy, resume past
damaged checkpoints, one-line errors on a full disk, step counters past 2^31 and checkpoint names
past 8 digits, the jax.distributed timeout setting, and the outcome-prefix layout end to end."""

from __future__ import annotations

import errno
import json
import shutil
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

import pawn.metrics_core as accuracy_mod
import pawn.train.pretrain as pretrain_mod
from pawn.checkpoint import MANIFEST, load_checkpoint, write_manifest
from pawn.cli import app
from pawn.settings import PretrainConfig
from pawn.train.lifecycle import (
    EarlyStopping,
    complete_checkpoints,
    find_resume_checkpoint,
    rotate_checkpoints,
    step_dir_name,
)
from pawn.train.metrics import read_metrics
from pawn.metrics import METRICS
from pawn.train.pretrain import VAL_METRICS, PretrainTask, TrainingError, run_pretrain
from pawn.train.spine import resolve_resume

SMALL = dict(variant="toy", batch_size=4, seq_len=32, val_games=0, steps_per_chunk=2, lr=1e-3, warmup_steps=1)
RUN = dict(progress=False, install_signal_handlers=False)


def cfg(out: Path, **over) -> PretrainConfig:
    base = dict(SMALL, total_steps=8, val_every=4, checkpoint_every=4, out=out)
    base.update(over)
    return PretrainConfig.load(**base)


def records(run_dir: Path, kind: str) -> list[dict]:
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if r["type"] == kind]


class _Report:
    def __init__(self, d):
        self._d = d

    def to_dict(self):
        return self._d


def scripted_validation(monkeypatch, script, sleep_s: float = 0.0):
    """Replace the evaluator: call i returns (loss, late legal, completion, avg plies) = script[i]."""
    calls = iter(script)

    def fake(*args, **kwargs):
        loss, late, comp, plies = next(calls)
        time.sleep(sleep_s)
        d = {METRICS[k].eval_key: 0.5 for k in VAL_METRICS}
        d.update({"published/loss": loss, "published/late_legal_rate": late,
                  "published/completion_rate": comp, "published/avg_plies_completed": plies})
        return _Report(d)

    monkeypatch.setattr(accuracy_mod, "evaluate_games", fake)


# ------------------------------------------------------------------------------ timing


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_chunk_time_excludes_validation_and_checkpoint_time_reported_on_their_own(tmp_path, monkeypatch):
    scripted_validation(monkeypatch, [(5.0, 0.5, 0.5, 10.0)] * 4, sleep_s=1.2)
    real_save = pretrain_mod.save_checkpoint

    def slow_save(*a, **k):
        time.sleep(0.8)
        return real_save(*a, **k)

    monkeypatch.setattr(pretrain_mod, "save_checkpoint", slow_save)
    res = run_pretrain(cfg(tmp_path / "run", val_games=4, val_every=2, checkpoint_every=4, keep_checkpoints=0), **RUN)
    train = records(res.run_dir, "train")
    assert [r["step"] for r in train] == [2, 4, 6, 8]
    for r in train:
        assert r["val_wall_s"] >= 1.2, r
        assert abs(r["tokens_per_s"] - 2 * 4 * 32 / r["chunk_wall_s"]) < 1e-6 * r["tokens_per_s"]
        if not r["includes_compile"]:
            # the previous chunk's 1.2 s validation (and 0.8 s saves) are not in this chunk's time
            assert r["chunk_wall_s"] < 1.0, r
    # step 2: the first validation is a new best (saved to checkpoints/best); step 4: interval checkpoint
    assert [r["checkpoint_wall_s"] >= 0.8 for r in train] == [True, True, False, False]
    assert all(v["val_wall_s"] >= 1.2 for v in records(res.run_dir, "val"))


# ------------------------------------------------------------------------------ best checkpoint and patience


def test_early_stopping_compound_rule_each_metric_tracks_its_own_best():
    es = EarlyStopping(patience=2)
    assert es.update(2, {"loss": 5.0, "late_legal_move_rate": 0.5, "game_completion_rate": 0.5, "avg_plies_completed": 10}) == (True, True)
    assert es.update(4, {"loss": 5.0, "late_legal_move_rate": 0.5, "game_completion_rate": 0.5, "avg_plies_completed": 10}) == (False, False)
    assert es.counter == 1 and not es.exhausted
    # each metric alone counts, in its own direction, against its own best
    assert es.update(6, {"loss": 6.0, "late_legal_move_rate": 0.4, "game_completion_rate": 0.4, "avg_plies_completed": 11}) == (True, False)
    assert es.counter == 0 and es.best["avg_plies_completed"] == 11 and es.best["late_legal_move_rate"] == 0.5
    assert es.update(8, {"loss": 6.0, "late_legal_move_rate": 0.45, "game_completion_rate": 0.6, "avg_plies_completed": 3}) == (True, False)
    assert es.update(10, {"loss": 4.9, "late_legal_move_rate": None, "game_completion_rate": float("nan"), "avg_plies_completed": 3}) == (True, True)
    assert es.best_loss_step == 10 and es.best["loss"] == 4.9
    for step in (12, 14):
        assert es.update(step, {"loss": 4.9, "late_legal_move_rate": 0.5, "game_completion_rate": 0.6, "avg_plies_completed": 11})[0] is False
    assert es.counter == 2 and es.exhausted
    again = EarlyStopping.from_json(json.loads(json.dumps(es.to_json())), patience=2)
    assert (again.best, again.counter, again.best_loss_step, again.exhausted) == (es.best, 2, 10, True)
    assert not EarlyStopping(None, counter=99).exhausted


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_best_checkpoint_survives_rotation_and_patience_stops_the_run(tmp_path, monkeypatch):
    scripted_validation(monkeypatch, [
        (5.0, 0.5, 0.5, 10.0),  # step 2: first evaluation, best
        (4.0, 0.5, 0.5, 10.0),  # step 4: lower loss → best checkpoint
        (4.5, 0.6, 0.5, 10.0),  # step 6: only the late legal rate improves → counter reset
        (4.0, 0.6, 0.5, 10.0),  # step 8: equal loss is not a strict decrease → 1
        (4.2, 0.6, 0.5, 10.0),  # step 10: → 2 = patience: stop
    ])
    res = run_pretrain(cfg(tmp_path / "run", total_steps=16, val_games=4, val_every=2, checkpoint_every=4,
                           keep_checkpoints=0, patience=2), **RUN)
    assert (res.reason, res.step) == ("patience", 10)
    assert res.best_checkpoint == res.run_dir / "checkpoints" / "best" and res.best_step == 4
    vals = records(res.run_dir, "val")
    assert [v["val/patience_counter"] for v in vals] == [0, 0, 0, 1, 2]
    assert [v["val/improved"] for v in vals] == [True, True, True, False, False]
    best, step4 = load_checkpoint(res.best_checkpoint), load_checkpoint(res.run_dir / "checkpoints" / "step_00000004")
    assert best.training_state["step"] == 4
    for name in best.params:
        np.testing.assert_array_equal(best.params[name], step4.params[name], err_msg=name)
    final = load_checkpoint(res.checkpoint)
    assert final.path.name == "step_00000010"
    assert final.training_state["early_stopping"] == {
        "patience": 2, "patience_counter": 2, "best_loss_step": 4,
        "best": {"loss": 4.0, "late_legal_move_rate": 0.6, "game_completion_rate": 0.5, "avg_plies_completed": 10.0}}
    assert json.loads((res.run_dir / "schedule_health.json").read_text())["reason_for_stop"] == "patience"

    msgs: list[str] = []
    again = run_pretrain(PretrainConfig.load(resume="auto", out=res.run_dir), log=msgs.append, **RUN)
    assert again.reason == "resume_no_op" and any("early stopping already ended" in m for m in msgs)

    # More patience continues with the restored bests and counter: step 12 beats no best → 3 = patience.
    scripted_validation(monkeypatch, [(4.1, 0.55, 0.5, 10.0)])
    more = run_pretrain(PretrainConfig.load(resume="auto", out=res.run_dir, patience=3), **RUN)
    assert (more.reason, more.step, more.best_step) == ("patience", 12, 4)
    assert load_checkpoint(more.checkpoint).training_state["early_stopping"]["patience_counter"] == 3


def test_rotation_never_deletes_the_best_checkpoint_and_sorts_steps_numerically(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (99_999_999, 5, 100_000_000, 123_456_789):
        d = root / step_dir_name(step)
        d.mkdir(parents=True)
        (d / MANIFEST).write_text("{}")
    (root / "best").mkdir()
    (root / "best" / MANIFEST).write_text("{}")
    assert step_dir_name(123_456_789) == "step_123456789" and step_dir_name(7) == "step_00000007"
    assert [s for s, _ in complete_checkpoints(root)] == [5, 99_999_999, 100_000_000, 123_456_789]
    assert find_resume_checkpoint("auto", tmp_path).name == "step_123456789"
    rotate_checkpoints(root, 2)
    assert sorted(p.name for p in root.iterdir()) == ["best", "step_100000000", "step_123456789"]


def test_patience_needs_validation():
    with pytest.raises(ValueError, match="patience needs validation"):
        PretrainConfig.load(**{**SMALL, "total_steps": 4, "val_every": 2, "checkpoint_every": 2, "patience": 2})
    with pytest.raises(ValueError, match="patience must be > 0"):
        PretrainConfig.load(**{**SMALL, "total_steps": 4, "val_every": 2, "checkpoint_every": 2, "val_games": 4, "patience": 0})


# ------------------------------------------------------------------------------ train accuracy


def test_train_accuracy_is_top1_on_supervised_positions_of_the_logged_step(tmp_path):
    from pawn.data.stream import EngineSource, make_batch
    from pawn.model import PAWNModel

    res = run_pretrain(cfg(tmp_path / "run", total_steps=5, steps_per_chunk=1, val_every=5, checkpoint_every=4, keep_checkpoints=0), **RUN)
    rec = {r["step"]: r for r in records(res.run_dir, "train")}[5]  # step 5 = update on batch 4 from the step-4 weights
    ck = load_checkpoint(res.run_dir / "checkpoints" / "step_00000004")
    c = ck.run_config
    batch = make_batch(EngineSource(c["seed"], c["seq_len"]), 4, c["batch_size"], c["seq_len"], False)
    logits = np.asarray(PAWNModel(ck.config, params=ck.params)(jnp.asarray(batch["input_ids"]), jnp.asarray(batch["attn_mask"])))
    mask = batch["loss_mask"]
    expected = float(((logits.argmax(-1) == batch["targets"]) & mask).sum() / mask.sum())
    assert abs(rec["top1"] - expected) <= 1.0 / mask.sum() + 1e-6
    assert rec["top1"] == rec["top1_mean"]  # one step per chunk
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
    nll = -np.take_along_axis(logp, batch["targets"][..., None], -1)[..., 0]
    assert abs(rec["loss"] - float(nll[mask].mean())) < 1e-4


# ------------------------------------------------------------------------------ damaged checkpoints on resume


@pytest.fixture(scope="module")
def paused_run(tmp_path_factory) -> Path:
    """A toy run paused at step 4 with checkpoints at steps 2 and 4."""
    out = tmp_path_factory.mktemp("paused") / "run"
    res = run_pretrain(cfg(out, checkpoint_every=2, val_every=2, keep_checkpoints=0, pause_after_steps=4), **RUN)
    assert res.reason == "paused"
    return out


def _flip_byte(p: Path):
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0xFF
    p.write_bytes(bytes(b))


def _remanifested(fn):
    def damage(d: Path):
        fn(d)
        write_manifest(d)

    return damage


DAMAGE = {
    "flipped_model_byte": lambda d: _flip_byte(d / "model.safetensors"),
    "truncated_optimizer": lambda d: (d / "optimizer.safetensors").write_bytes((d / "optimizer.safetensors").read_bytes()[:100]),
    "deleted_manifest": lambda d: (d / MANIFEST).unlink(),
    "corrupt_config_json": lambda d: (d / "config.json").write_text("{not json"),
    "missing_training_state": lambda d: (d / "training_state.json").unlink(),
    "resealed_garbage_optimizer": _remanifested(lambda d: (d / "optimizer.safetensors").write_bytes(b"\x00garbage" * 10)),
    "resealed_garbage_model": _remanifested(lambda d: (d / "model.safetensors").write_bytes(b"\xff" * 64)),
    "resealed_bad_config_json": _remanifested(lambda d: (d / "config.json").write_text("[1, 2")),
    "resealed_config_without_model_config": _remanifested(lambda d: (d / "config.json").write_text('{"format_version": 1, "model_config": 3}')),
    "resealed_state_without_step": _remanifested(lambda d: (d / "training_state.json").write_text('{"elapsed": 1.0}')),
    "resealed_run_config_garbage": _remanifested(lambda d: (d / "config.json").write_text(json.dumps(
        {**json.loads((d / "config.json").read_text()), "run_config": {"prepend_outcome": False, "batch_size": "many"}}))),
}


def _snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_resume_auto_falls_back_past_a_damaged_checkpoint_and_deletes_nothing(tmp_path, paused_run, kind):
    run = tmp_path / "run"
    shutil.copytree(paused_run, run)
    bad = run / "checkpoints" / "step_00000004"
    DAMAGE[kind](bad)
    before = _snapshot(bad)
    msgs: list[str] = []
    c, ck = resolve_resume(PretrainConfig.load(resume="auto", out=run), PretrainTask(PretrainConfig.load(total_steps=1)), log=msgs.append)
    assert ck.path.name == "step_00000002" and ck.training_state["step"] == 2
    warn = [m for m in msgs if m.startswith("WARNING: skipping damaged checkpoint")]
    assert len(warn) == 1 and "step_00000004" in warn[0] and "\n" not in warn[0], msgs
    assert _snapshot(bad) == before  # nothing deleted or rewritten
    # named directly, the damaged checkpoint is refused in one line, never substituted
    with pytest.raises(TrainingError) as e:
        resolve_resume(PretrainConfig.load(resume=str(bad)), PretrainTask(PretrainConfig.load(total_steps=1)), log=msgs.append)
    assert "step_00000004" in str(e.value) and "\n" not in str(e.value)


def test_cli_resume_with_a_flipped_byte_falls_back_and_finishes(tmp_path, paused_run):
    run = tmp_path / "run"
    shutil.copytree(paused_run, run)
    _flip_byte(run / "checkpoints" / "step_00000004" / "model.safetensors")
    damaged = _snapshot(run / "checkpoints" / "step_00000004")
    r = CliRunner().invoke(app, ["pretrain", "--resume", "auto", "--out", str(run)])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output and "WARNING: skipping damaged checkpoint" in r.output
    assert "SHA-256 does not match" in r.output and "finished 8 steps" in r.output
    assert load_checkpoint(run / "checkpoints" / "step_00000004").training_state["step"] == 4  # rewritten by the rerun
    # the damaged copy is kept aside, byte for byte, not overwritten by the rerun nor rotated away
    assert "kept the damaged checkpoint step_00000004 as step_00000004.damaged" in r.output
    assert _snapshot(run / "checkpoints" / "step_00000004.damaged") == damaged


def test_cli_resume_with_every_checkpoint_damaged_is_one_line(tmp_path, paused_run):
    run = tmp_path / "run"
    shutil.copytree(paused_run, run)
    for d in (run / "checkpoints").iterdir():
        _flip_byte(d / "model.safetensors")
    r = CliRunner().invoke(app, ["pretrain", "--resume", "auto", "--out", str(run)])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit)
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no intact checkpoint" in errors[0] and "nothing was deleted" in errors[0], r.output
    assert "--overwrite" in errors[0]  # the way forward when nothing there can be resumed
    assert "Traceback" not in r.output
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_00000002", "step_00000004"]


# ------------------------------------------------------------------------------ full disk


def test_disk_full_during_a_save_is_one_line_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    import pawn.checkpoint as ckmod

    real = ckmod.save_safetensors
    calls = {"model": 0}

    def filling_disk(tensors, path, *a, **k):
        if str(path).endswith("model.safetensors"):
            calls["model"] += 1
            if calls["model"] == 2:
                Path(path).write_bytes(b"\x00" * 10)  # a partial write, then the disk is full
                raise OSError(errno.ENOSPC, "No space left on device", path)
        return real(tensors, path, *a, **k)

    monkeypatch.setattr(ckmod, "save_safetensors", filling_disk)
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["pretrain", "--variant", "toy", "--total-steps", "8", "--batch-size", "4", "--seq-len", "32",
                                 "--val-games", "0", "--steps-per-chunk", "2", "--val-every", "2", "--checkpoint-every", "2",
                                 "--out", str(out)])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in r.output, r.output
    assert "step_00000004" in errors[0] and "No space left on device" in errors[0] and "step_00000002" in errors[0]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000002"]  # no step_4, no .tmp
    assert load_checkpoint(out / "checkpoints" / "step_00000002").training_state["step"] == 2
    assert json.loads((out / "schedule_health.json").read_text())["reason_for_stop"] == "exception"


def test_disk_full_on_a_metrics_write_is_one_line(tmp_path, monkeypatch):
    from pawn.train.metrics import MetricsLogger

    real = MetricsLogger.write

    def write(self, kind, *a, **k):
        if kind == "train":
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        return real(self, kind, *a, **k)

    monkeypatch.setattr(MetricsLogger, "write", write)
    with pytest.raises(TrainingError, match=r"metrics.jsonl \(No space left on device\)") as e:
        run_pretrain(cfg(tmp_path / "run"), **RUN)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------ counters past 2^31


def test_compiled_loop_counts_past_2_pow_31_with_the_schedule_lr():
    from pawn.config import TOY
    from pawn.data.stream import EngineSource, make_batch
    from pawn.model import PAWNModel
    from pawn.train.loop import (
        TrainProgram,
        counter_value,
        init_state,
        make_mesh,
        make_optimizer,
        optimizer_to_arrays,
        with_count,
    )
    from pawn.train.schedules import build_schedule

    start, K = 2**31 - 3, 6
    schedule = build_schedule("cosine", 1e-3, 2**32, 10)
    opt = make_optimizer(schedule, b1=0.9, b2=0.95, weight_decay=0.01, max_grad_norm=1.0)
    state = init_state(PAWNModel(TOY, jax.random.key(0)), opt, step=start)
    state = type(state)(state.model, with_count(state.opt_state, start), state.step)
    before = np.asarray(state.model.params()["wq"]).copy()
    batches = [make_batch(EngineSource(1, 16), s, 2, 16, False) for s in range(K)]
    chunk = {k: np.stack([b[k] for b in batches]) for k in batches[0]}
    program = TrainProgram.of(opt, schedule, TOY, mesh=make_mesh(jax.devices()[:1]))
    state, m = program.run_chunk(program.place_state(state), program.place_chunk(chunk))
    lrs = np.asarray(m["lr"])
    expected = [schedule.value(s) for s in range(start, start + K)]
    assert (lrs > 0).all()
    np.testing.assert_allclose(lrs, expected, rtol=1e-6)
    assert counter_value(state.step) == start + K  # an int32 would have wrapped to −2^31 + 2
    after = np.asarray(state.model.params()["wq"])
    assert np.isfinite(after).all() and not np.array_equal(after, before)
    counts = [v for k, v in optimizer_to_arrays(state.opt_state).items() if k.endswith(".count")]
    assert counts and all(int(c) == 2**31 - 1 for c in counts)  # Adam's own count saturates (bias correction = 1)


def test_resume_near_2_pow_31_names_counts_and_schedules_correctly(tmp_path, paused_run):
    run = tmp_path / "run"
    src = paused_run / "checkpoints" / "step_00000002"
    start = 2**31 - 2
    dst = run / "checkpoints" / step_dir_name(start)
    shutil.copytree(src, dst)
    conf = json.loads((dst / "config.json").read_text())
    conf["run_config"].update(total_steps=2**31 + 2, pause_after_steps=None, out=str(run), checkpoint_every=2, keep_checkpoints=2)
    (dst / "config.json").write_text(json.dumps(conf))
    ts = json.loads((dst / "training_state.json").read_text())
    ts.update(step=start, next_game=start * 4)
    (dst / "training_state.json").write_text(json.dumps(ts))
    write_manifest(dst)
    res = run_pretrain(PretrainConfig.load(resume="auto", out=run), **RUN)
    assert (res.reason, res.step) == ("completed", 2**31 + 2)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_2147483648", "step_2147483650"]
    schedule = PretrainConfig.load(**conf["run_config"]).schedule()
    for r in records(run, "train"):
        assert r["lr"] > 0
        assert abs(r["lr"] - schedule.value(r["step"] - 1)) <= 1e-6 * schedule.value(r["step"] - 1)
    assert load_checkpoint(res.checkpoint).training_state["step"] == 2**31 + 2
    again = run_pretrain(PretrainConfig.load(resume="auto", out=run), **RUN)  # auto sees the 10-digit names
    assert again.reason == "resume_no_op" and again.step == 2**31 + 2


# ------------------------------------------------------------------------------ jax.distributed timeout


def test_distributed_timeout_is_a_setting_passed_to_jax(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:1")
    monkeypatch.setenv("PAWN_DISTRIBUTED_TIMEOUT_S", "17")
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(jax.config, "update", lambda *a: None)

    def fake_init(**kw):
        seen.update(kw)
        raise RuntimeError("DEADLINE_EXCEEDED: Barrier timed out\n  more detail")

    monkeypatch.setattr(jax.distributed, "initialize", fake_init)
    c = PretrainConfig.load(**{**SMALL, "total_steps": 4, "val_every": 2, "checkpoint_every": 2})
    assert c.distributed_timeout_s == 17
    assert PretrainConfig.load(**{**SMALL, "total_steps": 4, "val_every": 2, "checkpoint_every": 2,
                                  "distributed_timeout_s": 5}).distributed_timeout_s == 5
    conf = tmp_path / "c.json"
    conf.write_text('{"distributed_timeout_s": 9}')
    monkeypatch.delenv("PAWN_DISTRIBUTED_TIMEOUT_S")
    assert PretrainConfig.load(conf, **{**SMALL, "total_steps": 4, "val_every": 2, "checkpoint_every": 2}).distributed_timeout_s == 9
    with pytest.raises(TrainingError, match="within 17 s") as e:
        pretrain_mod.maybe_initialize_distributed(c.distributed_timeout_s)
    assert seen["initialization_timeout"] == 17 and seen["coordinator_address"] == "127.0.0.1:1"
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="distributed_timeout_s must be > 0"):
        PretrainConfig.load(**{**SMALL, "total_steps": 4, "val_every": 2, "checkpoint_every": 2, "distributed_timeout_s": 0})


# ------------------------------------------------------------------------------ outcome prefix end to end


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_prepend_outcome_pretrains_end_to_end_and_runs_the_five_outcome_diagnostics(tmp_path):
    from pawn.evaluate.diagnostics import TESTS, run_outcome_tests
    from pawn.evaluate.loading import load_models

    out = tmp_path / "prefix"
    r = CliRunner().invoke(app, ["pretrain", "--variant", "toy", "--prepend-outcome", "--total-steps", "8", "--batch-size", "4",
                                 "--seq-len", "32", "--val-games", "8", "--steps-per-chunk", "2", "--val-every", "4",
                                 "--checkpoint-every", "4", "--lr", "1e-3", "--warmup-steps", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    ck = load_checkpoint(out / "checkpoints" / "best")
    assert ck.run_config["prepend_outcome"] is True
    train = records(out, "train")
    assert train[0]["n_supervised_mean"] > 0 and 0.0 <= train[-1]["top1"] <= 1.0
    assert len(records(out, "val")) == 2
    (lm,) = load_models(out / "checkpoints" / "step_00000008")
    assert lm.prepend_outcome is True
    # A 30-game held-out corpus (511 plies) has games of every kind the tests continue, few enough
    # that prefix_continuation runs one outcome's buckets (its pool must hold n_per_bucket games).
    res = run_outcome_tests(lm.model, outcome_prefix_trained=lm.prepend_outcome, n_per_outcome=2, n_per_bucket=4,
                            n_per_pair=2, n_per_scenario=2, corpus_size=30, corpus_max_ply=511, batch_size=8)
    assert set(res) == set(TESTS)
    for name, r_ in res.items():
        assert r_ and "_skipped" not in r_, (name, r_)
    assert len(res["outcome_signal"]) == 5
    for outcome, by_mask in res["outcome_signal"].items():
        assert set(by_mask) == {"masked", "unmasked"} and by_mask["masked"]["n_games"] == 2, outcome
        assert 0.0 <= by_mask["masked"]["outcome_match_rate"] <= 1.0
    for actual, buckets in res["prefix_continuation"].items():
        for bucket, by_cond in buckets.items():
            assert len(by_cond) == 5 and all(m["n_games"] == 4 for m in by_cond.values()), (actual, bucket)
    for pair, m in res["poisoned_prefix"].items():
        assert "_skipped" not in m and "original_outcome_match_rate" in m, pair
    for task in ("impossible_task", "improbable_task"):
        for scenario, m in res[task].items():
            assert "_skipped" not in m and m["n_games"] >= 1, (task, scenario)


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_sigterm_during_setup_checkpoints_after_the_first_chunk(tmp_path):
    """A SIGTERM that arrives during the setup (here: with the first log line, before the run's
    summary and the compiled chunk) stops like a later one: the first chunk finishes, a
    checkpoint is written and the run ends with reason "sigterm" (once the default handler
    killed the process: exit 143 / -15)."""
    import subprocess
    import sys

    out = tmp_path / "run"
    script = f"""
import os, signal
from pawn.settings import PretrainConfig
from pawn.train.pretrain import run_pretrain
sent = []
def log(m):
    if not sent:
        sent.append(m)
        os.kill(os.getpid(), signal.SIGTERM)
cfg = PretrainConfig.load(variant="toy", total_steps=6, steps_per_chunk=2, batch_size=4, seq_len=32, val_games=0,
                          checkpoint_every=6, out={str(out)!r})
r = run_pretrain(cfg, log=log, progress=False)
print("RESULT", r.reason, r.step)
"""
    p = subprocess.run([sys.executable, "-c", script], env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"},
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    assert "RESULT sigterm 2" in p.stdout and "SIGTERM: stopping after the first chunk" in p.stderr  # the setup message says which chunk (issue 42)
    assert json.loads((out / "checkpoints" / "step_00000002" / "training_state.json").read_text())["step"] == 2
