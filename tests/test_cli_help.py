"""The help texts: every pretrain flag is described with its default and environment variable,
and command descriptions are not broken mid-sentence."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from pawn.cli import app
from pawn.settings import PretrainConfig


def _help(*args: str) -> str:
    res = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "400", "TERM": "dumb"})
    assert res.exit_code == 0, res.output
    return res.output


def test_pretrain_help_describes_every_flag_with_its_default():
    out = _help("pretrain")
    for name, field in PretrainConfig.model_fields.items():
        assert field.description, f"{name} has no help text"
        assert f"PAWN_{name.upper()}" in out
    # rich markup used to swallow these as unknown tags
    assert "[default: 0.0003]" in out and "[default: 0.95]" in out
    assert "(tiny supernet and toy model: 16)" in out
    assert "[default: None]" not in out


def test_command_descriptions_are_reflowed():
    out = _help()
    line = next(ln for ln in out.splitlines() if "probe" in ln and "linear probes" in ln)
    assert "best layer per probe" in line, out
    assert re.search(r"argmax over all 1,980 tokens", _help("eval"))


def test_command_descriptions_keep_square_brackets():
    """Typer renders help as rich markup: ``pawn[tensorboard]`` in pretrain's description once
    printed as ``pawn`` (the bracket read as a style tag)."""
    text = " ".join(_help("pretrain").split())
    assert "(extras pawn[tensorboard], pawn[wandb])" in text
