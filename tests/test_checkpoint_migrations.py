"""Checkpoint and adapter formats are versioned separately, each with a migrations table, so a
checkpoint written today still loads after a format bump (issue 22). The checkpoints are written
by today's writers (:func:`pawn.checkpoint.save_checkpoint`, :func:`pawn.adapters.io.save_adapter`)
and read back through the migration path after the version is bumped."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from pawn import checkpoint as ck
from pawn.adapters import build_adapted
from pawn.adapters import io as aio
from pawn.config import ModelConfig
from pawn.model import PAWNModel

CFG = ModelConfig(d_model=16, n_layers=1, n_heads=1, d_ff=32)


@pytest.fixture
def written_today(tmp_path):
    m = PAWNModel(CFG, jax.random.PRNGKey(0))
    d = ck.save_checkpoint(tmp_path / "ck", {k: np.asarray(v) for k, v in m.params().items()}, CFG, run_config={"seq_len": 64})
    assert json.loads((d / ck.CONFIG_FILE).read_text())["format_version"] == 1
    return d, m


def test_a_version_1_checkpoint_loads_through_a_migration_after_a_bump(written_today, monkeypatch):
    d, m = written_today
    seen = []

    def one_to_two(cfg: dict) -> dict:  # a format-2 config keeps the run context under a new key
        seen.append(cfg["format_version"])
        return {**cfg, "run_config": {**cfg["run_config"], "context": cfg["run_config"]["seq_len"]}}

    monkeypatch.setattr(ck, "FORMAT_VERSION", 2)
    monkeypatch.setattr(ck, "MIGRATIONS", {1: one_to_two})
    c = ck.load_checkpoint(d)
    assert seen == [1] and c.run_config == {"seq_len": 64, "context": 64} and c.config == CFG
    assert all(np.array_equal(c.params[k], np.asarray(v)) for k, v in m.params().items())


def test_a_bump_without_its_migration_or_a_newer_file_is_refused_in_one_line(written_today, monkeypatch):
    d, _ = written_today
    monkeypatch.setattr(ck, "FORMAT_VERSION", 2)
    monkeypatch.setattr(ck, "MIGRATIONS", {})
    with pytest.raises(ck.UnsupportedCheckpointVersionError, match="no migration from 1 to 2"):
        ck.load_checkpoint(d)
    monkeypatch.setattr(ck, "FORMAT_VERSION", 1)
    with pytest.raises(ck.UnsupportedCheckpointVersionError, match="newer than this PAWN reads"):
        ck.read_model_config({"format_version": 3, "model_config": CFG.to_json_dict()}, d / ck.CONFIG_FILE)
    with pytest.raises(ck.UnsupportedCheckpointVersionError, match="not supported"):
        ck.read_model_config({"format_version": "1", "model_config": CFG.to_json_dict()}, d / ck.CONFIG_FILE)


def test_the_adapter_format_bumps_apart_from_the_model_format(written_today, tmp_path, monkeypatch):
    """An adapter checkpoint written today (adapter format 1) loads after the adapter format is
    bumped, through its own migration; the model format (top-level format_version) stays 1, and
    an adapter section without a version (written before it existed) reads as version 1."""
    bb_dir, bb = written_today
    model = build_adapted("lora", {"rank": 2}, bb, jax.random.PRNGKey(0))
    _, ref, _ = aio.load_backbone(bb_dir)
    out = aio.save_adapter(tmp_path / "ad", model, ref)
    cfg = json.loads((out / ck.CONFIG_FILE).read_text())
    assert cfg["format_version"] == 1 and cfg["adapter"]["format_version"] == 1
    monkeypatch.setattr(aio, "ADAPTER_FORMAT_VERSION", 2)
    monkeypatch.setattr(aio, "ADAPTER_MIGRATIONS", {1: lambda a: {**a, "settings": {**a["settings"], "alpha": 4.0}}})
    la = aio.load_adapter(out)
    assert la.model.settings.rank == 2 and la.model.settings.alpha == 4.0  # the migration ran
    assert ck.FORMAT_VERSION == 1
    monkeypatch.setattr(aio, "ADAPTER_MIGRATIONS", {})
    with pytest.raises(ck.UnsupportedCheckpointVersionError, match="adapter: format_version 1 has no migration"):
        aio.load_adapter(out)
