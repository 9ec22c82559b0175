//! Diagnostics (spec `engine.md` §7): game validation, edge-case bits and per-ply edge
//! statistics, quota-driven diagnostic sets, and the Monte-Carlo accuracy ceiling.

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rayon::prelude::*;
use shakmaty::{attacks, Bitboard, CastlingSide, Color, EnPassantMode, File, Move, MoveList, Position, Rank, Role, Square};

use crate::game::{GameState, IllegalToken, Termination};
use crate::random::{game_seeds, play_random_game, uniform_f64, uniform_index, random_games, OptionError, RandomGameOptions};
use crate::vocab::PAD_TOKEN;

// ------------------------------------------------------------------------------------------------
// Validation (§7.4)

/// Ply of the first token of `tokens` that is not a legal move in the position reached so far,
/// or `None` when every token is legal (§7.4). PAD and outcome tokens are never legal moves.
/// Only legality is checked: moves after a draw rule or ply cap would have ended the game pass.
pub fn first_illegal_ply(tokens: &[u16]) -> Option<usize> {
    let mut g = GameState::new();
    tokens.iter().position(|&t| g.play_token(t).is_err())
}

/// [`first_illegal_ply`] for every game of a row-major batch `tokens` [n × max_ply] cut to
/// `lengths` [n], in parallel. Never fails on illegal moves.
pub fn validate_games(tokens: &[u16], lengths: &[usize], max_ply: usize) -> Vec<Option<usize>> {
    lengths
        .par_iter()
        .enumerate()
        .map(|(b, &l)| first_illegal_ply(&tokens[b * max_ply..b * max_ply + l]))
        .collect()
}

// ------------------------------------------------------------------------------------------------
// Edge-case bits (§7.1)

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

// ------------------------------------------------------------------------------------------------
// Diagnostic sets (§7.3)

/// Output of [`diagnostic_sets`]; row-major arrays over the N accepted games.
#[derive(Clone, Debug)]
pub struct DiagnosticSets {
    pub n_games: usize,
    pub max_ply: usize,
    /// [N × max_ply] move tokens, PAD after each game's end.
    pub tokens: Vec<u16>,
    pub lengths: Vec<u16>,
    pub termination: Vec<u8>,
    /// [N × max_ply] edge bits as in [`edge_stats_batch`].
    pub per_ply: Vec<u64>,
    /// OR of the stored `per_ply` entries at even / odd t (the final position is included only
    /// when it fits, i.e. length < max_ply).
    pub white: Vec<u64>,
    pub black: Vec<u64>,
    /// One-hot mask of the (bit, white) quota the game was credited to, else 0.
    pub assignment_white: Vec<u64>,
    pub assignment_black: Vec<u64>,
    pub filled_white: [i32; 64],
    pub filled_black: [i32; 64],
    /// Games simulated in total (accepted or not).
    pub n_simulated: usize,
}

