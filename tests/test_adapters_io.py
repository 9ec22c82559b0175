"""Adapter checkpoints: save/load round trip, backbone hash check, damage detection, merging into a
v2 checkpoint, and loading wherever a checkpoint is accepted (issue 13 "Using an adapted model")."""

from __future__ import annotations

import json

import equinox as eqx
import jax
import numpy as np
import pytest

from pawn import checkpoint as ck
from pawn.adapters import AdapterError, build_adapted
from pawn.adapters.io import ADAPTER_FILE, BackboneMismatchError, load_adapter, load_backbone, save_adapter, save_merged
from pawn.config import ModelConfig
from pawn.evaluate.loading import load_model, load_models
from pawn.model import PAWNModel

CFG = ModelConfig(d_model=32, n_layers=3, n_heads=2, d_ff=64, max_seq_len=64)


@pytest.fixture(scope="module")
def backbone_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bb") / "backbone"
    m = PAWNModel(CFG, jax.random.PRNGKey(0))
    ck.save_checkpoint(d, m.params(), CFG, run_config={"prepend_outcome": False, "seq_len": 48})
    return d


@pytest.fixture(scope="module")
def tokens():
    return jax.random.randint(jax.random.PRNGKey(1), (2, 10), 0, 1968)


def _perturb(model, key):
    tr, fr = eqx.partition(model, model.trainable_filter())
    leaves, tdef = jax.tree_util.tree_flatten(tr)
    leaves = [x + 0.05 * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, jax.random.split(key, len(leaves)))]
    return eqx.combine(jax.tree_util.tree_unflatten(tdef, leaves), fr)


@pytest.mark.parametrize("name,settings", [
    ("lora", {"layers": [1, 2], "ffn": True}), ("film", {"use_output_film": True}), ("bottleneck", {"n_hidden": 1, "attn_layers": [0]}),
    ("hybrid", {}), ("sparse", {"density": 0.1}), ("unfreeze", {"top_n": 1, "include_lm_head": True}),
])
def test_round_trip_restores_the_adapted_model(tmp_path, backbone_dir, tokens, name, settings):
    bb, ref, _ = load_backbone(backbone_dir)
    m = _perturb(build_adapted(name, settings, bb, jax.random.PRNGKey(2)), jax.random.PRNGKey(3))
    if name == "sparse":  # masks are stored, not regenerated from the seed
        m = eqx.tree_at(lambda m: m.adapter.mask["wq"], m, ~m.adapter.mask["wq"])
    out = save_adapter(tmp_path / "a", m, ref, run_config={"strategy": name}, training_state={"step": 5})
    assert sorted(p.name for p in out.iterdir()) == sorted([".complete", ADAPTER_FILE, "config.json", "training_state.json"])
    la = load_adapter(out)
    assert la.model.strategy == name and la.model.settings == m.settings and la.training_state == {"step": 5}
    np.testing.assert_array_equal(np.asarray(la.model(tokens, dtype="float32")), np.asarray(m(tokens, dtype="float32")))
    assert la.model.num_trainable_params() == m.num_trainable_params()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["adapter"]["backbone"] == {"source": str(backbone_dir.resolve()), "variant": None,
                                          "sha256": ck.sha256_file(backbone_dir / "model.safetensors")}


