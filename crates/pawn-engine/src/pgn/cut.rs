//! Cutting PGN bytes into game spans ([`split_games`], and [`cut_games`] for input that
//! arrives in blocks): where each game, its tag pairs and its movetext begin and end.

use super::find_from;
use super::movetext::{classify, token_len, unicode_space_len, Token};

/// Byte ranges of one game: `start..end`, with the movetext starting at `movetext`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GameSpan {
    pub start: usize,
    pub movetext: usize,
    pub end: usize,
}

const BOM: &[u8] = b"\xef\xbb\xbf";

/// Skip whitespace, `%` escape lines and `;` comment lines (at line starts) between games and
/// tag pairs, as python-chess does.
fn skip_whitespace(data: &[u8], mut i: usize, mut new_line: bool) -> usize {
    while let Some(&c) = data.get(i) {
        match c {
            b' ' | b'\t' | b'\r' => i += 1,
            b'\n' => {
                new_line = true;
                i += 1;
            }
            b'%' | b';' if new_line => i = find_from(data, i, b'\n').map_or(data.len(), |p| p + 1),
            // A UTF-8 BOM between games: two exports concatenated (python-chess reads past it
            // only at the very start of a line that holds a tag).
            0xef if data[i..].starts_with(BOM) => i += BOM.len(),
            _ => break,
        }
    }
    i
}

/// Cut `data` into games with `pgn-reader`'s boundary rules: header lines start with `[`
/// (blank lines between them and the movetext do not split a game); the movetext ends at a
/// newline followed by `[` or by an empty line, except inside a `{…}` comment. A tag pair
/// (`[Name "`) inside the movetext, outside comments, also starts a new game: two games glued
/// on one line (`… 1-0[Event "b"] …`). A UTF-8 BOM before a game (at the start, or between two
/// concatenated exports) is skipped. A span with no tag pair and nothing but comments and
/// results is not a game (python-chess returns an empty game for it; PAWN does not count it, so
/// the game numbers after it stay those of the games in the file): a game whose movetext is
/// only a comment, a blank line and its result (`{ White forfeits }`, blank line, `0-1`) is
/// one game, as in the file.
pub fn split_games(data: &[u8]) -> Vec<GameSpan> {
    let mut spans = Vec::new();
    each_game_span(data, |span| spans.push(span));
    spans
}

/// [`split_games`], calling `emit` with each span as soon as it is cut (so games can be parsed
/// while the rest of the input is still being cut).
pub fn each_game_span(data: &[u8], emit: impl FnMut(GameSpan)) {
    cut_games(data, true, emit);
}

