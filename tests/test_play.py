"""``pawn play`` (spec eval §4.2, issue 17): colours, the opening book, PAWN's legal-argmax moves,
score and Elo arithmetic against a hand computation, an engine killed mid-match, PGN that replays
in python-chess, a missing Stockfish, and the settings sources. A fake UCI engine
(``tests/fake_uci.py``: always the first legal move) stands in for Stockfish; one slow test plays
the real one."""

from __future__ import annotations

import io
import json
import math
import os
import stat
import sys
from pathlib import Path

import chess
import chess.pgn
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

from pawn.checkpoint import save_checkpoint
from pawn.cli import app
from pawn.config import TOY
from pawn.data.layout import Layout
from pawn.evaluate.loading import LoadedModel
from pawn.model import PAWNModel
from pawn.play import GameRecord, PawnPlayer, PlayConfig, Score, StockfishNotFound, StockfishPool, find_stockfish, play_match, summarize
from pawn.play import players as players_mod
from pawn.play.pgn import write_pgn
from pawn.vocab import PAD_TOKEN, uci_to_token

BOOK = ["e2e4", "d2d4", "g1f3"]
FIRST_LEGAL = lambda board: next(iter(board.legal_moves)).uci()  # noqa: E731  (what the fake engine plays)


@pytest.fixture(scope="module")
def fake_engine(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("fake_uci")
    exe = d / "fake-stockfish"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).with_name('fake_uci.py')} \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


@pytest.fixture(scope="module")
def toy_model():
    return PAWNModel(TOY, jax.random.PRNGKey(3))


def _player(model, name="toy", batch=3) -> PawnPlayer:
    return PawnPlayer(LoadedModel(name, model, TOY, None, name), Layout.of(False), batch=batch)


