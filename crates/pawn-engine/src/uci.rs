//! UCI and SAN move lists ↔ tokens (spec `engine.md` §6.7, §1.4).
//!
//! UCI moves are 4–5 characters, the promotion letter is case-insensitive, a pawn move onto
//! the back rank needs a letter, and castling is the king moving two squares (`e1g1`):
//! king-takes-rook `e1h1` is an ordinary rook move id and is not castling. A move is accepted
//! only if its token equals the token of a legal move (§1.4).

use shakmaty::san::SanPlus;
use shakmaty::{Chess, Move, Position};

use crate::{pgn, vocab};

/// What went wrong with a move, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveError {
    /// 0-based ply of the failing move.
    pub ply: usize,
    /// The move text (or token id as text) that failed.
    pub text: String,
    /// True if the text is not a move at all; false if it is well formed but illegal.
    pub malformed: bool,
}

impl std::fmt::Display for MoveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.malformed {
            write!(f, "malformed move {:?} at ply {}", self.text, self.ply)
        } else {
            write!(f, "illegal move {:?} at ply {}", self.text, self.ply)
        }
    }
}

impl std::error::Error for MoveError {}

/// The legal move of `pos` whose token is `token`, if any.
pub fn legal_move_for_token(pos: &Chess, token: u16) -> Option<Move> {
    pos.legal_moves().into_iter().find(|m| vocab::move_to_token(m) == Some(token))
}

/// Resolve one UCI string in `pos` (ply `ply` for errors).
pub fn uci_to_move(pos: &Chess, uci: &str, ply: usize) -> Result<Move, MoveError> {
    let err = |malformed| MoveError { ply, text: uci.to_owned(), malformed };
    let token = vocab::uci_to_token(uci).ok_or_else(|| err(true))?;
    legal_move_for_token(pos, token).ok_or_else(|| err(false))
}

/// Resolve one SAN string in `pos` with the PGN reader's dialect rules (`Nf3`, `exd5`, `O-O`,
/// `0-0`, `e8=Q+`, `bxa8Q`, `Ng1-f3`, `ed5`, glyphs such as `e4!?` or `Nf3±`; see
/// [`crate::pgn::read_mainline`]). Null moves, drops and anything else that is not one move are
/// malformed.
pub fn san_to_move(pos: &Chess, san: &str, ply: usize) -> Result<Move, MoveError> {
    let err = |malformed| MoveError { ply, text: san.to_owned(), malformed };
    // `!`, `?` and `$` end a token in movetext; here they may only follow the move.
    let text = san.trim().trim_end_matches(['!', '?']);
    let sp = pgn::read_san(text.as_bytes()).ok_or_else(|| err(true))?;
    pgn::san_to_move(pos, &sp.san).ok_or_else(|| err(false))
}

/// Replay a game given as move strings with `resolve`, returning every token until the end or
/// the first failure (and that failure).
fn replay_with<S: AsRef<str>>(
    moves: &[S],
    resolve: impl Fn(&Chess, &str, usize) -> Result<Move, MoveError>,
    mut on_move: impl FnMut(&Chess, &Move, u16),
) -> Result<(), MoveError> {
    let mut pos = Chess::default();
    for (ply, mv) in moves.iter().enumerate() {
        let m = resolve(&pos, mv.as_ref(), ply)?;
        let token = vocab::move_to_token(&m).ok_or(MoveError { ply, text: mv.as_ref().to_owned(), malformed: false })?;
        on_move(&pos, &m, token);
        pos.play_unchecked(m);
    }
    Ok(())
}

/// Tokens of a UCI game: all moves replayed (legality checked even past `max_ply`), tokens
/// kept up to `max_ply`. Returns the kept tokens and the first error, if any; tokens before the
/// error are returned either way.
///
/// ```
/// use pawn_engine::uci::uci_game_to_tokens;
///
/// let (tokens, err) = uci_game_to_tokens(&["e2e4", "e7e5", "g1f3"], 2);
/// assert_eq!((tokens, err), (vec![317, 1497], None)); // cut at max_ply = 2
/// let (tokens, err) = uci_game_to_tokens(&["e2e4", "e2e4"], 512);
/// assert_eq!(tokens, vec![317]);
/// assert_eq!(err.unwrap().to_string(), "illegal move \"e2e4\" at ply 1");
/// ```
pub fn uci_game_to_tokens<S: AsRef<str>>(moves: &[S], max_ply: usize) -> (Vec<u16>, Option<MoveError>) {
    let mut tokens = Vec::with_capacity(moves.len().min(max_ply));
    let r = replay_with(moves, uci_to_move, |_, _, t| {
        if tokens.len() < max_ply {
            tokens.push(t)
        }
    });
    (tokens, r.err())
}