/// [`each_game_span`] on `data` that may be only the first part of the input (`complete`
/// false): only the spans whose end the bytes at hand settle are emitted, and the offset where
/// cutting must go on once more bytes follow is returned (`data.len()` when `complete`).
///
/// A span ending before `data.len()` is the span the whole input gives: each place where the
/// cut looks past the bytes it has (an unclosed `{`, a line without its newline, a tag pair
/// cut short) ends the span at `data.len()`, and such a span is held back. Cutting again from
/// the returned offset with more bytes appended gives the spans the whole input gives after
/// it, since the cut restarts at the end of every span in the same state.
pub fn cut_games(data: &[u8], complete: bool, mut emit: impl FnMut(GameSpan)) -> usize {
    let mut i = 0;
    loop {
        let top = i;
        if data[i.min(data.len())..].starts_with(BOM) {
            i += BOM.len();
        }
        i = skip_whitespace(data, i, true);
        if i >= data.len() {
            return if complete { data.len() } else { top };
        }
        let start = i;
        while data.get(i) == Some(&b'[') {
            // header lines; `skip_whitespace` also passes `%` and `;` lines between them
            i = find_from(data, i, b'\n').map_or(data.len(), |p| p + 1);
            i = skip_whitespace(data, i, true);
        }
        let movetext = i;
        loop {
            // The next byte that can end the movetext or open a comment: `{`, `[` or a newline;
            // a `;` before it opens a line comment that runs to the end of the line.
            // (A byte loop: between Lichess comments there are only a few bytes, too few for
            // memchr's set-up to pay.)
            let Some(p) = data.get(i..).and_then(|d| d.iter().position(|&b| MOVETEXT_STOP[b as usize])) else {
                i = data.len();
                break;
            };
            i += p;
            if data[i] == b';' {
                i = find_from(data, i, b'\n').unwrap_or(data.len());
                continue;
            }
            match data[i] {
                b'{' => i = find_from(data, i + 1, b'}').map_or(data.len(), |p| p + 1),
                // A tag pair inside the movetext starts the next game: two games glued on one
                // line (`… 1-0[Event "b"]`).
                b'[' if is_tag_start(data, i) => break,
                b'[' => i += 1,
                _ => {
                    i += 1;
                    match data.get(i) {
                        Some(b'%') => i = find_from(data, i, b'\n').unwrap_or(data.len()),
                        Some(b'[' | b'\n') => break,
                        Some(b'\r') => {
                            i += 1;
                            if data.get(i) == Some(&b'\n') {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        let end = i.min(data.len());
        if end == data.len() && !complete {
            return top;
        }
        if movetext > start || !no_moves(&data[movetext..end]) {
            emit(GameSpan { start, movetext, end });
        }
        i = end;
    }
}

/// The bytes [`split_games`] stops at in a movetext: `{`, `[`, a newline and `;`.
static MOVETEXT_STOP: [bool; 256] = {
    let mut t = [false; 256];
    t[b'{' as usize] = true;
    t[b'[' as usize] = true;
    t[b'\n' as usize] = true;
    t[b';' as usize] = true;
    t
};

/// Whether a movetext holds nothing but whitespace, `{…}`, `;` and `%` comments (and BOMs) and
/// game results (`1-0`, `0-1`, `1/2-1/2` in any spelling [`classify`] reads, `*`): a span
/// without tags made of these is no game. It is the end of the game before it whose movetext
/// is only a comment, cut off by a blank line (`{ White forfeits }`, blank line, `0-1`).
fn no_moves(d: &[u8]) -> bool {
    let mut i = 0;
    while let Some(&c) = d.get(i) {
        match c {
            b' ' | b'\t' | b'\r' | b'\n' | b'*' => i += 1,
            b'{' => i = find_from(d, i + 1, b'}').map_or(d.len(), |p| p + 1),
            b';' | b'%' => i = find_from(d, i, b'\n').unwrap_or(d.len()),
            0x80.. if unicode_space_len(&d[i..]) > 0 => i += unicode_space_len(&d[i..]),
            _ => {
                let k = token_len(&d[i..]);
                if k == 0 || !matches!(classify(&d[i..i + k]), Token::Result(_)) {
                    return false;
                }
                i += k;
            }
        }
    }
    true
}

/// `[Name "` at `i`: the start of a tag pair (python-chess's tag-name characters).
pub(super) fn is_tag_start(data: &[u8], i: usize) -> bool {
    let name = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'+' | b'#' | b'=' | b':' | b'-');
    let Some(rest) = data.get(i + 1..) else { return false };
    let n = rest.iter().take_while(|b| name(b)).count();
    let spaces = rest[n..].iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    n > 0 && rest[0].is_ascii_alphanumeric() && spaces > 0 && rest.get(n + spaces) == Some(&b'"')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pgn::testing::{pgn_pieces, ucis};
    use crate::pgn::{parse_pgn, SkipReason, Skipped, Tag};
    use crate::vocab::outcome;
    use proptest::prelude::*;

    #[test]
    fn glued_games_are_split_with_their_tags() {
        let pgn = "[Event \"a\"]\n[Result \"1-0\"]\n[Termination \"Normal\"]\n\n1. e4 e5 1-0[Event \"b\"]\n[Result \"0-1\"]\n[Termination \"Normal\"]\n\n1. d4 d5 0-1\n";
        let b = parse_pgn(pgn.as_bytes(), 512, 1);
        assert_eq!((b.n_read, b.games.len()), (2, 2), "{:?}", b.skipped);
        assert_eq!(b.games[0].headers.get(Tag::Event), "a");
        assert_eq!(b.games[1].headers.get(Tag::Event), "b");
        assert_eq!(ucis(&b.games[0]), ["e2e4", "e7e5"]);
        assert_eq!(ucis(&b.games[1]), ["d2d4", "d7d5"]);
        assert_eq!(b.games[1].outcome, outcome::BLACK_RESIGNS);
        // A bracket that is not a tag pair does not split; one inside a comment neither.
        let spans = split_games(b"1. e4 [x] e5 { [Event \"c\"] } *\n");
        assert_eq!(spans.len(), 1);
    }

    #[test]
    fn split_games_keeps_headers_with_movetext() {
        let pgn = b"[A \"1\"]\n\n1. e4 *\n\n[A \"2\"]\n[B \"3\"]\n1. d4\n{ a\n\nb } *\n\n\n";
        let spans = split_games(pgn);
        assert_eq!(spans.len(), 2);
        assert!(pgn[spans[1].movetext..spans[1].end].starts_with(b"1. d4"));
    }

    #[test]
    fn comment_only_span_and_bom_between_exports_are_not_games() {
        let a = "[Event \"a\"]\n[Result \"1-0\"]\n[Termination \"Normal\"]\n\n1. e4 e5 1-0\n\n";
        let bad = "[Event \"b\"]\n[Result \"1-0\"]\n[Termination \"Normal\"]\n\n1. e4 e5 2. Ke3 1-0\n\n";
        for pgn in [
            format!("{a}{{ exported by a tool }}\n\n{bad}"),
            format!("{{ a file comment }}\n\n{a}{bad}"),
            format!("{a}\u{feff}{bad}"),
            format!("{a}\n\u{feff}{bad}"),
            format!("\u{feff}{a}\u{feff}\n{bad}"),
        ] {
            let b = parse_pgn(pgn.as_bytes(), 512, 1);
            assert_eq!((b.n_read, b.games.len()), (2, 1), "{pgn:?}");
            assert_eq!(b.skipped, [Skipped { game: 2, ply: 2, reason: SkipReason::IllegalMove }], "{pgn:?}");
            assert_eq!(b.games[0].headers.get(Tag::Event), "a");
            assert!(b.pgn_like);
        }
        // A tagless game with moves is still a game.
        assert_eq!(parse_pgn(b"1. e4 e5 *\n", 512, 1).n_read, 1);
    }

    #[test]
    fn a_result_after_a_comment_only_game_is_not_a_game() {
        // A forfeit with no move: its movetext is a comment, then a blank line, then the result.
        let forfeit = "[Event \"a\"]\n[Result \"0-1\"]\n[Termination \"Time forfeit\"]\n\n{ White forfeits on time }\n\n";
        let bad = "[Event \"b\"]\n[Result \"1-0\"]\n[Termination \"Normal\"]\n\n1. e4 e5 2. Ke3 1-0\n\n";
        for end in ["0-1", "*", "1/2-1/2 { agreed }", "\u{bd}-\u{bd}", "{ c } 1-0 ; a line comment", "0-1\n\n*"] {
            let pgn = format!("{forfeit}{end}\n\n{bad}");
            let b = parse_pgn(pgn.as_bytes(), 512, 0);
            assert_eq!(b.n_read, 2, "{pgn:?}");
            assert_eq!(b.skipped, [Skipped { game: 2, ply: 2, reason: SkipReason::IllegalMove }], "{pgn:?}");
            assert_eq!(b.games[0].headers.get(Tag::Event), "a");
            assert_eq!(b.games[0].outcome, outcome::BLACK_WINS_ON_TIME);
        }
        // After a blank line, moves without tags are still a game of their own.
        let pgn = format!("{forfeit}1. e4 e5 0-1\n\n{bad}");
        assert_eq!(parse_pgn(pgn.as_bytes(), 512, 0).n_read, 3);
        assert_eq!(parse_pgn(b"1/2-1/2\n", 512, 0).n_read, 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]
        #[test]
        fn cutting_a_prefix_emits_only_spans_the_whole_input_has(data in pgn_pieces(), at in any::<prop::sample::Index>()) {
            let whole = split_games(&data);
            let k = at.index(data.len() + 1);
            let mut part = Vec::new();
            let resume = cut_games(&data[..k], false, |s| part.push(s));
            prop_assert_eq!(&part[..], &whole[..part.len()]);
            prop_assert!(part.last().map_or(0, |s| s.end) <= resume && resume <= k);
            // going on from `resume` with the rest gives the remaining spans
            let mut rest = Vec::new();
            cut_games(&data[resume..], true, |s| rest.push(GameSpan { start: s.start + resume, movetext: s.movetext + resume, end: s.end + resume }));
            part.extend(rest);
            prop_assert_eq!(part, whole);
        }
    }
}