def test_specialized_clm_checkpoint_needs_no_backbone(tmp_path, backbone_dir, tokens):
    bb, _, _ = load_backbone(backbone_dir)  # lends only its context length (64)
    m = _perturb(build_adapted("specialized_clm", {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32}, bb,
                               jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    assert m.config.max_seq_len == 64
    la = load_adapter(save_adapter(tmp_path / "s", m, None))
    assert la.model.config == m.config and la.backbone is None
    np.testing.assert_array_equal(np.asarray(la.model(tokens, dtype="float32")), np.asarray(m(tokens, dtype="float32")))


def test_a_different_backbone_is_refused_naming_both_hashes(tmp_path, backbone_dir):
    bb, ref, _ = load_backbone(backbone_dir)
    a = save_adapter(tmp_path / "a", build_adapted("lora", {}, bb, jax.random.PRNGKey(0)), ref)
    other = tmp_path / "other"
    ck.save_checkpoint(other, PAWNModel(CFG, jax.random.PRNGKey(9)).params(), CFG)
    with pytest.raises(BackboneMismatchError) as e:
        load_adapter(a, backbone_dir=other)
    msg = str(e.value)
    assert ref.sha256 in msg and ck.sha256_file(other / "model.safetensors") in msg and "\n" not in msg
    # The same backbone moved elsewhere is accepted.
    import shutil

    shutil.copytree(backbone_dir, tmp_path / "moved")
    assert load_adapter(a, backbone_dir=tmp_path / "moved").backbone.sha256 == ref.sha256


def test_damaged_adapter_file_is_detected(tmp_path, backbone_dir):
    bb, ref, _ = load_backbone(backbone_dir)
    a = save_adapter(tmp_path / "a", build_adapted("film", {}, bb, jax.random.PRNGKey(0)), ref)
    raw = bytearray((a / ADAPTER_FILE).read_bytes())
    raw[-3] ^= 0xFF
    (a / ADAPTER_FILE).write_bytes(bytes(raw))
    with pytest.raises(ck.CheckpointIntegrityError, match="adapter.safetensors: SHA-256"):
        load_adapter(a)


def test_rewrite_is_atomic_and_keeps_the_old_checkpoint_on_failure(tmp_path, backbone_dir):
    bb, ref, _ = load_backbone(backbone_dir)
    m = build_adapted("lora", {}, bb, jax.random.PRNGKey(0))
    a = save_adapter(tmp_path / "a", m, ref)
    before = (a / ".complete").read_bytes()
    with pytest.raises(TypeError):  # a run config that is not JSON fails inside the staging dir
        save_adapter(tmp_path / "a", _perturb(m, jax.random.PRNGKey(1)), ref, run_config={"bad": object()})
    assert (a / ".complete").read_bytes() == before and not (tmp_path / "a.tmp").exists()


@pytest.mark.parametrize("name,settings", [("lora", {"alpha": 2.0, "layers": [0]}), ("sparse", {"density": 0.2}),
                                           ("unfreeze", {"layers": [0], "include_embeddings": True})])
def test_merged_checkpoint_loads_with_the_plain_loader_and_gives_the_same_logits(tmp_path, backbone_dir, tokens, name, settings):
    bb, ref, _ = load_backbone(backbone_dir)
    m = _perturb(build_adapted(name, settings, bb, jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    out = save_merged(tmp_path / "merged", m, backbone=ref)
    merged, cfg = ck.load_model(out)
    assert cfg == CFG
    np.testing.assert_allclose(np.asarray(merged(tokens, dtype="float32")), np.asarray(m(tokens, dtype="float32")), atol=2e-5)
    assert ck.load_checkpoint(out).run_config["merged_adapter"]["strategy"] == name


def test_film_merge_is_refused(tmp_path, backbone_dir):
    bb, ref, _ = load_backbone(backbone_dir)
    with pytest.raises(AdapterError, match="cannot be merged"):
        save_merged(tmp_path / "m", build_adapted("film", {}, bb, jax.random.PRNGKey(0)))
    assert not (tmp_path / "m").exists()


def test_evaluation_loaders_accept_an_adapter_checkpoint(tmp_path, backbone_dir, tokens):
    bb, ref, _ = load_backbone(backbone_dir)
    m = _perturb(build_adapted("bottleneck", {}, bb, jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    a = save_adapter(tmp_path / "a", m, ref)
    [lm] = load_models(str(a))
    assert lm.name == f"bottleneck:{CFG.name}" and lm.config == CFG
    assert lm.trained_seq_len == 48 and lm.prepend_outcome is False  # the backbone's run config
    np.testing.assert_array_equal(np.asarray(lm.model(tokens, dtype="float32")), np.asarray(m(tokens, dtype="float32")))
    model, cfg = load_model(str(a))
    assert cfg == CFG and model.strategy == "bottleneck"
    with pytest.raises(ValueError, match="adapter checkpoint"):
        load_models(str(a), variant="base")


def test_generation_runs_on_an_adapted_model(tmp_path, backbone_dir):
    from pawn.evaluate.generation import autoregressive_generate

    bb, ref, _ = load_backbone(backbone_dir)
    m = _perturb(build_adapted("hybrid", {"use_output_film": True}, bb, jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    [lm] = load_models(str(save_adapter(tmp_path / "a", m, ref)))
    cached = autoregressive_generate(lm.model, 4, max_seq_len=12, seed=0, batch_size=4, dtype="float32", mask_illegal=True)
    full = autoregressive_generate(lm.model, 4, max_seq_len=12, seed=0, batch_size=4, dtype="float32", mask_illegal=True,
                                   use_kv_cache=False)
    np.testing.assert_array_equal(cached.sequences, full.sequences)  # KV-cache decode with adapters = full forward
    bare = autoregressive_generate(bb, 4, max_seq_len=12, seed=0, batch_size=4, dtype="float32", mask_illegal=True)
    assert cached.moves.shape == bare.moves.shape


def test_supernet_variant_backbone_is_sliced_and_recorded(tmp_path, tokens):
    from pawn.config import TINY_SUPERNET, TINY_VARIANTS
    from pawn.model import sliced

    sup = PAWNModel(TINY_SUPERNET, jax.random.PRNGKey(0))
    d = ck.save_checkpoint(tmp_path / "sup", sup.params(), TINY_SUPERNET)
    bb, ref, _ = load_backbone(d, "small")
    assert bb.config == TINY_VARIANTS["small"] and ref.variant == "small"
    m = _perturb(build_adapted("lora", {}, bb, jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    la = load_adapter(save_adapter(tmp_path / "a", m, ref))
    assert la.model.config == TINY_VARIANTS["small"]
    np.testing.assert_array_equal(np.asarray(la.model.backbone.wq), np.asarray(sliced(sup, TINY_VARIANTS["small"]).wq))
    np.testing.assert_array_equal(np.asarray(la.model(tokens, dtype="float32")), np.asarray(m(tokens, dtype="float32")))
    with pytest.raises(AdapterError, match="not a nested variant"):
        load_backbone(d, "huge")


def test_adapter_config_records_strategy_settings_and_trainable_count(tmp_path, backbone_dir):
    bb, ref, _ = load_backbone(backbone_dir)
    a = save_adapter(tmp_path / "a", build_adapted("sparse", {"density": 0.05, "targets": ["q"]}, bb, jax.random.PRNGKey(0)), ref)
    meta = json.loads((a / "config.json").read_text())["adapter"]
    assert meta["strategy"] == "sparse" and meta["settings"]["density"] == 0.05 and meta["settings"]["targets"] == ["q"]
    from safetensors.numpy import load_file

    t = load_file(str(a / ADAPTER_FILE))
    assert set(t) == {"adapter.delta.wq", "adapter.mask.wq"} and t["adapter.mask.wq"].dtype == np.bool_
    assert meta["trainable_params"] == int(t["adapter.mask.wq"].sum())
    with pytest.raises(AdapterError, match="must record its backbone"):
        save_adapter(tmp_path / "b", build_adapted("lora", {}, bb, jax.random.PRNGKey(0)), None)


def test_cli_convert_merge_writes_a_standalone_checkpoint_with_the_backbone_layout(tmp_path, backbone_dir, tokens):
    """``pawn convert ADAPTER --merge``: the merged checkpoint gives the adapter's logits and keeps the
    backbone's run config (layout, trained context); an unmergeable strategy is one line, exit 1."""
    from typer.testing import CliRunner

    from pawn.cli import app

    bb, ref, _ = load_backbone(backbone_dir)
    m = _perturb(build_adapted("lora", {"rank": 2}, bb, jax.random.PRNGKey(0)), jax.random.PRNGKey(2))
    save_adapter(tmp_path / "lora", m, ref)
    r = CliRunner().invoke(app, ["convert", str(tmp_path / "lora"), "--merge", "-o", str(tmp_path / "merged")])
    assert r.exit_code == 0, r.output
    merged, _ = ck.load_model(tmp_path / "merged")
    np.testing.assert_allclose(np.asarray(merged(tokens, dtype="float32")), np.asarray(m(tokens, dtype="float32")), atol=2e-5)
    rc = ck.load_checkpoint(tmp_path / "merged").run_config
    assert rc["seq_len"] == 48 and rc["prepend_outcome"] is False and rc["merged_adapter"]["strategy"] == "lora"
    save_adapter(tmp_path / "film", build_adapted("film", {}, bb, jax.random.PRNGKey(0)), ref)
    r = CliRunner().invoke(app, ["convert", str(tmp_path / "film"), "--merge"])
    assert r.exit_code == 1 and r.output.count("\n") == 1 and "FiLM" in r.output and "Traceback" not in r.output


def test_cli_convert_merge_never_replaces_what_is_not_its_own_result(tmp_path, backbone_dir):
    """``pawn convert ADAPTER --merge -o X``: a user's directory, a file, a file on the way, a run
    directory, a run's ``best`` symlink and another checkpoint are refused with one line and left
    as they were; an earlier merge of the same adapter is replaced; a backbone given as the
    adapter, and a checkpoint's config.json given as a checkpoint, are named for what they are."""
    import os

    from typer.testing import CliRunner

    from pawn.cli import app

    bb, ref, _ = load_backbone(backbone_dir)
    run = tmp_path / "runs" / "a-lora"
    save_adapter(run / "checkpoints" / "best", build_adapted("lora", {"rank": 2}, bb, jax.random.PRNGKey(0)), ref)
    (run / "config.json").write_text("{}")
    os.symlink(os.path.join("checkpoints", "best"), run / "best")
    user = tmp_path / "userdir"
    user.mkdir()
    (user / "notes.txt").write_text("keep me")
    (tmp_path / "afile").write_text("mine")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}

    def merge(out):
        return CliRunner().invoke(app, ["convert", str(run / "best"), "--merge", "-o", str(out)])

    for out, msg in ((user, "userdir: exists and is not a PAWN checkpoint"),
                     (tmp_path / "afile", "afile: the output exists and is not a directory"),
                     (tmp_path / "afile" / "x", "afile is a file, not a directory"),
                     (run, "a-lora: a run directory"),
                     (run / "best", "best: the output is a symbolic link"),
                     (run / "checkpoints" / "best", "holds an adapter checkpoint that is not a merge of"),
                     (backbone_dir, "holds a checkpoint that is not a merge of")):
        r = merge(out)
        assert r.exit_code == 1 and msg in r.output and r.output.count("\n") == 1 and "Traceback" not in r.output, (out, r.output)
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before and (run / "best").is_symlink()
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith((".bak", ".tmp"))]
    first = merge(tmp_path / "merged")
    assert first.exit_code == 0, first.output
    stamp = (tmp_path / "merged").stat().st_ino  # the old directory lives until the new one is in place
    again = merge(tmp_path / "merged")  # its own earlier result: replaced
    assert again.exit_code == 0, again.output
    assert (tmp_path / "merged").stat().st_ino != stamp
    assert ck.load_checkpoint(tmp_path / "merged").run_config["merged_from"] == str((run / "best").resolve())
    r = CliRunner().invoke(app, ["convert", str(backbone_dir), "--merge", "-o", str(tmp_path / "m2")])
    assert r.exit_code == 1 and "a backbone (model) checkpoint, not an adapter checkpoint" in r.output
    assert not (tmp_path / "m2").exists()
    with pytest.raises(FileNotFoundError, match="config.json: is a file, not a checkpoint directory; the checkpoint is its directory"):
        ck.load_checkpoint(backbone_dir / ck.CONFIG_FILE)
