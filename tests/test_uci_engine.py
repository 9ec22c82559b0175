"""``pawn uci`` (issue 29) against a real ``pawn uci`` subprocess on a tiny checkpoint (TOY shape,
random init, trained context 64 so a game runs past it): through python-chess's UCI client, and
through the raw protocol where the test needs to see exactly which lines come back and when.

One engine process serves the module (start-up is most of the cost); tests that change options
put them back."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import chess
import chess.engine
import jax
import numpy as np
import pytest

from pawn.checkpoint import save_checkpoint
from pawn.config import TINY_VARIANTS, TOY
from pawn.model import PAWNModel
from pawn.play.match import _to_token, _token_table
from pawn.play.players import find_stockfish
from pawn.play.uci_engine import EngineOptions, prob_to_cp, sample_move, time_budget_ms

import pawn

# the folder holding the pawn these tests import (src/ in an editable install, site-packages after
# `pip install .`, where src/ has no compiled engine): the subprocess imports the same one
PAWN_ROOT = str(Path(pawn.__file__).resolve().parents[1])
CONTEXT = 64


def _cmd(ckpt: Path) -> list[str]:
    return [sys.executable, "-m", "pawn.cli", "uci", str(ckpt)]


def _env() -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = PAWN_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _toy_checkpoint(folder: Path, seed: int, prepend_outcome: bool) -> Path:
    """A random-init TOY checkpoint trained (nominally) at CONTEXT, in either sequence layout."""
    m = PAWNModel(TOY, jax.random.PRNGKey(seed))
    return save_checkpoint(folder / "toy", m.params(), TOY,
                           run_config={"prepend_outcome": prepend_outcome, "seq_len": CONTEXT})


def _engine_of(ckpt: Path):
    """A ``pawn uci`` subprocess on ``ckpt`` through python-chess, quit when the generator closes."""
    eng = chess.engine.SimpleEngine.popen_uci(_cmd(ckpt), timeout=180, env=_env())
    eng.ping()
    yield eng
    eng.quit()


def _player_of(ckpt: Path):
    """The same checkpoint in this process, to compute what the engine should report."""
    from pawn.play.runner import load_player

    return load_player(str(ckpt), None, batch=1)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return _toy_checkpoint(tmp_path_factory.mktemp("uci"), 3, prepend_outcome=False)


@pytest.fixture(scope="module")
def engine(ckpt):
    yield from _engine_of(ckpt)


@pytest.fixture(scope="module")
def player(ckpt):
    return _player_of(ckpt)


def _probs(player, board: chess.Board, prefix=None) -> dict[str, float]:
    """The model's legal-move probabilities for ``board`` from its own move list, by hand; for an
    outcome-prefix model ``prefix`` is the outcome token at position 0 (None: the player's
    default, its own side checkmating)."""
    table = _token_table()
    root, hist = board.root(), []
    for m in board.move_stack:
        hist.append(_to_token(table, root, m.uci()))
        root.push(m)
    legal = list(board.legal_moves)
    x = player.legal_logits([hist], [[_to_token(table, board, m.uci()) for m in legal]], [board.turn], [prefix])[0]
    p = np.exp(x - x.max())
    p /= p.sum()
    return {m.uci(): float(q) for m, q in zip(legal, p)}


def _multipv(engine, board: chess.Board, k: int = 256) -> dict[str, int]:
    infos = engine.analyse(board, chess.engine.Limit(time=60.0), multipv=k)
    return {i["pv"][0].uci(): i["score"].relative.score() for i in infos}


class Raw:
    """A bare UCI client: lines in, lines out with timestamps, nothing hidden."""

    def __init__(self, ckpt: Path):
        self.p = subprocess.Popen(_cmd(ckpt), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env=_env())
        self.q: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.p.stdout:
            self.q.put((time.perf_counter(), line.rstrip("\n")))

    def send(self, line: str) -> float:
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return time.perf_counter()

    def until(self, prefix: str, timeout: float = 120.0) -> list[tuple[float, str]]:
        """Lines up to and including the first that starts with ``prefix``."""
        out, end = [], time.monotonic() + timeout
        while True:
            t, line = self.q.get(timeout=max(0.01, end - time.monotonic()))
            out.append((t, line))
            if line.startswith(prefix):
                return out

    def close(self) -> int:
        self.send("quit")
        return self.p.wait(timeout=30)


@pytest.fixture(scope="module")
def raw(ckpt):
    r = Raw(ckpt)
    r.send("uci")
    r.until("uciok")
    r.send("isready")
    r.until("readyok", timeout=180)
    yield r
    assert r.close() == 0


# --------------------------------------------------------------------------- games
def test_a_full_game_against_stockfish_plays_only_legal_moves(engine):
    sf = chess.engine.SimpleEngine.popen_uci(find_stockfish(), timeout=30)
    try:
        sf.configure({"Skill Level": 0, "Threads": 1, "Hash": 16})
        board, game = chess.Board(), object()
        while board.outcome(claim_draw=False) is None and board.ply() < 300:
            if board.turn == chess.WHITE:
                mv = engine.play(board, chess.engine.Limit(time=0.5), game=game).move
            else:
                mv = sf.play(board, chess.engine.Limit(time=0.005), game=game).move
            assert mv in board.legal_moves, (board.fen(), mv)
            board.push(mv)
    finally:
        sf.quit()
    assert board.ply() >= 10 and (board.outcome(claim_draw=False) is not None or board.ply() == 300)
    assert board.ply() > CONTEXT or board.is_checkmate()  # Stockfish mates early, or PAWN played past its context


def test_a_game_against_itself_plays_only_legal_moves_past_the_context(engine):
    engine.configure({"Temperature": "1", "Seed": 7})
    try:
        board, game = chess.Board(), object()
        while board.outcome(claim_draw=False) is None and board.ply() < 2 * CONTEXT:
            mv = engine.play(board, chess.engine.Limit(time=0.5), game=game).move
            assert mv in board.legal_moves, (board.fen(), mv)
            board.push(mv)
    finally:
        engine.configure({"Temperature": "0", "Seed": 0})
    assert board.ply() >= 20


# --------------------------------------------------------------------------- positions
def _special_board() -> chess.Board:
    b = chess.Board()
    for m in ["e2e4", "g8f6", "e4e5", "d7d5", "e5d6", "c7d6", "g1f3", "b8c6", "f1e2", "c8g4", "e1g1", "d8d7",
              "b1c3", "e8c8", "a2a4", "d6d5", "a4a5", "d5d4", "a5a6", "d4c3", "a6b7", "c8b8", "d2d3", "c3b2",
              "a1a2", "b2c1q"]:
        b.push_uci(m)  # en passant (e5d6), both castlings (e1g1, e8c8), a promotion by capture (b2c1q)
    return b


def test_position_moves_with_castling_en_passant_and_promotion_reach_the_same_board(engine, player):
    """MultiPV 256 lists every legal move of the engine's position: the set equals python-chess's,
    and each score is the model's probability from the whole move list on the centipawn scale."""
    board = _special_board()
    got = _multipv(engine, board)
    want = _probs(player, board)
    assert set(got) == set(want)
    assert all(abs(got[m] - prob_to_cp(want[m])) <= 1 for m in want), [(m, got[m], prob_to_cp(want[m])) for m in want][:5]
    best = max(want, key=want.get)
    assert got[best] == max(got.values()) and got[best] == prob_to_cp(want[best])
    # an en-passant capture offered to the engine is in its move list
    ep = chess.Board()
    for m in ["e2e4", "a7a6", "e4e5", "d7d5"]:
        ep.push_uci(m)
    assert "e5d6" in _multipv(engine, ep) and ep.has_legal_en_passant()


