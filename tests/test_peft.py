"""LoRA adapters in the Hugging Face PEFT layout (issue 26): ``pawn convert --peft`` writes
``adapter_config.json`` + ``adapter_model.safetensors`` in PEFT's names and orientation,
``--from-peft`` reads them back bit for bit, and ``pawn.torch.load(backbone, adapter=DIR)`` gives
the JAX adapted model's logits (and real ``peft`` loads the folder, when installed)."""

from __future__ import annotations

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file
from typer.testing import CliRunner

from pawn import checkpoint as ck
from pawn.adapters import build_adapted
from pawn.adapters.io import _replace_named, load_adapter, load_backbone, save_adapter
from pawn.adapters.peft import PeftBackboneMismatchError, PeftFormatError, export_peft, import_peft, peft_selects, read_peft_lora
from pawn.cli import app
from pawn.convert import parity_batch


def _trained_lora(tmp_path, backbone, settings, seed=0, name="lora", amp=1.0):
    """A lora adapter checkpoint whose A and B are random (B is zero at init, which would hide a
    transposed or dropped B): values ~U(-amp, amp)."""
    bb, ref, _ = load_backbone(backbone)
    m = build_adapted("lora", settings, bb, jax.random.PRNGKey(seed))
    rng = np.random.default_rng(seed)
    arrays = {}
    for which, tree in (("A", m.adapter.A), ("B", m.adapter.B)):
        for t, x in tree.items():
            arrays[f"adapter.{which}.{t}"] = jnp.asarray(rng.uniform(-amp, amp, x.shape).astype(np.float32))
    m = _replace_named(m, arrays)
    return save_adapter(tmp_path / name, m, ref, run_config={"strategy": "lora", "seq_len": 64}), m, ref


_forward = eqx.filter_jit(lambda model, tokens, mask: model(tokens, mask, dtype="float32"))  # one compile per structure


SUBSET = {"rank": 3, "alpha": 5.0, "targets": ["q", "v"], "ffn": True, "layers": [1]}


def test_export_writes_peft_names_orientation_and_config(tmp_path, tiny_backbone):
    adapter, m, ref = _trained_lora(tmp_path, tiny_backbone, SUBSET)
    out = export_peft(adapter, tmp_path / "peft")
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 3 and cfg["lora_alpha"] == 5 and cfg["bias"] == "none"
    assert cfg["base_model_name_or_path"] == ref.source and cfg["lora_dropout"] == 0.0 and cfg["use_rslora"] is False
    # a layer subset: full module paths (PEFT's layers_to_transform needs a dot before "layers")
    assert cfg["target_modules"] == ["layers.1.attn.wq", "layers.1.attn.wv", "layers.1.ffn.w_gate", "layers.1.ffn.w_up",
                                     "layers.1.ffn.w_down"]
    with safe_open(str(out / "adapter_model.safetensors"), "np") as f:
        assert f.metadata() == {"format": "pt"}
    t = load_file(out / "adapter_model.safetensors")
    assert sorted(t) == sorted(f"base_model.model.layers.1.{blk}.{n}.lora_{w}.weight"
                               for blk, n in (("attn", "wq"), ("attn", "wv"), ("ffn", "w_gate"), ("ffn", "w_up"), ("ffn", "w_down"))
                               for w in "AB")
    a, b = t["base_model.model.layers.1.ffn.w_down.lora_A.weight"], t["base_model.model.layers.1.ffn.w_down.lora_B.weight"]
    assert a.shape == (3, 64) and b.shape == (32, 3) and a.dtype == b.dtype == np.float32  # (r, in), (out, r); d_ff 64, d 32
    np.testing.assert_array_equal(a, np.asarray(m.adapter.A["w_down"][0]).T)
    np.testing.assert_array_equal(b, np.asarray(m.adapter.B["w_down"][0]).T)
    rec = json.loads((out / "pawn_adapter.json").read_text())
    assert rec["backbone"] == ref.to_json() and rec["settings"]["rank"] == 3 and rec["exported_from"] == str(adapter.resolve())
    assert set(ck.verify_manifest(out)) == {"adapter_config.json", "adapter_model.safetensors", "pawn_adapter.json", "README.md"}
    assert "library_name: peft" in (out / "README.md").read_text()


