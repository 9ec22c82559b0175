"""Adapter populations (issue 15 "Populations"): P `pawn adapt` trials that differ only in lr,
weight decay, warm-up fraction and init scale train as one vmapped program over the stacked trainable half
(frozen backbone shared) and reproduce, per member, the sequential `run_adapt` runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from pawn.runs import open_run, population_member_of
from pawn.sweep.population import PopulationError, run_adapt_population
from pawn.sweep.trials import PrunerHook
from pawn.train.adapt import run_adapt
from pawn.train.adapt_config import AdaptSettings


class _Recorder:
    """A stand-in Optuna trial: records nothing, never prunes."""

    def report(self, v, s):
        pass

    def should_prune(self):
        return False


def _configs(backbone, shared_data, tmp_path, members, **over):
    base = dict(backbone=str(backbone), strategy="lora", lora_rank=2, data=str(shared_data / "lichess"), elo_min=1200,
                elo_max=2200, epochs=2, steps_per_epoch=2, steps_per_chunk=2, batch_size=8, seq_len=64, val_games=32,
                data_seed=7, cache_dir=str(tmp_path / "cache"), **over)
    return [AdaptSettings.load(**{**base, **m, "out": str(tmp_path / f"m{i}")}).model_dump(mode="json")
            for i, m in enumerate(members)]


def _train_losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, open(run_dir / "metrics.jsonl")) if r.get("type") == "train"}


MEMBERS = [dict(lr=3e-3, weight_decay=0.0, warmup_frac=0.25), dict(lr=2e-2, weight_decay=0.1, warmup_frac=0.0, init_scale=0.25),
           dict(lr=1e-2, weight_decay=0.05, warmup_frac=0.5, init_scale=3.0), dict(lr=5e-3, weight_decay=0.0, warmup_frac=0.0)]
"""Members differing in every array-valued field: lr, weight decay, warm-up fraction and LoRA's init scale."""