@pytest.fixture(scope="module")
def fake_match(fake_engine, toy_model, tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "setoption.log"
    os.environ["FAKE_UCI_LOG"] = str(log)
    pool = StockfishPool(str(fake_engine), 1500, 1.0, slots=3)
    try:
        res = play_match(_player(toy_model), pool, games=6, temperature=0.0, first_moves=BOOK, max_ply=14, seed=0, slots=3)
    finally:
        pool.close()
        del os.environ["FAKE_UCI_LOG"]
    return res, log.read_text()


@eqx.filter_jit
def _forward(model, tokens):
    return model(tokens)  # attention mask: tokens != PAD


def _greedy(model, tokens: list[int], legal: list[int]) -> int:
    """PAWN's greedy move by hand: one game alone, PAD-filled to 16 slots, logits at its last move."""
    seq = np.full((1, 16), PAD_TOKEN, np.int32)
    seq[0, :len(tokens)] = tokens
    logits = np.asarray(_forward(model, jnp.asarray(seq)))[0, len(tokens) - 1]
    return max(legal, key=lambda t: logits[t])


def test_colours_alternate_book_rotates_and_every_move_follows_its_player(fake_match, toy_model):
    res, setoptions = fake_match
    recs = res.records
    assert [r.index for r in recs] == list(range(6))
    assert [r.pawn_white for r in recs] == [True, False] * 3
    assert [r.first_move for r in recs if r.pawn_white] == BOOK  # book index = white-game count
    assert all(r.book == r.pawn_white for r in recs)
    for r in recs:
        assert r.plies == 14 and r.term == "ply_limit" and r.result == "draw", r
        board, toks = chess.Board(), []
        for ply, mv in enumerate(r.moves):
            pawn_moves = (ply % 2 == 0) == r.pawn_white
            legal = {uci_to_token(m.uci()): m.uci() for m in board.legal_moves}
            if not pawn_moves:
                assert mv == FIRST_LEGAL(board), (r.index, ply)
            elif ply > 0:
                assert mv == legal[_greedy(toy_model, toks, list(legal))], (r.index, ply)
            toks.append(uci_to_token(mv))
            board.push_uci(mv)
    for line in ("UCI_LimitStrength value true", "UCI_Elo value 1500", "Hash value 16", "Threads value 1"):
        assert line in setoptions


def test_uci_elo_outside_the_engine_range_is_clamped_and_reported(fake_engine):
    pool = StockfishPool(str(fake_engine), 900, 1.0, slots=1)
    try:
        pool.start()
        assert pool.effective_elo == 1000 and pool.name == "stockfish-1000" and "900" in pool.note
    finally:
        pool.close()


def test_score_and_elo_interval_match_a_hand_computation():
    # 6 wins, 2 draws, 2 losses: s = 7/10; Δ = 400·log10(0.7/0.3) = 147.19; Wilson, z = 1.959964,
    # z²/N = 0.384146: centre (0.7 + 0.192073)/1.384146 = 0.644494, half 1.416010·√(0.021 + 0.009604)
    # = 0.247716 → s ∈ [0.396778, 0.892209] → Δ ∈ [−72.77, 367.15].
    s = Score(6, 2, 2)
    assert (s.games, s.score, s.score_rate, s.winrate_strict) == (10, 7.0, 0.7, 0.6)
    assert s.elo() == pytest.approx(147.19, abs=0.01)
    lo, hi = s.score_interval()
    assert (lo, hi) == (pytest.approx(0.396778, abs=1e-6), pytest.approx(0.892209, abs=1e-6))
    elo_lo, elo_hi = s.elo_interval()
    assert (elo_lo, elo_hi) == (pytest.approx(-72.77, abs=0.01), pytest.approx(367.15, abs=0.01))
    d = s.to_dict(reference_elo=1500)
    assert d["elo_estimate"] == pytest.approx(1647.19, abs=0.01)
    assert d["elo_estimate_ci95"] == [pytest.approx(1427.23, abs=0.01), pytest.approx(1867.15, abs=0.01)]
    assert Score(0, 4, 0).elo() == 0.0 and Score(3, 0, 0).elo() == math.inf and Score(0, 0, 2).elo() == -math.inf


@pytest.mark.parametrize("n", [1, 2, 10, 100])
def test_score_interval_keeps_its_width_at_0_100_percent_and_all_draws(n):
    """The normal (Wald) interval collapsed to [0, 0], [1, 1] and [½, ½] there, so a 2-game match
    looked certain (issue 25). Wilson at 0/N and N/N has the closed form z²/(N + z²) and N/(N + z²)."""
    from pawn.play.stats import Z95

    z2 = Z95 ** 2
    assert Score(0, 0, n).score_interval() == (0.0, pytest.approx(z2 / (n + z2), rel=1e-12))
    assert Score(n, 0, 0).score_interval() == (pytest.approx(n / (n + z2), rel=1e-12), 1.0)
    lo, hi = Score(0, n, 0).score_interval()
    assert lo == pytest.approx(1 - hi, abs=1e-12) and hi - lo > 0.19  # n = 100: ±0.0976
    elo_lo, elo_hi = Score(n, 0, 0).elo_interval()
    assert elo_hi == math.inf and math.isfinite(elo_lo) and elo_lo == pytest.approx(-400 * math.log10(z2 / n))


def _rec(i, white, result, first=None, term="checkmate"):
    return GameRecord(i, 0.0, "pawn", "stockfish-1500", 1500, white, first, first is not None, result, term, 10, [])


def test_summary_counts_by_colour_opening_and_leaves_engine_errors_unscored():
    recs = [_rec(0, True, "win", "e2e4"), _rec(1, False, "loss"), _rec(2, True, "draw", "d2d4", "ply_limit"),
            _rec(3, False, "win"), _rec(4, True, "win", "e2e4"), _rec(5, False, None, term="engine_error")]
    s = summarize(recs, reference_elo=1500)
    assert (s["wins"], s["draws"], s["losses"], s["games"], s["engine_errors"]) == (3, 1, 1, 5, 1)
    assert s["score_rate"] == pytest.approx(3.5 / 5)
    assert s["as_white_wdl"] == {"w": 2, "d": 1, "l": 0} and s["as_black_wdl"] == {"w": 1, "d": 0, "l": 1}
    assert s["per_opening"] == {"e2e4": {"w": 2, "d": 0, "l": 0}, "d2d4": {"w": 0, "d": 1, "l": 0}}
    assert s["terminations"] == {"checkmate": 4, "ply_limit": 1, "engine_error": 1}
    assert s["elo_estimate"] == pytest.approx(1500 - 400 * math.log10(5 / 3.5 - 1))


def test_an_engine_killed_mid_match_ends_that_game_only(fake_engine, toy_model, tmp_path):
    die = tmp_path / "die"
    die.write_text("1")
    os.environ["FAKE_UCI_DIE_FILE"] = str(die)
    pool = StockfishPool(str(fake_engine), 1500, 1.0, slots=2)
    try:
        res = play_match(_player(toy_model, batch=2), pool, games=4, temperature=0.0, first_moves=BOOK, max_ply=12, seed=0, slots=2)
    finally:
        pool.close()
        del os.environ["FAKE_UCI_DIE_FILE"]
    assert not die.exists()
    errs = [r for r in res.records if r.term == "engine_error"]
    assert len(errs) == 1 and errs[0].result is None and 6 <= errs[0].plies < 12 and errs[0].error
    assert len(res.records) == 4 and res.engine_restarts == 1
    assert all(r.term == "ply_limit" and r.plies == 12 for r in res.records if r is not errs[0])
    assert summarize(res.records)["games"] == 3
    out = tmp_path / "m.pgn"
    write_pgn(out, res.records)
    games = _read_pgn(out)
    g = games[errs[0].index]
    assert g.headers["Result"] == "*" and g.headers["Termination"] == "abandoned" and g.headers["PawnTermination"] == "engine_error"


def _read_pgn(path: Path) -> list[chess.pgn.Game]:
    games, f = [], io.StringIO(path.read_text())
    while (g := chess.pgn.read_game(f)) is not None:
        assert not g.errors, g.errors
        games.append(g)
    return games


def test_pgn_replays_legally_with_the_recorded_results(fake_match, tmp_path):
    res, _ = fake_match
    mate = GameRecord(6, 1.0, "toy", "stockfish-1500", 1500, True, "f2f3", True, "loss", "checkmate", 4,
                      ["f2f3", "e7e5", "g2g4", "d8h4"])
    ladder = GameRecord(7, 1.0, "toy", "greedy", 478.4, True, "f2f3", True, "loss", "checkmate", 4,
                        ["f2f3", "e7e5", "g2g4", "d8h4"])  # a ladder rung's anchor is a float ("478.4" before)
    recs = res.records + [mate]
    out = tmp_path / "games.pgn"
    write_pgn(out, recs, event="test")
    games = _read_pgn(out)
    assert len(games) == len(recs)
    for g, r in zip(games, recs):
        board = g.end().board()
        assert [m.uci() for m in g.mainline_moves()] == r.moves
        h = g.headers
        assert (h["White"], h["Black"]) == ((r.pawn, r.opponent) if r.pawn_white else (r.opponent, r.pawn))
        assert h["Result"] == r.pgn_result and h["PlyCount"] == str(r.plies) and h["PawnTermination"] == r.term
        assert h["BlackElo" if r.pawn_white else "WhiteElo"] == "1500"
        if r.term == "checkmate":
            assert board.is_checkmate() and board.outcome().result() == h["Result"] == "0-1"
        else:
            assert h["Result"] == "1/2-1/2" and h["Termination"] == "adjudication" and board.ply() == 14
    write_pgn(out, [ladder], event="test")
    assert _read_pgn(out)[0].headers["BlackElo"] == "478"


def test_pawn_vs_pawn_uses_the_book_for_either_model_as_white(toy_model):
    other = PAWNModel(TOY, jax.random.PRNGKey(9))
    res = play_match(_player(toy_model, "a", 2), _player(other, "b", 2), games=4, temperature=1.0, first_moves=BOOK,
                     max_ply=10, seed=5, slots=2)
    assert [(r.pawn_white, r.first_move, r.opponent) for r in res.records] == [
        (True, "e2e4", "b"), (False, "e2e4", "b"), (True, "d2d4", "b"), (False, "d2d4", "b")]
    again = play_match(_player(toy_model, "a", 1), _player(other, "b", 1), games=4, temperature=1.0, first_moves=BOOK,
                       max_ply=10, seed=5, slots=1)
    assert [r.moves for r in again.records] == [r.moves for r in res.records]  # per-game seeds: slots do not matter


def test_missing_stockfish_is_one_line_with_an_install_hint(monkeypatch, tmp_path):
    with pytest.raises(StockfishNotFound, match="apt-get install stockfish"):
        find_stockfish(tmp_path / "no-such-stockfish")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(players_mod, "_EXTRA_DIRS", (str(tmp_path),))
    with pytest.raises(StockfishNotFound, match="not found on PATH"):
        find_stockfish()
    res = CliRunner().invoke(app, ["play", "some/ckpt", "--games", "2"])
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: stockfish not found") and "apt-get install stockfish" in lines[0]


def test_settings_come_from_flags_environment_and_config_file(monkeypatch, tmp_path):
    cfg_file = tmp_path / "play.toml"
    cfg_file.write_text('temperatures = [0.25]\ngames = 3\nfirst_moves = "g1f3"\n')
    monkeypatch.setenv("PAWN_PLAY_GAMES", "7")
    cfg = PlayConfig.load(cfg_file, stockfish_elo="1400, 1600")
    assert (cfg.games, cfg.temperatures, cfg.first_moves, cfg.stockfish_elo) == (7, [0.25], ["g1f3"], [1400, 1600])
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="first_moves"):
        PlayConfig.load(first_moves="e2e5")
    with pytest.raises(ValidationError, match="temperatures"):
        PlayConfig.load(temperatures="0,-1")