def test_all_layers_give_suffix_target_modules_and_integral_alpha_stays_exact(tmp_path, tiny_backbone):
    adapter, m, _ = _trained_lora(tmp_path, tiny_backbone, {"rank": 4, "alpha": 0.3})
    out = export_peft(adapter, tmp_path / "peft")
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["target_modules"] == ["wq", "wk", "wv", "wo"] and cfg["lora_alpha"] == 0.3
    p = read_peft_lora(out)
    assert p.scaling == m.adapter.scale == 0.3 / 4  # the same float64 PEFT computes (lora_alpha / r)
    assert peft_selects(cfg, "layers.0.attn.wq") and not peft_selects(cfg, "layers.0.ffn.w_up") and not peft_selects(cfg, "lm_head")
    # PEFT's other forms: layers_to_transform by the index after ".layers.", exclude_modules first
    nested = {"target_modules": ["wq"], "layers_to_transform": [1], "layers_pattern": "layers"}
    assert peft_selects(nested, "model.layers.1.attn.wq") and not peft_selects(nested, "model.layers.0.attn.wq")
    assert not peft_selects(nested, "layers.1.attn.wq")  # no dot before "layers": why PAWN writes full paths
    assert not peft_selects({"target_modules": ["wq"], "exclude_modules": ["layers.0.attn.wq"]}, "layers.0.attn.wq")


def test_pawn_to_peft_to_pawn_is_bit_identical(tmp_path, tiny_backbone):
    adapter, _, ref = _trained_lora(tmp_path, tiny_backbone, SUBSET)
    out = export_peft(adapter, tmp_path / "peft")
    back = import_peft(out, tmp_path / "back")  # a PAWN export needs no backbone
    before, after = load_file(adapter / "adapter.safetensors"), load_file(back / "adapter.safetensors")
    assert sorted(before) == sorted(after) and len(before) == 10
    for k in before:
        assert after[k].dtype == before[k].dtype and after[k].tobytes() == before[k].tobytes(), k
    la, lb = load_adapter(adapter), load_adapter(back)
    assert lb.model.settings == la.model.settings and lb.backbone == ref
    assert lb.run_config == {**la.run_config, "imported_from": str(out.resolve())}
    tokens, mask = parity_batch(64, seed=1)
    np.testing.assert_array_equal(np.asarray(_forward(lb.model, tokens, mask)), np.asarray(_forward(la.model, tokens, mask)))


def test_torch_loader_with_the_peft_folder_gives_the_jax_adapted_logits(tmp_path, tiny_backbone):
    torch = pytest.importorskip("torch")  # the pawn[torch] extra; CI installs it
    import pawn.torch as pt

    adapter, m, _ = _trained_lora(tmp_path, tiny_backbone, {"rank": 2, "alpha": 6.0, "ffn": True}, amp=0.3)  # scale 3
    out = export_peft(adapter, tmp_path / "peft")
    tokens, mask = parity_batch(64, seed=2)
    ours = np.asarray(_forward(m, tokens, mask))
    tm = pt.load(tiny_backbone, adapter=out)
    with torch.no_grad():
        theirs = tm(torch.from_numpy(tokens.astype(np.int64)), torch.from_numpy(mask)).numpy()
        plain = pt.load(tiny_backbone)(torch.from_numpy(tokens.astype(np.int64)), torch.from_numpy(mask)).numpy()
    real = mask & (np.cumsum(mask, axis=1) > 0)
    assert np.abs(ours - plain)[real].max() > 0.5  # the adapter moves the logits a lot (a dropped scale or B shows)
    diff = np.abs(theirs - ours)[real].max()
    print(f"\nmax |dlogit| torch+PEFT folder vs JAX adapted: {diff:.2e}")
    assert diff <= 1e-5
    sd = tm.state_dict()
    assert "layers.0.attn.wq.weight" in sd and tuple(sd["layers.1.ffn.w_down.lora_A.weight"].shape) == (2, 64)


def test_the_torch_loader_refuses_another_backbone_and_a_pawn_layout(tmp_path, tiny_backbone):
    pytest.importorskip("torch")
    import pawn.torch as pt
    from pawn.config import ModelConfig
    from pawn.model import PAWNModel

    adapter, _, ref = _trained_lora(tmp_path, tiny_backbone, {"rank": 2})
    out = export_peft(adapter, tmp_path / "peft")
    cfg = ModelConfig(d_model=32, n_layers=2, n_heads=1, d_ff=64)
    other = ck.save_checkpoint(tmp_path / "other", {k: np.asarray(v) for k, v in PAWNModel(cfg, jax.random.PRNGKey(9)).params().items()}, cfg)
    with pytest.raises(PeftBackboneMismatchError, match=f"but the adapter was trained on {ref.sha256}"):
        pt.load(other, adapter=out)
    with pytest.raises(PeftFormatError, match=r"adapter_config.json is missing; .*pawn convert .* --peft OUT"):
        pt.load(tiny_backbone, adapter=adapter)