def test_a_fen_start_is_parsed_and_the_model_sees_only_the_moves_after_it(engine, player):
    fen = "r3k2r/pPpp1ppp/8/4p3/4P3/8/PPPP1PpP/R3K2R w KQkq - 0 20"
    board = chess.Board(fen)
    board.push_uci("b7a8n")  # a promotion after the FEN
    got = _multipv(engine, board)
    want = _probs(player, board)  # history = [b7a8n] only
    assert set(got) == {m.uci() for m in board.legal_moves} and {"g2h1q", "e8g8"} <= set(got) and "e8c8" not in got
    assert all(abs(got[m] - prob_to_cp(want[m])) <= 1 for m in want)
    # no move after the FEN: nothing to condition on, a legal move is drawn and the rule is named
    r = engine.play(chess.Board(fen), chess.engine.Limit(time=30.0), info=chess.engine.INFO_ALL)
    assert r.move in chess.Board(fen).legal_moves and "uniform" in r.info.get("string", "")


def test_a_repetition_is_seen_from_the_move_list(engine, player):
    """The same board reached by a knight shuffle twice: the engine's distribution is the model's
    for the whole 8-move list, not for the 4-move one nor for a bare FEN of the board."""
    shuffle = ["g1f3", "g8f6", "f3g1", "f6g8"]
    twice, once = chess.Board(), chess.Board()
    for m in shuffle * 2:
        twice.push_uci(m)
    for m in shuffle:
        once.push_uci(m)
    assert twice.board_fen() == once.board_fen() and twice.is_repetition(3)
    got_twice, got_once = _multipv(engine, twice), _multipv(engine, once)
    want_twice, want_once = _probs(player, twice), _probs(player, once)
    assert all(abs(got_twice[m] - prob_to_cp(want_twice[m])) <= 1 for m in want_twice)
    assert all(abs(got_once[m] - prob_to_cp(want_once[m])) <= 1 for m in want_once)
    assert max(abs(got_twice[m] - got_once[m]) for m in got_once) > 3  # cp: the two histories really differ