/// Generate games whose edge-case bits fill per-bit quotas (§7.3).
///
/// Games are simulated in batches of 256 with plain sequential seeds (game g plays with a
/// ChaCha8 generator seeded from `seed + g`, no mate boost) until `total_games` are accepted or
/// ⌊total_games × max_simulated_factor⌋ were simulated. Per game, in order: the generator is
/// selective when the remaining slots are ≤ the remaining need Σ max(quota − filled, 0) over all
/// bits and colours; the candidate is the (bit, colour) present in the game's accumulators with
/// the largest positive need (bits 0→63, white before black, later candidates win ties).
/// Selective mode rejects games without a candidate; otherwise the game is accepted and credited
/// to its candidate, if any. May return fewer than `total_games` games.
pub fn diagnostic_sets(
    quotas_white: &[i32; 64],
    quotas_black: &[i32; 64],
    total_games: usize,
    max_ply: usize,
    seed: u64,
    max_simulated_factor: f64,
) -> DiagnosticSets {
    let max_sim = (total_games as f64 * max_simulated_factor).floor().max(0.0) as usize;
    let mut out = DiagnosticSets {
        n_games: 0,
        max_ply,
        tokens: Vec::new(),
        lengths: Vec::new(),
        termination: Vec::new(),
        per_ply: Vec::new(),
        white: Vec::new(),
        black: Vec::new(),
        assignment_white: Vec::new(),
        assignment_black: Vec::new(),
        filled_white: [0; 64],
        filled_black: [0; 64],
        n_simulated: 0,
    };
    while out.n_games < total_games && out.n_simulated < max_sim {
        let batch = 256.min(max_sim - out.n_simulated);
        let first = out.n_simulated as u64;
        let games: Vec<(Vec<u16>, Termination, EdgeStats)> = (0..batch as u64)
            .into_par_iter()
            .map(|i| {
                let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_add(first + i));
                let game = play_random_game(&mut rng, max_ply, 0.0);
                let stats = edge_stats(&game.tokens).expect("random games are legal");
                (game.tokens, game.termination, stats)
            })
            .collect();
        for (tokens, term, stats) in games {
            if out.n_games == total_games {
                break;
            }
            out.n_simulated += 1;
            let need = |q: &[i32; 64], f: &[i32; 64], b: usize| (q[b] - f[b]).max(0) as i64;
            let remaining_need: i64 = (0..64)
                .map(|b| need(quotas_white, &out.filled_white, b) + need(quotas_black, &out.filled_black, b))
                .sum();
            let selective = ((total_games - out.n_games) as i64) <= remaining_need;
            let mut cand: Option<(usize, bool)> = None; // (bit, is_white)
            let mut best = 0i64;
            for b in 0..64 {
                for white in [true, false] {
                    let (acc, n) = if white {
                        (stats.white, need(quotas_white, &out.filled_white, b))
                    } else {
                        (stats.black, need(quotas_black, &out.filled_black, b))
                    };
                    if acc & (1u64 << b) != 0 && n > 0 && n >= best {
                        best = n;
                        cand = Some((b, white));
                    }
                }
            }
            if selective && cand.is_none() {
                continue;
            }
            let (mut aw, mut ab) = (0u64, 0u64);
            match cand {
                Some((b, true)) => {
                    out.filled_white[b] += 1;
                    aw = 1 << b;
                }
                Some((b, false)) => {
                    out.filled_black[b] += 1;
                    ab = 1 << b;
                }
                None => {}
            }
            let l = tokens.len();
            let mut row = vec![PAD_TOKEN; max_ply];
            row[..l].copy_from_slice(&tokens);
            let k = stats.positions.len().min(max_ply);
            let mut stored = vec![0u64; max_ply];
            stored[..k].copy_from_slice(&stats.positions[..k]);
            let (mut w, mut bl) = (0u64, 0u64);
            for (t, &bits) in stored[..k].iter().enumerate() {
                if t % 2 == 0 {
                    w |= bits;
                } else {
                    bl |= bits;
                }
            }
            out.tokens.extend_from_slice(&row);
            out.per_ply.extend_from_slice(&stored);
            out.lengths.push(l as u16);
            out.termination.push(term.code());
            out.white.push(w);
            out.black.push(bl);
            out.assignment_white.push(aw);
            out.assignment_black.push(ab);
            out.n_games += 1;
        }
    }
    out
}

// ------------------------------------------------------------------------------------------------
// Accuracy ceiling (§7.5)

/// 1/N_legal at every position t < len of a game (the best any predictor can do in expectation
/// against a uniform random mover). Errors with the first illegal token.
pub fn inverse_legal_counts(tokens: &[u16]) -> Result<Vec<f64>, IllegalToken> {
    let mut g = GameState::new();
    let mut out = Vec::with_capacity(tokens.len());
    for (ply, &tok) in tokens.iter().enumerate() {
        let moves = g.legal_moves();
        out.push(1.0 / moves.len().max(1) as f64);
        let m = moves
            .iter()
            .find(|m| crate::vocab::move_to_token(m) == Some(tok))
            .copied()
            .ok_or(IllegalToken { ply, token: tok })?;
        g.play_unchecked(&m);
    }
    Ok(out)
}

/// Side-aware outcome class of §7.5 for a game that ended with `term` after `length` plies:
/// 0 white is mated, 1 black is mated, 2 stalemate, 3 75-move, 4 fivefold, 5 insufficient
/// material, 6 ply limit.
pub fn outcome_class(term: Termination, length: usize) -> u8 {
    match term {
        Termination::Checkmate => (length % 2) as u8,
        Termination::Stalemate => 2,
        Termination::SeventyFiveMoveRule => 3,
        Termination::FivefoldRepetition => 4,
        Termination::InsufficientMaterial => 5,
        Termination::PlyLimit => 6,
    }
}

