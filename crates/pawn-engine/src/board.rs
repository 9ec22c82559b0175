//! Board-state extraction for probes (spec `engine.md` §5): per game and ply, the position
//! *before* move t as small integer arrays.

use rayon::prelude::*;
use shakmaty::{CastlingSide, Color, Position, Role, Square};

use crate::game::{self, GameState};
use crate::masks::BatchError;

/// Piece code of §5 boards: 0 empty, 1–6 white P N B R Q K, 7–12 black P N B R Q K.
pub fn piece_code(color: Color, role: Role) -> i8 {
    let r = match role {
        Role::Pawn => 1,
        Role::Knight => 2,
        Role::Bishop => 3,
        Role::Rook => 4,
        Role::Queen => 5,
        Role::King => 6,
    };
    if color == Color::White {
        r
    } else {
        r + 6
    }
}

/// One position's §5 features.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoardState {
    /// Piece codes by square index (§1.2: a1 = 0 … h8 = 63, i.e. `[rank][file]` flattened).
    pub board: [i8; 64],
    /// True when white is to move.
    pub white_to_move: bool,
    /// Castling rights: bit0 K (white short), bit1 Q (white long), bit2 k, bit3 q.
    pub castling_rights: u8,
    /// En-passant target square if an en-passant capture is legal now, else −1.
    pub ep_square: i8,
    /// The side to move is in check.
    pub is_check: bool,
    /// Engine halfmove clock (§2.1), capped at 255.
    pub halfmove_clock: u8,
}

impl BoardState {
    /// Features of the current position of `state`.
    pub fn of(state: &GameState) -> Self {
        let pos = state.position();
        let mut board = [0i8; 64];
        for sq in pos.board().occupied() {
            let piece = pos.board().piece_at(sq).expect("occupied square has a piece");
            board[sq as usize] = piece_code(piece.color, piece.role);
        }
        let castles = pos.castles();
        let mut castling_rights = 0u8;
        for (bit, color, side) in [
            (0, Color::White, CastlingSide::KingSide),
            (1, Color::White, CastlingSide::QueenSide),
            (2, Color::Black, CastlingSide::KingSide),
            (3, Color::Black, CastlingSide::QueenSide),
        ] {
            if castles.has(color, side) {
                castling_rights |= 1 << bit;
            }
        }
        BoardState {
            board,
            white_to_move: pos.turn() == Color::White,
            castling_rights,
            ep_square: pos.legal_ep_square().map_or(-1, |s: Square| s as i8),
            is_check: pos.is_check(),
            halfmove_clock: state.halfmove_clock().min(255) as u8,
        }
    }
}

/// The six §5 arrays of a batch, flattened row-major. For t ≥ length every entry holds the §5
/// fill value: board 0, side_to_move false, castling 0, ep −1, check false, clock 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BoardStates {
    /// int8 `[B, T, 8, 8]` (`[rank][file]`, rank 0 = rank 1).
    pub boards: Vec<i8>,
    /// bool `[B, T]`, true = white to move.
    pub side_to_move: Vec<bool>,
    /// uint8 `[B, T]`, bits K Q k q.
    pub castling_rights: Vec<u8>,
    /// int8 `[B, T]`, legal en-passant target square or −1.
    pub ep_square: Vec<i8>,
    /// bool `[B, T]`.
    pub is_check: Vec<bool>,
    /// uint8 `[B, T]`, engine halfmove clock capped at 255.
    pub halfmove_clock: Vec<u8>,
}

