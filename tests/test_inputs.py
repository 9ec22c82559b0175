"""Bad settings and inputs from a new-user trial: non-finite floats are refused at validation in
every settings model, a run that fails before writing leaves no directory that blocks its re-run,
a bad value is reported against its source (flag, environment variable, config file), and skipped
PGN games are named (file, game number, ply, reason)."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from pawn.adapters.strategies.lora import LoRAConfig
from pawn.bench.settings import BenchSettings
from pawn.cli import app
from pawn.config import ModelConfig
from pawn.evaluate.settings import GenerateSettings, ProbeSettings
from pawn.play.config import PlayConfig
from pawn.settings import PretrainConfig
from pawn.sweep.settings import SweepSettings
from pawn.train.adapt_config import AdaptSettings
from pawn.train.hooks import RunHooks
from pawn.train.run import Run
from pawn.train.rundir import check_run_dir

from test_cli_errors import one_line_error

_ADAPT = {"backbone": "bb", "data": "games.pgn", "strategy": "lora"}


# (model, the other fields it needs, the float field set to a non-finite value)
_CASES = [
    (PretrainConfig, {"variant": "toy", "total_steps": 4}, "lr"),
    (PretrainConfig, {"variant": "toy", "total_steps": 4}, "hub_exit_wait_s"),
    (AdaptSettings, _ADAPT, "lr"),
    (AdaptSettings, _ADAPT, "init_scale"),
    (AdaptSettings, _ADAPT, "lora_alpha"),
    (AdaptSettings, _ADAPT, "weight_decay"),
    (SweepSettings, {"out": "sweeps/x"}, "timeout"),
    (PlayConfig, {}, "movetime_ms"),
    (ProbeSettings, {}, "lr"),
    (GenerateSettings, {}, "temperature"),
]


def _load(model, fields):
    return model.load(**fields) if hasattr(model, "load") else model(**fields)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 1e400])
@pytest.mark.parametrize("model,base,name", _CASES, ids=[f"{m.__name__}.{n}" for m, _, n in _CASES])
def test_every_settings_model_refuses_non_finite_floats(model, base, name, value):
    with pytest.raises(ValidationError) as ei:
        _load(model, {**base, name: value})
    errs = ei.value.errors()
    assert [e["loc"][0] for e in errs] == [name] and errs[0]["type"] == "finite_number", errs


def test_adapter_and_model_configs_refuse_non_finite_floats():
    with pytest.raises(ValidationError, match="finite"):
        LoRAConfig(init_scale=math.inf)
    with pytest.raises(ValidationError, match="finite"):
        LoRAConfig(alpha=math.nan)
    with pytest.raises(ValidationError, match="finite"):
        ModelConfig(d_model=64, n_layers=2, n_heads=4, d_ff=128, rope_base=math.inf)
    assert LoRAConfig(init_scale=0.5).init_scale == 0.5  # finite values still pass


def test_no_settings_float_field_needs_inf():
    """Every command's settings model refuses inf (none of their float fields means 'unlimited')."""
    for model in (PretrainConfig, AdaptSettings, SweepSettings, PlayConfig, BenchSettings, ProbeSettings, GenerateSettings):
        assert model.model_config.get("allow_inf_nan") is False, model.__name__


@pytest.mark.parametrize("argv,flag", [
    (["pretrain", "--variant", "toy", "--total-steps", "4", "--lr", "inf"], "--lr"),
    (["pretrain", "--variant", "toy", "--total-steps", "4", "--lr", "1e400"], "--lr"),
    (["adapt", "BB", "--strategy", "lora", "--data", "games.pgn", "--init-scale", "inf"], "--init-scale"),
    (["adapt", "BB", "--strategy", "lora", "--data", "games.pgn", "--lora-alpha", "inf"], "--lora-alpha"),
])
def test_cli_non_finite_float_is_one_line_and_writes_nothing(tmp_path, argv, flag):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, [*argv, "--out", str(out)])
    one_line_error(res, 2, f"{flag}: Input should be a finite number")
    assert not out.exists()


def _run(tmp_path, name="run"):
    run_dir = tmp_path / name
    return Run.check(run_dir, resume=None, resume_from=None, overwrite=False, new_config={}, ignored_fields=(), log=lambda m: None)


def test_a_run_that_fails_before_writing_its_config_leaves_nothing_that_blocks_the_rerun(tmp_path):
    run = _run(tmp_path)
    with pytest.raises(ValueError):  # a snapshot that is not JSON (what --init-scale inf used to give)
        run.open(snapshot={"lr": math.inf}, open_sinks=RunHooks, start_step=0, resumed_from=None)
    assert not run.run_dir.exists()
    assert check_run_dir(run.run_dir).move_aside is False  # the re-run is not refused
    run = _run(tmp_path)
    run.open(snapshot={"lr": 1.0}, open_sinks=RunHooks, start_step=0, resumed_from=None)
    assert (run.run_dir / "config.json").is_file() and (run.run_dir / "checkpoints").is_dir()
    run.logger.close()


