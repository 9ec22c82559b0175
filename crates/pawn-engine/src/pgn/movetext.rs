//! Reading a movetext: its tokens (moves in every dialect, move numbers, glyphs, results) and
//! its main line ([`read_mainline`]) with the clock and eval annotations of each move.

use pgn_reader::{KnownOutcome, Outcome, SanPlus};
use shakmaty::san::{San, Suffix};
use shakmaty::{Color, Role};

use super::annotations::clock_and_eval;
use super::{find_from, SkipReason, CLOCK_MISSING, EVAL_MISSING};

/// Bytes that end a movetext token: the same set as `pgn-reader`'s `is_token_end`. Move
/// numbers (`1.`, `1...`, `1.e4`), glyphs (`e4!?`) and NAGs (`$14`) are split off by it.
fn is_separator(b: u8) -> bool {
    SEPARATOR[b as usize]
}

/// [`is_separator`] as a table (the per-byte test of the movetext scan).
static SEPARATOR: [bool; 256] = {
    let mut t = [false; 256];
    let seps = b" \t\n\r{}()!?$;.*";
    let mut k = 0;
    while k < seps.len() {
        t[seps[k] as usize] = true;
        k += 1;
    }
    t
};

/// Length of the Unicode space at the start of `s` (no-break space, the U+2000–U+200B spaces,
/// narrow no-break space, ideographic space, a stray BOM), or 0. python-chess reads past them.
pub(super) fn unicode_space_len(s: &[u8]) -> usize {
    match s {
        [0xc2, 0xa0, ..] => 2,
        [0xe2, 0x80, 0x80..=0x8b | 0xaf, ..] | [0xe3, 0x80, 0x80, ..] | [0xef, 0xbb, 0xbf, ..] => 3,
        _ => 0,
    }
}

/// Length of the token at the start of `s`: up to a separator or a Unicode space.
pub(super) fn token_len(s: &[u8]) -> usize {
    let mut k = 0;
    while let Some(&b) = s.get(k) {
        if is_separator(b) || (b >= 0x80 && unicode_space_len(&s[k..]) > 0) {
            break;
        }
        k += 1;
    }
    k
}

/// `rest` after a result dash: `-`, or the en/em dash that `pgn-reader` also accepts.
fn strip_dash(s: &[u8]) -> Option<&[u8]> {
    s.strip_prefix(b"-").or_else(|| s.strip_prefix("\u{2013}".as_bytes())).or_else(|| s.strip_prefix("\u{2014}".as_bytes()))
}

/// A result header in the spelling §6.3 matches (`1-0`, `0-1`, `1/2-1/2`, `*`): the draw
/// spellings of older Lichess and other exports (`½-½`, `1/2`, `0.5-0.5`) and the en/em dash
/// are rewritten; anything else is returned trimmed.
pub fn normalise_result(result: &str) -> &str {
    let r = result.trim();
    if r == "1/2" || r == "0.5-0.5" || r == "\u{bd}" {
        return "1/2-1/2";
    }
    match result_prefix(r.as_bytes()) {
        Some(o) if r.len() <= 9 => outcome_str(o),
        _ => r,
    }
}

/// The game result a token starts with: `1-0`, `0-1`, `1/2-1/2`, `½-½` (any of the dashes).
fn result_prefix(tok: &[u8]) -> Option<Outcome> {
    const HALF: &[u8] = "\u{bd}".as_bytes();
    let white = Outcome::Known(KnownOutcome::Decisive { winner: Color::White });
    let black = Outcome::Known(KnownOutcome::Decisive { winner: Color::Black });
    let draw = Outcome::Known(KnownOutcome::Draw);
    let after = |prefix: &[u8], then: &[u8], o: Outcome| {
        tok.strip_prefix(prefix).and_then(strip_dash).filter(|r| r.starts_with(then)).map(|_| o)
    };
    after(b"1/2", b"1/2", draw)
        .or_else(|| after(HALF, HALF, draw))
        .or_else(|| after(b"1", b"0", white))
        .or_else(|| after(b"0", b"1", black))
}