def test_beyond_the_context_the_last_window_of_moves_is_fed(engine, player):
    board = chess.Board()
    rng = np.random.default_rng(0)
    while board.ply() < CONTEXT + 6:
        legal = list(board.legal_moves)
        board.push(legal[int(rng.integers(len(legal)))])
        if board.is_game_over():
            board.pop()
            board.pop()
    r = engine.play(board, chess.engine.Limit(time=30.0), info=chess.engine.INFO_ALL)
    assert r.move in board.legal_moves and f"last {CONTEXT} of {board.ply()} moves" in r.info["string"]
    got, want = _multipv(engine, board), _probs(player, board)  # PawnPlayer windows the same way
    assert all(abs(got[m] - prob_to_cp(want[m])) <= 1 for m in want)


def test_from_the_start_position_the_book_gives_move_one(engine):
    r = engine.play(chess.Board(), chess.engine.Limit(time=30.0), info=chess.engine.INFO_ALL)
    assert r.move.uci() == "e2e4" and r.info["string"] == "book: e2e4"
    engine.configure({"Book": "g1f3 c2c4"})
    try:
        assert engine.play(chess.Board(), chess.engine.Limit(time=30.0)).move.uci() == "g1f3"
    finally:
        engine.configure({"Book": "e2e4 d2d4 g1f3"})


# --------------------------------------------------------------------------- options
def test_sampling_options_temperature_topk_topp_and_seed(engine, player):
    board = chess.Board()
    for m in ["d2d4", "d7d5", "c2c4"]:
        board.push_uci(m)
    p = _probs(player, board)
    argmax = max(p, key=p.get)
    assert engine.play(board, chess.engine.Limit(time=30.0)).move.uci() == argmax  # Temperature 0
    try:
        engine.configure({"Temperature": "50", "TopK": 1})
        assert {engine.play(board, chess.engine.Limit(time=30.0)).move.uci() for _ in range(4)} == {argmax}
        engine.configure({"TopK": 0, "TopP": "0.000001"})
        assert {engine.play(board, chess.engine.Limit(time=30.0)).move.uci() for _ in range(4)} == {argmax}
        engine.configure({"TopP": "1", "Seed": 11})

        def run(game) -> list[str]:
            return [engine.play(board, chess.engine.Limit(time=30.0), game=game).move.uci() for _ in range(12)]

        a, b = run(object()), run(object())  # a new game (ucinewgame) restarts the generator
        engine.configure({"Seed": 12})
        c = run(object())
        assert a == b and a != c and len(set(a)) > 3
    finally:
        engine.configure({"Temperature": "0", "TopK": 0, "TopP": "1", "Seed": 0})


