//! Game state, move replay and the termination check (spec `engine.md` §2).

use shakmaty::zobrist::Zobrist64;
use shakmaty::{Chess, EnPassantMode, Move, MoveList, Position};

use crate::vocab;

/// Why a game ended (spec §2.2 codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Termination {
    Checkmate = 0,
    Stalemate = 1,
    SeventyFiveMoveRule = 2,
    FivefoldRepetition = 3,
    InsufficientMaterial = 4,
    PlyLimit = 5,
}

impl Termination {
    /// Every termination, by code.
    pub const ALL: [Termination; 6] = [
        Termination::Checkmate,
        Termination::Stalemate,
        Termination::SeventyFiveMoveRule,
        Termination::FivefoldRepetition,
        Termination::InsufficientMaterial,
        Termination::PlyLimit,
    ];

    /// Spec code 0–5.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The termination of a §2.2 code 0–5, None for any other code (the sentinels included).
    ///
    /// ```
    /// use pawn_engine::game::Termination;
    /// assert_eq!(Termination::from_code(1), Some(Termination::Stalemate));
    /// assert_eq!(Termination::from_code(-3), None);
    /// ```
    pub fn from_code(code: i64) -> Option<Termination> {
        usize::try_from(code).ok().and_then(|c| Termination::ALL.get(c).copied())
    }

    /// Snake-case name (`"checkmate"`, `"seventy_five_move_rule"`, …), the §2.2 names.
    pub fn name(self) -> &'static str {
        match self {
            Termination::Checkmate => "checkmate",
            Termination::Stalemate => "stalemate",
            Termination::SeventyFiveMoveRule => "seventy_five_move_rule",
            Termination::FivefoldRepetition => "fivefold_repetition",
            Termination::InsufficientMaterial => "insufficient_material",
            Termination::PlyLimit => "ply_limit",
        }
    }

    /// Outcome token of a game that ended this way after `length` plies (spec §2.3): checkmate
    /// is a win for the side that moved last.
    ///
    /// ```
    /// use pawn_engine::game::Termination;
    /// use pawn_engine::vocab::outcome::{BLACK_CHECKMATES, DRAW_BY_RULE, WHITE_CHECKMATES};
    /// assert_eq!(Termination::Checkmate.outcome_token(3), WHITE_CHECKMATES); // white moved last
    /// assert_eq!(Termination::Checkmate.outcome_token(4), BLACK_CHECKMATES);
    /// assert_eq!(Termination::FivefoldRepetition.outcome_token(40), DRAW_BY_RULE);
    /// ```
    pub fn outcome_token(self, length: usize) -> u16 {
        use vocab::outcome::*;
        match self {
            Termination::Checkmate if length % 2 == 1 => WHITE_CHECKMATES,
            Termination::Checkmate => BLACK_CHECKMATES,
            Termination::Stalemate => STALEMATE,
            Termination::SeventyFiveMoveRule
            | Termination::FivefoldRepetition
            | Termination::InsufficientMaterial => DRAW_BY_RULE,
            Termination::PlyLimit => PLY_LIMIT,
        }
    }
}

/// Error raised when a token cannot be played in the current position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IllegalToken {
    /// Ply (0-based) at which the token was offered.
    pub ply: usize,
    /// The offending token id.
    pub token: u16,
}

impl std::fmt::Display for IllegalToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Token arrays are int16 in NumPy: show the id as the caller wrote it (−5, not 65531).
        let shown = self.token as i16;
        match vocab::token_to_uci(self.token) {
            Some(u) => write!(f, "illegal move token {shown} ({u}) at ply {}", self.ply),
            None => write!(f, "token {shown} at ply {} is not a move", self.ply),
        }
    }
}

impl std::error::Error for IllegalToken {}

/// One game from the standard start position, with the engine's own halfmove clock and the
/// history of position keys needed for the fivefold rule (spec §2.1).
#[derive(Clone, Debug)]
pub struct GameState {
    pos: Chess,
    tokens: Vec<u16>,
    halfmove_clock: u32,
    /// Zobrist keys of the positions reached since the last pawn move or capture (the current
    /// one last). Earlier positions cannot repeat, so the full history of §2.1 is not needed.
    /// The key includes the en passant square only when an en-passant capture is legal.
    keys: Vec<u64>,
}

impl Default for GameState {
    fn default() -> Self {
        Self::new()
    }
}

/// Position key (§2.1): placement, side to move, castling rights, legal en passant square.
pub fn position_key(pos: &Chess) -> u64 {
    let z: Zobrist64 = pos.zobrist_hash(EnPassantMode::Legal);
    u64::from(z)
}

impl GameState {
    /// A game at the standard start position.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// A game at the standard start position with room for `plies` moves reserved up front
    /// (avoids regrowing the history in hot loops).
    pub fn with_capacity(plies: usize) -> Self {
        let pos = Chess::default();
        let mut keys = Vec::with_capacity(plies.clamp(1, 152));
        keys.push(position_key(&pos));
        GameState { pos, tokens: Vec::with_capacity(plies), halfmove_clock: 0, keys }
    }

