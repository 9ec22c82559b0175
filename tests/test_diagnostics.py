"""Diagnostics (spec engine.md §7) against python-chess as the oracle."""

from __future__ import annotations

import math
import random

import chess
from _chess_oracle import insufficient_material, random_uci_games
import numpy as np
import pytest

from pawn.engine import (
    accuracy_ceiling,
    accuracy_ceiling_of,
    edge_case_bits,
    edge_stats_per_ply,
    generate_diagnostic_sets,
    random_games,
    validate_games,
)
from pawn.vocab import PAD_TOKEN, uci_to_token

BITS = edge_case_bits()


def bitno(name: str) -> int:
    return BITS[name].bit_length() - 1


def batch(games: list[list[str]], max_ply: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """UCI move lists → (int16 [B, T] PAD-filled, int16 [B])."""
    t = max_ply or max(1, max(len(g) for g in games))
    tokens = np.full((len(games), t), PAD_TOKEN, dtype=np.int16)
    for i, g in enumerate(games):
        tokens[i, : len(g)] = [uci_to_token(u) for u in g]
    return tokens, np.array([len(g) for g in games], dtype=np.int16)


# --- validation (§7.4) ---------------------------------------------------------------------------


def test_validate_games_accepts_python_chess_random_games():
    games = random_uci_games(20, 150, seed=1)
    tokens, lengths = batch(games)
    valid, first = validate_games(tokens, lengths)
    assert valid.dtype == np.bool_ and first.dtype == np.int16
    assert valid.all()
    assert (first == -1).all()


def test_validate_games_reports_the_ply_of_a_corrupted_token():
    games = random_uci_games(12, 120, seed=2)
    tokens, lengths = batch(games)
    rng = random.Random(3)
    expected = []
    for i, g in enumerate(games):
        k = rng.randrange(len(g))
        b = chess.Board()
        for u in g[:k]:
            b.push_uci(u)
        legal = {m.uci() for m in b.legal_moves}
        # An id that is a move token but illegal here.
        bad = next(t for t in range(1968) if chess.Move.from_uci(_uci(t)).uci() not in legal)
        tokens[i, k] = bad
        expected.append(k)
    valid, first = validate_games(tokens, lengths)
    assert not valid.any()
    assert first.tolist() == expected


def _uci(token: int) -> str:
    from pawn.vocab import token_to_uci

    return token_to_uci(token)


def test_pad_or_outcome_inside_the_length_is_illegal_and_beyond_it_ignored():
    tokens, lengths = batch([["e2e4", "e7e5", "g1f3"]], max_ply=6)
    assert validate_games(tokens, lengths)[1].tolist() == [-1]
    tokens[0, 1] = PAD_TOKEN
    assert validate_games(tokens, lengths)[1].tolist() == [1]
    tokens[0, 1] = 1969
    assert validate_games(tokens, lengths)[1].tolist() == [1]


def test_validate_games_rejects_wrong_dtype_and_shape():
    tokens, lengths = batch([["e2e4"]])
    with pytest.raises(TypeError):
        validate_games(tokens.astype(np.int32), lengths)
    with pytest.raises(TypeError):
        validate_games(tokens[0], lengths)
    with pytest.raises(ValueError):
        validate_games(tokens, np.array([5], dtype=np.int16))
    with pytest.raises(ValueError):
        validate_games(tokens, np.array([1, 1], dtype=np.int16))


# --- edge-case bits (§7.1, §7.2) -----------------------------------------------------------------


def test_edge_case_bits_has_43_named_masks_in_bit_order():
    assert len(BITS) == 43
    assert list(BITS.values()) == [1 << i for i in range(43)]
    assert BITS["IN_CHECK"] == 1 and BITS["EP_FILE_A"] == 1 << 24 and BITS["INSUFFICIENT_MATERIAL"] == 1 << 42


def position_bits(moves: list[str], t: int) -> int:
    tokens, lengths = batch([moves], max_ply=len(moves) + 1)
    per_ply, _, _ = edge_stats_per_ply(tokens, lengths)
    return int(per_ply[0, t])


def has(bits: int, *names: str) -> bool:
    return all(bits & BITS[n] for n in names)


def test_hand_chosen_check_position_is_in_check_and_castling_blocked():
    b = position_bits(["d2d4", "e7e5", "g1f3", "f8b4"], 4)  # 2... Bb4+
    assert has(b, "IN_CHECK", "CASTLE_BLOCKED_CHECK")
    assert not has(b, "IN_DOUBLE_CHECK")


def test_hand_chosen_double_check_position():
    # The first double check (with legal replies) found in seeded python-chess random games.
    moves, t = _find_position(lambda b: len(b.checkers()) >= 2 and any(b.legal_moves))
    b = position_bits(moves, t)
    assert has(b, "IN_CHECK", "IN_DOUBLE_CHECK")


def _find_position(pred, seed: int = 11) -> tuple[list[str], int]:
    for moves in random_uci_games(400, 200, seed):
        b = chess.Board()
        for t, u in enumerate(moves):
            if pred(b):
                return moves, t
            b.push_uci(u)
    raise AssertionError("no such position in 400 random games")


def test_hand_chosen_en_passant_position_sets_ep_file():
    b = position_bits(["e2e4", "a7a6", "e4e5", "d7d5"], 4)
    assert has(b, "EP_CAPTURE_AVAILABLE", "EP_FILE_D", "PAWN_CAPTURE_AVAILABLE")
    # A double push with no pawn able to capture sets nothing.
    b = position_bits(["e2e4", "d7d5"], 2)
    assert not has(b, "EP_CAPTURE_AVAILABLE")


def test_hand_chosen_castling_legal_blocked_and_attacked():
    b = position_bits(["e2e4", "e7e5", "g1f3", "b8c6", "f1c4", "g8f6"], 6)
    assert has(b, "CASTLE_LEGAL_KINGSIDE", "PIECE_BLOCKS_B", "PIECE_BLOCKS_C", "PIECE_BLOCKS_D")
    assert not has(b, "CASTLE_LEGAL_QUEENSIDE") and not has(b, "PIECE_BLOCKS_F")
    # 1. e4 b6 2. Ba6 Bxa6 3. Nf3 e6: the a6 bishop attacks the empty f1.
    b = position_bits(["e2e4", "b7b6", "f1a6", "c8a6", "g1f3", "e7e6"], 6)
    assert has(b, "ATTACK_BLOCKS_F") and not has(b, "CASTLE_LEGAL_KINGSIDE")


def test_hand_chosen_promotion_position_sets_promo_files():
    b = position_bits(["a2a4", "b7b5", "a4b5", "a7a6", "b5a6", "b8c6", "a6a7", "a8b8"], 8)
    assert has(b, "PROMOTION_AVAILABLE", "PROMO_FILE_A", "PROMO_FILE_B")
    assert not has(b, "PROMO_FILE_C")


def test_rights_lost_by_king_move_and_by_rook_capture():
    moves = ["e2e4", "e7e5", "e1e2", "e8e7"]
    assert has(position_bits(moves, 4), "RIGHTS_LOST_KINGSIDE", "RIGHTS_LOST_QUEENSIDE")
    assert not has(position_bits(moves, 4), "RIGHTS_LOST_CAPTURE_KINGSIDE")
    assert not has(position_bits(moves, 3), "RIGHTS_LOST_KINGSIDE")
    moves = ["g2g3", "b7b6", "f1g2", "c8b7", "g2b7", "e7e6", "b7a8"]
    b = position_bits(moves, 7)
    assert has(b, "RIGHTS_LOST_QUEENSIDE", "RIGHTS_LOST_CAPTURE_QUEENSIDE")


def test_checkmate_final_position_carries_only_the_checkmate_bit():
    moves = ["f2f3", "e7e5", "g2g4", "d8h4"]
    tokens, lengths = batch([moves], max_ply=8)
    per_ply, white, black = edge_stats_per_ply(tokens, lengths)
    assert per_ply.dtype == np.uint64 and per_ply.shape == (1, 8)
    assert int(per_ply[0, 4]) == BITS["CHECKMATE"]
    assert (per_ply[0, 5:] == 0).all()
    assert int(white[0]) & BITS["CHECKMATE"] and not int(black[0]) & BITS["CHECKMATE"]
    # When the final position does not fit, the accumulators still include it.
    tokens, lengths = batch([moves], max_ply=4)
    per_ply, white, _ = edge_stats_per_ply(tokens, lengths)
    assert int(white[0]) & BITS["CHECKMATE"] and not (per_ply & np.uint64(BITS["CHECKMATE"])).any()


def test_edge_stats_illegal_move_names_game_and_ply():
    tokens, lengths = batch([["e2e4", "e7e5"], ["e2e4", "e2e4"]])
    with pytest.raises(ValueError, match=r"game 1: .*ply 1"):
        edge_stats_per_ply(tokens, lengths)


def oracle_bits(b: chess.Board, prev_rights: tuple[bool, bool] | None, last: chess.Move | None,
                last_captured: chess.PieceType | None, final: bool) -> tuple[int, int]:
    """(bits, mask of checked bits) for every bit except PIN_RESTRICTS_MOVEMENT."""
    bits = 0
    legal = list(b.legal_moves)
    us = b.turn
    if not legal:
        bits |= BITS["CHECKMATE"] if b.is_check() else BITS["STALEMATE"]
    else:
        if b.is_check():
            bits |= BITS["IN_CHECK"]
        if len(b.checkers()) >= 2:
            bits |= BITS["IN_DOUBLE_CHECK"]
        for m in legal:
            if b.piece_type_at(m.from_square) == chess.PAWN and chess.square_file(m.from_square) != chess.square_file(m.to_square):
                bits |= BITS["PAWN_CAPTURE_AVAILABLE"]
            if m.promotion:
                bits |= BITS["PROMOTION_AVAILABLE"] | BITS["PROMO_FILE_" + "ABCDEFGH"[chess.square_file(m.to_square)]]
            if b.is_en_passant(m):
                bits |= BITS["EP_CAPTURE_AVAILABLE"] | BITS["EP_FILE_" + "ABCDEFGH"[chess.square_file(m.to_square)]]
            if b.is_kingside_castling(m):
                bits |= BITS["CASTLE_LEGAL_KINGSIDE"]
            if b.is_queenside_castling(m):
                bits |= BITS["CASTLE_LEGAL_QUEENSIDE"]
        hk, hq = b.has_kingside_castling_rights(us), b.has_queenside_castling_rights(us)
        if b.is_check() and (hk or hq):
            bits |= BITS["CASTLE_BLOCKED_CHECK"]
        back = 0 if us == chess.WHITE else 56
        if prev_rights is not None:
            for side, had, now, corner in (("KINGSIDE", prev_rights[0], hk, 7), ("QUEENSIDE", prev_rights[1], hq, 0)):
                if had and not now:
                    bits |= BITS["RIGHTS_LOST_" + side]
                    if last is not None and last.to_square == back + corner and last_captured == chess.ROOK:
                        bits |= BITS["RIGHTS_LOST_CAPTURE_" + side]
        occ = lambda f: b.piece_at(back + f) is not None  # noqa: E731
        att = lambda f: b.is_attacked_by(not us, back + f)  # noqa: E731
        if hq:
            for f, n in ((1, "B"), (2, "C"), (3, "D")):
                if occ(f):
                    bits |= BITS["PIECE_BLOCKS_" + n]
                if n != "B" and not occ(f) and att(f):
                    bits |= BITS["ATTACK_BLOCKS_" + n]
        if hk:
            for f, n in ((5, "F"), (6, "G")):
                if occ(f):
                    bits |= BITS["PIECE_BLOCKS_" + n]
                if not occ(f) and att(f):
                    bits |= BITS["ATTACK_BLOCKS_" + n]
    if final:
        if b.halfmove_clock >= 150:
            bits |= BITS["SEVENTY_FIVE_MOVE_RULE"]
        if b.is_repetition(5):
            bits |= BITS["FIVEFOLD_REPETITION"]
        if insufficient_material(b):
            bits |= BITS["INSUFFICIENT_MATERIAL"]
    return bits, ((1 << 43) - 1) & ~BITS["PIN_RESTRICTS_MOVEMENT"]


def test_edge_bits_of_random_games_match_python_chess():
    g = random_games(24, max_ply=300, seed=5)
    per_ply, white, black = edge_stats_per_ply(g.tokens, g.lengths)
    seen = 0
    for i in range(len(g)):
        b = chess.Board()
        rights: list[tuple[bool, bool, bool, bool]] = []
        last = last_cap = None
        n = int(g.lengths[i])
        acc = [0, 0]
        for t in range(n + 1):
            rights.append((b.has_kingside_castling_rights(chess.WHITE), b.has_queenside_castling_rights(chess.WHITE),
                           b.has_kingside_castling_rights(chess.BLACK), b.has_queenside_castling_rights(chess.BLACK)))
            prev = None
            if t >= 2:
                r = rights[t - 2]
                prev = (r[0], r[1]) if b.turn == chess.WHITE else (r[2], r[3])
            want, checked = oracle_bits(b, prev, last, last_cap, t == n)
            got = int(per_ply[i, t]) if t < g.max_ply else None
            if got is not None:
                assert got & checked == want, (i, t, b.fen(), hex(got & checked ^ want))
                got_all = got
            else:
                got_all = want | (int(white[i] if t % 2 == 0 else black[i]) & BITS["PIN_RESTRICTS_MOVEMENT"])
            acc[t % 2] |= got_all
            seen |= want
            if t < n:
                m = chess.Move.from_uci(_uci(int(g.tokens[i, t])))
                last_cap = b.piece_type_at(m.to_square)
                last = m
                b.push(m)
        assert int(white[i]) & ~BITS["PIN_RESTRICTS_MOVEMENT"] == acc[0] & ~BITS["PIN_RESTRICTS_MOVEMENT"]
        assert int(black[i]) & ~BITS["PIN_RESTRICTS_MOVEMENT"] == acc[1] & ~BITS["PIN_RESTRICTS_MOVEMENT"]
    # The sample exercised the bits the brief names.
    for name in ("IN_CHECK", "EP_CAPTURE_AVAILABLE", "PROMOTION_AVAILABLE", "CASTLE_LEGAL_KINGSIDE",
                 "CASTLE_LEGAL_QUEENSIDE", "RIGHTS_LOST_KINGSIDE"):
        assert seen & BITS[name], name


def test_pin_bit_marks_a_pinned_knight():
    assert has(position_bits(["d2d4", "e7e6", "b1c3", "f8b4"], 4), "PIN_RESTRICTS_MOVEMENT")
    assert not has(position_bits(["d2d4", "e7e6"], 2), "PIN_RESTRICTS_MOVEMENT")


# --- diagnostic sets (§7.3) ----------------------------------------------------------------------


def test_diagnostic_sets_fill_quotas_with_games_that_have_the_bit():
    qw = np.zeros(64, dtype=np.int32)
    qb = np.zeros(64, dtype=np.int32)
    qw[bitno("EP_CAPTURE_AVAILABLE")] = 3
    qw[bitno("IN_DOUBLE_CHECK")] = 2
    qb[bitno("PROMOTION_AVAILABLE")] = 2
    qb[bitno("STALEMATE")] = 1
    d = generate_diagnostic_sets(qw, qb, total_games=10, max_ply=200, seed=42, max_simulated_factor=50.0)
    n = d["move_ids"].shape[0]
    assert 0 < n <= 10
    assert d["move_ids"].dtype == np.int16 and d["per_ply_stats"].dtype == np.uint64
    assert (d["quotas_filled_white"] <= qw).all() and (d["quotas_filled_black"] <= qb).all()
    assert d["quotas_filled_white"].sum() + d["quotas_filled_black"].sum() > 0
    lengths = d["game_lengths"]
    for i in range(n):
        assert (d["move_ids"][i, lengths[i]:] == PAD_TOKEN).all()
    assert validate_games(d["move_ids"], lengths)[0].all()
    per_ply, white, black = edge_stats_per_ply(d["move_ids"], lengths)
    assert (per_ply == d["per_ply_stats"]).all()
    aw, ab = d["quota_assignment_white"], d["quota_assignment_black"]
    assert ((aw & ~white) == 0).all() and ((ab & ~black) == 0).all()
    assert all(bin(int(x)).count("1") <= 1 for x in np.concatenate([aw, ab]))
    assert int((aw != 0).sum()) == d["quotas_filled_white"].sum()
    assert int((ab != 0).sum()) == d["quotas_filled_black"].sum()
    # Deterministic for a seed.
    again = generate_diagnostic_sets(qw, qb, total_games=10, max_ply=200, seed=42, max_simulated_factor=50.0)
    assert (again["move_ids"] == d["move_ids"]).all()


def test_diagnostic_sets_without_quotas_accept_every_game_with_sequential_seeds():
    z = np.zeros(64, dtype=np.int32)
    d = generate_diagnostic_sets(z, z, total_games=5, max_ply=64, seed=7)
    assert d["move_ids"].shape == (5, 64) and d["n_simulated"] == 5
    assert (d["quota_assignment_white"] == 0).all()


def test_diagnostic_sets_stop_at_the_simulation_budget():
    qw = np.zeros(64, dtype=np.int32)
    qw[bitno("FIVEFOLD_REPETITION")] = 100
    z = np.zeros(64, dtype=np.int32)
    d = generate_diagnostic_sets(qw, z, total_games=4, max_ply=40, seed=1, max_simulated_factor=2.5)
    assert d["n_simulated"] == 10
    assert d["move_ids"].shape[0] <= 4


def test_diagnostic_sets_reject_bad_quotas():
    with pytest.raises(TypeError):
        generate_diagnostic_sets(np.zeros(64, dtype=np.int64), np.zeros(64, dtype=np.int32), 1)
    with pytest.raises(ValueError):
        generate_diagnostic_sets(np.zeros(10, dtype=np.int32), np.zeros(64, dtype=np.int32), 1)


# --- accuracy ceiling (§7.5) ---------------------------------------------------------------------


def test_accuracy_ceiling_of_random_games_matches_the_published_reference():
    # Spec §3.6: E[1/N_legal] = 0.0843 over uniform random games with max_ply 512. Games are the
    # clusters of this estimate, so the standard error comes from per-game sums (ratio estimator).
    r = accuracy_ceiling(n_games=2000, max_ply=512, sample_rate=1.0, seed=77777)
    u, gi = r["unconditional"], r["game_idx"]
    sums = np.bincount(gi, weights=u, minlength=2000)
    counts = np.bincount(gi, minlength=2000).astype(float)
    est = sums.sum() / counts.sum()
    assert est == pytest.approx(r["unconditional_ceiling"])
    resid = sums - est * counts
    se = math.sqrt((resid**2).sum() / (len(sums) * (len(sums) - 1))) / counts.mean()
    assert 0 < se < 0.002
    assert abs(est - 0.0843) < 4 * se + 0.0002  # + half the reference's own CI width
    assert r["n_positions"] == int(counts.sum())
    assert 300 < counts.mean() < 400  # mean game length ≈ 352 plies
    assert r["naive_conditional_ceiling"] >= r["unconditional_ceiling"]


def test_accuracy_ceiling_of_given_games_is_inverse_legal_count():
    moves = ["e2e4", "e7e5", "g1f3"]
    tokens, lengths = batch([moves, []], max_ply=5)
    out = accuracy_ceiling_of(tokens, lengths)
    assert out.dtype == np.float64 and out.shape == (2, 5)
    b = chess.Board()
    for t, u in enumerate(moves):
        assert out[0, t] == pytest.approx(1 / b.legal_moves.count())
        b.push_uci(u)
    assert (out[0, 3:] == 0).all() and (out[1] == 0).all()
    tokens[0, 2] = uci_to_token("e2e4")
    with pytest.raises(ValueError, match="game 0"):
        accuracy_ceiling_of(tokens, lengths)


def test_accuracy_ceiling_sampling_and_rollouts():
    full = accuracy_ceiling(n_games=6, max_ply=60, sample_rate=1.0, seed=3)
    some = accuracy_ceiling(n_games=6, max_ply=60, sample_rate=0.3, seed=3)
    assert 0 < some["n_positions"] < full["n_positions"]
    assert set(zip(some["game_idx"], some["ply"])) <= set(zip(full["game_idx"], full["ply"]))
    r = accuracy_ceiling(n_games=3, max_ply=40, sample_rate=0.1, seed=9, n_rollouts=4)
    assert r["n_rollouts"] == 4
    assert (r["conditional"] >= r["unconditional"] - 1e-12).all() and (r["conditional"] <= 1).all()
    assert ((r["outcome"] >= 0) & (r["outcome"] <= 6)).all()
