"""Legal-move masks (spec engine.md §4) against python-chess, alignment (§3.4) and perft."""

from __future__ import annotations

import numpy as np
import pytest
from _chess_oracle import PAD, OracleGames, load_vocab, random_games

from pawn import engine, vocab
from pawn.data.layout import Layout

N_GAMES, MAX_PLY, WIDE = 200, 300, 310


@pytest.fixture(scope="module")
def games(shared_data) -> OracleGames:
    return random_games(load_vocab(shared_data), N_GAMES, MAX_PLY, seed=20240611)


@pytest.fixture(scope="module")
def wide(games) -> tuple[np.ndarray, np.ndarray]:
    """The same games in a PAD-filled array with T = 310 > every length, so every game has a
    position t = length inside the array."""
    tokens = np.full((N_GAMES, WIDE), PAD, dtype=np.int16)
    tokens[:, :MAX_PLY] = games.tokens
    return tokens, games.lengths


def expected_dense(games: OracleGames, width: int, vocab_size: int) -> np.ndarray:
    exp = np.zeros((len(games.legal), width, vocab_size), dtype=bool)
    for b, per_ply in enumerate(games.legal):
        for t, toks in enumerate(per_ply):
            exp[b, t, toks] = True
        if len(per_ply) < width and vocab_size > PAD:
            exp[b, len(per_ply), PAD] = True
    return exp


def test_random_games_cover_both_length_cases(games):
    # Some games end by mate/stalemate (length < 300), some are cut at 300 plies.
    assert (games.lengths < MAX_PLY).any() and (games.lengths == MAX_PLY).any()


def test_dense_mask_equals_python_chess_legal_moves_with_pad_at_length(games, wide):
    tokens, lengths = wide
    for lo in range(0, N_GAMES, 50):  # chunks keep memory small
        sl = slice(lo, lo + 50)
        mask = engine.legal_move_masks(tokens[sl], lengths[sl])
        assert mask.shape == (50, WIDE, 1969) and mask.dtype == np.bool_
        sub = OracleGames(tokens[sl], lengths[sl], games.legal[sl], games.boards[sl])
        np.testing.assert_array_equal(mask, expected_dense(sub, WIDE, 1969))


def test_dense_mask_with_full_vocab_and_without_pad_column(games):
    tokens, lengths = games.tokens[:20], games.lengths[:20]
    sub = OracleGames(tokens, lengths, games.legal[:20], games.boards[:20])
    full = engine.legal_move_masks(tokens, lengths, vocab_size=1980)
    assert full.shape == (20, MAX_PLY, 1980)
    np.testing.assert_array_equal(full, expected_dense(sub, MAX_PLY, 1980))
    assert not full[:, :, 1969:].any()
    bare = engine.legal_move_masks(tokens, lengths, vocab_size=1968)
    np.testing.assert_array_equal(bare, expected_dense(sub, MAX_PLY, 1968))
    with pytest.raises(ValueError, match="vocab_size"):
        engine.legal_move_masks(tokens, lengths, vocab_size=100)


def test_game_of_full_length_has_no_pad_row():
    tokens = np.array([[317, 1497]], dtype=np.int16)
    mask = engine.legal_move_masks(tokens, np.array([2], dtype=np.int16))
    assert not mask[0, :, PAD].any()
    mask = engine.legal_move_masks(tokens, np.array([1], dtype=np.int16))
    assert mask[0, 1, PAD] and mask[0, 1].sum() == 1