def test_a_folder_peft_itself_would_write_is_read_and_checked(tmp_path, tiny_backbone):
    """A PEFT folder not from PAWN (no pawn_adapter.json): regex target_modules, float16
    factors; imported with its backbone; its logits are those of the same weights in PAWN."""
    from safetensors.numpy import save_file

    f = tmp_path / "foreign"
    f.mkdir()
    rng = np.random.default_rng(5)
    tensors = {}
    for i in (0, 1):
        for n in ("wk", "wo"):
            tensors[f"base_model.model.layers.{i}.attn.{n}.lora_A.weight"] = rng.uniform(-1, 1, (2, 32)).astype(np.float16)
            tensors[f"base_model.model.layers.{i}.attn.{n}.lora_B.weight"] = rng.uniform(-1, 1, (32, 2)).astype(np.float16)
    save_file(tensors, str(f / "adapter_model.safetensors"), metadata={"format": "pt"})
    base = {"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": r"layers\.\d+\.attn\.(wk|wo)",
            "base_model_name_or_path": None, "use_dora": False}
    (f / "adapter_config.json").write_text(json.dumps(base))
    with pytest.raises(Exception, match="names no base_model_name_or_path; give the backbone"):
        import_peft(f, tmp_path / "x")
    out = import_peft(f, tmp_path / "imp", backbone_dir=tiny_backbone)
    la = load_adapter(out)
    assert la.model.settings.targets == ("k", "o") and la.model.settings.alpha is None and la.model.settings.rank == 2
    np.testing.assert_array_equal(np.asarray(la.model.adapter.B["wo"][1]), tensors["base_model.model.layers.1.attn.wo.lora_B.weight"].astype(np.float32).T)
    # refusals, one line each, naming the file and field
    for change, msg in (({"use_dora": True}, "adapter_config.json: use_dora is True; PAWN's LoRA supports only use_dora = false"),
                        ({"use_rslora": True}, "use_rslora is True"),
                        ({"peft_type": "IA3"}, "peft_type is 'IA3'; PAWN reads LORA adapters only"),
                        ({"target_modules": ["wk"]}, r"weights for layers.0.attn.wo, which target_modules \['wk'\] does not select"),
                        ({"target_modules": ["wk", "wo", "lm_head"]}, "target_modules selects lm_head, which PAWN's LoRA does not adapt"),
                        ({"target_modules": ["wk", "wo", "wq"]}, "selects layers.0.attn.wq, but adapter_model.safetensors has no lora_A/lora_B")):
        (f / "adapter_config.json").write_text(json.dumps({**base, **change}))
        with pytest.raises(PeftFormatError, match=msg):
            import_peft(f, tmp_path / "y", backbone_dir=tiny_backbone)
    (f / "adapter_config.json").write_text(json.dumps({**base, "r": 4}))
    with pytest.raises(PeftFormatError, match=r"layers.0.attn.wk.lora_A.weight has shape \[2, 32\], r=4 on .* needs \[4, 32\]"):
        import_peft(f, tmp_path / "y", backbone_dir=tiny_backbone)
    assert not (tmp_path / "y").exists()