def test_cli_writes_table_json_and_pgn(fake_engine, toy_model, tmp_path):
    ckpt = save_checkpoint(tmp_path / "toy", toy_model.params(), TOY)
    js, pgn = tmp_path / "play.json", tmp_path / "play.pgn"
    res = CliRunner().invoke(app, ["play", str(ckpt), "--stockfish", str(fake_engine), "--stockfish-elo", "1200",
                                   "--games", "2", "--temperatures", "0,1", "--max-ply", "8", "--json", str(js),
                                   "--pgn-out", str(pgn)])
    assert res.exit_code == 0, res.output
    assert "stockfish-1200" in res.output and "0/4/0" not in res.output
    data = json.loads(js.read_text())
    assert [s["temperature"] for s in data["summaries"]] == [0.0, 1.0]
    assert all(s["draws"] == 2 and s["score_rate"] == 0.5 and s["elo_estimate"] == 1200 for s in data["summaries"])
    assert len(data["games"]) == 4 and data["config"]["max_ply"] == 8
    assert len(_read_pgn(pgn)) == 4


@pytest.mark.slow
def test_against_real_stockfish(toy_model, tmp_path):
    pool = StockfishPool(find_stockfish(), 1500, 1.0, slots=2)
    try:
        res = play_match(_player(toy_model, batch=2), pool, games=2, temperature=1.0, first_moves=BOOK, max_ply=200, seed=1, slots=2)
    finally:
        pool.close()
    assert len(res.records) == 2 and res.engine_restarts == 0
    assert all(r.term != "engine_error" for r in res.records)
    write_pgn(tmp_path / "sf.pgn", res.records)
    for g, r in zip(_read_pgn(tmp_path / "sf.pgn"), res.records):
        board = g.end().board()
        assert [m.uci() for m in g.mainline_moves()] == r.moves and board.ply() == r.plies
        if r.term == "checkmate":
            assert board.is_checkmate() and board.outcome().result() == g.headers["Result"]


