"""``pawn play`` with the weak-opponent ladder and any UCI engine as either side (issue 29): the
movers' rules, the maximum-likelihood Elo fit against a hand computation, and matches through
``uci:COMMAND`` players (a real ``pawn uci`` subprocess, the fake UCI engine of ``test_play``)."""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from pathlib import Path

import chess
import jax
import numpy as np
import pytest
from typer.testing import CliRunner

from pawn.checkpoint import save_checkpoint
from pawn.cli import app
from pawn.config import TOY
from pawn.model import PAWNModel
from pawn.play.ladder import GREEDY_ANCHOR, LR_HALF_CHI2, GreedyMover, RandomMover, _loglik, fit_elo, material, rung

import pawn

# the folder holding the pawn these tests import (src/ in an editable install, site-packages after
# `pip install .`, where src/ has no compiled engine): the subprocess imports the same one
PAWN_ROOT = str(Path(pawn.__file__).resolve().parents[1])


def test_greedy_takes_the_most_material_and_mates_when_it_can():
    # the white queen can take a rook (a8) or a knight (h5)
    b = chess.Board("r3k3/8/8/3Q3n/8/8/8/4K3 w - - 0 1")
    assert {GreedyMover(1, s).move(0, b) for s in range(10)} == {"d5a8"}  # +5 beats +3
    b = chess.Board("6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1")  # back-rank mate beats everything
    assert GreedyMover(1).move(0, b) == "a1a8"
    b = chess.Board("7k/8/8/8/8/8/8/K6q w - - 0 1")  # nothing to take: ties drawn among all moves
    assert {GreedyMover(1, s).move(0, b) for s in range(30)} == {m.uci() for m in b.legal_moves}
    assert material(chess.Board(), chess.WHITE) == 0 and material(chess.Board("k7/8/8/8/8/8/8/KQ6 w - - 0 1"), chess.BLACK) == -9


def test_random_mover_is_uniform_over_legal_moves():
    b = chess.Board()
    r = RandomMover(2, seed=1)
    counts = {}
    for _ in range(4000):
        m = r.move(0, b)
        counts[m] = counts.get(m, 0) + 1
    assert set(counts) == {m.uci() for m in b.legal_moves}
    assert max(counts.values()) / 4000 < 0.05 + 0.025 and min(counts.values()) / 4000 > 0.05 - 0.025


def test_fit_against_one_rung_is_the_score_rate_estimate_with_a_likelihood_ratio_interval():
    # 7 of 10 against a 1350 rung: MLE = 1350 + 400·log10(0.7/0.3) = 1497.19
    fit = fit_elo([1350] * 10, [1] * 6 + [0.5] * 2 + [0] * 2)
    assert fit["elo"] == pytest.approx(1350 + 400 * math.log10(7 / 3), abs=0.01)
    lo, hi = fit["elo_ci95"]
    a, s = np.full(10, 1350.0), np.array([1] * 6 + [0.5] * 2 + [0] * 2, float)
    top = _loglik(fit["elo"], a, s)
    for bound in (lo, hi):  # the bounds are where the log-likelihood has dropped by χ²₁(0.95)/2
        assert _loglik(bound, a, s) == pytest.approx(top - LR_HALF_CHI2, abs=1e-6)
    assert lo < fit["elo"] < hi and hi - lo > 300


def test_fit_over_several_rungs_at_once_and_at_zero_and_full_score():
    # 3/4 against random (0) and 1/4 against greedy (478): the MLE solves Σ (s − E) = 0
    anchors = [0.0] * 4 + [GREEDY_ANCHOR] * 4
    scores = [1, 1, 1, 0] + [1, 0, 0, 0]
    fit = fit_elo(anchors, scores)
    e = lambda r, A: 1 / (1 + 10 ** ((A - r) / 400))  # noqa: E731
    assert sum(sc - e(fit["elo"], A) for A, sc in zip(anchors, scores)) == pytest.approx(0.0, abs=1e-6)
    assert fit["elo"] == pytest.approx(GREEDY_ANCHOR / 2, abs=0.01)  # symmetric results: the midpoint
    zero = fit_elo([0.0, 478.0, 1350.0], [0, 0, 0])
    assert zero["elo"] == -math.inf and zero["elo_ci95"][0] == -math.inf and math.isfinite(zero["elo_ci95"][1])
    full = fit_elo([0.0] * 5, [1] * 5)
    assert full["elo"] == math.inf and full["elo_ci95"][1] == math.inf and math.isfinite(full["elo_ci95"][0])
    with pytest.raises(ValueError):
        fit_elo([], [])
    with pytest.raises(ValueError, match="sf-<UCI_Elo>"):
        rung("sf-strong", 1)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    m = PAWNModel(TOY, jax.random.PRNGKey(3))
    return save_checkpoint(tmp_path_factory.mktemp("ladder") / "toy", m.params(), TOY,
                           run_config={"prepend_outcome": False, "seq_len": 64})


