"""Random games (spec engine.md §2–3) replayed in python-chess, the independent oracle."""

from __future__ import annotations

import chess
import numpy as np
import pytest

from pawn import vocab
from pawn.engine import random_games

TERM_CHECKMATE, TERM_STALEMATE, TERM_75, TERM_FIVEFOLD, TERM_INSUFFICIENT, TERM_PLY = range(6)


def spec_termination(board: chess.Board, ply: int, max_ply: int) -> int | None:
    """Spec §2.2 order, computed with python-chess: mate/stalemate > ply cap > 75-move >
    fivefold > insufficient material (not python-chess's own Board.outcome() order)."""
    if not any(board.generate_legal_moves()):
        return TERM_CHECKMATE if board.is_check() else TERM_STALEMATE
    if ply >= max_ply:
        return TERM_PLY
    if board.halfmove_clock >= 150:
        return TERM_75
    if board.halfmove_clock >= 16 and board.is_fivefold_repetition():
        return TERM_FIVEFOLD
    if board.is_insufficient_material():
        return TERM_INSUFFICIENT
    return None


def expected_outcome(term: int, length: int) -> int:
    if term == TERM_CHECKMATE:
        return vocab.WHITE_CHECKMATES if length % 2 == 1 else vocab.BLACK_CHECKMATES
    if term == TERM_STALEMATE:
        return vocab.STALEMATE
    if term == TERM_PLY:
        return vocab.PLY_LIMIT
    return vocab.DRAW_BY_RULE


def replay_and_check(games, max_ply: int) -> dict[int, int]:
    seen: dict[int, int] = {}
    for i in range(len(games)):
        n = int(games.lengths[i])
        board = chess.Board()
        for t in range(n):
            assert spec_termination(board, t, max_ply) is None, f"game {i} should have ended before ply {t}"
            move = chess.Move.from_uci(vocab.token_to_uci(int(games.tokens[i, t])))
            assert board.is_legal(move), f"game {i} ply {t}: {move} illegal"
            board.push(move)
        term = spec_termination(board, n, max_ply)
        assert term == games.termination[i], f"game {i}: engine says {games.termination[i]}, python-chess {term}"
        assert games.outcome[i] == expected_outcome(term, n)
        assert (games.tokens[i, n:] == vocab.PAD_TOKEN).all()
        seen[term] = seen.get(term, 0) + 1
    return seen


@pytest.mark.slow
def test_2000_random_games_are_legal_and_end_as_python_chess_says():
    games = random_games(2000, max_ply=512, seed=2024)
    assert games.tokens.dtype == np.int16 and games.tokens.shape == (2000, 512)
    assert games.lengths.dtype == np.int16 and games.termination.dtype == np.uint8
    assert games.outcome.dtype == np.int16
    seen = replay_and_check(games, 512)
    # Uniform random play at 512 plies reaches every ending (spec §3.6: mean length ≈ 352).
    assert {TERM_CHECKMATE, TERM_STALEMATE, TERM_INSUFFICIENT, TERM_PLY} <= set(seen)
    assert 330 < games.lengths.mean() < 375


def test_short_ply_cap_ends_games_by_ply_limit():
    games = random_games(200, max_ply=20, seed=1)
    seen = replay_and_check(games, 20)
    assert seen.get(TERM_PLY, 0) >= 190
    assert (games.lengths <= 20).all()


def test_same_seed_same_games_and_prefix_stability():
    a = random_games(50, 128, seed=9)
    b = random_games(10, 128, seed=9)
    np.testing.assert_array_equal(a.tokens[:10], b.tokens)
    c = random_games(10, 128, seed=10)
    assert not np.array_equal(b.tokens, c.tokens)


def test_games_are_independent_of_thread_count():
    import subprocess
    import sys

    code = (
        "import numpy as np, sys; from pawn.engine import random_games;"
        "g = random_games(64, 256, seed=5); sys.stdout.write(str(int(g.tokens.astype(np.int64).sum())))"
    )
    sums = set()
    for threads in ("1", "2", "3"):
        env = {**__import__("os").environ, "RAYON_NUM_THREADS": threads}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        sums.add(out.stdout)
    assert len(sums) == 1


def test_zero_games_and_bad_arguments():
    assert random_games(0).tokens.shape == (0, 512)
    with pytest.raises(ValueError, match="max_ply"):
        random_games(1, max_ply=0)
    with pytest.raises(ValueError, match="n_games"):
        random_games(-1)
    with pytest.raises(ValueError, match="mate_boost"):
        random_games(1, mate_boost=2.0)
    with pytest.raises(OverflowError):
        random_games(1, seed=-1)


def test_discard_ply_limit_drops_capped_games():
    games = random_games(20, max_ply=80, seed=3, discard_ply_limit=True)
    assert (games.termination != TERM_PLY).all()
    replay_and_check(games, 80)


def test_first_game_selects_the_same_games_as_a_larger_call():
    whole = random_games(40, 96, seed=77)
    part = random_games(15, 96, seed=77, first_game=20)
    np.testing.assert_array_equal(whole.tokens[20:35], part.tokens)
    np.testing.assert_array_equal(whole.termination[20:35], part.termination)


def test_non_integer_counts_are_refused_not_truncated():
    with pytest.raises(TypeError, match="n_games must be an integer"):
        random_games(2.7)
    with pytest.raises(TypeError, match="seed"):
        random_games(2, seed="1")
    assert len(random_games(np.int64(3), np.int32(16))) == 3


def test_large_calls_run_in_blocks_with_the_same_result(monkeypatch):
    import pawn.engine.games as games_mod

    whole = random_games(25, 40, seed=8)
    monkeypatch.setattr(games_mod, "INTERRUPT_BLOCK", 7)
    blocked = games_mod.random_games(25, 40, seed=8)
    for name in ("tokens", "lengths", "termination", "outcome"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(blocked, name))
    np.testing.assert_array_equal(games_mod.random_games(10, 40, seed=8, first_game=5).tokens, whole.tokens[5:15])