def test_sparse_equals_dense_in_game_then_ply_order(games, wide):
    tokens, lengths = wide[0][:60], wide[1][:60]
    v = 1980
    dense = engine.legal_move_masks(tokens, lengths, vocab_size=v)
    idx = engine.legal_move_masks_sparse(tokens, lengths)
    assert idx.dtype == np.int64
    assert len(np.unique(idx)) == len(idx)
    assert (np.diff(idx // v) >= 0).all()  # game, then ply order
    recon = np.zeros(dense.size, dtype=bool)
    recon[idx] = True
    np.testing.assert_array_equal(recon.reshape(dense.shape), dense)
    # A wider seq_len changes only the stride.
    idx2 = engine.legal_move_masks_sparse(tokens, lengths, seq_len=400, vocab_size=v)
    b, rest = np.divmod(idx2, 400 * v)
    np.testing.assert_array_equal(b * WIDE * v + rest, idx)


def test_sparse_rejects_short_seq_len_and_narrow_vocab(games):
    with pytest.raises(ValueError, match="seq_len"):
        engine.legal_move_masks_sparse(games.tokens, games.lengths, seq_len=10)
    with pytest.raises(ValueError, match="vocab_size"):
        engine.legal_move_masks_sparse(games.tokens, games.lengths, vocab_size=1968)


def test_grid_and_promo_match_python_chess_moves(games):
    grid, promo = engine.legal_move_grid(games.tokens, games.lengths)
    assert grid.shape == (N_GAMES, MAX_PLY, 64) and grid.dtype == np.uint64
    assert promo.shape == (N_GAMES, MAX_PLY, 44, 4) and promo.dtype == np.bool_
    pair_index = {p: i for i, p in enumerate(vocab.promo_pairs())}
    exp_grid = np.zeros_like(grid)
    exp_promo = np.zeros_like(promo)
    n_promotions = 0
    for b, boards in enumerate(games.boards):
        for t, board in enumerate(boards):
            for m in board.legal_moves:
                to = m.to_square
                if board.is_castling(m):  # king two squares, as the token
                    to = m.from_square + (2 if to > m.from_square else -2)
                exp_grid[b, t, m.from_square] |= np.uint64(1) << np.uint64(to)
                if m.promotion:
                    n_promotions += 1
                    k = "qrbn".index("pnbrqk"[m.promotion - 1])
                    exp_promo[b, t, pair_index[(m.from_square, to)], k] = True
    assert n_promotions > 0
    np.testing.assert_array_equal(grid, exp_grid)
    np.testing.assert_array_equal(promo, exp_promo)


def test_legal_move_counts_equal_python_chess(games, wide):
    counts = engine.legal_move_counts(*wide)
    assert counts.dtype == np.int16 and counts.shape == (N_GAMES, WIDE)
    exp = np.zeros_like(counts)
    for b, boards in enumerate(games.boards):
        exp[b, : len(boards)] = [board.legal_moves.count() for board in boards]
    np.testing.assert_array_equal(counts, exp)


def test_illegal_token_error_names_game_ply_and_token(games):
    tokens = games.tokens[:5].copy()
    lengths = games.lengths[:5].copy()
    tokens[3, 7] = 317 if tokens[3, 7] != 317 else 288  # e2e4 / d2d4 at ply 7: illegal here
    for fn in (engine.legal_move_masks, engine.legal_move_masks_sparse, engine.legal_move_grid,
               engine.legal_move_counts, engine.board_states):
        with pytest.raises(ValueError, match=r"game 3, ply 7: move token (317|288)"):
            fn(tokens, lengths)
    tokens[3, 7] = -1
    with pytest.raises(ValueError, match=r"game 3, ply 7: token -1 is not a move"):
        engine.legal_move_counts(tokens, lengths)
    tokens[3, 7] = PAD  # PAD inside a game is not a move either
    with pytest.raises(ValueError, match="game 3, ply 7"):
        engine.legal_move_counts(tokens, lengths)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint16])
def test_wrong_token_dtype_is_a_type_error(dtype, games):
    with pytest.raises(TypeError, match="int16"):
        engine.legal_move_masks(games.tokens.astype(dtype), games.lengths)
    with pytest.raises(TypeError, match="int16"):
        engine.legal_move_counts(games.tokens, games.lengths.astype(dtype))


def test_bad_shapes_and_lengths_are_value_errors(games):
    t, n = games.tokens[:3], games.lengths[:3]
    with pytest.raises(ValueError, match="entries"):
        engine.legal_move_counts(t, games.lengths[:2])
    with pytest.raises(ValueError, match=r"lengths\[1\]"):
        engine.legal_move_grid(t, np.array([1, MAX_PLY + 1, 1], dtype=np.int16))
    with pytest.raises(ValueError, match=r"lengths\[0\]"):
        engine.legal_move_masks_sparse(t, np.array([-1, 1, 1], dtype=np.int16))
    with pytest.raises(TypeError):
        engine.legal_move_counts(t[0], n)  # 1-D tokens


# --- alignment to sequence positions (§4 notes, §3.4 packing) --------------------------------


def pack(tokens: np.ndarray, lengths: np.ndarray, prepend_outcome: bool):
    """§3.4 packing, outcome token fixed to 1973 (the value does not matter for masks)."""
    n, t = tokens.shape
    seq_len = t + 1 if prepend_outcome else t
    inputs = np.full((n, seq_len), PAD, dtype=np.int64)
    for b, ln in enumerate(lengths):
        moves = tokens[b, :ln]
        row = np.concatenate([[1973], moves]) if prepend_outcome else moves
        inputs[b, : len(row)] = row
    targets = np.full_like(inputs, PAD)
    targets[:, :-1] = inputs[:, 1:]
    n_sup = lengths.astype(np.int64) + (1 if prepend_outcome else 0)
    loss_mask = np.arange(seq_len)[None, :] < n_sup[:, None]
    return inputs, targets, loss_mask


