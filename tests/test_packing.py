"""Sequence packing (spec engine.md §3.4, training-and-adapters.md §1.2)."""

from __future__ import annotations

import numpy as np
import pytest

from pawn.data.packing import pack_games
from pawn.data.stream import EngineSource, build_corpus, CorpusSource, CorpusError, make_batch
from pawn.engine import random_games
from pawn.vocab import PAD_TOKEN

P = PAD_TOKEN


def test_pure_moves_targets_shift_and_final_pad_target():
    t = np.array([[5, 6, 7, P, P]], np.int16)
    d = pack_games(t, np.array([3]), np.array([1969]), 5)
    assert d["input_ids"].tolist() == [[5, 6, 7, P, P]]
    assert d["targets"].tolist() == [[6, 7, P, P, P]]
    assert d["loss_mask"].tolist() == [[True, True, True, False, False]]
    assert d["input_ids"].dtype == np.int32 and d["loss_mask"].dtype == bool


def test_zero_length_game_supervises_nothing():
    t = np.full((1, 4), P, np.int16)
    for prefix in (False, True):
        d = pack_games(t, np.array([0]), np.array([1971]), 4, prepend_outcome=prefix)
        assert d["loss_mask"].sum() == (1 if prefix else 0)  # prefix mode: outcome → PAD is supervised


def test_full_length_game_predicts_pad_in_the_last_slot():
    t = np.arange(4, dtype=np.int16)[None]
    d = pack_games(t, np.array([4]), np.array([1973]), 4)
    assert d["targets"][0, -1] == P and d["loss_mask"][0].all()


def test_outcome_prefix_layout():
    t = np.array([[5, 6, 7]], np.int16)
    d = pack_games(t, np.array([3]), np.array([1970]), 4, prepend_outcome=True)
    assert d["input_ids"].tolist() == [[1970, 5, 6, 7]]
    assert d["targets"].tolist() == [[5, 6, 7, P]]
    assert d["loss_mask"].tolist() == [[True] * 4]


def test_stale_slots_after_the_length_become_pad_never_zero():
    t = np.array([[5, 6, 0, 0]], np.int16)  # an engine that left zeros after the game
    d = pack_games(t, np.array([2]), np.array([1969]), 4)
    assert d["input_ids"].tolist() == [[5, 6, P, P]]
    assert d["attn_mask"].sum() == 2


def test_bad_lengths_raise():
    with pytest.raises(ValueError, match="negative"):
        pack_games(np.zeros((1, 4), np.int16), np.array([-1]), np.array([0]), 4)
    with pytest.raises(ValueError, match="shape"):
        pack_games(np.zeros((2, 4), np.int16), np.array([1]), np.array([0]), 4)


def test_batch_s_is_a_fixed_range_of_the_seed_stream():
    src = EngineSource(seed=5, max_ply=32)
    b3 = make_batch(src, 3, 4, 32, False)
    g = random_games(16, 32, seed=5)
    ref = pack_games(g.tokens[12:16], g.lengths[12:16], g.outcome[12:16], 32)
    np.testing.assert_array_equal(b3["input_ids"], ref["input_ids"])
    # two processes split the batch into contiguous halves
    half = make_batch(src, 3, 4, 32, False, process_index=1, process_count=2)
    np.testing.assert_array_equal(half["input_ids"], ref["input_ids"][2:])


def test_on_disk_corpus_gives_the_same_batches(tmp_path):
    d = build_corpus(tmp_path / "corpus", 24, 32, seed=5)
    src = CorpusSource(d, seed=5, max_ply=32, mate_boost=0.0, n_games=24)
    np.testing.assert_array_equal(make_batch(src, 2, 8, 32, False)["targets"], make_batch(EngineSource(5, 32), 2, 8, 32, False)["targets"])
    with pytest.raises(CorpusError, match="seed"):
        CorpusSource(d, seed=6, max_ply=32, mate_boost=0.0, n_games=24)
    with pytest.raises(CorpusError, match="holds 24 games"):
        CorpusSource(d, seed=5, max_ply=32, mate_boost=0.0, n_games=100)