@pytest.fixture()
def fake_engine(tmp_path) -> Path:
    exe = tmp_path / "fake-engine"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).with_name('fake_uci.py')} \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_cli_ladder_writes_per_rung_summaries_and_one_fit(ckpt, tmp_path):
    js = tmp_path / "ladder.json"
    r = CliRunner().invoke(app, ["play", str(ckpt), "--vs", "ladder", "--ladder", "random,greedy", "--games", "4",
                                 "--temperatures", "0", "--max-ply", "30", "--json", str(js)])
    assert r.exit_code == 0, r.output
    data = json.loads(js.read_text())
    assert [(s["opponent"], s["opponent_elo"]) for s in data["summaries"]] == [("random", 0.0), ("greedy", GREEDY_ANCHOR)]
    games = data["games"]
    assert len(games) == 8 and all(g["opponent_elo"] in (0.0, GREEDY_ANCHOR) for g in games)
    (fit,) = data["elo_fits"]
    want = fit_elo([g["opponent_elo"] for g in games], [{"win": 1, "draw": 0.5, "loss": 0}[g["result"]] for g in games])
    assert fit["elo"] == want["elo"] and fit["elo_ci95"] == want["elo_ci95"] and fit["opponents"] == ["greedy", "random"]
    assert "Elo fit T=0 over greedy, random (8 games)" in " ".join(r.output.split())
    bad = CliRunner().invoke(app, ["play", str(ckpt), "--vs", "ladder", "--ladder", "random,sf-max"])
    assert bad.exit_code == 2 and "ladder" in bad.output and "sf-max" in bad.output