def test_alignment_on_a_hand_built_game():
    # 1.e4 e5: T = 3, length 2.
    tokens = np.array([[317, 1497, PAD]], dtype=np.int16)
    lengths = np.array([2], dtype=np.int16)
    mask = engine.legal_move_masks(tokens, lengths)
    pure = Layout.named("pure_moves").align_masks(mask, lengths)
    assert pure.shape == (1, 3, 1969)
    np.testing.assert_array_equal(pure[0, 0], mask[0, 1])  # after e4: black's 20 replies
    assert pure[0, 0, 1497] and pure[0, 0].sum() == 20
    assert pure[0, 1, PAD] and pure[0, 1].sum() == 1  # e5 is the last move: predict end
    assert not pure[0, 2].any()
    prefix = Layout.named("outcome_prefix").align_masks(mask, lengths)
    assert prefix.shape == (1, 4, 1969)
    np.testing.assert_array_equal(prefix[0, :2], mask[0, :2])
    assert prefix[0, 2, PAD] and prefix[0, 2].sum() == 1
    assert not prefix[0, 3].any()
    # A game of full length gets its PAD target at position T − 1 explicitly.
    full = np.array([[317, 1497]], dtype=np.int16)
    two = np.array([2], dtype=np.int16)
    pure = Layout().align_masks(engine.legal_move_masks(full, two), two)
    assert pure[0, 1, PAD] and pure[0, 1].sum() == 1
    # The empty game supervises nothing in pure-moves mode, only PAD at 0 with a prefix.
    empty = np.full((1, 2), PAD, dtype=np.int16)
    zero = np.array([0], dtype=np.int16)
    m0 = engine.legal_move_masks(empty, zero)
    assert not Layout().align_masks(m0, zero).any()
    p0 = Layout.named("outcome_prefix").align_masks(m0, zero)
    assert p0[0, 0, PAD] and p0.sum() == 1
    with pytest.raises(ValueError, match="layout"):
        Layout.named("moves").align_masks(m0, zero)


@pytest.mark.parametrize("layout", ["pure_moves", "outcome_prefix"])
def test_every_supervised_target_is_legal_under_the_aligned_mask(layout, games):
    tokens, lengths = games.tokens[:60], games.lengths[:60]  # includes games of length T
    assert (lengths == MAX_PLY).any()
    aligned = Layout.named(layout).align_masks(engine.legal_move_masks(tokens, lengths), lengths)
    _, targets, loss_mask = pack(tokens, lengths, layout == "outcome_prefix")
    assert aligned.shape[:2] == targets.shape
    b, p = np.nonzero(loss_mask)
    assert aligned[b, p, targets[b, p]].all()
    assert not aligned[~loss_mask].any()  # unsupervised positions allow nothing
    # The final supervised target is PAD, and PAD is the only option there.
    last = loss_mask.sum(axis=1) - 1
    has = last >= 0
    rows = aligned[np.nonzero(has)[0], last[has]]
    assert rows[:, PAD].all() and (rows.sum(axis=1) == 1).all()


# --- perft ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fen", "depth", "nodes"),
    [
        ("startpos", 3, 8_902),
        ("r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1", 2, 2_039),
        ("8/2p5/3p4/KP5r/1R3p1k/8/4P1P1/8 w - - 0 1", 4, 43_238),
        ("rnbq1k1r/pp1Pbppp/2p5/8/2B5/8/PPP1NnPP/RNBQK2R w KQ - 1 8", 2, 1_486),
    ],
)
def test_perft_matches_literature(fen, depth, nodes):
    assert engine.perft(fen, depth) == nodes


def test_perft_rejects_bad_fen_and_negative_depth():
    with pytest.raises(ValueError, match="FEN"):
        engine.perft("not a fen", 1)
    with pytest.raises(ValueError, match="depth"):
        engine.perft("startpos", -1)


def test_engine_random_games_replay_with_every_move_legal_under_its_mask():
    g = engine.random_games(40, max_ply=200, seed=5)
    mask = engine.legal_move_masks(g.tokens, g.lengths)
    counts = engine.legal_move_counts(g.tokens, g.lengths)
    np.testing.assert_array_equal(mask[:, :, :PAD].sum(axis=-1), counts)
    b, t = np.nonzero(np.arange(200)[None, :] < g.lengths[:, None])
    assert mask[b, t, g.tokens[b, t]].all()
    # The game ends because of the rules, not the mask: PAD only where length < max_ply.
    assert (mask[:, :, PAD].sum(axis=1) == (g.lengths < 200)).all()
