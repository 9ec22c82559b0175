"""Stateful GameState and BatchEnv (spec engine.md §8) against python-chess as the oracle."""

from __future__ import annotations


import chess
from _chess_oracle import insufficient_material, random_uci_games
import numpy as np
import pytest

from pawn.engine import BatchEnv, GameState, random_games
from pawn.vocab import PAD_TOKEN, token_to_uci, uci_to_token


def oracle_termination(b: chess.Board, max_ply: int) -> int:
    """Spec §2.2 order, computed with python-chess."""
    if not any(b.legal_moves):
        return 0 if b.is_check() else 1
    if b.ply() >= max_ply:
        return 5
    if b.halfmove_clock >= 150:
        return 2
    if b.is_repetition(5):
        return 3
    if insufficient_material(b):
        return 4
    return -1


def legal_tokens(b: chess.Board) -> set[int]:
    return {uci_to_token(m.uci()) for m in b.legal_moves}


# --- GameState (§8.1) ----------------------------------------------------------------------------


def test_game_state_replays_python_chess_games_with_identical_state():
    max_ply = 150
    for moves in random_uci_games(12, max_ply, seed=4, stop_at_game_over=True):
        g = GameState(max_ply=max_ply)
        b = chess.Board()
        for u in moves + [None]:
            assert set(g.legal_move_tokens()) == legal_tokens(b)
            assert len(g.legal_move_tokens()) == b.legal_moves.count()
            assert g.fen() == b.fen(en_passant="legal")
            assert g.is_check() == b.is_check()
            assert g.ply() == b.ply() and g.is_white_to_move() == (b.turn == chess.WHITE)
            code = oracle_termination(b, max_ply)
            assert g.check_termination() == code
            assert g.is_game_over() == (code != -1) and g.is_checkmate() == (code == 0)
            mask = g.legal_moves_grid_mask()
            assert len(mask) == 4096
            assert {i for i, x in enumerate(mask) if x} == {m.from_square * 64 + m.to_square for m in b.legal_moves}
            if u is None:
                break
            assert g.make_move(uci_to_token(u))
            b.push_uci(u)
        assert g.move_history() == [uci_to_token(u) for u in moves]
        assert g.uci_position() == ("position startpos moves " + " ".join(moves) if moves else "position startpos")


def test_illegal_move_returns_false_and_leaves_state_unchanged():
    g = GameState()
    assert g.make_move(uci_to_token("e2e4"))
    before = (g.fen(), g.ply(), g.move_history(), g.legal_move_tokens())
    for bad in [uci_to_token("e2e4"), uci_to_token("e7e4"), PAD_TOKEN, 1969, 5000, -1]:
        assert not g.make_move(bad)
        assert (g.fen(), g.ply(), g.move_history(), g.legal_move_tokens()) == before
    assert g.make_move_uci("e7e5") == "e7e5"
    assert g.make_move_uci("e1g1") is None and g.make_move_uci("zz") is None
    assert g.ply() == 2


def test_castling_is_the_king_two_squares_and_outcome_tokens():
    g = GameState()
    for u in ["e2e4", "e7e5", "g1f3", "b8c6", "f1c4", "g8f6"]:
        assert g.make_move_uci(u) == u
    assert uci_to_token("e1g1") in g.legal_move_tokens()
    assert uci_to_token("e1h1") not in g.legal_move_tokens()
    g = GameState()
    assert g.outcome_token() is None
    for u in ["f2f3", "e7e5", "g2g4", "d8h4"]:
        g.make_move_uci(u)
    assert g.is_checkmate() and g.check_termination() == 0 and g.outcome_token() == 1970
    g = GameState(max_ply=2)
    g.make_move_uci("e2e4")
    g.make_move_uci("e7e5")
    assert g.check_termination() == 5 and g.outcome_token() == 1973
    assert g.make_move_uci("g1f3") == "g1f3"  # the cap does not refuse moves


def test_structured_legal_moves_collapse_promotions():
    g = GameState()
    for u in ["a2a4", "b7b5", "a4b5", "a7a6", "b5a6", "b8c6", "a6a7", "a8b8"]:
        assert g.make_move_uci(u)
    grid, promos, mask = g.legal_moves_full()
    a7a8, a7b8 = 48 * 64 + 56, 48 * 64 + 57
    assert a7a8 in grid and a7b8 in grid and mask[a7a8] and mask[a7b8]
    assert sorted(promos) == [(0, [0, 1, 2, 3]), (15, [0, 1, 2, 3])]  # a7a8, a7b8 (§1.7)
    assert (grid, promos) == g.legal_moves_structured()


def test_game_state_rejects_bad_max_ply():
    with pytest.raises(ValueError):
        GameState(max_ply=0)


# --- BatchEnv (§8.2) -----------------------------------------------------------------------------


def test_batch_env_methods_before_reset_raise_runtime_error():
    env = BatchEnv(3, max_ply=20)
    for call in (env.all_terminated, env.active_games, env.outcomes, lambda: env.apply_moves([0], [317]),
                 lambda: env.legal_token_masks([0]), lambda: env.fens([0])):
        with pytest.raises(RuntimeError, match="reset"):
            call()
    env.reset()
    assert env.n_games() == 3 and not env.all_terminated()