def test_an_even_score_prints_elo_zero_not_minus_zero():
    """Two all-draw checkpoints printed "Elo Δ -0 [-0, -0]": log10(1) = 0 times −400 is −0.0."""
    from pawn.cli.play import _fmt
    from pawn.play.stats import elo_diff

    assert math.copysign(1.0, elo_diff(0.5)) == 1.0 and elo_diff(0.5) == 0.0
    assert [_fmt(elo_diff(0.5)), _fmt(-0.3), _fmt(-0.0, ".1%"), _fmt(0.0004, ".1%")] == ["0", "0", "0.0%", "0.0%"]
    assert [_fmt(elo_diff(0.75)), _fmt(-0.6), _fmt(0.5, ".1%"), _fmt(math.inf), _fmt(None)] == ["+191", "-1", "50.0%", "+∞", "—"]


def test_vs_variant_errors_name_the_vs_variant_flag(toy_model, tmp_path):
    """``--vs-variant`` for an opponent that is not a supernet was reported as "--variant base
    does not apply", naming the wrong flag; exit 2 (bad usage) and no game played."""
    ck = save_checkpoint(tmp_path / "toy", toy_model.params(), TOY)
    r = CliRunner().invoke(app, ["play", str(ck), "--vs", str(ck), "--vs-variant", "base", "--games", "2",
                                 "--temperatures", "0"])
    assert r.exit_code == 2, r.output
    assert f"{ck} is not a supernet checkpoint; --vs-variant base does not apply" in " ".join(r.output.split())
    r = CliRunner().invoke(app, ["play", str(ck), "--vs", str(ck), "--variant", "base", "--games", "2"])
    assert r.exit_code == 2 and "; --variant base does not apply" in r.output


