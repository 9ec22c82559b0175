"""Board states and probe targets (spec engine.md §5) against python-chess."""

from __future__ import annotations

import chess
import numpy as np
import pytest
from _chess_oracle import PAD, PIECE_SYMBOLS, OracleGames, load_vocab, random_games

from pawn import engine, vocab
from pawn.engine.boards import NO_EP_SQUARE, derived_legal_move_count

N_GAMES, MAX_PLY, WIDE = 200, 300, 310


@pytest.fixture(scope="module")
def games(shared_data) -> OracleGames:
    return random_games(load_vocab(shared_data), N_GAMES, MAX_PLY, seed=977)


@pytest.fixture(scope="module")
def wide(games) -> tuple[np.ndarray, np.ndarray]:
    tokens = np.full((N_GAMES, WIDE), PAD, dtype=np.int16)
    tokens[:, :MAX_PLY] = games.tokens
    return tokens, games.lengths


@pytest.fixture(scope="module")
def oracle(games) -> dict[str, np.ndarray]:
    """python-chess's view of every position, with §5 fill values for t ≥ length."""
    shape = (N_GAMES, WIDE)
    exp = {
        "boards": np.zeros((*shape, 64), np.int8),
        "side_to_move": np.zeros(shape, bool),
        "castling_rights": np.zeros(shape, np.uint8),
        "ep_square": np.full(shape, -1, np.int8),
        "is_check": np.zeros(shape, bool),
        "halfmove_clock": np.zeros(shape, np.uint8),
        "material_count": np.zeros((*shape, 10), np.int8),
        "legal_move_count": np.zeros(shape, np.int16),
        "game_phase": np.zeros(shape, np.int8),
    }
    order = [(c, p) for c in (chess.WHITE, chess.BLACK) for p in (1, 2, 3, 4, 5)]
    for b, boards in enumerate(games.boards):
        for t, board in enumerate(boards):
            for sq, piece in board.piece_map().items():
                exp["boards"][b, t, sq] = PIECE_SYMBOLS.index(piece.symbol())
            exp["side_to_move"][b, t] = board.turn == chess.WHITE
            exp["castling_rights"][b, t] = (
                board.has_kingside_castling_rights(chess.WHITE)
                | board.has_queenside_castling_rights(chess.WHITE) << 1
                | board.has_kingside_castling_rights(chess.BLACK) << 2
                | board.has_queenside_castling_rights(chess.BLACK) << 3
            )
            if board.has_legal_en_passant():
                exp["ep_square"][b, t] = board.ep_square
            exp["is_check"][b, t] = board.is_check()
            exp["halfmove_clock"][b, t] = min(board.halfmove_clock, 255)
            counts = [len(board.pieces(p, c)) for c, p in order]
            exp["material_count"][b, t] = counts
            exp["legal_move_count"][b, t] = board.legal_moves.count()
            occupied = len(board.piece_map())
            non_pawn = sum(counts) - counts[0] - counts[5]
            exp["game_phase"][b, t] = 0 if t <= 20 and occupied >= 28 else (2 if non_pawn <= 6 else 1)
    return exp


def test_random_games_exercise_en_passant_check_and_lost_castling(oracle):
    assert (oracle["ep_square"] >= 0).any()
    assert oracle["is_check"].any()
    assert ((oracle["castling_rights"] > 0) & (oracle["castling_rights"] < 15)).any()
    assert set(np.unique(oracle["game_phase"])) == {0, 1, 2}


def test_board_states_equal_python_chess_with_fill_values_after_the_end(wide, oracle):
    st = engine.board_states(*wide)
    assert st.boards.shape == (N_GAMES, WIDE, 8, 8) and st.boards.dtype == np.int8
    np.testing.assert_array_equal(st.boards.reshape(N_GAMES, WIDE, 64), oracle["boards"])
    for name, dtype in [("side_to_move", np.bool_), ("castling_rights", np.uint8), ("ep_square", np.int8),
                        ("is_check", np.bool_), ("halfmove_clock", np.uint8)]:
        arr = getattr(st, name)
        assert arr.dtype == dtype and arr.shape == (N_GAMES, WIDE), name
        np.testing.assert_array_equal(arr, oracle[name], err_msg=name)


