//! The PAWN move vocabulary (spec `engine.md` §1): 1,968 searchless_chess move actions, PAD and
//! eleven outcome tokens, derived by the enumeration of §1.3 rather than pasted as a table.

use std::sync::OnceLock;

use shakmaty::{attacks, Bitboard, Move, Role, Square};

/// Number of move actions (ids 0..1967).
pub const NUM_ACTIONS: usize = 1968;
/// Padding token id; fills every slot after the end of a game.
pub const PAD_TOKEN: u16 = 1968;
/// First outcome token id (spec §1.6).
pub const OUTCOME_TOKEN_BASE: u16 = 1969;
/// Number of outcome tokens.
pub const N_OUTCOMES: usize = 11;
/// Full vocabulary width: actions + PAD + outcomes.
pub const VOCAB_SIZE: usize = 1980;
/// Model context length in tokens.
pub const MAX_SEQ_LEN: usize = 512;

/// Outcome token ids (spec §1.6). Note 1974/1975: the *named* side wins.
pub mod outcome {
    pub const WHITE_CHECKMATES: u16 = 1969;
    pub const BLACK_CHECKMATES: u16 = 1970;
    pub const STALEMATE: u16 = 1971;
    pub const DRAW_BY_RULE: u16 = 1972;
    pub const PLY_LIMIT: u16 = 1973;
    pub const WHITE_RESIGNS: u16 = 1974;
    pub const BLACK_RESIGNS: u16 = 1975;
    pub const DRAW_BY_AGREEMENT: u16 = 1976;
    pub const WHITE_WINS_ON_TIME: u16 = 1977;
    pub const BLACK_WINS_ON_TIME: u16 = 1978;
    pub const DRAW_BY_TIME: u16 = 1979;
    /// Names in id order (index = id − 1969).
    pub const NAMES: [&str; 11] = [
        "WHITE_CHECKMATES",
        "BLACK_CHECKMATES",
        "STALEMATE",
        "DRAW_BY_RULE",
        "PLY_LIMIT",
        "WHITE_RESIGNS",
        "BLACK_RESIGNS",
        "DRAW_BY_AGREEMENT",
        "WHITE_WINS_ON_TIME",
        "BLACK_WINS_ON_TIME",
        "DRAW_BY_TIME",
    ];
}

/// Promotion pieces in vocabulary order (§1.3: q, r, b, n within a quadruple).
pub const PROMO_ROLES: [Role; 4] = [Role::Queen, Role::Rook, Role::Bishop, Role::Knight];
const PROMO_LETTERS: [char; 4] = ['q', 'r', 'b', 'n'];

/// One vocabulary action: source and destination square (§1.2 indices) and the promotion
/// code of the factored embedding (§1.5: 0 none, 1 q, 2 r, 3 b, 4 n).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    pub src: u8,
    pub dst: u8,
    pub promo: u8,
}

impl Action {
    /// The UCI string of this action, e.g. `e2e4` or `a7a8q`.
    pub fn uci(&self) -> String {
        let mut s = String::with_capacity(5);
        s.push_str(&square_name(self.src));
        s.push_str(&square_name(self.dst));
        if self.promo > 0 {
            s.push(PROMO_LETTERS[(self.promo - 1) as usize]);
        }
        s
    }
}

/// Name of square index `sq` (0 = a1, 63 = h8).
pub fn square_name(sq: u8) -> String {
    let file = (b'a' + (sq % 8)) as char;
    let rank = (b'1' + (sq / 8)) as char;
    format!("{file}{rank}")
}

struct Tables {
    actions: Vec<Action>,
    /// `normal[src * 64 + dst]` = id of the non-promotion action, or `u16::MAX`.
    normal: Vec<u16>,
    /// `promo[(src * 64 + dst) * 4 + k]` = id of promotion with piece k (q r b n), or `u16::MAX`.
    promo: Vec<u16>,
}

