"""Bad input from Python gives a clear exception — never a panic, an abort or silent garbage."""

from __future__ import annotations

import numpy as np
import pytest

from pawn import engine


@pytest.fixture(scope="module")
def games():
    return engine.random_games(4, max_ply=64, seed=1)


def test_random_games_too_large_to_allocate_raises_memory_error_not_abort():
    with pytest.raises(MemoryError, match="random_games"):
        engine.random_games(2**62, max_ply=512)
    with pytest.raises(MemoryError, match="random_games"):
        engine.random_games(10**15, max_ply=512)


def test_dense_masks_with_huge_vocab_size_raise_memory_error_not_panic(games):
    with pytest.raises(MemoryError, match="legal_move_masks"):
        engine.legal_move_masks(games.tokens, games.lengths, vocab_size=2**62)


def test_sparse_masks_reject_flat_indices_beyond_int64(games):
    with pytest.raises(ValueError, match="int64"):
        engine.legal_move_masks_sparse(games.tokens, games.lengths, vocab_size=2**62)
    with pytest.raises(ValueError, match="int64"):
        engine.legal_move_masks_sparse(games.tokens, games.lengths, seq_len=2**62)


def test_batch_env_too_large_to_allocate_raises_memory_error():
    with pytest.raises(MemoryError, match="BatchEnv"):
        engine.BatchEnv(2**62)
    env = engine.BatchEnv(2)
    env.reset()
    with pytest.raises(MemoryError, match="legal_token_masks"):
        env.legal_token_masks([0], vocab_size=2**62)


def test_accuracy_ceiling_too_large_to_allocate_raises_memory_error():
    with pytest.raises(MemoryError, match="accuracy_ceiling"):
        engine.accuracy_ceiling(10**15, max_ply=8)


def test_diagnostic_sets_too_large_to_allocate_raise_memory_error():
    quotas = np.zeros(64, np.int32)
    with pytest.raises(MemoryError, match="generate_diagnostic_sets"):
        engine.generate_diagnostic_sets(quotas, quotas, 2**62)


def test_discard_ply_limit_with_max_ply_below_four_raises_instead_of_looping_forever():
    with pytest.raises(ValueError, match="max_ply ≥ 4"):
        engine.random_games(3, max_ply=3, discard_ply_limit=True)


def test_negative_token_is_named_as_written(games):
    tokens = games.tokens.copy()
    tokens[3, 0] = -5
    for fn in (engine.edge_stats_per_ply, engine.accuracy_ceiling_of, engine.tokens_to_san):
        with pytest.raises(ValueError, match=r"game 3.*-5"):
            fn(tokens, games.lengths)


def test_uci_file_with_bom_keeps_its_first_game(tmp_path):
    path = tmp_path / "games.txt"
    path.write_bytes(b"\xef\xbb\xbfe2e4\te7e5\r\n\r\ng1f3 0-1\r\n")
    parsed = engine.parse_uci_file(path)
    assert parsed.skipped == []
    assert parsed.uci == [["e2e4", "e7e5"], ["g1f3"]]


def test_directory_paths_raise_is_a_directory_error(tmp_path):
    with pytest.raises(IsADirectoryError, match=str(tmp_path)):
        engine.parse_pgn(tmp_path)
    with pytest.raises(IsADirectoryError, match=str(tmp_path)):
        engine.parse_pgn(str(tmp_path))
    with pytest.raises(IsADirectoryError, match=str(tmp_path)):
        engine.parse_uci_file(tmp_path)
    with pytest.raises(ValueError, match="empty string"):
        engine.parse_pgn("")


def test_move_lists_given_as_strings_are_split_not_read_per_character():
    tokens, lengths = engine.uci_to_tokens(["e2e4 e7e5", ["g1f3"]])
    assert lengths.tolist() == [2, 1]
    assert engine.uci_to_san(["e2e4 e7e5"]) == [["e4", "e5"]]
    assert engine.san_to_uci(["e4 e5 Nf3"]) == [["e2e4", "e7e5", "g1f3"]]
    with pytest.raises(TypeError, match="single string"):
        engine.uci_to_tokens("e2e4 e7e5")


def test_rl_moves_with_one_wrong_turn_change_no_game():
    env = engine.BatchEnv(4)
    env.reset()  # games 0, 1: agent white; games 2, 3: agent black
    with pytest.raises(ValueError, match="game 3"):
        env.apply_agent_moves([0, 3], [317, 317])
    with pytest.raises(ValueError, match="game 0"):
        env.apply_agent_moves([0, 0], [317, 1497])
    with pytest.raises(ValueError, match="game 0"):
        env.apply_opponent_moves([2, 0], [317, 317])
    assert env.plies([0, 1, 2, 3]).tolist() == [0, 0, 0, 0]
    assert env.apply_agent_moves([0, 1], [317, 317]) == [True, True]


def test_token_to_uci_rejects_floats_and_returns_none_for_any_out_of_range_int():
    from pawn import vocab

    assert vocab.token_to_uci(np.int16(317)) == "e2e4"
    assert vocab.token_to_uci(2**70) is None
    assert vocab.token_to_uci(-(2**70)) is None
    with pytest.raises(TypeError):
        vocab.token_to_uci(3.7)