/// The [`Termination`] of a §2.2 code 0–5 (codes above 5 read as PlyLimit).
pub fn termination_from_code(code: u8) -> Termination {
    match code {
        0 => Termination::Checkmate,
        1 => Termination::Stalemate,
        2 => Termination::SeventyFiveMoveRule,
        3 => Termination::FivefoldRepetition,
        4 => Termination::InsufficientMaterial,
        _ => Termination::PlyLimit,
    }
}

/// Options of [`accuracy_ceiling`].
#[derive(Clone, Copy, Debug)]
pub struct CeilingOptions {
    pub n_games: usize,
    pub max_ply: usize,
    /// Random playouts per legal move (0 = no rollout estimates; then the two conditional
    /// rollout estimates equal the unconditional one).
    pub n_rollouts: usize,
    /// Fraction of positions sampled (≥ 1 keeps every position).
    pub sample_rate: f64,
    pub seed: u64,
}

/// Result of [`accuracy_ceiling`]: per-position arrays (one entry per sampled position, in
/// game-then-ply order) and their means.
#[derive(Clone, Debug, Default)]
pub struct Ceiling {
    pub n_games: usize,
    pub ply: Vec<u16>,
    pub game_length: Vec<u16>,
    pub n_legal: Vec<u16>,
    pub unconditional: Vec<f64>,
    pub naive_conditional: Vec<f64>,
    pub conditional: Vec<f64>,
    pub conditional_corrected: Vec<f64>,
    pub outcome: Vec<u8>,
    pub game_idx: Vec<u32>,
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
}

impl Ceiling {
    pub fn unconditional_ceiling(&self) -> f64 {
        mean(&self.unconditional)
    }
    pub fn naive_conditional_ceiling(&self) -> f64 {
        mean(&self.naive_conditional)
    }
    pub fn conditional_ceiling(&self) -> f64 {
        mean(&self.conditional)
    }
    pub fn conditional_corrected_ceiling(&self) -> f64 {
        mean(&self.conditional_corrected)
    }
}

/// Continue a random game from `g` with `rng` until §2.2 ends it; return its outcome class.
fn playout_class(mut g: GameState, rng: &mut ChaCha8Rng, max_ply: usize) -> u8 {
    loop {
        let moves = g.legal_moves();
        if let Some(t) = g.termination_with(moves.len(), max_ply) {
            return outcome_class(t, g.ply());
        }
        let m = moves[uniform_index(rng, moves.len() as u64) as usize];
        g.play_unchecked(&m);
    }
}

/// Per-move hit counts of reaching `class` over `half` playouts per move, seeded move-major from
/// the per-game seeds of `base` (§3.2).
fn rollout_hits(g: &GameState, moves: &MoveList, class: u8, half: usize, base: u64, max_ply: usize) -> Vec<u32> {
    let seeds = game_seeds(base, 0, moves.len() * half);
    moves
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut after = g.clone();
            after.play_unchecked(m);
            (0..half)
                .filter(|&r| {
                    let mut rng = ChaCha8Rng::seed_from_u64(seeds[i * half + r]);
                    playout_class(after.clone(), &mut rng, max_ply) == class
                })
                .count() as u32
        })
        .collect()
}