/// UCI of a SAN game, up to the first failure (returned with it).
pub fn san_game_to_uci<S: AsRef<str>>(moves: &[S]) -> (Vec<String>, Option<MoveError>) {
    let mut out = Vec::with_capacity(moves.len());
    let r = replay_with(moves, san_to_move, |_, _, t| out.push(vocab::token_to_uci(t).expect("move token")));
    (out, r.err())
}

/// SAN (with `+`/`#`, `O-O`, `e8=Q`, minimal disambiguation) of a UCI game, up to the first
/// failure (returned with it).
pub fn uci_game_to_san<S: AsRef<str>>(moves: &[S]) -> (Vec<String>, Option<MoveError>) {
    let mut out = Vec::with_capacity(moves.len());
    let r = replay_with(moves, uci_to_move, |pos, m, _| out.push(SanPlus::from_move(pos.clone(), *m).to_string()));
    (out, r.err())
}

/// SAN of a token game, up to the first token that is not a legal move (returned with it).
///
/// ```
/// use pawn_engine::uci::{tokens_to_san, uci_game_to_tokens};
///
/// let (tokens, _) = uci_game_to_tokens(&["f2f3", "e7e5", "g2g4", "d8h4"], 512);
/// assert_eq!(tokens_to_san(&tokens), (vec!["f3".into(), "e5".into(), "g4".into(), "Qh4#".into()], None));
/// ```
pub fn tokens_to_san(tokens: &[u16]) -> (Vec<String>, Option<MoveError>) {
    let mut pos = Chess::default();
    let mut out = Vec::with_capacity(tokens.len());
    for (ply, &t) in tokens.iter().enumerate() {
        let Some(m) = ((t as usize) < vocab::NUM_ACTIONS).then(|| legal_move_for_token(&pos, t)).flatten() else {
            // Shown as the int16 the caller passed (−5, not 65531).
            let shown = t as i16;
            let text = vocab::token_to_uci(t).map_or_else(|| format!("token {shown}"), |u| format!("token {shown} ({u})"));
            return (out, Some(MoveError { ply, text, malformed: t as usize >= vocab::NUM_ACTIONS }));
        };
        out.push(SanPlus::from_move_and_play_unchecked(&mut pos, m).to_string());
    }
    (out, None)
}

/// A trailing result token of a UCI line (dropped by [`parse_uci_line`]).
pub fn is_result_token(s: &str) -> bool {
    matches!(s, "1-0" | "0-1" | "1/2-1/2" | "*")
}

/// Split one line of a UCI file into moves: whitespace-separated, a trailing result dropped.
pub fn parse_uci_line(line: &str) -> Vec<&str> {
    let mut moves: Vec<&str> = line.split_whitespace().collect();
    if moves.last().is_some_and(|m| is_result_token(m)) {
        moves.pop();
    }
    moves
}

/// Games read from a UCI file (spec §6.7): kept games in file order plus every skipped game.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UciBatch {
    /// `(game number, tokens)` per kept game: the 1-based number of its non-empty line and its
    /// move tokens (at most `max_ply`).
    pub games: Vec<(usize, Vec<u16>)>,
    /// Games left out, in file order (`illegal_move`, `unreadable_move` or `too_short`).
    pub skipped: Vec<pgn::Skipped>,
    /// Number of non-empty lines (games) read.
    pub n_read: usize,
}

impl UciBatch {
    /// Number of skipped games with this reason.
    pub fn count(&self, reason: pgn::SkipReason) -> usize {
        self.skipped.iter().filter(|s| s.reason == reason).count()
    }
}

/// Parse a UCI file's bytes (spec §6.7), in parallel, keeping file order: one game per
/// non-empty line, whitespace-separated moves, a trailing result token dropped, a UTF-8 BOM
/// ignored, UTF-8 or Latin-1 text. A game with a bad move is skipped (`illegal_move` /
/// `unreadable_move`, with the ply of the move), a longer game truncated to `max_ply` (moves
/// past it are still checked), a game with fewer than `min_ply` moves skipped (`too_short`).
///
/// ```
/// use pawn_engine::pgn::SkipReason;
/// use pawn_engine::uci::parse_uci_file;
///
/// let batch = parse_uci_file(b"e2e4 e7e5 1-0\n\ne2e5\nd2d4\n", 512, 2);
/// assert_eq!(batch.n_read, 3);
/// assert_eq!(batch.games, vec![(1, vec![317, 1497])]);
/// assert_eq!((batch.skipped[0].game, batch.skipped[0].reason), (2, SkipReason::IllegalMove));
/// assert_eq!((batch.skipped[1].game, batch.skipped[1].reason), (3, SkipReason::TooShort));
/// ```
pub fn parse_uci_file(data: &[u8], max_ply: usize, min_ply: usize) -> UciBatch {
    use rayon::prelude::*;
    // A UTF-8 BOM would otherwise stick to the first move and make game 1 unreadable.
    let text = pgn::decode_text(data.strip_prefix(b"\xef\xbb\xbf").unwrap_or(data));
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let results: Vec<Result<Vec<u16>, pgn::Skipped>> = lines
        .par_iter()
        .enumerate()
        .map(|(i, line)| {
            let moves = parse_uci_line(line);
            let (tokens, err) = uci_game_to_tokens(&moves, max_ply);
            let game = i + 1;
            match err {
                Some(e) => Err(pgn::Skipped {
                    game,
                    ply: e.ply,
                    reason: if e.malformed { pgn::SkipReason::UnreadableMove } else { pgn::SkipReason::IllegalMove },
                }),
                None if moves.len() < min_ply => {
                    Err(pgn::Skipped { game, ply: moves.len(), reason: pgn::SkipReason::TooShort })
                }
                None => Ok(tokens),
            }
        })
        .collect();
    let mut batch = UciBatch { n_read: lines.len(), ..UciBatch::default() };
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(t) => batch.games.push((i + 1, t)),
            Err(s) => batch.skipped.push(s),
        }
    }
    batch
}

