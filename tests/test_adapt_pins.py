"""What ``pawn adapt`` really trains (issue 25, "tests a wrong implementation passes"): the training
loss follows ``--no-legal-mask`` / ``--illegal-penalty`` through the CLI, the RoSA warm-up runs at a
constant learning rate, the CLI's strategy defaults are the spec's, and the backbone is
bit-identical after a run. ``benchmarks/mutations.py`` checks that each of these tests fails on a
copy of PAWN with the matching bug."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest
from typer.testing import CliRunner

from pawn.cli import app

PGN = "lichess/lichess_db_2013-01_first100_reexported_chess.js-benchmark.pgn"


def _records(run: Path, kind: str) -> list[dict]:
    """The run's ``kind`` records in file order through the run record (pawn.runs), flat."""
    from pawn.runs import open_run

    return [{"step": r.step, **r.values, **r.fields} for r in open_run(run).records(types=[kind])[0]]


def _adapt(backbone, shared_data, cache, out: Path, *extra: str) -> Path:
    r = CliRunner().invoke(app, ["adapt", str(backbone), "--data", str(shared_data / PGN), "--epochs", "1",
                                 "--steps-per-epoch", "1", "--batch-size", "8", "--seq-len", "64", "--val-games", "8",
                                 "--data-seed", "3", "--cache-dir", str(cache), "--out", str(out), *extra])
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.slow  # three CLI runs
def test_the_training_loss_follows_the_legal_mask_flags_through_the_cli(tiny_backbone, shared_data, tmp_path):
    """One step from the identity adapter: the recorded train loss is the loss of the backbone on
    the same first batch in all three runs. The hard mask drops ~1,940 of 1,968 moves from the
    softmax (random backbone: NLL ≈ ln 30 vs ln 1968); the penalty adds λ × illegal mass (≈ 1 here).
    A training loss that ignored the mask or the penalty gives equal losses."""
    cache = tmp_path / "cache"
    runs = {name: _adapt(tiny_backbone, shared_data, cache, tmp_path / name, "--strategy", "lora", *flags)
            for name, flags in {"masked": (), "plain": ("--no-legal-mask",),
                                "penalty": ("--no-legal-mask", "--illegal-penalty", "1")}.items()}
    loss = {k: _records(d, "train")[0]["loss"] for k, d in runs.items()}
    assert all(_records(d, "train")[0]["step"] == 1 for d in runs.values())
    assert loss["plain"] - loss["masked"] > 2.0, loss
    assert 0.9 < loss["penalty"] - loss["plain"] < 1.0, loss
    # the validation of each run uses its own regime too (step-0 baseline, same val games)
    val = {k: _records(d, "val")[0] for k, d in runs.items()}
    assert val["masked"]["illegal_prob_mass"] == 0.0 and val["plain"]["illegal_prob_mass"] > 0.9
    assert val["penalty"]["loss"] == pytest.approx(val["plain"]["loss"] + val["plain"]["illegal_prob_mass"], rel=1e-5)


@pytest.mark.slow  # two CLI runs
def test_cli_adapt_trains_the_spec_defaults(tiny_backbone, shared_data, tmp_path):
    """Spec training-and-adapters.md AdapterConfig: ``lora_rank`` 4, ``lora_alpha`` None (= rank),
    ``lora_ffn`` False, targets q,k,v,o; ``n_unfreeze`` 2, ``include_embeddings`` False (§4.7);
    ``include_lm_head`` False, as the README states (the spec's v2 default is True).
    (``bottleneck_dim``: pinned where the strategy table is made the one home, branch ``registry``.)"""
    cache = tmp_path / "cache"
    lora = _records(_adapt(tiny_backbone, shared_data, cache, tmp_path / "lora", "--strategy", "lora"), "config")[0]
    s = lora["adapter_settings"]
    assert lora["strategy"] == "lora" and s["rank"] == 4 and s["alpha"] is None and s["ffn"] is False, s
    assert s["targets"] == ["q", "k", "v", "o"] and s["layers"] is None, s
    unf = _records(_adapt(tiny_backbone, shared_data, cache, tmp_path / "unf", "--strategy", "unfreeze"), "config")[0]
    s = unf["adapter_settings"]
    # README "Where pawn adapt differs from the spec": the head stays frozen unless --include-lm-head (v1's rule)
    assert s["include_lm_head"] is False and s["include_embeddings"] is False, s
    # neither a layer list nor --n-unfreeze given: the recorded settings resolve to the top 2 layers (spec §4.7)
    from pawn.adapters.strategies.unfreeze import UnfreezeConfig

    assert UnfreezeConfig(**s).selected(2) == (0, 1) and UnfreezeConfig(**s).selected(5) == (3, 4), s  # tiny: 2 layers


@pytest.mark.slow  # CI budget: a RoSA warm-up and main phase compiled through pawn adapt
def test_rosa_warmup_runs_at_the_constant_peak_lr_and_the_backbone_stays_bit_identical(tiny_backbone, shared_data, tmp_path):
    """Spec §4.6 phase 1 (v1): a separate AdamW at constant ``lr`` (no schedule). Every warm-up step's
    lr is recorded; a cosine (or any decaying) warm-up fails. And the backbone a run trains with is the
    checkpoint, bit for bit, at the end (a trainable-backbone bug changes it) and on disk."""
    from pawn.adapters.io import load_backbone
    from pawn.train.adapt import run_adapt
    from pawn.train.adapt_config import AdaptSettings
    from pawn.train.run import Hook

    disk = hashlib.sha256((tiny_backbone / "model.safetensors").read_bytes()).hexdigest()
    original, _, _ = load_backbone(tiny_backbone)
    seen = []

    class LastBackbone(Hook):
        def on_chunk(self, ctx):
            seen.append(jax.tree_util.tree_map(np.asarray, ctx.result.state.model.backbone))

    cfg = AdaptSettings.load(backbone=str(tiny_backbone), data=str(shared_data / PGN), strategy="rosa", epochs=1,
                             steps_per_epoch=4, batch_size=8, seq_len=64, val_games=8, lr=1e-2, data_seed=3, density=0.05,
                             rosa_warmup_steps=4, mask_samples=1, steps_per_chunk=4, cache_dir=str(tmp_path / "cache"),
                             out=str(tmp_path / "run"))
    res = run_adapt(cfg, log=lambda m: None, progress=False, install_signal_handlers=False, hooks=[LastBackbone()])
    assert res.reason == "step_limit"
    warm = [r for r in _records(res.run_dir, "train") if "rosa/warmup_lr" in r]
    lrs = [x for r in warm for x in r["rosa/warmup_lr"]]
    assert len(lrs) == 4 and all(x == pytest.approx(1e-2, rel=1e-6) for x in lrs), lrs
    main = [r for r in _records(res.run_dir, "train") if "rosa/warmup_lr" not in r]
    assert main and main[0]["lr"] < 1e-2  # the main phase has its own schedule (warm-up from 0)

    assert seen
    trained = seen[-1]  # the trainable half's backbone: None where frozen
    pairs = jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda t, o: (t, o), trained, eqx.filter(original, eqx.is_array),
                                                             is_leaf=lambda x: x is None), is_leaf=lambda x: isinstance(x, tuple))
    for t, o in pairs:
        assert t is None or np.array_equal(np.asarray(t), np.asarray(o)), "the backbone changed during pawn adapt"
    assert hashlib.sha256((tiny_backbone / "model.safetensors").read_bytes()).hexdigest() == disk
