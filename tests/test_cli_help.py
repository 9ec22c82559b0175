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


def test_list_strategies_shows_the_settings_pawn_adapt_uses():
    """The table shows the strategy table's defaults, which `pawn adapt` now uses too (its
    --bottleneck-dim once defaulted to 32 against the table's 8, issue 22); flags given
    alongside are reflected."""
    res = CliRunner().invoke(app, ["adapt", "--list-strategies"], env={"COLUMNS": "400", "TERM": "dumb"})
    assert res.exit_code == 0, res.output
    row = next(line for line in res.output.splitlines() if line.startswith("│ bottleneck "))
    assert "bottleneck_dim=8" in row and "bottleneck_dim=32" not in row
    res = CliRunner().invoke(app, ["adapt", "--list-strategies", "--lora-rank", "8", "--bottleneck-dim", "16"],
                             env={"COLUMNS": "400", "TERM": "dumb"})
    rows = {line.split("│")[1].strip(): line for line in res.output.splitlines() if line.startswith("│ ")}
    assert "rank=8" in rows["lora"] and "bottleneck_dim=16" in rows["bottleneck"] and "rank=8" in rows["rosa"]


def test_every_command_help_has_three_valid_examples():
    """Issue 26: each command's --help ends with three example lines, and each parses (every flag
    exists, required arguments given)."""
    import shlex

    import typer as _typer

    from pawn.cli import EXAMPLES

    import click

    group = _typer.main.get_command(app)
    ctx = click.Context(group)
    assert set(EXAMPLES) == {n for n in group.list_commands(ctx) if n != "data"}
    for name, examples in EXAMPLES.items():
        assert len(examples) == 3
        out = _help(name)
        assert "Examples:" in out
        for ex in examples:
            assert ex in out
            group.get_command(ctx, name).make_context(name, shlex.split(ex)[2:])  # raises on an unknown flag


def test_list_defaults_print_as_typed_and_no_spec_references():
    out = _help("adapt")
    assert "default q,k,v,o" in out and "('q'" not in out  # the strategy table's default, as typed
    from pawn.cli._options import format_default, user_help

    assert format_default(("q", "k", "v", "o")) == "q,k,v,o" and format_default([]) == "none" and format_default(0.5) == "0.5"
    assert user_help("counts (spec §1.8). Off") == "counts. Off"
    for name in ("pretrain", "adapt", "eval", "probe", "generate", "bench", "play", "sweep", "convert"):
        text = _help(name)
        assert "§" not in text and "shared/spec" not in text, name
        assert not re.search(r"\bspec\b", text), (name, re.findall(r".{40}\bspec\b.{40}", text))


def test_adapt_help_says_what_negated_flags_do_and_open_float_ranges():
    """``--no-adapt-attn`` read "default false" beside PAWN_NO_ADAPT_ATTN (a double negative next to
    ``adapt_attn=True`` in --list-strategies) and ``--density`` showed ``[x<=1.0]`` although 0 is
    refused ("greater than 0"): the help now gives the bottleneck's default (on) and the range (0, 1]."""
    out = re.sub(r"\s+", " ", re.sub(r"[│]", " ", _help("adapt")))
    for pos, what in (("attn", "after attention"), ("ffn", "after the FFN")):
        m = re.search(rf"--no-adapt-{pos} --adapt-{pos} <bool> (.*?) Env: PAWN_NO_ADAPT_{pos.upper()} \(true = off\)\.", out)
        assert m and what in m[1] and m[1].endswith("(bottleneck, retro-bottleneck; default on)"), out
    m = re.search(r"--density <float> (.*?) Env: PAWN_DENSITY\.", out)
    assert m and m[1].endswith("Range (0, 1].") and "x<=" not in m[1], out
    assert "default false" not in out.split("--no-adapt-attn")[1].split("Env:")[0]
    m = re.search(r"--init-scale <float> (.*?) Env: PAWN_INIT_SCALE\.", out)  # gt 0 without a maximum
    assert m and m[1].endswith("Greater than 0."), out
    res = CliRunner().invoke(app, ["adapt", "runs/x", "--density", "0"])
    assert res.exit_code != 0 and "--density: Input should be greater than 0" in res.output, res.output


def test_environment_variables_are_shown_one_way_in_every_command():
    """Every command's --help names an option's variable as `Env: PAWN_X.`, never Click's
    `[env var: PAWN_X]` (dashboard and lab used that form, the settings commands the other)."""
    from pawn.cli._errors import OneLineErrors

    for name in sorted(OneLineErrors.lazy_commands):
        assert "[env var:" not in _help(name), name
    out = " ".join(_help("dashboard").split())
    assert "Port to listen on. Env: PAWN_DASHBOARD_PORT." in out
    assert "Env: PAWN_LAB_DIR." in " ".join(_help("lab").split())
    assert "Env: PAWN_LICHESS_URL." in " ".join(_help("data", "fetch").split())


def test_uci_help_speaks_of_playing_and_points_to_the_page_that_documents_it():
    out = " ".join(_help("uci").split())
    assert "play as this nested variant" in out and "evaluate only" not in out
    assert "docs/play-and-uci.md" in out and 'README "' not in out
    assert 'README "' not in " ".join(_help().split())