/// Whether text that is not a readable move still looks like one to python-chess's movetext
/// scanner: it holds a square (`f3` in `Sf3`, `nf3`, `♘f3`), castling or a null move
/// (`--`, `Z0`, `0000`, `@@@@`). Anything else (`±`, `+/-`, `N`, `TN`, `Δ`, `e.p.`, `=`) is an
/// annotation and is dropped, as python-chess drops it.
fn looks_like_move(t: &[u8]) -> bool {
    let has = |needle: &[u8]| t.windows(needle.len()).any(|w| w == needle);
    t.windows(2).any(|w| matches!(w[0], b'a'..=b'h') && matches!(w[1], b'1'..=b'8'))
        || has(b"--")
        || has(b"Z0")
        || has(b"0000")
        || has(b"@@@@")
        || has(b"O-O")
        || has(b"0-0")
}

/// One movetext token, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Token {
    /// A move number or an annotation glyph / symbol: nothing to do.
    Skip,
    /// A game result: the main line ends here (§6.1).
    Result(Outcome),
    Move(SanPlus),
    /// Looks like a move but is not one PAWN can read (null move, drop, `Sf3`, `nf3`, ...).
    Unreadable,
}

pub(super) fn outcome_str(o: Outcome) -> &'static str {
    match o {
        Outcome::Known(KnownOutcome::Decisive { winner: Color::White }) => "1-0",
        Outcome::Known(KnownOutcome::Decisive { winner: Color::Black }) => "0-1",
        Outcome::Known(KnownOutcome::Draw) => "1/2-1/2",
        Outcome::Unknown => "*",
    }
}

/// Rewrite the dialect spellings shakmaty's SAN reader does not take into `buf`: castling with
/// zeros (`0-0-0` → `O-O-O`) and long algebraic with a hyphen (`Ng1-f3` → `Ng1f3`,
/// `e2-e4` → `e2e4`). Returns `tok` itself when there is nothing to rewrite.
fn normalise<'a>(tok: &'a [u8], buf: &'a mut [u8; 32]) -> &'a [u8] {
    if tok.len() > buf.len() {
        return tok;
    }
    if tok.starts_with(b"0-0") {
        let out = &mut buf[..tok.len()];
        out.copy_from_slice(tok);
        out.iter_mut().filter(|b| **b == b'0').for_each(|b| *b = b'O');
        return out;
    }
    let p = usize::from(matches!(tok.first(), Some(b'K' | b'Q' | b'R' | b'B' | b'N' | b'P')));
    let long = tok.len() >= p + 5
        && matches!(tok[p], b'a'..=b'h')
        && matches!(tok[p + 1], b'1'..=b'8')
        && tok[p + 2] == b'-'
        && matches!(tok[p + 3], b'a'..=b'h');
    if !long {
        return tok;
    }
    buf[..p + 2].copy_from_slice(&tok[..p + 2]);
    buf[p + 2..tok.len() - 1].copy_from_slice(&tok[p + 3..]);
    &buf[..tok.len() - 1]
}

/// Classify one main-line token (separators already split off), as python-chess reads it:
/// digits are a move number; a result ends the game; a SAN move may carry a promotion letter
/// without `=` (`bxa8Q`, `bxa8n`), `+`/`#`/`++` and any glyph glued after it (`Nf3±`,
/// `exd6e.p.`); a token without anything move-like is an annotation.
pub(super) fn classify(tok: &[u8]) -> Token {
    if tok.iter().all(u8::is_ascii_digit) {
        return if tok == b"0000" { Token::Unreadable } else { Token::Skip };
    }
    if let Some(o) = result_prefix(tok) {
        return Token::Result(o);
    }
    if tok == b"1/2" {
        return Token::Result(Outcome::Known(KnownOutcome::Draw));
    }
    let mut buf = [0u8; 32];
    let t = normalise(tok, &mut buf);
    // shakmaty commits to a promotion at `=`; an `=` not followed by a piece letter is the
    // start of an evaluation symbol glued to the move (`Nf3=`, `e4=/+`), not part of it.
    let head = match t.iter().position(|&b| b == b'=') {
        Some(k) if !t.get(k + 1).is_some_and(|&b| b"NBRQKnbrqk".contains(&b)) => &t[..k],
        _ => t,
    };
    // shakmaty does not backtrack (`a5e` of `a5e.p.` fails at the `e`); python-chess's
    // scanner takes the longest prefix that is a move, so shorten until one parses.
    let parsed = (2..=head.len()).rev().find_map(|end| San::from_ascii_prefix(&head[..end]).ok());
    let Some((mut san, mut used)) = parsed else {
        return if looks_like_move(t) { Token::Unreadable } else { Token::Skip };
    };
    if let San::Normal { ref mut promotion, .. } = san {
        // python-chess takes a piece letter right after any move as its promotion piece
        // (`bxa8Q`); on a non-pawn or a non-last-rank move that makes the move illegal.
        if promotion.is_none() {
            if let Some(role) = t.get(used).and_then(|&b| Role::from_char(b as char)).filter(|r| *r != Role::Pawn) {
                *promotion = Some(role);
                used += 1;
            }
        }
    }
    if matches!(san, San::Null | San::Put { .. }) {
        return Token::Unreadable;
    }
    let suffix = match t.get(used) {
        Some(b'+') => Some(Suffix::Check),
        Some(b'#') => Some(Suffix::Checkmate),
        _ => None,
    };
    if looks_like_move(&t[used..]) {
        return Token::Unreadable;
    }
    Token::Move(SanPlus { san, suffix })
}