def test_options_are_declared_and_bad_values_are_refused_in_one_info_line(raw):
    raw.send("uci")
    lines = [ln for _, ln in raw.until("uciok")]
    names = {ln.split(" type ")[0][len("option name "):] for ln in lines if ln.startswith("option name ")}
    assert {"Temperature", "TopK", "TopP", "Seed", "MultiPV", "Outcome", "Book", "Move Overhead", "Ponder"} <= names
    assert lines[0] == "id name PAWN d64_L2_F256" and lines[1].startswith("id author ")  # the model, not its folder "toy"
    for cmd, want in [("setoption name Temperature value hot", "Temperature: 'hot' is not a number"),
                      ("setoption name TopP value 0", "TopP: must be > 0"),
                      ("setoption name MultiPV value 999", "MultiPV: 999 is outside [1, 256]"),
                      ("setoption name Outcome value WHITE_WINS", "is not auto or one of"),
                      ("setoption name Book value e2e5", "Book: 'e2e5' is not a legal first move"),
                      ("setoption name Hash value 16", "no option named 'Hash'"),
                      ("setoption Temperature 1", "expected 'setoption name")]:
        raw.send(cmd)
        raw.send("isready")
        got = [ln for _, ln in raw.until("readyok")]
        assert any(ln.startswith("info string ") and want in ln for ln in got), (cmd, got)
    raw.send("setoption name move OVERHEAD value 5")  # names are case-insensitive
    raw.send("setoption name Outcome value white_checkmates")  # a pure-moves model ignores it, once
    raw.send("position startpos moves e2e4")
    raw.send("go movetime 2000")
    got = [ln for _, ln in raw.until("bestmove")]
    assert any("Outcome ignored" in ln for ln in got)
    raw.send("setoption name Outcome value auto")


def test_bad_commands_are_ignored_with_an_info_string(raw):
    for cmd, want in [("fly away", "unknown command: fly away"),
                      ("position startpos moves e2e4 e7e6 e4e6", "move 'e4e6' is not legal"),
                      ("position fen not/a/fen w - - 0 1", "bad FEN"),
                      ("position somewhere", "expected 'position startpos|fen"),
                      ("go depth x movetime 500", "go: depth 'x' is not an integer"),
                      ("joho isready", "skipped unknown tokens before 'isready'")]:
        raw.send(cmd)
        raw.send("isready")
        got = [ln for _, ln in raw.until("readyok")]
        if cmd.startswith("go"):
            got += [ln for _, ln in raw.until("bestmove")]
        assert any(ln.startswith("info string ") and want in ln for ln in got), (cmd, got)
    # the engine still plays from the last good position (the moves before the illegal one kept)
    raw.send("position startpos moves e2e4 e7e6 e4e6")
    raw.send("go movetime 1000")
    best = raw.until("bestmove")[-1][1].split()[1]
    b = chess.Board()
    b.push_uci("e2e4")
    b.push_uci("e7e6")
    assert chess.Move.from_uci(best) in b.legal_moves


# --------------------------------------------------------------------------- time and stop
def test_go_infinite_waits_for_stop_and_ponder_for_ponderhit(raw):
    raw.send("position startpos moves e2e4 e7e5")
    raw.send("go infinite")
    lines = raw.until("info string model")  # the model has its move …
    time.sleep(0.6)
    lines += [raw.q.get() for _ in range(raw.q.qsize())]
    assert not any(ln.startswith("bestmove") for _, ln in lines)  # … but holds it until stop
    t_stop = raw.send("stop")
    t_best, best = raw.until("bestmove")[-1]
    assert t_best - t_stop < 0.5
    b = chess.Board()
    b.push_uci("e2e4")
    b.push_uci("e7e5")
    assert chess.Move.from_uci(best.split()[1]) in b.legal_moves
    raw.send("go ponder wtime 60000 btime 60000")
    raw.until("info string model")
    time.sleep(0.3)
    assert not any(raw.q.get()[1].startswith("bestmove") for _ in range(raw.q.qsize()))
    t_hit = raw.send("ponderhit")
    t_best, _ = raw.until("bestmove")[-1]
    assert t_best - t_hit < 0.5


@pytest.mark.parametrize("go, budget_ms", [("go movetime 300", 300), ("go wtime 3000 btime 3000 winc 0 binc 0", 100),
                                            ("go wtime 900 btime 60000 movestogo 1", 450)])
def test_go_time_limits_are_honoured_within_a_tolerance(raw, go, budget_ms):
    raw.send("setoption name Move Overhead value 0")
    raw.send("position startpos moves d2d4 g8f6")
    raw.send("isready")
    raw.until("readyok")
    t0 = raw.send(go)
    t1, _ = raw.until("bestmove")[-1]
    assert (t1 - t0) * 1000 <= budget_ms + 250, (go, (t1 - t0) * 1000)
    raw.send("setoption name Move Overhead value 30")