fn build() -> Tables {
    let mut actions = Vec::with_capacity(NUM_ACTIONS);
    // §1.3 step 1: per source square, queen rays on an empty board, then knight jumps,
    // each in ascending destination index (bitboards iterate ascending).
    for s in 0..64u8 {
        let sq = Square::new(s as u32);
        for dst in attacks::queen_attacks(sq, Bitboard::EMPTY) {
            actions.push(Action { src: s, dst: dst as u8, promo: 0 });
        }
        for dst in attacks::knight_attacks(sq) {
            actions.push(Action { src: s, dst: dst as u8, promo: 0 });
        }
    }
    // §1.3 step 2: black block (rank 2 → 1), then white block (rank 7 → 8); per file the push,
    // the capture toward the lower file, the capture toward the higher file; q r b n each.
    for (from_rank, to_rank) in [(1u8, 0u8), (6u8, 7u8)] {
        for file in 0..8i8 {
            for df in [0i8, -1, 1] {
                let to_file = file + df;
                if !(0..8).contains(&to_file) {
                    continue;
                }
                for k in 0..4u8 {
                    actions.push(Action {
                        src: from_rank * 8 + file as u8,
                        dst: to_rank * 8 + to_file as u8,
                        promo: k + 1,
                    });
                }
            }
        }
    }
    assert_eq!(actions.len(), NUM_ACTIONS, "vocabulary derivation broke");
    let mut normal = vec![u16::MAX; 64 * 64];
    let mut promo = vec![u16::MAX; 64 * 64 * 4];
    for (id, a) in actions.iter().enumerate() {
        let pair = a.src as usize * 64 + a.dst as usize;
        if a.promo == 0 {
            normal[pair] = id as u16;
        } else {
            promo[pair * 4 + (a.promo - 1) as usize] = id as u16;
        }
    }
    Tables { actions, normal, promo }
}

fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(build)
}

/// All 1,968 actions in id order.
pub fn actions() -> &'static [Action] {
    &tables().actions
}

/// Decompose a token into its action, or `None` for PAD, outcome and out-of-range ids.
pub fn decompose(token: u16) -> Option<Action> {
    tables().actions.get(token as usize).copied()
}

/// UCI string of a move token; `None` for PAD, outcomes and out-of-range ids.
pub fn token_to_uci(token: u16) -> Option<String> {
    decompose(token).map(|a| a.uci())
}

/// Token of a (src, dst, promotion) triple; `promo_role` is `None` for non-promotions.
/// Returns `None` when the vocabulary has no such entry.
pub fn squares_to_token(src: u8, dst: u8, promo_role: Option<Role>) -> Option<u16> {
    if src >= 64 || dst >= 64 {
        return None;
    }
    let pair = src as usize * 64 + dst as usize;
    let t = tables();
    let id = match promo_role {
        None => t.normal[pair],
        Some(role) => {
            let k = PROMO_ROLES.iter().position(|&r| r == role)?;
            t.promo[pair * 4 + k]
        }
    };
    (id != u16::MAX).then_some(id)
}

/// Token of a UCI string (`e2e4`, `a7a8q`; promotion letter case-insensitive). Castling must be
/// written as the king moving two squares; this function only maps strings to ids and does not
/// check legality. Returns `None` for malformed strings and pairs outside the vocabulary.
///
/// ```
/// use pawn_engine::vocab::{token_to_uci, uci_to_token};
///
/// assert_eq!(uci_to_token("e2e4"), Some(317));
/// assert_eq!(uci_to_token("e1g1"), Some(102)); // castling is the king's two-square step
/// assert_eq!(uci_to_token("a1a1"), None);
/// assert_eq!(token_to_uci(317).as_deref(), Some("e2e4"));
/// ```
pub fn uci_to_token(uci: &str) -> Option<u16> {
    let b = uci.as_bytes();
    if b.len() != 4 && b.len() != 5 {
        return None;
    }
    let sq = |f: u8, r: u8| -> Option<u8> {
        if (b'a'..=b'h').contains(&f) && (b'1'..=b'8').contains(&r) {
            Some((r - b'1') * 8 + (f - b'a'))
        } else {
            None
        }
    };
    let src = sq(b[0], b[1])?;
    let dst = sq(b[2], b[3])?;
    let promo = if b.len() == 5 {
        Some(match b[4].to_ascii_lowercase() {
            b'q' => Role::Queen,
            b'r' => Role::Rook,
            b'b' => Role::Bishop,
            b'n' => Role::Knight,
            _ => return None,
        })
    } else {
        None
    };
    squares_to_token(src, dst, promo)
}