def test_a_failed_open_keeps_what_was_there_before(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "slurm.log").write_text("job started")
    run = _run(tmp_path)
    with pytest.raises(ValueError):
        run.open(snapshot={"lr": math.nan}, open_sinks=RunHooks, start_step=0, resumed_from=None)
    assert sorted(p.name for p in run_dir.iterdir()) == ["slurm.log"]
    assert (run_dir / "slurm.log").read_text() == "job started"


def test_bad_value_from_the_environment_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("PAWN_LORA_RANK", "abc")
    res = CliRunner().invoke(app, ["adapt", "BB", "--strategy", "lora", "--data", "g.pgn", "--out", str(tmp_path / "o")])
    line = one_line_error(res, 2, "PAWN_LORA_RANK: ", "integer")
    assert "error: lora_rank" not in line


def test_bad_value_from_the_environment_with_another_prefix(tmp_path, monkeypatch):
    monkeypatch.setenv("PAWN_SWEEP_TIMEOUT", "-3")
    res = CliRunner().invoke(app, ["sweep", "--strategy", "lora", "--out", str(tmp_path / "s")])
    one_line_error(res, 2, "PAWN_SWEEP_TIMEOUT: ", "greater than 0")


@pytest.mark.parametrize("suffix,text", [(".toml", "lora_rnak = 3\n"), (".json", '{"lora_rnak": 3}')])
def test_unknown_key_in_a_config_file_names_the_file(tmp_path, suffix, text):
    cfg = tmp_path / f"c1{suffix}"
    cfg.write_text(text)
    res = CliRunner().invoke(app, ["adapt", "BB", "--strategy", "lora", "--data", "g.pgn", "--config", str(cfg)])
    one_line_error(res, 2, f"{cfg}: lora_rnak: unknown field")


def test_each_source_is_named_and_the_winning_source_is_the_one_named(tmp_path, monkeypatch):
    cfg = tmp_path / "c.toml"
    cfg.write_text("lr = -1.0\nweight_decay = -2.0\n")
    monkeypatch.setenv("PAWN_WEIGHT_DECAY", "-3")  # the environment beats the file
    res = CliRunner().invoke(app, ["adapt", "BB", "--strategy", "lora", "--data", "g.pgn", "--config", str(cfg),
                                   "--init-scale", "inf"])
    line = one_line_error(res, 2)
    assert f"{cfg}: lr: " in line and "PAWN_WEIGHT_DECAY: " in line and "--init-scale: " in line, line
    assert f"{cfg}: weight_decay" not in line


# ---------------------------------------------------------------------------------- skipped PGN games
_GOOD = '[Event "g"]\n[WhiteElo "1500"]\n[BlackElo "1500"]\n[Result "1-0"]\n[Termination "Normal"]\n\n' \
        "1. e4 e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# 1-0\n\n"
_ILLEGAL = '[Event "b"]\n[Result "1-0"]\n[Termination "Normal"]\n\n1. e4 e5 2. Ke8 Nc6 1-0\n\n'  # ply 2 (from 0)
_UNREADABLE = '[Event "u"]\n[Result "1-0"]\n[Termination "Normal"]\n\n1. e4 e5 2. Nf3 Sc6 1-0\n\n'  # ply 3


def _bad_pgn(path):
    """Games 1..12: bad ones at 3 (illegal, ply 2), 5 (unreadable, ply 3), 6, 8, 9, 11, 12 (illegal)."""
    bad = {3: _ILLEGAL, 5: _UNREADABLE, 6: _ILLEGAL, 8: _ILLEGAL, 9: _ILLEGAL, 11: _ILLEGAL, 12: _ILLEGAL}
    path.write_text("".join(bad.get(i, _GOOD) for i in range(1, 13)))
    return path


