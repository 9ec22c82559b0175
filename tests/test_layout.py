"""The sequence layout (``pawn.data.layout``; spec engine §3.4, §4 alignment notes)."""

from __future__ import annotations

import numpy as np
import pytest

from pawn.data.layout import OUTCOME_PREFIX, PURE_MOVES, Layout
from pawn.engine import random_games
from pawn.vocab import PAD_TOKEN


def test_geometry_of_both_layouts():
    assert (PURE_MOVES.offset, OUTCOME_PREFIX.offset) == (0, 1)
    assert (PURE_MOVES.name, OUTCOME_PREFIX.name) == ("pure_moves", "outcome_prefix")
    assert PURE_MOVES.seq_len(255) == 255 and OUTCOME_PREFIX.seq_len(255) == 256
    assert PURE_MOVES.max_ply(512) == 512 and OUTCOME_PREFIX.max_ply(512) == 511
    np.testing.assert_array_equal(OUTCOME_PREFIX.position_of_ply(np.array([0, 7])), [1, 8])
    assert Layout.named("outcome_prefix") == OUTCOME_PREFIX
    with pytest.raises(ValueError, match="layout"):
        Layout.named("moves")


def test_resolution_flag_then_checkpoint_then_pure_moves():
    assert Layout.recorded({"prepend_outcome": True}) == OUTCOME_PREFIX
    assert Layout.recorded({"seq_len": 20}) is None and Layout.recorded(None) is None
    assert Layout.resolve(None, OUTCOME_PREFIX) == OUTCOME_PREFIX
    assert Layout.resolve(False, OUTCOME_PREFIX) == PURE_MOVES
    assert Layout.resolve(True, None) == OUTCOME_PREFIX
    assert Layout.resolve(None, None) == PURE_MOVES


@pytest.mark.parametrize("layout", [PURE_MOVES, OUTCOME_PREFIX])
def test_position_of_ply_is_where_pack_puts_the_move(layout):
    g = random_games(8, 30, 5)
    seq_len = layout.seq_len(30)
    ids = layout.pack(g.tokens, g.lengths, g.outcome, seq_len)["input_ids"]
    for b in range(8):
        for t in range(int(g.lengths[b])):
            assert ids[b, layout.position_of_ply(t)] == g.tokens[b, t]
    # The end-of-game position is the last supervised one; its target is PAD.
    packed = layout.pack(g.tokens, g.lengths, g.outcome, seq_len)
    end = layout.end_position(g.lengths)
    assert (packed["loss_mask"].sum(1) - 1 == end).all()
    assert (packed["targets"][np.arange(8), end] == PAD_TOKEN).all()


def test_fit_cuts_to_the_plies_a_sequence_holds():
    tok = np.array([[5, 6, 7, 8], [9, 10, PAD_TOKEN, PAD_TOKEN]], np.int16)
    out, lens = OUTCOME_PREFIX.fit(tok, np.array([4, 2]), 4)
    np.testing.assert_array_equal(out, [[5, 6, 7], [9, 10, PAD_TOKEN]])
    np.testing.assert_array_equal(lens, [3, 2])
    out, lens = PURE_MOVES.fit(tok, np.array([4, 2]), 6)
    assert out.shape == (2, 6) and (out[:, 4:] == PAD_TOKEN).all() and list(lens) == [4, 2]


def test_align_plies_shifts_by_layout_and_clears_the_end():
    per_ply = np.arange(1, 9).reshape(2, 4)  # plies 0..3 of two games, lengths 4 and 2
    lens = np.array([4, 2])
    np.testing.assert_array_equal(PURE_MOVES.align_plies(per_ply, lens), [[2, 3, 4, 0], [6, 0, 0, 0]])
    np.testing.assert_array_equal(OUTCOME_PREFIX.align_plies(per_ply, lens), [[1, 2, 3, 4, 0], [5, 6, 0, 0, 0]])
    with pytest.raises(ValueError, match="lengths"):
        PURE_MOVES.align_plies(per_ply, np.array([5, 0]))


@pytest.mark.parametrize("layout", [PURE_MOVES, OUTCOME_PREFIX])
def test_every_packed_target_is_legal_at_its_position(layout):
    g = random_games(12, 24, 9)
    seq_len = layout.seq_len(24)
    tok, lens = layout.fit(g.tokens, g.lengths, seq_len)
    packed = layout.pack(tok, lens, g.outcome, seq_len)
    legal, grid = layout.legal_at_positions(tok, lens)
    lm, tgt = packed["loss_mask"], packed["targets"]
    b, p = np.nonzero(lm)
    assert legal[b, p, tgt[b, p]].all()
    assert not legal[~lm].any() and not grid[~lm].any()
    end = layout.end_position(lens)
    assert (legal[np.arange(12), end].sum(-1) == 1).all() and not grid[np.arange(12), end].any()
