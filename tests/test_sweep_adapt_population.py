"""Adapter populations (issue 15 "Populations"): P `pawn adapt` trials that differ only in lr,
weight decay and warm-up fraction train as one vmapped program over the stacked trainable half
(frozen backbone shared) and reproduce, per member, the sequential `run_adapt` runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_adapter_population_of_2_reproduces_sequential_run_adapt(tiny_backbone, shared_data, tmp_path):
    configs = _configs(tiny_backbone, shared_data, tmp_path,
                       [dict(lr=3e-3, weight_decay=0.0, warmup_frac=0.25), dict(lr=2e-2, weight_decay=0.1, warmup_frac=0.0)])
    reps = [PrunerHook(_Recorder(), lambda m: m["val_loss"]) for _ in configs]
    outs = run_adapt_population(configs, reps, log=lambda m: None)
    for i, c in enumerate(configs):
        seq = PrunerHook(_Recorder(), lambda m: m["val_loss"])
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
    assert abs(outs[0].val_losses[4] - outs[1].val_losses[4]) > 1e-3  # the members really differ


def test_adapter_population_refuses_a_resume(tiny_backbone, shared_data, tmp_path):
    configs = _configs(tiny_backbone, shared_data, tmp_path, [dict(lr=1e-3), dict(lr=2e-3)], pause_after_steps=2)
    with pytest.raises(PopulationError, match="pause_after_steps"):
        run_adapt_population(configs, [PrunerHook(_Recorder(), lambda m: m["val_loss"]) for _ in configs])


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