/// Space-joined UCI of move tokens (non-move ids are left out).
///
/// ```
/// assert_eq!(pawn_engine::uci::join_uci(&[317, 1968, 1497]), "e2e4 e7e5");
/// ```
pub fn join_uci(tokens: &[u16]) -> String {
    let mut s = String::with_capacity(tokens.len() * 5);
    for a in tokens.iter().filter_map(|&t| vocab::decompose(t)) {
        if !s.is_empty() {
            s.push(' ');
        }
        for sq in [a.src, a.dst] {
            s.push((b'a' + sq % 8) as char);
            s.push((b'1' + sq / 8) as char);
        }
        if a.promo > 0 {
            s.push(['q', 'r', 'b', 'n'][(a.promo - 1) as usize]);
        }
    }
    s
}

/// Space-joined SAN of a move list.
pub fn join_san(san: &[SanPlus]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(san.len() * 5);
    for (i, x) in san.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        let _ = write!(s, "{x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn castling_is_king_two_squares_and_king_takes_rook_is_rejected() {
        let game = ["e2e4", "e7e5", "g1f3", "b8c6", "f1c4", "f8c5", "e1g1"];
        let (t, e) = uci_game_to_tokens(&game, 512);
        assert_eq!(e, None);
        assert_eq!(t[6], 102);
        let mut bad = game;
        bad[6] = "e1h1";
        let (t, e) = uci_game_to_tokens(&bad, 512);
        assert_eq!(t.len(), 6);
        assert_eq!(e.unwrap(), MoveError { ply: 6, text: "e1h1".into(), malformed: false });
    }

    #[test]
    fn promotion_letter_is_case_insensitive_and_required() {
        let pre = ["a2a4", "b7b5", "a4b5", "a7a6", "b5a6", "c8b7", "a6a7", "b7c6"];
        let mut g: Vec<&str> = pre.to_vec();
        g.push("a7b8Q");
        assert_eq!(uci_game_to_tokens(&g, 512).1, None);
        *g.last_mut().unwrap() = "a7a8";
        let e = uci_game_to_tokens(&g, 512).1.unwrap();
        assert_eq!((e.ply, e.malformed), (8, false));
        *g.last_mut().unwrap() = "a7a8x";
        assert!(uci_game_to_tokens(&g, 512).1.unwrap().malformed);
    }

    #[test]
    fn san_round_trip_with_check_and_mate_suffixes() {
        let uci = ["f2f3", "e7e5", "g2g4", "d8h4"];
        let (san, e) = uci_game_to_san(&uci);
        assert_eq!(e, None);
        assert_eq!(san, ["f3", "e5", "g4", "Qh4#"]);
        assert_eq!(san_game_to_uci(&san).0, uci);
        let tokens = uci_game_to_tokens(&uci, 512).0;
        assert_eq!(tokens_to_san(&tokens).0, san);
    }

    #[test]
    fn san_lists_take_the_pgn_dialects() {
        let pre = ["e4", "d5", "exd5", "c6", "dxc6", "Nf6", "cxb7", "Nbd7"];
        let mut g: Vec<&str> = pre.to_vec();
        g.push("bxa8N±");
        assert_eq!(san_game_to_uci(&g).0.last().unwrap(), "b7a8n");
        let (uci, e) = san_game_to_uci(&["e2-e4", "d5", "ed5", "Qd5", "Ng1-f3!?"]);
        assert_eq!((uci, e), (vec!["e2e4".into(), "d7d5".into(), "e4d5".into(), "d8d5".into(), "g1f3".into()], None));
        for bad in ["--", "Sf3", "1-0", "+-", ""] {
            let e = san_game_to_uci(&["e4", bad]).1.unwrap();
            assert_eq!((e.ply, e.malformed), (1, true), "{bad:?}");
        }
    }

    #[test]
    fn trailing_result_is_dropped() {
        assert_eq!(parse_uci_line(" e2e4 e7e5  1-0 "), ["e2e4", "e7e5"]);
    }
}