@pytest.mark.parametrize("P", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_adapter_population_reproduces_sequential_run_adapt(tiny_backbone, shared_data, tmp_path, P):
    configs = _configs(tiny_backbone, shared_data, tmp_path, MEMBERS[:P])
    reps = [PrunerHook(_Recorder(), lambda m: m["loss"]) for _ in configs]
    outs = run_adapt_population(configs, reps, log=lambda m: None)
    for i, c in enumerate(configs):
        seq = PrunerHook(_Recorder(), lambda m: m["loss"])
        res = run_adapt(AdaptSettings.load(**c), log=lambda m: None, progress=False, install_signal_handlers=False,
                        hooks=[seq])
        assert outs[i].reason == res.reason == "step_limit" and outs[i].step == res.step == 4
        assert set(outs[i].val_losses) == set(seq.reported) == {2, 4}
        for s, v in seq.reported.items():
            assert outs[i].val_losses[s] == pytest.approx(v, rel=2e-5, abs=2e-5), (i, s)
        train = _train_losses(res.run_dir)
        assert set(outs[i].train_losses) == set(train) == {2, 4}
        for s, v in train.items():
            assert outs[i].train_losses[s] == pytest.approx(v, rel=2e-5, abs=2e-5), (i, s)
        assert outs[i].best_val_loss == pytest.approx(min(seq.reported.values()), rel=2e-5)
        # the member keeps its best adapter as the sequential run does (same weights to float tolerance)
        assert outs[i].run_dir == Path(c["out"])
        mine, theirs = (load_file(d / "best" / "adapter.safetensors") for d in (outs[i].run_dir, res.run_dir))
        assert set(mine) == set(theirs)
        for k in mine:
            np.testing.assert_allclose(mine[k], theirs[k], rtol=1e-3, atol=1e-5, err_msg=f"member {i} {k}")
        # the member records the games it trained and validated on, as the sequential run does (issue 26)
        member = population_member_of(outs[i].run_dir / "best")
        assert member is not None and member.kind == "adapt" and member.path == outs[i].run_dir.resolve()
        assert member.config["lr"] == c["lr"] and member.config["data_seed"] == 7
        rec, seq_rec = member.split, open_run(res.run_dir).split
        assert rec.to_json() == seq_rec.to_json() and rec.counts["val"] == 32 and rec.counts["train"] > 1000
        assert {p: v.tolist() for p, v in rec.ids.items()} == {p: v.tolist() for p, v in seq_rec.ids.items()}
        assert len(rec.ids["val"]) == 32 and not set(rec.ids["val"].tolist()) & set(rec.ids["train"].tolist())
    finals = sorted(o.val_losses[4] for o in outs)
    assert min(b - a for a, b in zip(finals, finals[1:])) > 1e-4  # the members really differ


def test_population_members_start_from_their_own_init_scale(tiny_backbone, shared_data, tmp_path):
    """Two members that differ only in init_scale: each member's LoRA A starts at its own scale
    (A(s) = s · A(1), same seed), B at zero, and the two train to different losses."""
    import equinox as eqx
    import jax
    import numpy as np

    from pawn.adapters import build_adapted
    from pawn.checkpoint import load_model
    from pawn.sweep.population import PopulationProgram
    from pawn.train.loop import TrainProgram, make_optimizer, partition_model
    from pawn.schedules import build_schedule

    bb, _ = load_model(tiny_backbone)
    models = [build_adapted("lora", {"rank": 2, "init_scale": s}, bb, jax.random.key(0)) for s in (1.0, 0.25)]
    halves = [partition_model(m, m.trainable_filter())[0] for m in models]
    sched = build_schedule("constant", 1e-3, 10, 0)
    prog = TrainProgram.of(make_optimizer(sched, b1=0.9, b2=0.999, weight_decay=0.0, max_grad_norm=1.0), sched, models[0].config)
    state = PopulationProgram(prog, b1=0.9, b2=0.999, max_grad_norm=1.0).init(halves, [0.0, 0.0])
    A = state.model.adapter.A["wq"]
    np.testing.assert_allclose(np.asarray(A[1]), 0.25 * np.asarray(A[0]), rtol=1e-6)
    assert float(np.abs(np.asarray(A[0])).max()) > 0 and not np.asarray(state.model.adapter.B["wq"]).any()
    with pytest.raises(PopulationError, match="structure or shape"):
        other = build_adapted("lora", {"rank": 4}, bb, jax.random.key(0))
        PopulationProgram(prog, b1=0.9, b2=0.999, max_grad_norm=1.0).init(
            [halves[0], partition_model(other, other.trainable_filter())[0]], [0.0, 0.0])
    # member i starts from exactly the weights a standalone run with its settings builds (not member 0's, not redrawn)
    assert A.shape[0] == 2
    for i, m in enumerate(models):
        np.testing.assert_array_equal(np.asarray(A[i]), np.asarray(m.adapter.A["wq"]))
        for name in m.adapter.A:
            np.testing.assert_array_equal(np.asarray(state.model.adapter.A[name][i]), np.asarray(m.adapter.A[name]), err_msg=name)
    assert eqx.is_array(A)


def test_adapter_population_refuses_a_resume(tiny_backbone, shared_data, tmp_path):
    configs = _configs(tiny_backbone, shared_data, tmp_path, [dict(lr=1e-3), dict(lr=2e-3)], pause_after_steps=2)
    with pytest.raises(PopulationError, match="pause_after_steps"):
        run_adapt_population(configs, [PrunerHook(_Recorder(), lambda m: m["loss"]) for _ in configs])


def test_adapter_population_sweep_tells_each_member_to_the_study(tiny_backbone, shared_data, tmp_path):
    from pawn.sweep.settings import SweepSettings
    from pawn.sweep.study import run_sweep

    base = dict(elo_min=1200, elo_max=2200, epochs=2, steps_per_epoch=2, steps_per_chunk=2, batch_size=8, seq_len=64,
                val_games=32, data_seed=7, cache_dir=str(tmp_path / "cache"))
    (tmp_path / "base.json").write_text(json.dumps(base))
    (tmp_path / "space.json").write_text(json.dumps({"lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
                                                     "rank": {"type": "categorical", "choices": [2, 4]},
                                                     "warmup_frac": 0.0, "weight_decay": 0.0}))
    s = SweepSettings.load(strategy="lora", checkpoint=str(tiny_backbone), data=str(shared_data / "lichess"), trials=2,
                           population=2, pruner="none", seed=3, out=tmp_path / "sw", base_config=tmp_path / "base.json",
                           space=tmp_path / "space.json")
    trials = run_sweep(s, log=lambda m: None).trials
    assert [t["state"] for t in trials] == ["COMPLETE", "COMPLETE"]
    assert trials[0]["population"] == trials[1]["population"] == [0, 1]
    assert trials[0]["params"]["rank"] == trials[1]["params"]["rank"]  # not array-valued: shared through the queue
    assert trials[0]["params"]["lr"] != trials[1]["params"]["lr"]
    assert set(trials[0]["intermediate"]) == {"2", "4"} and trials[0]["value"] == min(trials[0]["intermediate"].values())
    # a member's adapter is evaluated on the validation games its split record names (issue 26)
    from typer.testing import CliRunner

    from pawn.cli import app

    member = Path(trials[0]["run_dir"])
    assert (member / "split.json").is_file() and (member / "split_ids.safetensors").is_file()
    js = tmp_path / "e.json"
    r = CliRunner().invoke(app, ["eval", str(member / "best"), "--split", "val", "--pgn-only", "--json", str(js)])
    assert r.exit_code == 0, r.output
    h = json.loads(js.read_text())["models"][0]["held_out"]
    assert h["split"] == "val" and h["n_games"] == 32 and h["run"] == str(member.resolve())


def test_a_population_builds_the_data_validation_and_optimizer_of_a_pawn_adapt_run(tiny_backbone, shared_data, tmp_path):
    """What an adapter population trains on is what `pawn adapt` with a member's settings builds,
    compared from what both really build: the same validation games (every batch, legal sets
    included), the same training chunks, the same validation steps, the same learning rate at every
    step, the same optimizer settings and the same step-0 validation of the member's starting weights."""
    import jax
    import jax.numpy as jnp

    from pawn.sweep.population import build_adapt_population, member
    from pawn.train import spine
    from pawn.train.adapt import AdaptTask

    configs = _configs(tiny_backbone, shared_data, tmp_path, MEMBERS[:2], test_games=16, illegal_penalty=0.5,
                       disable_legal_mask=True, beta2=0.98, max_grad_norm=0.5, eval_interval=2)
    pp = build_adapt_population(configs, log=lambda m: None)
    for i, c in enumerate(configs):
        task = AdaptTask(AdaptSettings.load(**{**c, "out": str(tmp_path / f"run{i}")}), log=lambda m: None)
        spine.run(task, log=lambda m: None, progress=False, install_signal_handlers=False)  # what run_adapt runs
        mine, theirs = pp.lead.data, task.data
        assert (len(mine.corpus.train), len(mine.corpus.val), mine.n_test) == (len(theirs.corpus.train), len(theirs.corpus.val),
                                                                              theirs.n_test) and theirs.n_test == 16
        val_mine, val_theirs = list(mine.val_batches), list(theirs.val_batches)
        assert len(val_mine) == len(val_theirs) == 4 and all(set(a) == set(b) for a, b in zip(val_mine, val_theirs))
        for a, b in zip(val_mine, val_theirs):
            for k in a:
                np.testing.assert_array_equal(a[k], b[k], err_msg=f"validation batch {k}")
        chunks_mine, chunks_theirs = pp.chunks(), task.chunks(0, theirs.total)
        try:
            pairs = list(zip(chunks_mine, chunks_theirs))
        finally:
            chunks_mine.close()
            chunks_theirs.close()
        assert [s for s, _ in pairs[0]] == [0, 0] and len(pairs) == 2
        for (s0, a), (_, b) in pairs:
            assert set(a) == set(b) and "legal" in a  # the penalty needs the legal sets, as the run's loss does
            for k in a:
                np.testing.assert_array_equal(a[k], b[k], err_msg=f"training chunk at step {s0}: {k}")
        steps = range(1, theirs.total + 1)
        assert [s for s in steps if pp.val_due(s)] == [s for s in steps if task.val_due(s)] == [2, 4]
        lrs = np.asarray([float(task.schedule(jnp.float32(s))) for s in range(theirs.total)], np.float32)
        np.testing.assert_allclose(np.asarray(pp.table[i]), lrs, rtol=1e-6)
        opt = task.prog.optimizer_kwargs
        assert pp.pop.optimizer_kwargs == {k: opt[k] for k in ("b1", "b2", "max_grad_norm")} and opt["b2"] == 0.98
        assert float(pp.state.opt_state.hyperparams["weight_decay"][i]) == pytest.approx(opt["weight_decay"])
        start = pp.validate(member(pp.state, i), 0)
        assert start["loss"] == pytest.approx(task.baseline["loss"], rel=1e-5)
        assert start["top1"] == pytest.approx(task.baseline["top1"], abs=1e-6)
        assert jax.tree_util.tree_structure(start["weights"]) == jax.tree_util.tree_structure(task.baseline["weights"])
    assert pp.table.shape == (2, 4) and not np.allclose(pp.table[0], pp.table[1])
