//! One game span → a kept [`Game`] or a [`Skipped`] one: tags, variant and set-up checks, the
//! main line replayed with shakmaty, and the §6.3 outcome.

use pgn_reader::Reader;
use shakmaty::{Chess, Position};

use super::movetext::outcome_str;
use super::tags::{simple_tags, Tags, TAIL_PADDING};
use super::{normalise_result, read_mainline, san_to_move, Game, GameSpan, Mainline, SkipReason, Skipped, Tag};
use crate::vocab::{self, outcome};

/// Outcome token of a Lichess game per §6.3, or `None` when the game is dropped.
/// `truncated` = the parsable game is longer than `max_ply`; `final_pos` is the position after
/// the last move of the whole game.
pub fn lichess_outcome(termination: &str, result: &str, final_pos: &Chess, truncated: bool) -> Option<u16> {
    if truncated {
        return Some(outcome::PLY_LIMIT);
    }
    let mated = || final_pos.is_checkmate();
    match (termination, result) {
        ("Normal", "1-0") => Some(if mated() { outcome::WHITE_CHECKMATES } else { outcome::WHITE_RESIGNS }),
        ("Normal", "0-1") => Some(if mated() { outcome::BLACK_CHECKMATES } else { outcome::BLACK_RESIGNS }),
        ("Normal", "1/2-1/2") => Some(if final_pos.is_stalemate() {
            outcome::STALEMATE
        } else {
            outcome::DRAW_BY_AGREEMENT
        }),
        ("Time forfeit", "1-0") => Some(outcome::WHITE_WINS_ON_TIME),
        ("Time forfeit", "0-1") => Some(outcome::BLACK_WINS_ON_TIME),
        ("Time forfeit", "1/2-1/2") => Some(outcome::DRAW_BY_TIME),
        ("Insufficient material", _) => Some(outcome::DRAW_BY_RULE),
        _ => None,
    }
}

/// Parse one game span (1-based number `index`). Never panics on any bytes.
pub fn parse_game(data: &[u8], span: GameSpan, index: usize, max_ply: usize, min_ply: usize) -> Result<Game, Skipped> {
    let skip = |ply: usize, reason: SkipReason| Skipped { game: index, ply, reason };
    // Tag pairs are read by pgn-reader. The padding keeps its look-ahead (`ensure_bytes`)
    // satisfied up to the last header byte; without it every tag near the end shifts the buffer.
    let headers = match simple_tags(&data[span.start..span.movetext]) {
        Some(h) => h,
        None => {
            let mut reader = Reader::new(std::io::Read::chain(&data[span.start..span.movetext], &TAIL_PADDING[..]));
            let mut tags = Tags::default();
            loop {
                match reader.read_game(&mut tags) {
                    Ok(Some(())) => {}
                    Ok(None) => break,
                    Err(_) => return Err(skip(0, SkipReason::Malformed)),
                }
            }
            tags.headers
        }
    };
    let h = &headers;
    let variant = h.get(Tag::Variant).trim();
    let standard = variant.is_empty() || variant.eq_ignore_ascii_case("standard") || variant.eq_ignore_ascii_case("chess");
    if variant.eq_ignore_ascii_case("from position") || (standard && (!h.get(Tag::Fen).is_empty() || h.get(Tag::SetUp).trim() == "1")) {
        return Err(skip(0, SkipReason::FenStart));
    }
    if !standard {
        return Err(skip(0, SkipReason::Variant));
    }
    let line = read_mainline(&data[span.movetext..span.end]).map_err(|(ply, reason)| skip(ply, reason))?;
    let mut pos = Chess::default();
    let mut tokens = Vec::with_capacity(line.sans.len().min(max_ply));
    for (ply, sp) in line.sans.iter().enumerate() {
        let m = san_to_move(&pos, &sp.san).ok_or_else(|| skip(ply, SkipReason::IllegalMove))?;
        if ply < max_ply {
            tokens.push(vocab::move_to_token(&m).ok_or_else(|| skip(ply, SkipReason::IllegalMove))?);
        }
        pos.play_unchecked(m);
    }
    let full_length = line.sans.len();
    let result = match h.get(Tag::Result) {
        "" => line.result.map(outcome_str).unwrap_or(""),
        r => normalise_result(r),
    };
    let outcome = lichess_outcome(h.get(Tag::Termination).trim(), result, &pos, full_length > max_ply)
        .ok_or_else(|| skip(full_length, SkipReason::NoOutcome))?;
    if full_length < min_ply {
        return Err(skip(full_length, SkipReason::TooShort));
    }
    let kept = tokens.len();
    let Mainline { mut sans, mut clocks, mut evals, .. } = line;
    sans.truncate(kept);
    clocks.truncate(kept);
    evals.truncate(kept);
    Ok(Game { index, tokens, san: sans, clocks, evals, outcome, full_length, headers })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pgn::parse_pgn;
    use crate::pgn::testing::{one, sample, HEAD};

    #[test]
    fn variant_and_fen_games_are_skipped() {
        let s = one("[Variant \"Chess960\"]\n[Result \"1-0\"]\n\n1. e4 1-0\n").unwrap_err();
        assert_eq!(s.reason, SkipReason::Variant);
        let s = one("[SetUp \"1\"]\n[FEN \"8/8/8/8/8/8/8/K6k w - - 0 1\"]\n\n1. Kb1 *\n").unwrap_err();
        assert_eq!(s.reason, SkipReason::FenStart);
    }

    #[test]
    fn long_game_is_truncated_with_ply_limit() {
        let b = parse_pgn(format!("{HEAD}1. Nf3 Nf6 2. Ng1 Ng8 3. Nf3 1-0\n").as_bytes(), 4, 1);
        assert_eq!(b.games[0].tokens.len(), 4);
        assert_eq!(b.games[0].full_length, 5);
        assert_eq!(b.games[0].outcome, outcome::PLY_LIMIT);
    }

    #[test]
    fn sample_checkmate_is_white_checkmates() {
        let b = parse_pgn(&sample(), 512, 1);
        assert_eq!(b.games.len(), 3);
        assert!(b.games.iter().all(|g| g.outcome == outcome::WHITE_CHECKMATES));
        assert_eq!(b.games[0].evals[0], 20);
        assert_eq!(b.games[2].index, 3);
    }
}
