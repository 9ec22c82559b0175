"""The derived vocabulary equals the published searchless_chess table (spec engine.md §1)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pawn import vocab


@pytest.fixture(scope="module")
def published(shared_data):
    with open(shared_data / "searchless_chess_vocabulary.json") as f:
        return json.load(f)


def test_derived_table_equals_searchless_chess_file_entry_by_entry(published):
    m2a = published["move_to_action"]
    assert len(m2a) == vocab.NUM_ACTIONS == 1968
    for uci, action in m2a.items():
        assert vocab.uci_to_token(uci) == action, uci
        assert vocab.token_to_uci(action) == uci
    for action, uci in published["action_to_move"].items():
        assert vocab.token_to_uci(int(action)) == uci


def test_export_move_vocabulary_matches_file(published):
    exp = vocab.export_move_vocabulary()
    assert exp["move_to_token"] == published["move_to_action"]
    assert {str(k): v for k, v in exp["token_to_move"].items()} == published["action_to_move"]
    assert exp["square_names"][:3] == ["a1", "b1", "c1"] and exp["square_names"][63] == "h8"
    assert exp["promo_pieces"] == ["q", "r", "b", "n"]
    assert len(exp["promo_pairs"]) == 44


def test_token_layout_constants():
    assert (vocab.PAD_TOKEN, vocab.OUTCOME_TOKEN_BASE, vocab.N_OUTCOMES, vocab.VOCAB_SIZE) == (1968, 1969, 11, 1980)
    assert vocab.WHITE_RESIGNS == 1974 and vocab.OUTCOME_NAMES[5] == "WHITE_RESIGNS"
    assert vocab.DRAW_BY_TIME == 1979 and vocab.OUTCOME_NAMES[-1] == "DRAW_BY_TIME"


def test_castling_is_king_two_squares_and_king_takes_rook_is_a_rook_move():
    assert vocab.uci_to_token("e1g1") == 102
    assert vocab.uci_to_token("e1c1") == 99
    assert vocab.uci_to_token("e8g8") == 1714
    assert vocab.uci_to_token("e8c8") == 1711
    assert vocab.uci_to_token("e1h1") == 103  # an ordinary rook/queen move id


def test_pad_and_outcomes_have_no_uci_and_bad_strings_have_no_token():
    assert vocab.token_to_uci(vocab.PAD_TOKEN) is None
    assert vocab.token_to_uci(1979) is None
    assert vocab.token_to_uci(-1) is None
    for bad in ["a1a1", "a1b4", "e2e4x", "z9z9", "", "e7e8k"]:
        assert vocab.uci_to_token(bad) is None, bad
    assert vocab.uci_to_token("A7A8Q") is None  # squares are lower case
    assert vocab.uci_to_token("a7a8Q") == 1880  # promotion letter is case-insensitive


def test_action_table_decomposes_every_id():
    src, dst, promo = vocab.action_table()
    assert src.dtype == dst.dtype == promo.dtype == np.uint8
    assert src.shape == (1968,)
    names = vocab.export_move_vocabulary()["square_names"]
    for i in [0, 317, 1791, 1792, 1967]:
        u = vocab.token_to_uci(i)
        assert names[src[i]] == u[:2] and names[dst[i]] == u[2:4]
        assert promo[i] == (0 if len(u) == 4 else "qrbn".index(u[4]) + 1)
    assert (src[1967], dst[1967], promo[1967]) == (55, 62, 4)
    assert (promo[:1792] == 0).all() and (promo[1792:] > 0).all()
