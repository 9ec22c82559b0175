//! Edge-case bits (spec `engine.md` §7.1): 43 named position features and per-ply edge
//! statistics of games.

use rayon::prelude::*;
use shakmaty::{attacks, Bitboard, CastlingSide, Color, EnPassantMode, File, Move, MoveList, Position, Rank, Role, Square};

use crate::game::{GameState, IllegalToken};

/// Names of the 43 edge-case bits; the index is the bit number (§7.1).
pub const EDGE_BIT_NAMES: [&str; 43] = [
    "IN_CHECK",
    "IN_DOUBLE_CHECK",
    "CHECKMATE",
    "STALEMATE",
    "PIN_RESTRICTS_MOVEMENT",
    "PAWN_CAPTURE_AVAILABLE",
    "PROMOTION_AVAILABLE",
    "EP_CAPTURE_AVAILABLE",
    "CASTLE_LEGAL_KINGSIDE",
    "CASTLE_LEGAL_QUEENSIDE",
    "CASTLE_BLOCKED_CHECK",
    "RIGHTS_LOST_KINGSIDE",
    "RIGHTS_LOST_QUEENSIDE",
    "RIGHTS_LOST_CAPTURE_KINGSIDE",
    "RIGHTS_LOST_CAPTURE_QUEENSIDE",
    "PIECE_BLOCKS_B",
    "PIECE_BLOCKS_C",
    "PIECE_BLOCKS_D",
    "PIECE_BLOCKS_F",
    "PIECE_BLOCKS_G",
    "ATTACK_BLOCKS_C",
    "ATTACK_BLOCKS_D",
    "ATTACK_BLOCKS_F",
    "ATTACK_BLOCKS_G",
    "EP_FILE_A",
    "EP_FILE_B",
    "EP_FILE_C",
    "EP_FILE_D",
    "EP_FILE_E",
    "EP_FILE_F",
    "EP_FILE_G",
    "EP_FILE_H",
    "PROMO_FILE_A",
    "PROMO_FILE_B",
    "PROMO_FILE_C",
    "PROMO_FILE_D",
    "PROMO_FILE_E",
    "PROMO_FILE_F",
    "PROMO_FILE_G",
    "PROMO_FILE_H",
    "SEVENTY_FIVE_MOVE_RULE",
    "FIVEFOLD_REPETITION",
    "INSUFFICIENT_MATERIAL",
];

/// Bit numbers of §7.1 (masks are `1 << bit`).
pub mod bit {
    pub const IN_CHECK: u32 = 0;
    pub const IN_DOUBLE_CHECK: u32 = 1;
    pub const CHECKMATE: u32 = 2;
    pub const STALEMATE: u32 = 3;
    pub const PIN_RESTRICTS_MOVEMENT: u32 = 4;
    pub const PAWN_CAPTURE_AVAILABLE: u32 = 5;
    pub const PROMOTION_AVAILABLE: u32 = 6;
    pub const EP_CAPTURE_AVAILABLE: u32 = 7;
    pub const CASTLE_LEGAL_KINGSIDE: u32 = 8;
    pub const CASTLE_LEGAL_QUEENSIDE: u32 = 9;
    pub const CASTLE_BLOCKED_CHECK: u32 = 10;
    pub const RIGHTS_LOST_KINGSIDE: u32 = 11;
    pub const RIGHTS_LOST_QUEENSIDE: u32 = 12;
    pub const RIGHTS_LOST_CAPTURE_KINGSIDE: u32 = 13;
    pub const RIGHTS_LOST_CAPTURE_QUEENSIDE: u32 = 14;
    /// PIECE_BLOCKS_B, _C, _D are 15, 16, 17.
    pub const PIECE_BLOCKS_B: u32 = 15;
    /// PIECE_BLOCKS_F, _G are 18, 19.
    pub const PIECE_BLOCKS_F: u32 = 18;
    /// ATTACK_BLOCKS_C, _D are 20, 21.
    pub const ATTACK_BLOCKS_C: u32 = 20;
    /// ATTACK_BLOCKS_F, _G are 22, 23.
    pub const ATTACK_BLOCKS_F: u32 = 22;
    /// EP_FILE_A + file (0–7).
    pub const EP_FILE_A: u32 = 24;
    /// PROMO_FILE_A + file (0–7).
    pub const PROMO_FILE_A: u32 = 32;
    pub const SEVENTY_FIVE_MOVE_RULE: u32 = 40;
    pub const FIVEFOLD_REPETITION: u32 = 41;
    pub const INSUFFICIENT_MATERIAL: u32 = 42;
}