def test_board_indexing_is_rank_then_file():
    st = engine.board_states(np.array([[317]], dtype=np.int16), np.array([1], dtype=np.int16))
    assert st.boards[0, 0, 0, 4] == 6  # white king on e1: rank 1, file e
    assert st.boards[0, 0, 7, 3] == 11  # black queen on d8
    assert st.boards[0, 0, 1].tolist() == [1] * 8


def test_halfmove_clock_is_capped_at_255():
    # Knights shuffle for 300 plies: the clock grows by one per ply after the first move.
    cycle = ["g1f3", "g8f6", "f3g1", "f6g8"]
    toks = [vocab.uci_to_token(u) for u in cycle * 75]
    st = engine.board_states(np.array([toks], dtype=np.int16), np.array([300], dtype=np.int16))
    assert st.halfmove_clock[0, 255] == 255 and st.halfmove_clock[0, 299] == 255
    assert st.halfmove_clock[0, 100] == 100


def test_probe_targets_equal_python_chess(wide, oracle, games):
    pt = engine.probe_targets(*wide)
    valid = np.arange(WIDE)[None, :] < games.lengths[:, None]
    np.testing.assert_array_equal(pt["valid"], valid)
    np.testing.assert_array_equal(pt["piece_type"], oracle["boards"])
    assert pt["piece_type"].dtype == np.int8 and pt["piece_type"].max() <= 12
    np.testing.assert_array_equal(pt["side_to_move"], oracle["side_to_move"])
    np.testing.assert_array_equal(pt["is_check"], oracle["is_check"])
    bits = (oracle["castling_rights"][..., None] >> np.arange(4)) & 1
    np.testing.assert_array_equal(pt["castling_rights"], bits.astype(bool))
    exp_ep = np.where(oracle["ep_square"] < 0, NO_EP_SQUARE, oracle["ep_square"])
    np.testing.assert_array_equal(pt["ep_square"], exp_ep)
    assert pt["ep_square"].dtype == np.int8
    np.testing.assert_array_equal(pt["material_count"], oracle["material_count"])
    np.testing.assert_array_equal(pt["halfmove_clock"], oracle["halfmove_clock"])
    np.testing.assert_array_equal(pt["game_phase"], oracle["game_phase"])
    assert pt["game_phase"].dtype == np.int8


def test_derived_legal_move_count_equals_true_number_of_legal_moves(wide, oracle):
    pt = engine.probe_targets(*wide)
    assert pt["legal_move_count"].dtype == np.int16
    np.testing.assert_array_equal(pt["legal_move_count"], oracle["legal_move_count"])
    np.testing.assert_array_equal(pt["legal_move_count"], engine.legal_move_counts(*wide))


def test_derived_count_adds_promotion_pieces_beyond_the_grid_bit():
    grid = np.zeros((1, 64), np.uint64)
    promo = np.zeros((1, 44, 4), bool)
    grid[0, 49] = (1 << 56) | (1 << 57)  # b7a8, b7b8
    grid[0, 4] = 1 << 5  # Kf1
    promo[0, 8] = True  # b7a8 q r b n
    promo[0, 1] = True  # b7b8 q r b n
    assert derived_legal_move_count(grid, promo).tolist() == [9]


def test_probe_targets_reject_illegal_and_wrong_dtype(games):
    tokens = games.tokens[:2].copy()
    tokens[1, 0] = 1497  # e7e5 as white's first move
    with pytest.raises(ValueError, match="game 1, ply 0"):
        engine.probe_targets(tokens, games.lengths[:2])
    with pytest.raises(TypeError):
        engine.board_states(games.tokens.astype(np.int32), games.lengths)