def test_batch_env_replays_python_chess_games_in_lockstep():
    max_ply = 120
    games = random_uci_games(6, max_ply, seed=8, stop_at_game_over=True)
    env = BatchEnv(len(games), max_ply=max_ply)
    env.reset()
    boards = [chess.Board() for _ in games]
    for t in range(max(len(m) for m in games) + 1):
        idx = [i for i in range(len(games)) if t <= len(games[i])]
        masks = env.legal_token_masks(idx)
        assert masks.shape == (len(idx), 1980) and masks.dtype == np.bool_
        fens = env.fens(idx)
        codes, _ = env.outcomes()
        for r, i in enumerate(idx):
            b = boards[i]
            want = oracle_termination(b, max_ply)
            assert codes[i] == want
            if want == -1:
                assert set(np.flatnonzero(masks[r])) == legal_tokens(b)
            else:
                assert list(np.flatnonzero(masks[r])) == [PAD_TOKEN]
            assert fens[r] == b.fen(en_passant="legal")
        move_idx = [i for i in idx if t < len(games[i])]
        if not move_idx:
            break
        toks = np.array([uci_to_token(games[i][t]) for i in move_idx], dtype=np.int16)
        played, code = env.apply_moves(np.array(move_idx), toks)
        for r, i in enumerate(move_idx):
            boards[i].push_uci(games[i][t])
            assert played[r]
            assert code[r] == oracle_termination(boards[i], max_ply)
    hist, lens = env.move_histories(list(range(len(games))))
    assert hist.dtype == np.int16 and hist.shape == (len(games), max_ply)
    for i, m in enumerate(games):
        assert lens[i] == len(m)
        assert [token_to_uci(int(x)) for x in hist[i, : lens[i]]] == m
        assert (hist[i, lens[i]:] == PAD_TOKEN).all()
    assert list(env.plies(range(len(games)))) == [len(m) for m in games]


def test_batch_env_illegal_token_forfeits_with_minus_three():
    env = BatchEnv(3, max_ply=30)
    env.reset()
    played, code = env.apply_moves([0, 1], [uci_to_token("e2e4"), uci_to_token("e2e5")])
    assert played.tolist() == [True, False] and code.tolist() == [-1, -3]
    assert code.dtype == np.int8
    played, code = env.apply_moves([1], [uci_to_token("e2e4")])
    assert played.tolist() == [False] and code.tolist() == [-3]
    codes, outcome = env.outcomes()
    assert codes.tolist() == [-1, -3, -1] and outcome.tolist() == [-1, -1, -1]
    assert outcome.dtype == np.int16
    assert env.active_games() == [0, 2]
    assert env.plies([1]).tolist() == [0]
    with pytest.raises(IndexError):
        env.apply_moves([3], [uci_to_token("e2e4")])
    with pytest.raises(ValueError):
        env.apply_moves([0, 2], [uci_to_token("e7e5")])


def test_load_prefixes_reports_running_terminated_and_forfeited_games():
    rg = random_games(3, max_ply=40, seed=2)
    env = BatchEnv(4, max_ply=40)
    env.reset()
    tokens = np.full((4, 40), PAD_TOKEN, dtype=np.int16)
    lengths = np.zeros(4, dtype=np.int16)
    tokens[:3], lengths[:3] = rg.tokens, rg.lengths
    lengths[1] = 10  # a running prefix
    tokens[2, 5] = uci_to_token("a1a8")  # illegal at ply 5 (the a1 rook is boxed in)
    codes = env.load_prefixes(tokens, lengths)
    assert codes.dtype == np.int8
    assert codes[0] == rg.termination[0] and codes[1] == -1 and codes[2] == -3 and codes[3] == -1
    assert env.plies([0, 1, 2, 3]).tolist() == [int(rg.lengths[0]), 10, 5, 0]
    _, out = env.outcomes()
    assert out[0] == rg.outcome[0] and out[1] == -1
    with pytest.raises(ValueError):
        env.load_prefixes(tokens[:2], lengths[:2])


def test_random_generation_loop_terminates_every_game():
    env = BatchEnv(8, max_ply=60, seed=1)
    env.reset()
    rng = np.random.default_rng(0)
    while not env.all_terminated():
        idx = env.active_games()
        masks = env.legal_token_masks(idx)
        toks = [int(rng.choice(np.flatnonzero(m))) for m in masks]
        env.apply_moves(idx, toks)
    hist, lens = env.move_histories(range(8))
    codes, out = env.outcomes()
    assert (codes >= 0).all() and (out >= 1969).all() and (out <= 1973).all()
    from pawn.engine import validate_games

    assert validate_games(hist, lens)[0].all()


def test_rl_agent_and_random_opponent():
    env = BatchEnv(4, max_ply=40, seed=3)
    env.reset()
    # Agent white in games 0, 1; black in 2, 3 (the opponent moves first there).
    assert env.active_agent_games() == [0, 1] and env.active_opponent_games() == [2, 3]
    assert env.apply_random_opponent_moves() == [2, 3]
    assert env.active_agent_games() == [0, 1, 2, 3]
    assert env.apply_agent_moves([0], [uci_to_token("e2e5")]) == [False]  # forfeit
    term, forf, reward, plies, code, white = env.rl_outcomes()
    assert term[0] and forf[0] and reward[0] == -1 and code[0] == -1
    assert white.tolist() == [True, True, False, False]
    with pytest.raises(ValueError):
        env.apply_opponent_moves([1], [uci_to_token("e2e4")])
    # Fool's mate against the agent in game 1.
    for who, u in [("a", "f2f3"), ("o", "e7e5"), ("a", "g2g4"), ("o", "d8h4")]:
        f = env.apply_agent_moves if who == "a" else env.apply_opponent_moves
        assert f([1], [uci_to_token(u)]) == [True]
    assert env.rewards()[1] == -1 and env.outcomes()[0][1] == 0 and env.rl_outcomes()[3][1] == 2
    # Same random opponent stream for the same seed.
    a, b = BatchEnv(4, 40, seed=5), BatchEnv(4, 40, seed=5)
    a.reset()
    b.reset()
    a.apply_random_opponent_moves()
    b.apply_random_opponent_moves()
    assert a.fens([2, 3]) == b.fens([2, 3])