def test_time_budget_rule():
    assert time_budget_ms({"movetime": 500}, True, 30) == 470
    assert time_budget_ms({"wtime": 60000, "btime": 1000, "winc": 1000}, True, 0) == 60000 / 30 + 750
    assert time_budget_ms({"wtime": 60000, "btime": 1000, "binc": 0}, False, 0) == 1000 / 30
    assert time_budget_ms({"wtime": 900, "btime": 1, "movestogo": 1}, True, 0) == 450  # at most half the clock
    assert time_budget_ms({"depth": 3}, True, 30) is None and time_budget_ms({"movetime": 5}, True, 30) == 1.0


def test_sample_move_top_k_and_top_p_cut_the_distribution():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    rng = np.random.default_rng(0)
    o = EngineOptions(temperature=1.0, top_k=2)
    assert {sample_move(logits, o, rng) for _ in range(300)} == {0, 1}
    o = EngineOptions(temperature=1.0, top_p=0.8)  # 0.5 + 0.3 reaches 0.8: the nucleus is {0, 1}
    assert {sample_move(logits, o, rng) for _ in range(300)} == {0, 1}
    o = EngineOptions(temperature=1.0, top_p=0.81)
    assert {sample_move(logits, o, rng) for _ in range(300)} == {0, 1, 2}
    draws = [sample_move(logits, EngineOptions(temperature=1.0), rng) for _ in range(4000)]
    assert np.bincount(draws, minlength=4) / 4000 == pytest.approx([0.5, 0.3, 0.15, 0.05], abs=0.03)
    assert sample_move(logits, EngineOptions(temperature=0.0), rng) == 0


def test_a_checkpoint_that_does_not_exist_is_one_error_line():
    r = subprocess.run([sys.executable, "-m", "pawn.cli", "uci", "/no/such/ckpt"], capture_output=True, text=True,
                       env=_env(), timeout=120, input="uci\n")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == ["error: /no/such/ckpt: no such checkpoint directory (nor a Hub id owner/name)"]


def test_kv_cached_logits_equal_the_full_forward_as_a_game_grows():
    """The engine's KV path (inputs over KV_MIN_LEN tokens): a prefill, then two decode steps per
    move, equals PawnPlayer's full forward of the same input (float32, 1e-4)."""
    from pawn.data.layout import Layout
    from pawn.evaluate.loading import LoadedModel
    from pawn.play.players import PawnPlayer
    from pawn.play.uci_engine import KV_MIN_LEN, IncrementalLogits

    model = PAWNModel(TOY, jax.random.PRNGKey(5))
    pl = PawnPlayer(LoadedModel("t", model, TOY, None, "t", 128), Layout.of(False), batch=1)
    inc = IncrementalLogits(pl)
    seq = [int(t) for t in np.random.default_rng(1).integers(1, 1960, 128)]
    every = list(range(1968))
    for n in (KV_MIN_LEN + 1, KV_MIN_LEN + 3, KV_MIN_LEN + 5, 128, 100):  # extend, extend, extend, jump, shorter
        got = inc.logits(seq[:n])
        want = pl.legal_logits([seq[:n]], [every], [True])[0]
        np.testing.assert_allclose(got[:1968], want, atol=1e-4, rtol=1e-4)
    assert inc.seq == seq[:100]


# --------------------------------------------------------------------------- outcome-prefix model
@pytest.fixture(scope="module")
def outcome_ckpt(tmp_path_factory) -> Path:
    """The same TOY shape in the outcome-prefix layout (spec ``engine.md`` §1.6: an outcome token at
    position 0, then the moves)."""
    return _toy_checkpoint(tmp_path_factory.mktemp("uci_outcome"), 5, prepend_outcome=True)


@pytest.fixture(scope="module")
def outcome_engine(outcome_ckpt):
    yield from _engine_of(outcome_ckpt)


@pytest.fixture(scope="module")
def outcome_player(outcome_ckpt):
    return _player_of(outcome_ckpt)