/// Extract §5 board states for every game and ply t < length (entry t = position before move t,
/// entry 0 = start position); T = `max_ply` (each game's length must be ≤ `max_ply`).
///
/// Errors: [`BatchError`] for the first game (by index) holding an illegal token.
pub fn board_states(games: &[&[u16]], max_ply: usize) -> Result<BoardStates, BatchError> {
    let per: Vec<Result<Vec<BoardState>, BatchError>> = games
        .par_iter()
        .enumerate()
        .map(|(b, g)| {
            let mut v = Vec::with_capacity(g.len());
            game::replay(g, |state, t| {
                if t < g.len() {
                    v.push(BoardState::of(state));
                }
            })
            .map_err(|illegal| BatchError { game: b, illegal })?;
            Ok(v)
        })
        .collect();
    let n = games.len() * max_ply;
    let mut out = BoardStates {
        boards: vec![0; n * 64],
        side_to_move: vec![false; n],
        castling_rights: vec![0; n],
        ep_square: vec![-1; n],
        is_check: vec![false; n],
        halfmove_clock: vec![0; n],
    };
    for (b, r) in per.into_iter().enumerate() {
        for (t, s) in r?.into_iter().enumerate() {
            let i = b * max_ply + t;
            out.boards[i * 64..(i + 1) * 64].copy_from_slice(&s.board);
            out.side_to_move[i] = s.white_to_move;
            out.castling_rights[i] = s.castling_rights;
            out.ep_square[i] = s.ep_square;
            out.is_check[i] = s.is_check;
            out.halfmove_clock[i] = s.halfmove_clock;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab;

    fn toks(uci: &[&str]) -> Vec<u16> {
        uci.iter().map(|u| vocab::uci_to_token(u).unwrap()).collect()
    }

    #[test]
    fn start_position_board_matches_spec_codes() {
        let s = BoardState::of(&GameState::new());
        assert_eq!(&s.board[0..8], &[4, 2, 3, 5, 6, 3, 2, 4]);
        assert_eq!(&s.board[8..16], &[1; 8]);
        assert_eq!(&s.board[48..56], &[7; 8]);
        assert_eq!(&s.board[56..64], &[10, 8, 9, 11, 12, 9, 8, 10]);
        assert!(s.white_to_move);
        assert_eq!(s.castling_rights, 0b1111);
        assert_eq!(s.ep_square, -1);
        assert!(!s.is_check);
        assert_eq!(s.halfmove_clock, 0);
    }

    #[test]
    fn ep_square_only_when_capture_is_legal_and_fill_after_end() {
        // 1.e4 (no black pawn can take) → −1; 1.e4 d5 2.e5 f5 → f6 (45) is capturable.
        let g = toks(&["e2e4", "d7d5", "e4e5", "f7f5", "g1f3", "b8c6"]);
        let st = board_states(&[&g[..]], 8).unwrap();
        assert_eq!(st.ep_square[..6], [-1, -1, -1, -1, 45, -1]);
        assert_eq!(st.side_to_move[..6], [true, false, true, false, true, false]);
        assert_eq!(st.halfmove_clock[..6], [0, 0, 0, 0, 0, 1]);
        // t = 6 is the length: fill values from there on.
        assert!(st.boards[6 * 64..].iter().all(|&x| x == 0));
        assert!(!st.side_to_move[6] && st.ep_square[7] == -1 && st.castling_rights[6] == 0);
    }

    #[test]
    fn castling_rights_drop_when_king_moves_and_check_is_seen() {
        // 1.e4 e5 2.Ke2: white loses both rights, black keeps its own.
        let g = toks(&["e2e4", "e7e5", "e1e2", "d8h4"]);
        let st = board_states(&[&g[..]], 4).unwrap();
        assert_eq!(st.castling_rights[3], 0b1100);
        // Fool's mate: nothing may follow the mate.
        let g = toks(&["f2f3", "e7e5", "g2g4", "d8h4", "a2a3"]);
        let err = board_states(&[&g[..]], 5).unwrap_err();
        assert_eq!((err.game, err.illegal.ply), (0, 4));
        let st = board_states(&[&g[..4]], 5).unwrap();
        assert!(!st.is_check[3] && !st.is_check[4]); // t = 4 is the length: filled
        // 1.e4 f6 2.Qh5+: black to move in check before move 3.
        let g = toks(&["e2e4", "f7f6", "d1h5", "g7g6"]);
        let st = board_states(&[&g[..]], 4).unwrap();
        assert!(st.is_check[3]);
    }
}
