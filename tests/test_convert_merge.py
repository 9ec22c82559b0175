"""``pawn convert --merge`` writes a model card like every converted checkpoint, and an adapter
checkpoint given where a backbone belongs names the backbone it records (issue 26)."""

from __future__ import annotations

import jax
from typer.testing import CliRunner

from pawn import checkpoint as ck
from pawn.adapters import build_adapted
from pawn.adapters.io import load_backbone, save_adapter
from pawn.cli import app


def _lora(tmp_path, backbone):
    bb, ref, _ = load_backbone(backbone)
    return save_adapter(tmp_path / "lora", build_adapted("lora", {"rank": 2}, bb, jax.random.PRNGKey(0)), ref), ref


def test_merge_writes_a_model_card_listed_in_the_manifest(tmp_path, tiny_backbone):
    adapter, ref = _lora(tmp_path, tiny_backbone)
    r = CliRunner().invoke(app, ["convert", str(adapter), "--merge", "-o", str(tmp_path / "merged")])
    assert r.exit_code == 0, r.output
    files = ck.verify_manifest(tmp_path / "merged")
    assert "README.md" in files  # hashed like the weights, so the strict file-set check holds
    card = (tmp_path / "merged" / "README.md").read_text()
    assert card.startswith("---\n") and "library_name: pawn" in card
    assert "merged lora adapter" in card and f"`{adapter.resolve()}`" in card and ref.source in card
    ck.load_checkpoint(tmp_path / "merged")


def test_an_adapter_given_as_the_backbone_names_the_backbone_it_records(tmp_path, tiny_backbone, shared_data):
    adapter, ref = _lora(tmp_path, tiny_backbone)
    r = CliRunner().invoke(app, ["adapt", str(adapter), "--strategy", "lora", "--data", str(shared_data / "lichess"),
                                 "--out", str(tmp_path / "run")])
    assert r.exit_code == 1, r.output
    (err,) = [line for line in r.output.splitlines() if line.startswith("error: ")]
    assert err == (f"error: {adapter}: a lora adapter checkpoint for the backbone {ref.source}, not a backbone; give that "
                   f"backbone ({ref.source}), or fold the adapter in first with `pawn convert {adapter} --merge` "
                   "(lora, sparse, unfreeze, specialized_clm)"), err
    assert "model.safetensors is missing" not in r.output and not (tmp_path / "run").exists()
