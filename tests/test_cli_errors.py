"""Every command-line failure is one ``error: ...`` line naming the file or field, with a non-zero
exit code and no traceback; output files are written whole or not at all."""

from __future__ import annotations

import jax
import pytest
from typer.testing import CliRunner

from pawn.checkpoint import save_checkpoint
from pawn.cli import app
from pawn.config import TOY
from pawn.model import PAWNModel


def one_line_error(res, code: int, *fragments: str) -> str:
    """Assert ``res`` failed with ``code`` and a single ``error:`` line holding ``fragments``."""
    assert isinstance(res.exception, SystemExit) or res.exception is None, repr(res.exception)
    assert res.exit_code == code, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in res.output and "╭" not in res.output, res.output
    for f in fragments:
        assert f in errors[0], res.output
    return errors[0]


@pytest.fixture(scope="module")
def toy_checkpoint(tmp_path_factory):
    m = PAWNModel(TOY, jax.random.PRNGKey(2))
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "toy", m.params(), TOY)


@pytest.mark.parametrize("target", ["dir", "under_file"])
def test_eval_json_to_an_unwritable_path_fails_before_evaluating(toy_checkpoint, tmp_path, target):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    path = tmp_path if target == "dir" else blocker / "eval.json"
    res = CliRunner().invoke(app, ["eval", str(toy_checkpoint), "--games", "2", "--max-ply", "8", "--json", str(path)])
    one_line_error(res, 1, "--json", str(path))
    assert "Top-1" not in res.output  # refused before the work, not after it
    assert blocker.read_text() == "x"


def test_generate_out_to_an_unwritable_path_is_one_line(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    for flag in ("--out", "--pgn-out"):
        res = CliRunner().invoke(app, ["generate", "--random", "--games", "2", "--max-ply", "8", flag, str(blocker / "g.out")])
        one_line_error(res, 1, flag, str(blocker / "g.out"))


def test_generate_outputs_replace_old_files_whole_and_leave_no_staging_files(tmp_path):
    out, pgn = tmp_path / "g.parquet", tmp_path / "g.pgn"
    out.write_text("old")
    pgn.write_text("old")
    res = CliRunner().invoke(app, ["generate", "--random", "--games", "3", "--max-ply", "10", "--out", str(out), "--pgn-out", str(pgn)])
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:4] == b"PAR1" and pgn.read_text().startswith("[Event")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.parquet", "g.pgn"]


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["eval", "somewhere", "--games", "-3"], "--games"),
        (["generate", "--random", "--games", "0"], "--games"),
        (["pretrain", "--total-steps", "abc"], "--total-steps"),
        (["pretrain", "--no-such-flag"], "--no-such-flag"),
        (["eval"], "checkpoint"),
    ],
)
def test_bad_command_lines_are_one_error_line_with_exit_code_2(args, fragment):
    res = CliRunner().invoke(app, args)
    one_line_error(res, 2, fragment, f"pawn {args[0]} --help")


@pytest.mark.parametrize("content", [b"garbage\n", bytes(range(256)) * 8])
def test_eval_pgn_without_a_usable_game_is_an_error_not_an_empty_table(toy_checkpoint, tmp_path, content):
    pgn = tmp_path / "junk.pgn"
    pgn.write_bytes(content)
    res = CliRunner().invoke(app, ["eval", str(toy_checkpoint), "--games", "2", "--max-ply", "16", "--pgn", str(pgn)])
    one_line_error(res, 1, str(pgn), "not a PGN file")


def test_a_bad_list_item_is_named_by_its_flag_position_and_value(toy_checkpoint, tmp_path):
    # pydantic's location of the 2nd item was printed as "--lora-targets.1"
    res = CliRunner().invoke(app, ["adapt", str(toy_checkpoint), "--strategy", "lora", "--lora-targets", "q,x",
                                   "--data", str(tmp_path), "--out", str(tmp_path / "run")])
    err = one_line_error(res, 2, "--lora-targets item 2 ('x'): Input should be 'q', 'k', 'v' or 'o'")
    assert ".1" not in err


@pytest.mark.parametrize(
    "args,env,message",
    [
        (["--total-steps", "0"], {}, "error: --total-steps must be > 0, got 0"),
        (["--total-steps", "100", "--steps-per-chunk", "7"], {},
         "error: --total-steps (100) must be a positive multiple of --steps-per-chunk (7)"),
        (["--total-steps", "10", "--batch-size", "30", "--accumulation-steps", "4"], {},
         "error: --batch-size (30) must be a multiple of --accumulation-steps (4)"),
        ([], {"PAWN_TOTAL_STEPS": "0"}, "error: PAWN_TOTAL_STEPS must be > 0, got 0"),
    ],
)
def test_a_cross_field_rule_names_each_field_by_where_its_value_came_from(args, env, message, monkeypatch):
    # these rules named the field (`total_steps must be > 0`), not the flag the user typed
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    res = CliRunner().invoke(app, ["pretrain", *args, "--dry-run"])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines()[0] == message


def test_a_cross_field_rule_keeps_a_config_file_fields_name(tmp_path):
    cfg = tmp_path / "c1.toml"
    cfg.write_text("total_steps = 0\n")
    res = CliRunner().invoke(app, ["pretrain", "--config", str(cfg), "--dry-run"])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines()[0] == "error: total_steps must be > 0, got 0"