def test_an_outcome_prefix_model_is_conditioned_on_the_outcome_option(outcome_engine, outcome_player):
    """``Outcome auto`` writes the side to move checkmating (WHITE_CHECKMATES with White to move);
    ``Outcome BLACK_CHECKMATES`` writes that token instead; each MultiPV list is 10000 × the model's
    probabilities under that prefix, and the two lists really differ (a wrong engine that ignores
    the option, or drops the prefix, fails one of the three)."""
    from pawn.vocab import BLACK_CHECKMATES, WHITE_CHECKMATES

    board = chess.Board()
    for m in ["e2e4", "e7e5", "g1f3", "b8c6"]:
        board.push_uci(m)
    assert outcome_player.layout.offset == 1
    try:
        auto = _multipv(outcome_engine, board)
        outcome_engine.configure({"Outcome": "BLACK_CHECKMATES"})
        black = _multipv(outcome_engine, board)
    finally:
        outcome_engine.configure({"Outcome": "auto"})
    want_auto = _probs(outcome_player, board, WHITE_CHECKMATES)
    assert _probs(outcome_player, board, None) == want_auto  # the player's own default
    want_black = _probs(outcome_player, board, BLACK_CHECKMATES)
    assert set(auto) == set(black) == set(want_auto)
    assert all(abs(auto[m] - prob_to_cp(want_auto[m])) <= 1 for m in want_auto)
    assert all(abs(black[m] - prob_to_cp(want_black[m])) <= 1 for m in want_black)
    assert max(abs(auto[m] - black[m]) for m in auto) > 3


def test_an_outcome_prefix_model_answers_move_one_from_its_outcome_token(outcome_engine, outcome_player):
    """From the start position there is no move to condition on, but an outcome-prefix model has
    its outcome token: move one comes from the model (not the book, not a uniform draw)."""
    from pawn.vocab import WHITE_CHECKMATES

    board = chess.Board()
    r = outcome_engine.play(board, chess.engine.Limit(time=30.0), info=chess.engine.INFO_ALL)
    assert r.move in board.legal_moves and "model" in r.info.get("string", "")
    got, want = _multipv(outcome_engine, board), _probs(outcome_player, board, WHITE_CHECKMATES)
    assert set(got) == set(want) and len(got) == 20
    assert all(abs(got[m] - prob_to_cp(want[m])) <= 1 for m in want)


def test_score_cp_is_lichess_win_percentage_curve_read_backwards():
    """Lichess's Win% = 50 + 50·(2/(1 + exp(−0.00368208·cp)) − 1) (lichess.org/page/accuracy) at
    the reported cp gives back the move's probability; 50 % is 0, the ends are clipped."""
    import math

    assert [prob_to_cp(p) for p in (0.5, 0.75, 0.9, 0.1)] == [0, 298, 597, -597]  # ln(3)/k = 298.4, ln(9)/k = 596.7
    for p in (0.02, 0.3, 0.64, 0.97):
        cp = prob_to_cp(p)
        win = 50 + 50 * (2 / (1 + math.exp(-0.00368208 * cp)) - 1)
        assert abs(win - 100 * p) < 0.05, (p, cp, win)
    assert prob_to_cp(1.0) == prob_to_cp(0.999) == 1876 and prob_to_cp(0.0) == -1876


def test_the_engine_is_named_after_the_model_it_holds(tpu_backbone, tmp_path):
    from pawn.play.uci_engine import uci_name

    assert uci_name(str(tpu_backbone)) == "PAWN tiny/large"
    tiny = save_checkpoint(tmp_path / "best", PAWNModel(TINY_VARIANTS["base"], jax.random.PRNGKey(0)).params(),
                           TINY_VARIANTS["base"], run_config={"supernet": None, "variant": "base",
                                                             "sliced_from": {"supernet": "tiny", "checkpoint": "x"}})
    assert uci_name(str(tiny)) == "PAWN tiny/base"
    from pawn.adapters import build_adapted
    from pawn.adapters.io import load_backbone, save_adapter

    bb, ref, _ = load_backbone(tpu_backbone)
    adapter = save_adapter(tmp_path / "lora" / "best", build_adapted("lora", {}, bb, jax.random.PRNGKey(0)), ref)
    assert uci_name(str(adapter)) == "PAWN lora adapter on tiny/large"
    assert uci_name("thomas-schweich/pawn-base") == "PAWN thomas-schweich/pawn-base"