/// `(name, mask)` of every edge-case bit, in bit order (§7.1).
pub fn edge_case_bits() -> Vec<(&'static str, u64)> {
    EDGE_BIT_NAMES.iter().enumerate().map(|(i, &n)| (n, 1u64 << i)).collect()
}

const fn mask(b: u32) -> u64 {
    1u64 << b
}

/// Castling rights as `[white king-side, white queen-side, black king-side, black queen-side]`.
type Rights = [bool; 4];

fn rights_of(pos: &shakmaty::Chess) -> Rights {
    let c = pos.castles();
    [
        c.has(Color::White, CastlingSide::KingSide),
        c.has(Color::White, CastlingSide::QueenSide),
        c.has(Color::Black, CastlingSide::KingSide),
        c.has(Color::Black, CastlingSide::QueenSide),
    ]
}

/// Pseudo-legal destinations of the piece of the side to move on `sq` (no king safety).
fn pseudo_destinations(pos: &shakmaty::Chess, sq: Square) -> Bitboard {
    let board = pos.board();
    let Some(piece) = board.piece_at(sq) else { return Bitboard::EMPTY };
    let us = board.by_color(piece.color);
    let them = board.by_color(!piece.color);
    if piece.role != Role::Pawn {
        return attacks::attacks(sq, piece, board.occupied()) & !us;
    }
    let mut targets = them;
    if let Some(ep) = pos.ep_square(EnPassantMode::PseudoLegal) {
        targets |= Bitboard::from_square(ep);
    }
    let mut dests = attacks::pawn_attacks(piece.color, sq) & targets;
    let (step, start_rank): (i32, Rank) = match piece.color {
        Color::White => (8, Rank::Second),
        Color::Black => (-8, Rank::Seventh),
    };
    let one = sq as i32 + step;
    if (0..64).contains(&one) && !board.occupied().contains(Square::new(one as u32)) {
        dests |= Bitboard::from_square(Square::new(one as u32));
        let two = one + step;
        if sq.rank() == start_rank && !board.occupied().contains(Square::new(two as u32)) {
            dests |= Bitboard::from_square(Square::new(two as u32));
        }
    }
    dests
}

/// §7.1 bit 4 heuristic: a non-king piece of the side to move lies on a line through its king,
/// the first piece beyond it (away from the king) is an enemy slider moving along that kind of
/// line, and at least one of its pseudo-legal destinations is not a legal move.
fn pin_restricts_movement(pos: &shakmaty::Chess, moves: &MoveList) -> bool {
    let board = pos.board();
    let us = pos.turn();
    let Some(king) = board.king_of(us) else { return false };
    let (kf, kr) = (king.file() as i32, king.rank() as i32);
    for sq in board.by_color(us) & !board.kings() {
        let (pf, pr) = (sq.file() as i32, sq.rank() as i32);
        let (df, dr) = ((pf - kf).signum(), (pr - kr).signum());
        let orthogonal = df == 0 || dr == 0;
        if !(orthogonal || (pf - kf).abs() == (pr - kr).abs()) {
            continue;
        }
        let (mut f, mut r) = (pf + df, pr + dr);
        let mut pinner = false;
        while (0..8).contains(&f) && (0..8).contains(&r) {
            let s = Square::from_coords(File::new(f as u32), Rank::new(r as u32));
            if let Some(p) = board.piece_at(s) {
                let slider = if orthogonal {
                    matches!(p.role, Role::Rook | Role::Queen)
                } else {
                    matches!(p.role, Role::Bishop | Role::Queen)
                };
                pinner = p.color != us && slider;
                break;
            }
            f += df;
            r += dr;
        }
        if !pinner {
            continue;
        }
        let legal: Bitboard = moves
            .iter()
            .filter(|m| m.from() == Some(sq))
            .map(|m| Bitboard::from_square(m.to()))
            .fold(Bitboard::EMPTY, |a, b| a | b);
        if (pseudo_destinations(pos, sq) & !legal).any() {
            return true;
        }
    }
    false
}