TEE = """#!{python}
# Copies every line it reads to {log}, then to the engine; leaves when the engine does.
import subprocess, sys
eng = subprocess.Popen([{engine!r}], stdin=subprocess.PIPE, text=True, bufsize=1)
with open({log!r}, "a") as log:
    for line in sys.stdin:
        log.write(line)
        log.flush()
        eng.stdin.write(line)
        if line.split()[:1] == ["quit"]:
            break
eng.stdin.close()
sys.exit(eng.wait())
"""


def test_stockfish_receives_the_start_position_and_every_move(toy_model, tmp_path):
    """``pawn play`` sent only ``position fen <current>`` (issue 25), so Stockfish could not see a
    repetition. What the real Stockfish reads on stdin is recorded by a ``tee`` in front of it: each
    ``position`` line is ``startpos`` (``moves`` + the whole game so far after move 1)."""
    log = tmp_path / "stdin.log"
    exe = tmp_path / "sf-tee"
    exe.write_text(TEE.format(python=sys.executable, log=str(log), engine=find_stockfish()))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    pool = StockfishPool(str(exe), 1500, 1.0, slots=1)
    try:
        res = play_match(_player(toy_model, batch=1), pool, games=2, temperature=0.0, first_moves=BOOK, max_ply=10, seed=0, slots=1)
    finally:
        pool.close()
    positions = [ln.split() for ln in log.read_text().splitlines() if ln.startswith("position")]
    assert positions and all(p[:2] == ["position", "startpos"] and p[2:3] in ([], ["moves"]) for p in positions), positions[:2]
    sent = [p[3:] for p in positions]
    for r in res.records:  # Stockfish moves at plies where it is to move; it saw every move before them
        sf_plies = [k for k in range(r.plies) if (k % 2 == 0) != r.pawn_white]
        assert [r.moves[:k] for k in sf_plies] == [s for s in sent if s in [r.moves[:k] for k in sf_plies]]
    assert len(sent) == sum(len([k for k in range(r.plies) if (k % 2 == 0) != r.pawn_white]) for r in res.records)
    assert max(len(s) for s in sent) >= 8