    /// The current position.
    pub fn position(&self) -> &Chess {
        &self.pos
    }

    /// Plies played so far.
    pub fn ply(&self) -> usize {
        self.tokens.len()
    }

    /// Tokens played so far.
    pub fn tokens(&self) -> &[u16] {
        &self.tokens
    }

    /// Consume the state, returning the tokens played.
    pub fn into_tokens(self) -> Vec<u16> {
        self.tokens
    }

    /// The engine's halfmove clock (§2.1): plies since the last pawn move or capture.
    pub fn halfmove_clock(&self) -> u32 {
        self.halfmove_clock
    }

    /// Legal moves in shakmaty's generation order (§2.4).
    pub fn legal_moves(&self) -> MoveList {
        self.pos.legal_moves()
    }

    /// Legal move tokens in generation order.
    pub fn legal_tokens(&self) -> Vec<u16> {
        self.legal_moves().iter().filter_map(vocab::move_to_token).collect()
    }

    /// Play a move known to be legal here. The token is derived from the move.
    pub fn play_unchecked(&mut self, m: &Move) {
        let token = vocab::move_to_token(m).expect("standard chess move has a token");
        let resets = m.is_capture() || m.role() == shakmaty::Role::Pawn;
        let cur = Zobrist64(*self.keys.last().expect("history is never empty"));
        let incremental = self.pos.update_zobrist_hash(cur, *m, EnPassantMode::Legal);
        self.pos.play_unchecked(*m);
        self.tokens.push(token);
        if resets {
            // Positions before a pawn move or capture can never occur again.
            self.halfmove_clock = 0;
            self.keys.clear();
        } else {
            self.halfmove_clock += 1;
        }
        let key = match incremental {
            Some(z) => u64::from(z),
            None => position_key(&self.pos),
        };
        self.keys.push(key);
    }

    /// The legal move whose token is `token`, if any (§1.4: the input is accepted only if it
    /// equals the token of one legal move).
    pub fn find_move(&self, token: u16) -> Option<Move> {
        if token as usize >= vocab::NUM_ACTIONS {
            return None;
        }
        self.legal_moves().into_iter().find(|m| vocab::move_to_token(m) == Some(token))
    }

    /// Play `token` if it is legal; on error the state is unchanged.
    pub fn play_token(&mut self, token: u16) -> Result<Move, IllegalToken> {
        match self.find_move(token) {
            Some(m) => {
                self.play_unchecked(&m);
                Ok(m)
            }
            None => Err(IllegalToken { ply: self.ply(), token }),
        }
    }

    /// Number of times the current position key occurs in the game (itself included).
    /// Only positions since the last pawn move or capture can repeat, so only those are kept.
    pub fn repetition_count(&self) -> usize {
        let cur = *self.keys.last().expect("history is never empty");
        self.keys
            .iter()
            .rev()
            .step_by(2) // same side to move only
            .filter(|&&k| k == cur)
            .count()
    }

    /// Termination check of spec §2.2, first match wins, given the legal-move count of the
    /// current position (so callers that already generated moves do not generate them twice).
    pub fn termination_with(&self, n_legal: usize, max_ply: usize) -> Option<Termination> {
        if n_legal == 0 {
            return Some(if self.pos.is_check() {
                Termination::Checkmate
            } else {
                Termination::Stalemate
            });
        }
        if self.ply() >= max_ply {
            return Some(Termination::PlyLimit);
        }
        if self.halfmove_clock >= 150 {
            return Some(Termination::SeventyFiveMoveRule);
        }
        // Five occurrences need at least 16 reversible plies since the last pawn move or capture.
        if self.halfmove_clock >= 16 && self.repetition_count() >= 5 {
            return Some(Termination::FivefoldRepetition);
        }
        if self.pos.is_insufficient_material() {
            return Some(Termination::InsufficientMaterial);
        }
        None
    }

    /// Termination check of spec §2.2 for the current position.
    pub fn termination(&self, max_ply: usize) -> Option<Termination> {
        self.termination_with(self.legal_moves().len(), max_ply)
    }
}

/// Error from [`GameState::from_fen`]: the FEN text is malformed or describes an illegal
/// position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FenError(pub String);

impl std::fmt::Display for FenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FenError {}