/// Edge-case bits of the current position of `g` (§7.1), from the side to move's perspective.
///
/// `moves` are the position's legal moves; `prev_rights` the castling rights two plies ago (the
/// same side's previous turn), `None` at plies 0 and 1; `last_move` the opponent's last move;
/// `is_final` marks the game's final position, the only one that carries the draw bits 40–42.
/// A position without legal moves carries only CHECKMATE or STALEMATE (plus the draw bits).
pub fn position_bits(
    g: &GameState,
    moves: &MoveList,
    prev_rights: Option<Rights>,
    last_move: Option<&Move>,
    is_final: bool,
) -> u64 {
    let pos = g.position();
    let board = pos.board();
    let us = pos.turn();
    let checkers = pos.checkers();
    let mut bits = 0u64;
    if moves.is_empty() {
        bits |= mask(if checkers.any() { bit::CHECKMATE } else { bit::STALEMATE });
    } else {
        if checkers.any() {
            bits |= mask(bit::IN_CHECK);
        }
        if checkers.count() >= 2 {
            bits |= mask(bit::IN_DOUBLE_CHECK);
        }
        if pin_restricts_movement(pos, moves) {
            bits |= mask(bit::PIN_RESTRICTS_MOVEMENT);
        }
        for m in moves {
            let to_file = m.to().file() as u32;
            if m.role() == Role::Pawn && m.from().map(|f| f.file()) != Some(m.to().file()) {
                bits |= mask(bit::PAWN_CAPTURE_AVAILABLE);
            }
            if m.is_promotion() {
                bits |= mask(bit::PROMOTION_AVAILABLE) | mask(bit::PROMO_FILE_A + to_file);
            }
            if m.is_en_passant() {
                bits |= mask(bit::EP_CAPTURE_AVAILABLE) | mask(bit::EP_FILE_A + to_file);
            }
            match m.castling_side() {
                Some(CastlingSide::KingSide) => bits |= mask(bit::CASTLE_LEGAL_KINGSIDE),
                Some(CastlingSide::QueenSide) => bits |= mask(bit::CASTLE_LEGAL_QUEENSIDE),
                None => {}
            }
        }
        let rights = rights_of(pos);
        let side = if us == Color::White { 0 } else { 2 };
        let (has_k, has_q) = (rights[side], rights[side + 1]);
        if checkers.any() && (has_k || has_q) {
            bits |= mask(bit::CASTLE_BLOCKED_CHECK);
        }
        if let Some(prev) = prev_rights {
            let back = if us == Color::White { 0u32 } else { 56 };
            let corner_captured = |corner: u32| {
                last_move.is_some_and(|m| m.capture() == Some(Role::Rook) && m.to() == Square::new(back + corner))
            };
            if prev[side] && !has_k {
                bits |= mask(bit::RIGHTS_LOST_KINGSIDE);
                if corner_captured(7) {
                    bits |= mask(bit::RIGHTS_LOST_CAPTURE_KINGSIDE);
                }
            }
            if prev[side + 1] && !has_q {
                bits |= mask(bit::RIGHTS_LOST_QUEENSIDE);
                if corner_captured(0) {
                    bits |= mask(bit::RIGHTS_LOST_CAPTURE_QUEENSIDE);
                }
            }
        }
        let back = if us == Color::White { 0u32 } else { 56 };
        let occupied = board.occupied();
        let attacked = |file: u32| board.attacks_to(Square::new(back + file), !us, occupied).any();
        let occ = |file: u32| occupied.contains(Square::new(back + file));
        if has_q {
            for (i, file) in [1u32, 2, 3].into_iter().enumerate() {
                if occ(file) {
                    bits |= mask(bit::PIECE_BLOCKS_B + i as u32);
                }
            }
            for (i, file) in [2u32, 3].into_iter().enumerate() {
                if !occ(file) && attacked(file) {
                    bits |= mask(bit::ATTACK_BLOCKS_C + i as u32);
                }
            }
        }
        if has_k {
            for (i, file) in [5u32, 6].into_iter().enumerate() {
                if occ(file) {
                    bits |= mask(bit::PIECE_BLOCKS_F + i as u32);
                }
                if !occ(file) && attacked(file) {
                    bits |= mask(bit::ATTACK_BLOCKS_F + i as u32);
                }
            }
        }
    }
    if is_final {
        if g.halfmove_clock() >= 150 {
            bits |= mask(bit::SEVENTY_FIVE_MOVE_RULE);
        }
        if g.repetition_count() >= 5 {
            bits |= mask(bit::FIVEFOLD_REPETITION);
        }
        if pos.is_insufficient_material() {
            bits |= mask(bit::INSUFFICIENT_MATERIAL);
        }
    }
    bits
}

