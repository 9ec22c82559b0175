//! Tests of the diagnostics modules.

use super::*;
use crate::random::{random_games, RandomGameOptions};
use crate::vocab::PAD_TOKEN;
use crate::vocab::uci_to_token;

fn toks(uci: &[&str]) -> Vec<u16> {
    uci.iter().map(|u| uci_to_token(u).unwrap()).collect()
}

fn has(bits: u64, b: u32) -> bool {
    bits & (1 << b) != 0
}

#[test]
fn there_are_43_named_bits() {
    let b = edge_case_bits();
    assert_eq!(b.len(), 43);
    assert_eq!(b[42], ("INSUFFICIENT_MATERIAL", 1 << 42));
}

#[test]
fn validation_reports_first_illegal_ply_and_pad() {
    assert_eq!(first_illegal_ply(&toks(&["e2e4", "e7e5", "g1f3"])), None);
    assert_eq!(first_illegal_ply(&toks(&["e2e4", "e7e5", "e4e5"])), Some(2));
    let mut t = toks(&["e2e4", "e7e5"]);
    t.push(PAD_TOKEN);
    assert_eq!(first_illegal_ply(&t), Some(2));
}

#[test]
fn fools_mate_final_position_is_checkmate_only() {
    let s = edge_stats(&toks(&["f2f3", "e7e5", "g2g4", "d8h4"])).unwrap();
    assert_eq!(s.positions.len(), 5);
    assert_eq!(s.positions[4], 1 << bit::CHECKMATE);
    assert!(has(s.white, bit::CHECKMATE));
    assert!(!has(s.black, bit::CHECKMATE));
}

#[test]
fn en_passant_and_file_bits() {
    let s = edge_stats(&toks(&["e2e4", "a7a6", "e4e5", "d7d5"])).unwrap();
    let b = s.positions[4];
    assert!(has(b, bit::EP_CAPTURE_AVAILABLE));
    assert!(has(b, bit::EP_FILE_A + 3));
    assert!(has(b, bit::PAWN_CAPTURE_AVAILABLE));
}

#[test]
fn castling_legal_and_blocks() {
    let s = edge_stats(&toks(&["e2e4", "e7e5", "g1f3", "b8c6", "f1c4", "g8f6"])).unwrap();
    let b = s.positions[6];
    assert!(has(b, bit::CASTLE_LEGAL_KINGSIDE));
    assert!(!has(b, bit::CASTLE_LEGAL_QUEENSIDE));
    assert!(has(b, bit::PIECE_BLOCKS_B));
    assert!(!has(b, bit::PIECE_BLOCKS_F));
    // Start position: everything blocked by pieces.
    assert!(has(s.positions[0], bit::PIECE_BLOCKS_F + 1));
}

#[test]
fn rights_lost_by_rook_capture_on_corner() {
    // 1. g3 b6 2. Bg2 Bb7 3. Bxb7 e6 4. Bxa8: the bishop takes the a8 rook.
    let s = edge_stats(&toks(&["g2g3", "b7b6", "f1g2", "c8b7", "g2b7", "e7e6", "b7a8"])).unwrap();
    // After white Bxa8 (ply 7) black to move lost queen-side right by capture.
    let b = s.positions[7];
    assert!(has(b, bit::RIGHTS_LOST_QUEENSIDE));
    assert!(has(b, bit::RIGHTS_LOST_CAPTURE_QUEENSIDE));
    assert!(!has(b, bit::RIGHTS_LOST_KINGSIDE));
}

#[test]
fn pinned_piece_sets_pin_bit() {
    // 1. d4 e6 2. Nc3 Bb4: the c3 knight is pinned to e1 and cannot move.
    let s = edge_stats(&toks(&["d2d4", "e7e6", "b1c3", "f8b4"])).unwrap();
    assert!(has(s.positions[4], bit::PIN_RESTRICTS_MOVEMENT));
    assert!(!has(s.positions[0], bit::PIN_RESTRICTS_MOVEMENT));
}

#[test]
fn illegal_move_in_edge_stats_names_ply() {
    let e = edge_stats(&toks(&["e2e4", "e2e4"])).unwrap_err();
    assert_eq!(e.ply, 1);
    let t = toks(&["e2e4", "e2e4"]);
    let err = edge_stats_batch(&[t.clone(), toks(&["e2e4", "e7e5"])].concat(), &[2, 2], 2).unwrap_err();
    assert_eq!(err.0, 0);
}

#[test]
fn diagnostic_sets_respect_quotas_and_assign_present_bits() {
    let mut qw = [0i32; 64];
    let mut qb = [0i32; 64];
    qw[bit::IN_CHECK as usize] = 3;
    qb[bit::PROMOTION_AVAILABLE as usize] = 2;
    let d = diagnostic_sets(&qw, &qb, 5, 128, 42, 10.0);
    assert!(d.n_games <= 5);
    assert!(d.filled_white[0] <= 3 && d.filled_black[6] <= 2);
    for i in 0..d.n_games {
        let l = d.lengths[i] as usize;
        let s = edge_stats(&d.tokens[i * 128..i * 128 + l]).unwrap();
        assert_eq!(d.assignment_white[i] & !s.white, 0);
        assert_eq!(d.assignment_black[i] & !s.black, 0);
    }
}

#[test]
fn ceiling_positions_are_all_positions_when_rate_is_one() {
    let c = accuracy_ceiling(CeilingOptions { n_games: 4, max_ply: 40, n_rollouts: 0, sample_rate: 1.0, seed: 5 })
        .unwrap();
    let games = random_games(4, RandomGameOptions { max_ply: 40, seed: 5, mate_boost: 0.0, discard_ply_limit: false, first_game: 0 })
        .unwrap();
    let total: usize = games.lengths.iter().map(|&l| l as usize).sum();
    assert_eq!(c.unconditional.len(), total);
    assert!((c.unconditional[0] - 1.0 / 20.0).abs() < 1e-12);
    assert!(c.naive_conditional.iter().zip(&c.unconditional).all(|(n, u)| n >= u));
}

#[test]
fn rollout_estimates_are_probabilities() {
    let c = accuracy_ceiling(CeilingOptions { n_games: 2, max_ply: 30, n_rollouts: 4, sample_rate: 0.2, seed: 3 })
        .unwrap();
    assert!(!c.conditional.is_empty());
    for (i, &x) in c.conditional.iter().enumerate() {
        assert!(x >= c.unconditional[i] - 1e-12 || x == c.unconditional[i]);
        assert!(x <= 1.0 + 1e-12);
    }
}