/// Monte-Carlo accuracy ceiling (§7.5).
///
/// Plays `n_games` random games with derived seeds (§3.2, base `seed`), samples positions
/// t < length with a ChaCha8 generator seeded with `seed + 999` (kept if a uniform float is below
/// `sample_rate`, always when the rate is ≥ 1; scanning games, then plies), and computes per
/// sampled position w: unconditional 1/N_legal; naive conditional 1/(N_legal − moves that end the
/// game at once with another outcome class); and with `n_rollouts > 0` the rollout estimates
/// (halves A and B of max(⌊n/2⌋, 1) playouts per move, base seeds `seed + 1,000,000 + 2000·w`
/// and that + 1000; `conditional` = max p / Σ p, `conditional_corrected` = p_B(argmax p_A) / Σ p
/// with the last maximum winning ties, p over both halves; unconditional when Σ p = 0).
pub fn accuracy_ceiling(opts: CeilingOptions) -> Result<Ceiling, OptionError> {
    let games = random_games(
        opts.n_games,
        RandomGameOptions { max_ply: opts.max_ply, seed: opts.seed, mate_boost: 0.0, discard_ply_limit: false, first_game: 0 },
    )?;
    let mut sampler = ChaCha8Rng::seed_from_u64(opts.seed.wrapping_add(999));
    let mut picks: Vec<(usize, usize)> = Vec::new();
    for b in 0..opts.n_games {
        for t in 0..games.lengths[b] as usize {
            if opts.sample_rate >= 1.0 || uniform_f64(&mut sampler) < opts.sample_rate {
                picks.push((b, t));
            }
        }
    }
    // Group sampled plies by game so each game is replayed once.
    let mut by_game: Vec<Vec<(usize, usize)>> = vec![Vec::new(); opts.n_games];
    for (w, &(b, t)) in picks.iter().enumerate() {
        by_game[b].push((w, t));
    }
    let half = (opts.n_rollouts / 2).max(1);
    let rows: Vec<(usize, [f64; 4], u16)> = by_game
        .par_iter()
        .enumerate()
        .flat_map_iter(|(b, sel)| {
            let mut rows = Vec::with_capacity(sel.len());
            if sel.is_empty() {
                return rows;
            }
            let length = games.lengths[b] as usize;
            let class = outcome_class(termination_from_code(games.termination[b]), length);
            let row = &games.tokens[b * opts.max_ply..b * opts.max_ply + length];
            let mut g = GameState::new();
            let mut next = 0;
            for (t, &tok) in row.iter().enumerate() {
                if next < sel.len() && sel[next].1 == t {
                    let w = sel[next].0;
                    next += 1;
                    let moves = g.legal_moves();
                    let n = moves.len();
                    let unc = 1.0 / n as f64;
                    let other = moves
                        .iter()
                        .filter(|m| {
                            let mut a = g.clone();
                            a.play_unchecked(m);
                            a.termination(opts.max_ply).is_some_and(|term| outcome_class(term, a.ply()) != class)
                        })
                        .count();
                    let naive = if other < n { 1.0 / (n - other) as f64 } else { unc };
                    let (mut cond, mut corr) = (unc, unc);
                    if opts.n_rollouts > 0 {
                        let base = opts.seed.wrapping_add(1_000_000).wrapping_add(2000 * w as u64);
                        let ha = rollout_hits(&g, &moves, class, half, base, opts.max_ply);
                        let hb = rollout_hits(&g, &moves, class, half, base.wrapping_add(1000), opts.max_ply);
                        let p: Vec<f64> =
                            ha.iter().zip(&hb).map(|(&a, &b)| (a + b) as f64 / (2 * half) as f64).collect();
                        let total: f64 = p.iter().sum();
                        if total > 0.0 {
                            cond = p.iter().cloned().fold(0.0, f64::max) / total;
                            let mut arg = 0;
                            for (i, &h) in ha.iter().enumerate() {
                                if h >= ha[arg] {
                                    arg = i;
                                }
                            }
                            corr = (hb[arg] as f64 / half as f64) / total;
                        }
                    }
                    rows.push((w, [unc, naive, cond, corr], n as u16));
                }
                let m = g.find_move(tok).expect("random games are legal");
                g.play_unchecked(&m);
            }
            rows
        })
        .collect();
    let mut rows = rows;
    rows.sort_by_key(|r| r.0);
    let mut c = Ceiling { n_games: opts.n_games, ..Default::default() };
    for (w, v, n) in rows {
        let (b, t) = picks[w];
        let length = games.lengths[b];
        c.ply.push(t as u16);
        c.game_length.push(length);
        c.n_legal.push(n);
        c.unconditional.push(v[0]);
        c.naive_conditional.push(v[1]);
        c.conditional.push(v[2]);
        c.conditional_corrected.push(v[3]);
        c.outcome.push(outcome_class(termination_from_code(games.termination[b]), length as usize));
        c.game_idx.push(b as u32);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