def test_pawn_uci_subprocess_plays_a_uci_engine_through_pawn_play(ckpt, fake_engine, tmp_path, monkeypatch):
    """Player A is ``uci:<python> -m pawn.cli uci CKPT`` (a real subprocess), B the fake engine
    (always its first legal move): every move A makes is legal, B's are B's rule, and the options
    reach only the engine that declares them."""
    monkeypatch.setenv("PYTHONPATH", PAWN_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    js = tmp_path / "uci.json"
    a = f"uci:{sys.executable} -m pawn.cli uci {ckpt}"
    r = CliRunner().invoke(app, ["play", a, "--vs", f"uci:{fake_engine}", "--games", "2", "--temperatures", "0",
                                 "--max-ply", "12", "--concurrency", "1", "--uci-options", "Temperature=0,Hash=8",
                                 "--json", str(js)])
    assert r.exit_code == 0, r.output
    data = json.loads(js.read_text())
    from pawn.play.uci_engine import uci_name

    assert data["config"]["pawn"].startswith(uci_name(str(ckpt))) and {s["opponent"] for s in data["summaries"]} == {"FakeUCI"}
    assert uci_name(str(ckpt)) in r.output and "has no option Hash" in " ".join(r.output.split())
    for g in data["games"]:
        b = chess.Board()
        for ply, mv in enumerate(g["moves"]):
            assert chess.Move.from_uci(mv) in b.legal_moves
            if (ply % 2 == 0) != g["pawn_white"]:
                assert mv == next(iter(b.legal_moves)).uci()
            b.push_uci(mv)
        assert g["plies"] == 12 and g["term"] == "ply_limit"
    assert [g["first_move"] for g in data["games"] if g["pawn_white"]] == ["e2e4"]


def test_skill_depth_rung_names_parse_only_in_stockfish_ranges():
    from pawn.play.ladder import is_rung, skill_depth

    assert skill_depth("sf-skill0-depth1") == (0, 1, 0) and skill_depth("sf-skill20-depth20") == (20, 20, 0)
    assert skill_depth("sf-skill0-depth1-random50") == (0, 1, 50) and skill_depth("sf-skill3-depth2-random1") == (3, 2, 1)
    for bad in ("sf-skill21-depth1", "sf-skill0-depth0", "sf-skill-1-depth1", "sf-skill0", "sf-depth3", "sf-skill0-depth1x",
                "sf-skill0-depth1-random0", "sf-skill0-depth1-random100", "sf-skill0-depth1-random"):
        assert skill_depth(bad) is None and not is_rung(bad), bad
    assert is_rung("sf-skill3-depth2") and is_rung("sf-1350")


def test_a_skill_depth_rung_is_real_stockfish_at_that_skill_and_depth():
    """The rung is a Stockfish process with ``Skill Level`` set and ``go depth D``: python-chess's
    view of the running engine has the option, and the move is legal; an unmeasured combination
    has no anchor (kept out of the fit) and says so, a measured one carries its table anchor."""
    import chess.engine

    from pawn.play.ladder import MEASURED_ANCHORS

    r = rung("sf-skill3-depth2", slots=1)
    assert "sf-skill3-depth2" not in MEASURED_ANCHORS
    try:
        assert r.name == "sf-skill3-depth2" and r.effective_elo is None and "no measured anchor" in r.note
        assert r.limit == chess.engine.Limit(depth=2) and r.options["Skill Level"] == 3
        r.start()
        eng = r._engines[0]
        assert eng.options["Skill Level"].max == 20 and eng.protocol.config["Skill Level"] == 3
        board = chess.Board()
        board.push_uci("e2e4")
        assert chess.Move.from_uci(r.move(0, board)) in board.legal_moves
    finally:
        r.close()
    for name, m in MEASURED_ANCHORS.items():
        measured = rung(name, slots=1)
        assert measured.effective_elo == m["anchor"] and measured.note is None
        measured.close()


def test_cli_ladder_with_an_unanchored_rung_reports_it_but_fits_only_the_anchored(ckpt, tmp_path):
    js = tmp_path / "ladder.json"
    r = CliRunner().invoke(app, ["play", str(ckpt), "--vs", "ladder", "--ladder", "random,sf-skill3-depth2", "--games", "2",
                                 "--temperatures", "0", "--max-ply", "20", "--json", str(js)])
    assert r.exit_code == 0, r.output
    data = json.loads(js.read_text())
    assert [(s["opponent"], s["opponent_elo"], s["games"]) for s in data["summaries"]] == [("random", 0.0, 2), ("sf-skill3-depth2", None, 2)]
    (fit,) = data["elo_fits"]
    assert fit["opponents"] == ["random"] and fit["games"] == 2
    assert "no measured anchor" in " ".join(r.output.split())


def test_a_diluted_rung_plays_a_random_legal_move_at_its_rate_and_the_engine_otherwise():
    """``-random30``: 30 % uniformly random legal moves. From the start position (20 legal moves)
    with an engine that always answers e2e4, e2e4 comes back 0.7 + 0.3/20 = 71.5 % of the time;
    the real Stockfish rung of that name plays legal moves through the same wrapper."""
    from pawn.play.ladder import DilutedPool

    class Always:
        restarts, note = 0, None

        def move(self, slot, board):
            return "e2e4"

    d = DilutedPool(Always(), 30, slots=1, seed=7, name="x", anchor=None)
    board = chess.Board()
    picks = [d.move(0, board) for _ in range(4000)]
    assert all(chess.Move.from_uci(m) in board.legal_moves for m in picks)
    assert abs(picks.count("e2e4") / 4000 - 0.715) < 0.025 and len(set(picks)) == 20
    real = rung("sf-skill0-depth1-random30", slots=1, seed=1)
    try:
        assert isinstance(real, DilutedPool) and real.base.options["Skill Level"] == 0
        b = chess.Board()
        for _ in range(12):
            b.push_uci(real.move(0, b))
        assert b.ply() == 12
    finally:
        real.close()


def test_the_results_tables_stockfish_name_is_read_as_its_rung():
    # The table calls the sf-1350 rung "stockfish-1350"; typed back as --ladder it was refused.
    from pydantic import ValidationError

    from pawn.play.config import PlayConfig

    c = PlayConfig.load(vs="ladder", ladder="random,stockfish-1350,sf-skill0-depth1")
    assert c.ladder == ["random", "sf-1350", "sf-skill0-depth1"]
    with pytest.raises(ValidationError, match="is not a rung"):
        PlayConfig.load(vs="ladder", ladder="stockfish-13x0")