/// Edge statistics of one game (§7.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeStats {
    /// Bits of positions 0 … length (length + 1 entries; the last is the final position).
    pub positions: Vec<u64>,
    /// OR over positions with white to move (even t), the final position included.
    pub white: u64,
    /// OR over positions with black to move (odd t), the final position included.
    pub black: u64,
}

/// Replay `tokens` and compute the edge-case bits of every position, the final one included
/// (§7.2). Errors with the ply of the first illegal token.
pub fn edge_stats(tokens: &[u16]) -> Result<EdgeStats, IllegalToken> {
    let mut g = GameState::new();
    let mut rights: Vec<Rights> = Vec::with_capacity(tokens.len() + 1);
    let mut last: Option<Move> = None;
    let mut out = EdgeStats { positions: Vec::with_capacity(tokens.len() + 1), white: 0, black: 0 };
    for t in 0..=tokens.len() {
        let moves = g.legal_moves();
        rights.push(rights_of(g.position()));
        let prev = (t >= 2).then(|| rights[t - 2]);
        let bits = position_bits(&g, &moves, prev, last.as_ref(), t == tokens.len());
        out.positions.push(bits);
        if t % 2 == 0 {
            out.white |= bits;
        } else {
            out.black |= bits;
        }
        if t < tokens.len() {
            let tok = tokens[t];
            let m = moves
                .iter()
                .find(|m| crate::vocab::move_to_token(m) == Some(tok))
                .copied()
                .ok_or(IllegalToken { ply: t, token: tok })?;
            g.play_unchecked(&m);
            last = Some(m);
        }
    }
    Ok(out)
}

/// Per-ply edge statistics of a batch (§7.2): `per_ply` [n × max_ply] (entry t < length =
/// position t, entry `length` = final position when length < max_ply, 0 elsewhere), and the
/// per-game `white`/`black` accumulators [n]. Errors with `(game, IllegalToken)` of the first
/// game (lowest index) holding an illegal move.
#[allow(clippy::type_complexity)]
pub fn edge_stats_batch(
    tokens: &[u16],
    lengths: &[usize],
    max_ply: usize,
) -> Result<(Vec<u64>, Vec<u64>, Vec<u64>), (usize, IllegalToken)> {
    let stats: Vec<Result<EdgeStats, IllegalToken>> = lengths
        .par_iter()
        .enumerate()
        .map(|(b, &l)| edge_stats(&tokens[b * max_ply..b * max_ply + l]))
        .collect();
    let n = lengths.len();
    let mut per_ply = vec![0u64; n * max_ply];
    let mut white = vec![0u64; n];
    let mut black = vec![0u64; n];
    for (b, s) in stats.into_iter().enumerate() {
        let s = s.map_err(|e| (b, e))?;
        let k = s.positions.len().min(max_ply);
        per_ply[b * max_ply..b * max_ply + k].copy_from_slice(&s.positions[..k]);
        white[b] = s.white;
        black[b] = s.black;
    }
    Ok((per_ply, white, black))
}