/// One SAN move token in any dialect [`read_mainline`] reads (glyphs after it allowed), or
/// `None` if the token is not exactly one move (a move number, result, annotation, null move).
pub fn read_san(tok: &[u8]) -> Option<SanPlus> {
    match classify(tok) {
        Token::Move(sp) => Some(sp),
        _ => None,
    }
}

/// The main line of one movetext: moves with their clock/eval annotations, and the result
/// token that ended it.
#[derive(Clone, Debug, Default)]
pub struct Mainline {
    pub sans: Vec<SanPlus>,
    /// Clock after each move (§6.4), or [`CLOCK_MISSING`].
    pub clocks: Vec<u16>,
    /// Eval after each move (§6.4), or [`EVAL_MISSING`].
    pub evals: Vec<i16>,
    /// The result token that ended the main line, if any (moves after it are not read).
    pub result: Option<Outcome>,
}

/// Read the main line of a movetext the way python-chess does, but strictly: `{…}` comments
/// (attached to the preceding main-line move), `;` comments, `%` escape lines, nested `( … )`
/// variations (skipped), move numbers in any spelling, NAGs, glyphs and evaluation symbols are
/// read past; the first result token ends the main line. Errors are `(ply, reason)`: an
/// unterminated comment is [`SkipReason::Malformed`], a token that looks like a move but is
/// not a readable one is [`SkipReason::UnreadableMove`] (ply = moves read before it).
pub fn read_mainline(d: &[u8]) -> Result<Mainline, (usize, SkipReason)> {
    let mut out = Mainline { sans: Vec::with_capacity(128), clocks: Vec::with_capacity(128), evals: Vec::with_capacity(128), result: None };
    let (mut i, mut depth, mut line_start) = (0usize, 0usize, true);
    while let Some(&c) = d.get(i) {
        match c {
            b'\n' => {
                line_start = true;
                i += 1;
                continue;
            }
            b' ' | b'\t' | b'\r' => {
                line_start = false; // `%` escapes only in the first column
                i += 1;
                continue;
            }
            b'%' if line_start => {
                i = find_from(d, i, b'\n').unwrap_or(d.len());
                continue;
            }
            0x80.. if unicode_space_len(&d[i..]) > 0 => {
                line_start = false;
                i += unicode_space_len(&d[i..]);
                continue;
            }
            _ => line_start = false,
        }
        match c {
            b'{' => {
                let end = find_from(d, i + 1, b'}').ok_or((out.sans.len(), SkipReason::Malformed))?;
                if let (0, Some(last)) = (depth, out.sans.len().checked_sub(1)) {
                    let (clk, ev) = clock_and_eval(&d[i + 1..end]);
                    if let Some(clk) = clk {
                        out.clocks[last] = clk;
                    }
                    if let Some(ev) = ev {
                        out.evals[last] = ev;
                    }
                }
                i = end + 1;
            }
            b';' => i = find_from(d, i, b'\n').unwrap_or(d.len()),
            b'(' => {
                depth += 1;
                i += 1;
            }
            // A stray `)` is ignored, as python-chess ignores it.
            b')' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'*' if depth == 0 => {
                out.result = Some(Outcome::Unknown);
                return Ok(out);
            }
            _ if is_separator(c) => i += 1,
            // `0.5-0.5`: a draw in some exports (the `.` would split it into tokens).
            b'0' if depth == 0 && d[i..].starts_with(b"0.5-0.5") => {
                out.result = Some(Outcome::Known(KnownOutcome::Draw));
                return Ok(out);
            }
            // A move number (`12.`, `12...`): digits then dots, skipped without classifying
            // (`0000.` is a null move, left to `classify`).
            b'0'..=b'9' if {
                let n = d[i..].iter().take_while(|b| b.is_ascii_digit()).count();
                d.get(i + n) == Some(&b'.') && &d[i..i + n] != b"0000"
            } =>
            {
                i += d[i..].iter().take_while(|b| b.is_ascii_digit()).count();
                i += d[i..].iter().take_while(|&&b| b == b'.').count();
            }
            _ => {
                let len = token_len(&d[i..]);
                let tok = &d[i..i + len];
                i += len;
                if depth > 0 {
                    continue;
                }
                match classify(tok) {
                    Token::Skip => {}
                    Token::Result(o) => {
                        out.result = Some(o);
                        return Ok(out);
                    }
                    Token::Move(sp) => {
                        out.sans.push(sp);
                        out.clocks.push(CLOCK_MISSING);
                        out.evals.push(EVAL_MISSING);
                    }
                    Token::Unreadable => return Err((out.sans.len(), SkipReason::UnreadableMove)),
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pgn::testing::{one, ucis, HEAD};
    use crate::pgn::Tag;
    use crate::vocab::outcome;

    const PROMO: &str = "1. e4 d5 2. exd5 c6 3. dxc6 Nf6 4. cxb7 Nbd7 5. ";

    #[test]
    fn glyphs_nags_comments_and_variations_are_read_past() {
        let pgn = format!(
            "{HEAD}1. e4!? {{ [%clk 0:03:00] }} e5?! $2 ; line comment\n2. Nf3!! (2. f4 (2. d4 d5) exd4) Nc6?? 3. Bb5 $1 1-0\n"
        );
        let g = one(&pgn).unwrap();
        assert_eq!(ucis(&g), ["e2e4", "e7e5", "g1f3", "b8c6", "f1b5"]);
        assert_eq!(g.clocks[0], 180);
        assert_eq!(g.clocks[1], CLOCK_MISSING);
        assert_eq!(g.outcome, outcome::WHITE_RESIGNS);
        assert_eq!(g.headers.white_elo, 1500);
    }

    #[test]
    fn castling_with_zeros_bom_and_crlf() {
        let pgn = format!("\u{feff}{HEAD}1. e4 e5 2. Nf3 Nc6 3. Bc4 Bc5 4. 0-0 Nf6 1-0\n").replace('\n', "\r\n");
        let g = one(&pgn).unwrap();
        assert_eq!(ucis(&g)[6], "e1g1");
        assert_eq!(g.san[6].to_string(), "O-O");
    }

    #[test]
    fn unreadable_and_illegal_moves_skip_the_game_with_their_ply() {
        let s = one(&format!("{HEAD}1. e4 e5 2. Nf3 Sf6 3. Bb5 1-0\n")).unwrap_err();
        assert_eq!((s.ply, s.reason), (3, SkipReason::UnreadableMove));
        // A word with no square in it is an annotation (python-chess drops it too), so the
        // next move is played by the wrong side.
        let s = one(&format!("{HEAD}1. e4 e5 2. Nf3 xyz 3. Bb5 1-0\n")).unwrap_err();
        assert_eq!((s.ply, s.reason), (3, SkipReason::IllegalMove));
        let s = one(&format!("{HEAD}1. e4 e5 2. Ke3 1-0\n")).unwrap_err();
        assert_eq!((s.ply, s.reason), (2, SkipReason::IllegalMove));
    }

    #[test]
    fn evaluation_symbols_outside_comments_are_dropped() {
        for glyph in [
            "±", "∓", "∞", "→", "=", "+-", "-+", "+/-", "-/+", "=/+", "+/=", "TN", "N", "Δ", "□", "⨀", "!!", "?!",
            "$14", "⩲", "⇆", "↑", "○", "=/∞", "RR", "D",
        ] {
            for moves in [format!("1. e4 e5 2. Nf3 {glyph} Nc6 1-0\n"), format!("1. e4 e5 2. Nf3{glyph} Nc6 1-0\n")] {
                let got = one(&format!("{HEAD}{moves}"));
                if moves.contains("Nf3N") || moves.contains("Nf3R") {
                    // Glued to the move, a piece letter is read as a promotion (python-chess too).
                    assert_eq!(got.unwrap_err().reason, SkipReason::IllegalMove, "{moves:?}");
                    continue;
                }
                let g = got.unwrap_or_else(|s| panic!("{moves:?}: {s:?}"));
                assert_eq!(ucis(&g), ["e2e4", "e7e5", "g1f3", "b8c6"], "{moves:?}");
            }
        }
    }

    #[test]
    fn promotion_without_equals_sign() {
        for (promo, uci) in [("bxa8Q", "b7a8q"), ("bxa8N", "b7a8n"), ("bxa8=q", "b7a8q"), ("bxa8r+", "b7a8r"), ("bxa8=B", "b7a8b")] {
            let g = one(&format!("{HEAD}{PROMO}{promo} 1-0\n")).unwrap();
            assert_eq!(ucis(&g).last().unwrap(), uci, "{promo}");
            assert_eq!(g.tokens.len(), 9);
        }
        // A king (or a piece letter after a piece move) as promotion is illegal, as in python-chess.
        let s = one(&format!("{HEAD}{PROMO}bxa8K 1-0\n")).unwrap_err();
        assert_eq!((s.ply, s.reason), (8, SkipReason::IllegalMove));
        let s = one(&format!("{HEAD}1. Nf3N Nf6 1-0\n")).unwrap_err();
        assert_eq!((s.ply, s.reason), (0, SkipReason::IllegalMove));
    }

    #[test]
    fn move_number_castling_check_and_en_passant_spellings() {
        let pgn = format!(
            "{HEAD}1.e4 a6 2.e5 d5 3.exd6e.p. cxd6 4.Nf3 1...Nc6?! 5.Bc4 e6 6.0-0+ Be7 7.Qe2 Bd7 8.Nc3 Qc7 9.d3 0-0-0 10.Bxe6++ 1-0\n"
        );
        let g = one(&pgn).unwrap();
        assert_eq!(
            ucis(&g),
            ["e2e4", "a7a6", "e4e5", "d7d5", "e5d6", "c7d6", "g1f3", "b8c6", "f1c4", "e7e6", "e1g1", "f8e7", "d1e2", "c8d7",
                "b1c3", "d8c7", "d2d3", "e8c8", "c4e6"]
        );
        let g = one(&format!("{HEAD}1. e4 a6 2. e5 d5 3. exd6 e.p. 1-0\n")).unwrap();
        assert_eq!(ucis(&g)[4], "e5d6");
        // A glyph glued to a quiet move: `a5e.p.` reads as `a5` (shakmaty alone would fail at `e`).
        let g = one(&format!("{HEAD}1. a4 e5 2. a5e.p. Nf6?? 3. Ra4e 1-0\n")).unwrap();
        assert_eq!(ucis(&g), ["a2a4", "e7e5", "a4a5", "g8f6", "a1a4"]);
    }

    #[test]
    fn comments_escapes_variations_and_results() {
        let pgn = "% escape line\n[Event \"x\"]\n% another\n[Result \"1/2-1/2\"]\n[Termination \"Normal\"]\n\n\
                   1. e4 ; line comment 2. d4\n% escape in movetext 2. d4\ne5 (1... c5 2. Nf3 (2. c3 {x) y} d5) d6) \
                   2. Nf3 {multi\n\nline [%clk 0:00:09]} Nc6 ) 1/2-1/2 3. Bb5\n";
        let g = one(pgn).unwrap();
        assert_eq!(ucis(&g), ["e2e4", "e7e5", "g1f3", "b8c6"]);
        assert_eq!(g.clocks[2], 9);
        assert_eq!(g.outcome, outcome::DRAW_BY_AGREEMENT);
        // No-break and other Unicode spaces separate moves; `%` escapes only in column one.
        let g = one(&format!("{HEAD}1.\u{a0}e4\u{a0}e5\u{2009}2.\u{202f}Nf3\u{3000}Nc6\n%Bb5\n1-0\n")).unwrap();
        assert_eq!(ucis(&g), ["e2e4", "e7e5", "g1f3", "b8c6"]);
        let s = one(&format!("{HEAD}1. e4 e5 2. Nf3 Nc6\n %Bb5\n1-0\n")).unwrap_err();
        assert_eq!((s.ply, s.reason), (4, SkipReason::UnreadableMove));
        // `;` comment lines before and between tag pairs (python-chess ignores them).
        let g = one("; file comment\n[Event \"x\"]\n; between\n[Result \"1-0\"]\n[Termination \"Normal\"]\n\n1. e4 1-0\n").unwrap();
        assert_eq!((g.headers.get(Tag::Event), g.outcome), ("x", outcome::WHITE_RESIGNS));
        // No tags at all: moves are read, the game has no §6.3 outcome.
        let s = one("1. e4 e5 2. Nf3 *\n").unwrap_err();
        assert_eq!((s.ply, s.reason), (3, SkipReason::NoOutcome));
    }

    #[test]
    fn null_moves_drops_and_foreign_piece_letters_are_unreadable() {
        for bad in ["--", "Z0", "0000", "@@@@", "N@f3", "Sf3", "nf3", "\u{2658}f3", "Nf3Nc6x", "+--", "Ng1xe5e6"] {
            let s = one(&format!("{HEAD}1. e4 e5 2. {bad} Nc6 1-0\n")).unwrap_err();
            assert_eq!((s.ply, s.reason), (2, SkipReason::UnreadableMove), "{bad}");
        }
    }

    #[test]
    fn classify_tokens() {
        assert_eq!(classify(b"12"), Token::Skip);
        assert_eq!(classify("\u{bd}\u{2013}\u{bd}".as_bytes()), Token::Result(Outcome::Known(KnownOutcome::Draw)));
        assert_eq!(classify(b"0-1"), Token::Result(Outcome::Known(KnownOutcome::Decisive { winner: Color::Black })));
        assert!(matches!(classify(b"0-0-0#"), Token::Move(SanPlus { san: San::Castle(_), suffix: Some(Suffix::Checkmate) })));
        assert_eq!(classify(b"+/-"), Token::Skip);
        assert_eq!(classify(b"ep"), Token::Skip);
        assert_eq!(classify(b"e4e5e6"), Token::Unreadable);
        let mut buf = [0u8; 32];
        assert_eq!(normalise(b"Ng1-f3+", &mut buf), b"Ng1f3+");
        assert_eq!(normalise(b"e7-e8Q", &mut buf), b"e7e8Q");
        assert_eq!(normalise(b"0-0-0", &mut buf), b"O-O-O");
        assert_eq!(normalise(b"O-O", &mut buf), b"O-O");
    }

    #[test]
    fn draw_spellings_are_draws() {
        for (tag, movetext) in [("\u{bd}-\u{bd}", "1/2-1/2"), ("1/2", "1/2"), ("0.5-0.5", "0.5-0.5"), ("1/2-1/2", "\u{bd}-\u{bd}"),
            ("1/2\u{2013}1/2", "0.5-0.5")]
        {
            let g = one(&format!("[Result \"{tag}\"]\n[Termination \"Normal\"]\n\n1. e4 e5 {movetext} 2. Nf3\n")).unwrap();
            assert_eq!((g.outcome, g.tokens.len()), (outcome::DRAW_BY_AGREEMENT, 2), "{tag} {movetext}");
            // Without a Result tag the movetext's result decides.
            let g = one(&format!("[Termination \"Time forfeit\"]\n\n1. e4 e5 {movetext}\n")).unwrap();
            assert_eq!(g.outcome, outcome::DRAW_BY_TIME, "{movetext}");
        }
        assert_eq!(normalise_result(" 1\u{2014}0 "), "1-0");
        assert_eq!(normalise_result("*"), "*");
    }
}