@pytest.mark.parametrize("pieces", [False, True])
def test_scan_names_the_first_skipped_games_with_file_game_ply_and_reason(tmp_path, monkeypatch, pieces):
    from pawn.data import lichess

    if pieces:  # a large file is parsed in pieces: game numbers still count from the file's start
        monkeypatch.setattr(lichess, "PGN_CHUNK_BYTES", 400)
    pgn = _bad_pgn(tmp_path / "broken.pgn")
    corpus = lichess.load_corpus(pgn, lichess.LichessFilters(min_ply=1), cache_dir=tmp_path / "cache", val_games=1)
    s = corpus.caches[0].stats
    assert s.read == 12 and s.kept == 5 and s.n_skipped == 7
    f = str(pgn.resolve())
    assert s.skipped == [(f, 3, 2, "illegal_move"), (f, 5, 3, "unreadable_move"), (f, 6, 2, "illegal_move"),
                         (f, 8, 2, "illegal_move"), (f, 9, 2, "illegal_move")]
    assert s.skipped_lines() == [f"{f}: game 3, ply 2: illegal_move", f"{f}: game 5, ply 3: unreadable_move",
                                 f"{f}: game 6, ply 2: illegal_move", f"{f}: game 8, ply 2: illegal_move",
                                 f"{f}: game 9, ply 2: illegal_move", "… and 2 more"]
    again = lichess.load_corpus(pgn, lichess.LichessFilters(min_ply=1), cache_dir=tmp_path / "cache", val_games=1)
    assert again.caches[0].state == "hit" and again.caches[0].stats.skipped_lines() == s.skipped_lines()


def test_a_cache_built_before_skipped_games_were_named_is_rebuilt(tmp_path):
    import json

    from pawn.data import lichess

    pgn = _bad_pgn(tmp_path / "broken.pgn")
    first = lichess.load_corpus(pgn, lichess.LichessFilters(min_ply=1), cache_dir=tmp_path / "cache", val_games=1)
    meta_path = first.caches[0].path / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["stats"]["skipped"], meta["stats"]["n_skipped"]
    meta_path.write_text(json.dumps(meta))
    warned = []
    again = lichess.load_corpus(pgn, lichess.LichessFilters(min_ply=1), cache_dir=tmp_path / "cache", val_games=1,
                                warn=warned.append)
    assert again.caches[0].state == "rebuilt" and again.caches[0].stats.n_skipped == 7 and len(warned) == 1


def test_data_info_names_the_skipped_games(tmp_path, monkeypatch):
    monkeypatch.setenv("PAWN_DATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "200")
    pgn = _bad_pgn(tmp_path / "broken.pgn")
    res = CliRunner().invoke(app, ["data", "info", str(pgn), "--min-ply", "1"])
    assert res.exit_code == 0, res.output
    assert "game 3, ply 2: illegal_move" in res.output and "game 5, ply 3: unreadable_move" in res.output
    assert "game 9, ply 2: illegal_move" in res.output and "… and 2 more" in res.output
    assert "game 11," not in res.output


def test_eval_pgn_names_the_skipped_games(tmp_path):
    import jax

    from pawn.checkpoint import save_checkpoint
    from pawn.config import TOY
    from pawn.model import PAWNModel

    ckpt = save_checkpoint(tmp_path / "toy", PAWNModel(TOY, jax.random.PRNGKey(2)).params(), TOY)
    pgn = _bad_pgn(tmp_path / "broken.pgn")
    res = CliRunner().invoke(app, ["eval", str(ckpt), "--games", "2", "--max-ply", "16", "--pgn", str(pgn),
                                   "--pgn-min-ply", "2", "--json", str(tmp_path / "e.json")])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("skipped ") or ln.startswith("…")]
    assert lines == [f"skipped {pgn}: game 3, ply 2: illegal_move", f"skipped {pgn}: game 5, ply 3: unreadable_move",
                     f"skipped {pgn}: game 6, ply 2: illegal_move", f"skipped {pgn}: game 8, ply 2: illegal_move",
                     f"skipped {pgn}: game 9, ply 2: illegal_move", "… and 2 more"], res.output
    import json

    li = json.loads((tmp_path / "e.json").read_text())["models"][0]["lichess"]
    assert li["n_skipped"] == 7 and li["skipped"][0] == {"file": str(pgn), "game": 3, "ply": 2, "reason": "illegal_move"}


def test_adapt_data_log_names_the_skipped_games(tiny_backbone, tmp_path):
    from pawn.train.adapt import run_adapt

    pgn = tmp_path / "games.pgn"
    pgn.write_text(_ILLEGAL + _GOOD * 20 + _UNREADABLE + _GOOD * 20)
    cfg = AdaptSettings.load(backbone=str(tiny_backbone), strategy="lora", data=str(pgn), min_ply=1, epochs=1,
                             steps_per_epoch=1, batch_size=4, seq_len=16, val_games=4, cache_dir=str(tmp_path / "cache"),
                             out=str(tmp_path / "run"))
    logged: list[str] = []
    run_adapt(cfg, log=logged.append, progress=False, install_signal_handlers=False)
    # one line (it was one line per game, five and "… and N more" for the shared data's 35 FEN starts,
    # in every adapt run and sweep trial): the count per reason in words, the first game named
    assert [m for m in logged if "skipped by the PGN parser" in m] == [
        f"data: 2 games skipped by the PGN parser (1 an illegal move, 1 an unreadable move); "
        f"the first: {pgn.resolve()}: game 1, ply 2: illegal_move (pawn data info {pgn} lists them)"], logged