/// Token of a legal standard-chess move (§1.4). Castling maps to the king moving two squares;
/// en passant to the capturing pawn's diagonal step. Every legal move has exactly one token;
/// `None` only for drops (variants), which PAWN does not support.
pub fn move_to_token(m: &Move) -> Option<u16> {
    match *m {
        Move::Normal { from, to, promotion, .. } => squares_to_token(from as u8, to as u8, promotion),
        Move::EnPassant { from, to } => squares_to_token(from as u8, to as u8, None),
        Move::Castle { king, rook } => {
            let k = king as u8;
            let dst = if (rook as u8) > k { k + 2 } else { k - 2 };
            squares_to_token(k, dst, None)
        }
        Move::Put { .. } => None,
    }
}

/// The 44 promotion (src, dst) pairs of the grid representation, in spec §1.7 order.
pub fn promo_pairs() -> &'static [(u8, u8); 44] {
    static P: OnceLock<[(u8, u8); 44]> = OnceLock::new();
    P.get_or_init(|| {
        let mut v = Vec::with_capacity(44);
        for (from_rank, to_rank) in [(6u8, 7u8), (1u8, 0u8)] {
            for f in 0..8u8 {
                v.push((from_rank * 8 + f, to_rank * 8 + f));
            }
            for f in 1..8u8 {
                v.push((from_rank * 8 + f, to_rank * 8 + f - 1));
            }
            for f in 0..7u8 {
                v.push((from_rank * 8 + f, to_rank * 8 + f + 1));
            }
        }
        v.try_into().expect("44 promotion pairs")
    })
}

/// Index (0–43) of a promotion pair in the §1.7 list, or `None`.
pub fn promo_pair_index(src: u8, dst: u8) -> Option<usize> {
    promo_pairs().iter().position(|&p| p == (src, dst))
}

/// Outcome token for a name in [`outcome::NAMES`], or `None`.
pub fn outcome_token_from_name(name: &str) -> Option<u16> {
    outcome::NAMES
        .iter()
        .position(|&n| n == name)
        .map(|i| OUTCOME_TOKEN_BASE + i as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchor_ids_match_spec() {
        for (uci, id) in [
            ("a1b1", 0), ("d2d4", 288), ("e2e4", 317), ("g1f3", 169), ("e7e5", 1497),
            ("e1c1", 99), ("e1g1", 102), ("e1h1", 103), ("e8c8", 1711), ("e8g8", 1714),
            ("h8g7", 1781), ("h8g8", 1789), ("a2a1q", 1792), ("a7a8q", 1880), ("b7a8q", 1892),
            ("b7c8q", 1896), ("h7g8n", 1967),
        ] {
            assert_eq!(uci_to_token(uci), Some(id), "{uci}");
            assert_eq!(token_to_uci(id).as_deref(), Some(uci));
        }
    }

    #[test]
    fn block_starts_match_spec_table() {
        // First id and size of a few source-square blocks (§1.3 table).
        let first = |s: u8| actions().iter().position(|a| a.src == s && a.promo == 0).unwrap();
        let size = |s: u8| actions().iter().filter(|a| a.src == s && a.promo == 0).count();
        assert_eq!((first(0), size(0)), (0, 23));
        assert_eq!((first(27), size(27)), (739, 35));
        assert_eq!((first(63), size(63)), (1769, 23));
        assert_eq!((first(8), size(8)), (194, 24));
    }

    #[test]
    fn promo_pairs_follow_grid_order() {
        let p = promo_pairs();
        assert_eq!(p[0], (48, 56)); // a7a8
        assert_eq!(p[8], (49, 56)); // b7a8
        assert_eq!(p[15], (48, 57)); // a7b8
        assert_eq!(p[22], (8, 0)); // a2a1
        assert_eq!(p[43], (14, 7)); // g2h1
    }

    #[test]
    fn pad_and_outcomes_have_no_decomposition() {
        assert!(decompose(PAD_TOKEN).is_none());
        assert!(decompose(1979).is_none());
        assert_eq!(decompose(1967), Some(Action { src: 55, dst: 62, promo: 4 }));
    }
}