impl GameState {
    /// A game starting from the position of a FEN string (standard chess, castling rights as in
    /// the FEN). Used by perft and tests; games in PAWN data always start with [`GameState::new`].
    ///
    /// The engine halfmove clock starts at the FEN's halfmove field, [`GameState::ply`] counts
    /// plies played since this position (starting at 0), and the key history holds only this
    /// position. The literal `"startpos"` gives the standard start position.
    ///
    /// Errors: [`FenError`] when the text is not a FEN or the position is illegal.
    pub fn from_fen(fen: &str) -> Result<Self, FenError> {
        let fen = fen.trim();
        if fen == "startpos" {
            return Ok(Self::new());
        }
        let parsed = shakmaty::fen::Fen::from_ascii(fen.as_bytes())
            .map_err(|e| FenError(format!("invalid FEN {fen:?}: {e}")))?;
        let pos: Chess = parsed
            .into_position(shakmaty::CastlingMode::Standard)
            .map_err(|e| FenError(format!("illegal position in FEN {fen:?}: {e}")))?;
        let key = position_key(&pos);
        let halfmove_clock = pos.halfmoves();
        Ok(GameState { pos, tokens: Vec::new(), halfmove_clock, keys: vec![key] })
    }
}

/// Replay `tokens` from the start position, calling `visit(state, ply)` on every position
/// *before* move `ply` (0 ≤ ply < len) and finally once with `ply = len` after the last move.
pub fn replay<F: FnMut(&GameState, usize)>(tokens: &[u16], mut visit: F) -> Result<GameState, IllegalToken> {
    let mut g = GameState::new();
    for (ply, &t) in tokens.iter().enumerate() {
        visit(&g, ply);
        g.play_token(t)?;
    }
    visit(&g, tokens.len());
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn illegal_token_message_shows_negative_ids_as_written() {
        let e = IllegalToken { ply: 3, token: -5i16 as u16 };
        assert_eq!(e.to_string(), "token -5 at ply 3 is not a move");
        let e = IllegalToken { ply: 0, token: 0 };
        assert_eq!(e.to_string(), "illegal move token 0 (a1b1) at ply 0");
    }

    fn play(uci: &[&str]) -> GameState {
        let mut g = GameState::new();
        for u in uci {
            g.play_token(vocab::uci_to_token(u).unwrap()).unwrap();
        }
        g
    }

    #[test]
    fn fools_mate_is_black_checkmates() {
        let g = play(&["f2f3", "e7e5", "g2g4", "d8h4"]);
        let t = g.termination(512).unwrap();
        assert_eq!(t, Termination::Checkmate);
        assert_eq!(t.outcome_token(g.ply()), vocab::outcome::BLACK_CHECKMATES);
    }

    #[test]
    fn knight_shuffle_reaches_fivefold_after_16_plies() {
        let cycle = ["g1f3", "g8f6", "f3g1", "f6g8"];
        let mut moves = Vec::new();
        for _ in 0..4 {
            moves.extend_from_slice(&cycle);
        }
        let g = play(&moves[..15]);
        assert_eq!(g.termination(512), None);
        let g = play(&moves);
        assert_eq!(g.repetition_count(), 5);
        assert_eq!(g.termination(512), Some(Termination::FivefoldRepetition));
        // Ply limit beats the draw rule.
        assert_eq!(g.termination(16), Some(Termination::PlyLimit));
    }

    #[test]
    fn castling_token_is_king_two_squares() {
        let g = play(&["e2e4", "e7e5", "g1f3", "b8c6", "f1c4", "g8f6"]);
        assert!(g.legal_tokens().contains(&102));
        assert!(!g.legal_tokens().contains(&103));
    }

    #[test]
    fn from_fen_startpos_equals_new_and_bad_fen_is_an_error() {
        let a = GameState::from_fen("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1").unwrap();
        let b = GameState::from_fen("startpos").unwrap();
        assert_eq!(a.legal_tokens(), GameState::new().legal_tokens());
        assert_eq!(position_key(a.position()), position_key(b.position()));
        let c = GameState::from_fen("8/8/8/8/8/8/8/K6k w - - 37 80").unwrap();
        assert_eq!(c.halfmove_clock(), 37);
        assert_eq!(c.ply(), 0);
        assert!(GameState::from_fen("not a fen").is_err());
        assert!(GameState::from_fen("8/8/8/8/8/8/8/8 w - - 0 1").is_err()); // no kings
    }

    #[test]
    fn illegal_token_leaves_state_unchanged() {
        let mut g = GameState::new();
        let err = g.play_token(vocab::uci_to_token("e2e5").unwrap()).unwrap_err();
        assert_eq!(err.ply, 0);
        assert_eq!(g.ply(), 0);
        assert!(g.play_token(vocab::PAD_TOKEN).is_err());
    }

    #[test]
    fn incremental_position_keys_equal_keys_from_scratch() {
        use crate::random::{random_games, RandomGameOptions};
        let opts = RandomGameOptions { max_ply: 300, seed: 5, mate_boost: 0.0, discard_ply_limit: false, first_game: 0 };
        let b = random_games(30, opts).unwrap();
        for i in 0..30 {
            let row = &b.tokens[i * 300..i * 300 + b.lengths[i] as usize];
            let mut g = GameState::new();
            for &t in row {
                g.play_token(t).unwrap();
                assert_eq!(*g.keys.last().unwrap(), position_key(g.position()));
            }
        }
    }
}