def test_cli_peft_round_trip_and_refusals(tmp_path, tiny_backbone):
    adapter, _, _ = _trained_lora(tmp_path, tiny_backbone, {"rank": 2})
    r = CliRunner().invoke(app, ["convert", str(adapter), "--peft", str(tmp_path / "peft")])
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1] == str(tmp_path / "peft")
    again = CliRunner().invoke(app, ["convert", str(adapter), "--peft", str(tmp_path / "peft")])  # its own export: replaced
    assert again.exit_code == 0, again.output
    r = CliRunner().invoke(app, ["convert", str(tmp_path / "peft"), "--from-peft", "-o", str(tmp_path / "back")])
    assert r.exit_code == 0, r.output
    assert load_file(tmp_path / "back" / "adapter.safetensors").keys() == load_file(adapter / "adapter.safetensors").keys()
    # another strategy: one line naming it, nothing written
    bb, ref, _ = load_backbone(tiny_backbone)
    film = save_adapter(tmp_path / "film", build_adapted("film", {}, bb, jax.random.PRNGKey(0)), ref)
    r = CliRunner().invoke(app, ["convert", str(film), "--peft", str(tmp_path / "p2")])
    assert r.exit_code == 1
    (err,) = [line for line in r.output.splitlines() if line.startswith("error: ")]
    assert err == f"error: {film.resolve()}: a film adapter checkpoint; the PEFT format holds LoRA adapters only (strategy lora)"
    assert not (tmp_path / "p2").exists()
    # an output that is someone else's folder is refused before any work
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    r = CliRunner().invoke(app, ["convert", str(adapter), "--peft", str(tmp_path / "taken")])
    assert r.exit_code == 1 and "exists and is not an earlier PEFT export of" in r.output
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"
    # a run directory stands for its best checkpoint (said in one line)
    best = save_adapter(tmp_path / "run" / "checkpoints" / "best", load_adapter(adapter).model, ref)
    (tmp_path / "run" / "config.json").write_text("{}")
    r = CliRunner().invoke(app, ["convert", str(tmp_path / "run"), "--peft", str(tmp_path / "p4")])
    assert r.exit_code == 0, r.output
    assert f"{tmp_path / 'run'} is a run directory: using its best checkpoint {best}" in r.output
    assert json.loads((tmp_path / "p4" / "pawn_adapter.json").read_text())["exported_from"] == str(best.resolve())
    # a PEFT folder given as a model or backbone says what it is and how to use it
    for argv in (["eval", str(tmp_path / "peft"), "--games", "4"],
                 ["adapt", str(tmp_path / "peft"), "--strategy", "lora", "--data", str(tmp_path), "--out", str(tmp_path / "r")]):
        r = CliRunner().invoke(app, argv)
        (err,) = [line for line in r.output.splitlines() if line.startswith("error: ")]
        assert r.exit_code == 1 and err.startswith(f"error: {tmp_path / 'peft'}: a PEFT adapter folder for the backbone "
                                                   f"{ref.source}, not a PAWN checkpoint; read it in with `pawn convert"), err
    r = CliRunner().invoke(app, ["convert", str(adapter), "--peft", str(tmp_path / "p3"), "--merge"])
    assert r.exit_code == 2 and "--merge and --peft cannot be combined" in r.output


@pytest.mark.slow  # importing peft + transformers alone takes ~7 s on the 2-core CI machine
def test_real_peft_loads_the_folder_and_pawn_reads_what_peft_writes(tmp_path, tiny_backbone):
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")  # the pawn[peft] extra; the only test that skips without it
    import pawn.torch as pt

    adapter, m, _ = _trained_lora(tmp_path, tiny_backbone, SUBSET, amp=0.3)
    out = export_peft(adapter, tmp_path / "peft")
    tokens, mask = parity_batch(64, seed=4)
    tt, tmask = torch.from_numpy(tokens.astype(np.int64)), torch.from_numpy(mask)
    real = mask & (np.cumsum(mask, axis=1) > 0)
    pm = peft.PeftModel.from_pretrained(pt.load(tiny_backbone), str(out)).eval()
    with torch.no_grad():
        theirs = pm(tt, tmask).numpy()
        ours_t = pt.load(tiny_backbone, adapter=out)(tt, tmask).numpy()
    ours = np.asarray(_forward(m, tokens, mask))
    assert np.abs(theirs - ours_t)[real].max() <= 1e-6
    assert np.abs(theirs - ours)[real].max() <= 1e-5
    # the other way: a LoRA trained with PEFT on PAWNTorch, saved by PEFT, read by PAWN
    base = pt.load(tiny_backbone)
    pm2 = peft.get_peft_model(base, peft.LoraConfig(r=2, lora_alpha=7, target_modules=["wq", "wo"]))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in pm2.named_parameters():
            if "lora_" in name:
                p.copy_((torch.rand(p.shape, generator=g) - 0.5) * 0.4)
    pm2.save_pretrained(str(tmp_path / "by-peft"))
    with torch.no_grad():
        want = pm2.eval()(tt, tmask).numpy()
    imported = load_adapter(import_peft(tmp_path / "by-peft", tmp_path / "imp", backbone_dir=tiny_backbone)).model
    assert imported.settings.alpha == 7.0 and imported.settings.targets == ("q", "o")
    assert np.abs(np.asarray(_forward(imported, tokens, mask)) - want)[real].max() <= 1e-5


def test_the_peft_module_imports_without_jax():
    """``pawn.torch`` reads PEFT folders through :mod:`pawn.adapters.peft`; neither may pull in JAX
    (``pawn.adapters`` loads its JAX names on first use)."""
    import subprocess
    import sys

    code = "import sys, pawn.adapters.peft, pawn.adapters; print(sorted(m for m in ('jax', 'equinox') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
