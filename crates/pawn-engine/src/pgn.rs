//! Lichess PGN parsing (spec `engine.md` §6.1–§6.4): games → move tokens, outcome tokens,
//! clocks, evals and header columns, with every dropped game reported instead of truncated.
//!
//! The work runs in three steps: [`split_games`] cuts the bytes into game spans (the same game
//! boundaries `pgn-reader` uses, plus a tag pair glued after a movetext), then each span's tag
//! pairs are read with `pgn-reader`'s streaming [`Visitor`], its main line with
//! [`read_mainline`] (shakmaty's SAN reader per token) and the moves are replayed with
//! shakmaty, in parallel (rayon) and in file order.
//!
//! Departures from the v1 parser (§6.1), all deliberate, chosen so that every game python-chess
//! reads without errors gives the same moves: move-quality glyphs (`e4!?`), NAGs, evaluation
//! symbols (`±`, `+/-`, `∞`, `N`, `TN`, `Δ`, `□`, ...; standalone or glued to the move), `;`
//! comments, `%` lines, nested variations, `0-0` castling, promotion without `=` (`bxa8Q`),
//! long algebraic (`Ng1-f3`, `e2e4`), a capture mark that is missing or extra (`ed5`),
//! `e.p.`, `1.e4` / `1...e5`, a UTF-8 BOM, CRLF line ends and two games glued on one line are
//! read correctly; a game with an illegal or unreadable move is *skipped and reported* with its
//! ply instead of being silently cut short — unreadable includes null moves and tokens that only
//! python-chess's scanner finds a square in (`Sf3`, `nf3`, `♘f3`, which it misreads as `f3`);
//! variant and FEN-start games are skipped and reported. As in §6.1 (and unlike python-chess)
//! the first result token ends the main line.

use std::ops::ControlFlow;
use std::sync::Mutex;

use pgn_reader::{KnownOutcome, Outcome, RawTag, Reader, SanPlus, Visitor};
use shakmaty::san::{San, Suffix};
use shakmaty::{attacks, Bitboard, Chess, Color, File, Move, Position, Role, Square};

use crate::vocab::{self, outcome};

/// Clock sentinel of a move inside a game that carries no `[%clk]` annotation (§6.4).
pub const CLOCK_MISSING: u16 = 0x8000;
/// Eval sentinel of a move inside a game that carries no `[%eval]` annotation (§6.4).
pub const EVAL_MISSING: i16 = i16::MIN;

/// Version of the parser's output: bumped whenever the same bytes can give different games,
/// moves, outcomes or skip reasons, so that caches built by an older parser are rebuilt.
/// 1: the parser up to PAWN 0.1; 2: a comment-only span and a UTF-8 BOM between games are not
/// games, and `½-½`, `1/2`, `0.5-0.5` are draws; 3: a span without tags that holds only comments
/// and a result (the `0-1` after a comment-only game and a blank line) is not a game.
pub const PARSER_VERSION: u32 = 3;

/// Why a game was left out of the parsed batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// A SAN move that is well formed but not legal (or ambiguous) in its position.
    IllegalMove,
    /// A movetext token that is neither a move, a move number, a NAG/glyph nor a result.
    UnreadableMove,
    /// The bytes could not be read as PGN at all (unterminated tag or comment).
    Malformed,
    /// A `[Variant]` other than Standard / From Position (Chess960, Crazyhouse, ...).
    Variant,
    /// A game from a set-up position (`[FEN]`, `[SetUp "1"]`, `[Variant "From Position"]`).
    FenStart,
    /// No outcome token per §6.3: Abandoned, Rules infraction, Unterminated, `*`, missing header.
    NoOutcome,
    /// Fewer plies than `min_ply`.
    TooShort,
}

impl SkipReason {
    /// Every reason, in the order of [`SkipReason::name`] keys reported in counts.
    pub const ALL: [SkipReason; 7] = [
        SkipReason::IllegalMove,
        SkipReason::UnreadableMove,
        SkipReason::Malformed,
        SkipReason::Variant,
        SkipReason::FenStart,
        SkipReason::NoOutcome,
        SkipReason::TooShort,
    ];

    /// Snake-case name used in Python (`"illegal_move"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            SkipReason::IllegalMove => "illegal_move",
            SkipReason::UnreadableMove => "unreadable_move",
            SkipReason::Malformed => "malformed",
            SkipReason::Variant => "variant",
            SkipReason::FenStart => "fen_start",
            SkipReason::NoOutcome => "no_outcome",
            SkipReason::TooShort => "too_short",
        }
    }

    /// One-line description for reports (`"an illegal move"`, ...).
    pub fn describe(self) -> &'static str {
        match self {
            SkipReason::IllegalMove => "an illegal move",
            SkipReason::UnreadableMove => "an unreadable move",
            SkipReason::Malformed => "malformed PGN",
            SkipReason::Variant => "a non-standard variant",
            SkipReason::FenStart => "a set-up (FEN) start position",
            SkipReason::NoOutcome => "unsupported termination (Abandoned, Rules infraction, Unterminated) or no result",
            SkipReason::TooShort => "shorter than min_ply",
        }
    }

    /// Whether the reason is a fault of the PGN text itself (every reason but `too_short`,
    /// which is a length filter the caller chooses).
    pub fn is_parse_fault(self) -> bool {
        self != SkipReason::TooShort
    }
}

/// A game left out: its 1-based number in the input, the 0-based ply at which the problem
/// was found (the number of plies for game-level reasons) and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub game: usize,
    pub ply: usize,
    pub reason: SkipReason,
}

/// A text tag PAWN reads from a game's headers, in [`Headers`] order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag {
    Event,
    Site,
    Date,
    UtcDate,
    UtcTime,
    White,
    Black,
    Result,
    Termination,
    TimeControl,
    Eco,
    Opening,
    Variant,
    Fen,
    SetUp,
}

impl Tag {
    pub const ALL: [Tag; 15] = [
        Tag::Event,
        Tag::Site,
        Tag::Date,
        Tag::UtcDate,
        Tag::UtcTime,
        Tag::White,
        Tag::Black,
        Tag::Result,
        Tag::Termination,
        Tag::TimeControl,
        Tag::Eco,
        Tag::Opening,
        Tag::Variant,
        Tag::Fen,
        Tag::SetUp,
    ];

    /// The tag a PGN tag name (`b"UTCDate"`) is, if PAWN reads it.
    pub fn from_name(name: &[u8]) -> Option<Tag> {
        Some(match name {
            b"Event" => Tag::Event,
            b"Site" => Tag::Site,
            b"Date" => Tag::Date,
            b"UTCDate" => Tag::UtcDate,
            b"UTCTime" => Tag::UtcTime,
            b"White" => Tag::White,
            b"Black" => Tag::Black,
            b"Result" => Tag::Result,
            b"Termination" => Tag::Termination,
            b"TimeControl" => Tag::TimeControl,
            b"ECO" => Tag::Eco,
            b"Opening" => Tag::Opening,
            b"Variant" => Tag::Variant,
            b"FEN" => Tag::Fen,
            b"SetUp" => Tag::SetUp,
            _ => return None,
        })
    }
}

/// Header values of one game. Strings are decoded as UTF-8, or Latin-1 when not valid UTF-8;
/// missing tags are empty; a repeated tag keeps its last value. Elo values are 0 when missing
/// or not an unsigned 16-bit integer. The text values share one buffer (one allocation a game
/// instead of one a tag).
#[derive(Clone, Debug, Default)]
pub struct Headers {
    text: String,
    spans: [(usize, usize); Tag::ALL.len()],
    pub white_elo: u16,
    pub black_elo: u16,
}

impl Headers {
    /// The value of `tag` ("" when the game has none).
    pub fn get(&self, tag: Tag) -> &str {
        let (a, b) = self.spans[tag as usize];
        &self.text[a..b]
    }

    /// Set `tag` to `value` (raw tag bytes: UTF-8, or Latin-1 when not valid UTF-8).
    pub fn set(&mut self, tag: Tag, value: &[u8]) {
        match std::str::from_utf8(value) {
            Ok(v) => self.set_str(tag, v),
            Err(_) => {
                let a = self.text.len();
                self.text.extend(value.iter().map(|&b| b as char));
                self.spans[tag as usize] = (a, self.text.len());
            }
        }
    }

    /// Set `tag` to `value`.
    pub fn set_str(&mut self, tag: Tag, value: &str) {
        let a = self.text.len();
        self.text.push_str(value);
        self.spans[tag as usize] = (a, self.text.len());
    }
}

impl PartialEq for Headers {
    fn eq(&self, other: &Self) -> bool {
        (self.white_elo, self.black_elo) == (other.white_elo, other.black_elo)
            && Tag::ALL.iter().all(|&t| self.get(t) == other.get(t))
    }
}

impl Eq for Headers {}

/// One kept game.
#[derive(Clone, Debug)]
pub struct Game {
    /// 1-based game number in the input.
    pub index: usize,
    /// Move tokens, at most `max_ply` (the game is truncated there).
    pub tokens: Vec<u16>,
    /// SAN of each kept move as written (normalised by shakmaty: `0-0` → `O-O`, `bxa8Q` →
    /// `bxa8=Q`, `Ng1-f3` → `Ng1f3`, glyphs dropped).
    pub san: Vec<SanPlus>,
    /// Clock after each kept move in seconds, or [`CLOCK_MISSING`].
    pub clocks: Vec<u16>,
    /// Engine eval after each kept move (§6.4 encoding), or [`EVAL_MISSING`].
    pub evals: Vec<i16>,
    /// Outcome token per §6.3.
    pub outcome: u16,
    /// Plies in the whole game before truncation to `max_ply`.
    pub full_length: usize,
    pub headers: Headers,
}

/// Result of parsing a PGN input: kept games in file order plus every skipped game.
#[derive(Clone, Debug, Default)]
pub struct PgnBatch {
    pub games: Vec<Game>,
    pub skipped: Vec<Skipped>,
    /// Games found in the input (kept + skipped).
    pub n_read: usize,
    /// Whether the input reads as PGN at all: no NUL byte in its first 64 KiB, and it is blank,
    /// or some game has a tag pair or a readable move. A JSON or binary file is not.
    pub pgn_like: bool,
}

impl PgnBatch {
    /// Number of skipped games with the given reason.
    pub fn count(&self, reason: SkipReason) -> usize {
        self.skipped.iter().filter(|s| s.reason == reason).count()
    }
}

/// Byte ranges of one game: `start..end`, with the movetext starting at `movetext`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GameSpan {
    pub start: usize,
    pub movetext: usize,
    pub end: usize,
}

/// A game end (blank line) followed by enough spaces to cover pgn-reader's look-ahead.
static TAIL_PADDING: [u8; 320] = {
    let mut p = [b' '; 320];
    p[0] = b'\n';
    p[1] = b'\n';
    p
};

const BOM: &[u8] = b"\xef\xbb\xbf";

fn find_from(data: &[u8], from: usize, needle: u8) -> Option<usize> {
    memchr::memchr(needle, data.get(from..)?).map(|p| p + from)
}

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
fn unicode_space_len(s: &[u8]) -> usize {
    match s {
        [0xc2, 0xa0, ..] => 2,
        [0xe2, 0x80, 0x80..=0x8b | 0xaf, ..] | [0xe3, 0x80, 0x80, ..] | [0xef, 0xbb, 0xbf, ..] => 3,
        _ => 0,
    }
}

/// Length of the token at the start of `s`: up to a separator or a Unicode space.
fn token_len(s: &[u8]) -> usize {
    let mut k = 0;
    while let Some(&b) = s.get(k) {
        if is_separator(b) || (b >= 0x80 && unicode_space_len(&s[k..]) > 0) {
            break;
        }
        k += 1;
    }
    k
}

/// `[Name "` at `i`: the start of a tag pair (python-chess's tag-name characters).
fn is_tag_start(data: &[u8], i: usize) -> bool {
    let name = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'+' | b'#' | b'=' | b':' | b'-');
    let Some(rest) = data.get(i + 1..) else { return false };
    let n = rest.iter().take_while(|b| name(b)).count();
    let spaces = rest[n..].iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    n > 0 && rest[0].is_ascii_alphanumeric() && spaces > 0 && rest.get(n + spaces) == Some(&b'"')
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
enum Token {
    /// A move number or an annotation glyph / symbol: nothing to do.
    Skip,
    /// A game result: the main line ends here (§6.1).
    Result(Outcome),
    Move(SanPlus),
    /// Looks like a move but is not one PAWN can read (null move, drop, `Sf3`, `nf3`, ...).
    Unreadable,
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
fn classify(tok: &[u8]) -> Token {
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

/// The legal move a SAN names, with python-chess's leniency: the capture mark is not checked
/// (`Nxf3` to an empty square, `ed5` for `exd5`), a pawn move without a file stays on its file,
/// and a move given by both squares without a piece letter (`g1f3`, `e1g1`, `e2e4`) may be any
/// piece's (castling as the king's two-square move). `None` if no move or more than one
/// matches.
pub fn san_to_move(pos: &Chess, san: &San) -> Option<Move> {
    if let San::Castle(side) = *san {
        return pos.castling_moves(side).first().copied();
    }
    // Where a move other than the king's may end: anywhere when not in check; on the checking
    // piece or between it and the king in a single check; nowhere in a double check.
    let checkers = pos.checkers();
    let targets = match checkers.single_square() {
        _ if checkers.is_empty() => Bitboard::FULL,
        Some(c) => attacks::between(pos.board().king_of(pos.turn())?, c).with(c),
        None => Bitboard::EMPTY,
    };
    match *san {
        San::Castle(_) => None,
        San::Normal { role: Role::Pawn, file: Some(f), rank: Some(r), to, promotion, .. } => {
            let from = Square::from_coords(f, r);
            let dest = |m: &Move| match *m {
                Move::Castle { king, rook } => Square::from_coords(
                    if rook > king { File::G } else { File::C },
                    king.rank(),
                ),
                _ => m.to(),
            };
            pos.legal_moves().into_iter().find(|m| m.from() == Some(from) && dest(m) == to && m.promotion() == promotion)
        }
        // A pawn push or capture, without generating the move list (en passant and anything
        // unusual take the general path below). In check it must capture or block the checker.
        San::Normal { role: Role::Pawn, file, rank, to, promotion, .. } => {
            if let Some(m) = pawn_move(pos, file, rank, to, promotion) {
                return m.filter(|_| targets.contains(to));
            }
            general_san_to_move(pos, san)
        }
        // The common case, without generating the move list: a piece move (not king or pawn)
        // is legal unless it uncovers a slider's attack on the own king; in check it must also
        // capture or block the checker.
        San::Normal { role, file, rank, to, promotion: None, .. } if !matches!(role, Role::Pawn | Role::King) => {
            let board = pos.board();
            if pos.us().contains(to) || !targets.contains(to) {
                return None;
            }
            let occ = board.occupied();
            let reach = match role {
                Role::Knight => attacks::knight_attacks(to),
                Role::Bishop => attacks::bishop_attacks(to, occ),
                Role::Rook => attacks::rook_attacks(to, occ),
                _ => attacks::queen_attacks(to, occ),
            };
            let mut found = None;
            for from in reach & pos.our(role) {
                if file.is_some_and(|f| f != from.file()) || rank.is_some_and(|r| r != from.rank()) {
                    continue;
                }
                if uncovers_king(pos, from, to) {
                    continue;
                }
                if found.is_some() {
                    return None; // ambiguous
                }
                found = Some(Move::Normal { role, from, capture: board.role_at(to), to, promotion: None });
            }
            found
        }
        // A king step: legal unless the target square is attacked (with the king gone from its
        // square, so a checking slider's ray through it counts).
        San::Normal { role: Role::King, file, rank, to, promotion: None, .. } => {
            let board = pos.board();
            let from = (board.kings() & pos.us()).first()?;
            if !attacks::king_attacks(from).contains(to)
                || pos.us().contains(to)
                || file.is_some_and(|f| f != from.file())
                || rank.is_some_and(|r| r != from.rank())
                || board.attacks_to(to, !pos.turn(), board.occupied().without(from)).any()
            {
                return None;
            }
            Some(Move::Normal { role: Role::King, from, capture: board.role_at(to), to, promotion: None })
        }
        San::Normal { .. } => general_san_to_move(pos, san),
        San::Put { .. } | San::Null => None,
    }
}

/// Whether moving a piece `from` → `to` (capturing what stands on `to`) leaves the own king
/// attacked by a slider; only valid for a piece other than the king when the side to move is
/// not in check, or when `to` captures or blocks the single checker (then only a discovered
/// slider attack can arise).
fn uncovers_king(pos: &Chess, from: Square, to: Square) -> bool {
    let board = pos.board();
    let Some(king) = board.king_of(pos.turn()) else { return true };
    let after = board.occupied().without(from).with(to);
    let diag = (board.bishops() | board.queens()) & pos.them();
    let line = (board.rooks() | board.queens()) & pos.them();
    ((attacks::bishop_attacks(king, after) & diag) | (attacks::rook_attacks(king, after) & line)).without(to).any()
}

/// The pawn move a SAN names, assuming it answers any check (see [`uncovers_king`]): `Some(Some(m))` legal, `Some(None)` no legal
/// move, `None` let the general path decide (en passant, a capture onto an empty square).
fn pawn_move(pos: &Chess, file: Option<File>, rank: Option<shakmaty::Rank>, to: Square, promotion: Option<Role>) -> Option<Option<Move>> {
    let white = pos.turn() == Color::White;
    let last = if white { shakmaty::Rank::Eighth } else { shakmaty::Rank::First };
    match promotion {
        None if to.rank() == last => return Some(None),
        Some(Role::Pawn | Role::King) => return Some(None),
        Some(_) if to.rank() != last => return Some(None),
        _ => {}
    }
    let back = |sq: Square| sq.offset(if white { -8 } else { 8 });
    let ours = pos.our(Role::Pawn);
    let occ = pos.board().occupied();
    let from = if file.is_none_or(|f| f == to.file()) {
        if occ.contains(to) {
            return Some(None);
        }
        let one = back(to)?;
        if ours.contains(one) {
            one
        } else {
            let double = if white { shakmaty::Rank::Fourth } else { shakmaty::Rank::Fifth };
            let two = back(one)?;
            if to.rank() != double || occ.contains(one) || !ours.contains(two) {
                return Some(None);
            }
            two
        }
    } else {
        let f = file?;
        if (f as i32 - to.file() as i32).abs() != 1 || !pos.them().contains(to) {
            return None; // en passant or illegal: the general path
        }
        let from = Square::from_coords(f, back(to)?.rank());
        if !ours.contains(from) {
            return Some(None);
        }
        from
    };
    if rank.is_some_and(|r| r != from.rank()) {
        return Some(None);
    }
    if uncovers_king(pos, from, to) {
        return Some(None);
    }
    Some(Some(Move::Normal { role: Role::Pawn, from, capture: pos.board().role_at(to), to, promotion }))
}

/// [`san_to_move`] by shakmaty's candidate list (any position).
fn general_san_to_move(pos: &Chess, san: &San) -> Option<Move> {
    match *san {
        San::Normal { role, file, rank, to, promotion, .. } => {
            let mut found = None;
            for m in pos.san_candidates(role, to) {
                let (from, p) = match m {
                    Move::Normal { from, promotion: p, .. } => (from, p),
                    Move::EnPassant { from, .. } => (from, None),
                    _ => continue,
                };
                let file_ok = match file {
                    Some(f) => f == from.file(),
                    None => role != Role::Pawn || from.file() == to.file(),
                };
                if file_ok && rank.is_none_or(|r| r == from.rank()) && p == promotion {
                    if found.is_some() {
                        return None; // ambiguous
                    }
                    found = Some(m);
                }
            }
            found
        }
        _ => None,
    }
}

/// Decode bytes as UTF-8, or as Latin-1 when they are not valid UTF-8.
pub fn decode_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => bytes.iter().map(|&b| b as char).collect(),
    }
}

/// `[%clk H:MM:SS]` in a comment → seconds (h·3600 + m·60 + s, fractions dropped), capped at
/// 32,767 (§6.4). `None` when absent or malformed.
pub fn parse_clock(comment: &[u8]) -> Option<u16> {
    clock_value(command_arg(comment, b"%clk")?)
}

/// `(parse_clock(comment), parse_eval(comment))` in one scan of the comment's `%` signs.
fn clock_and_eval(comment: &[u8]) -> (Option<u16>, Option<i16>) {
    let (mut clk, mut ev) = (None, None);
    for k in memchr::memchr_iter(b'%', comment) {
        let rest = &comment[k..];
        if clk.is_none() && rest.starts_with(b"%clk") {
            clk = Some(k);
        } else if ev.is_none() && rest.starts_with(b"%eval") {
            ev = Some(k);
        }
        if clk.is_some() && ev.is_some() {
            break;
        }
    }
    (
        clk.and_then(|k| clock_value(command_body(&comment[k + 4..])?)),
        ev.and_then(|k| eval_value(command_body(&comment[k + 5..])?)),
    )
}

/// The seconds of a `%clk` argument (`H:MM:SS[.f]`).
fn clock_value(body: &[u8]) -> Option<u16> {
    let mut total: u64 = 0;
    let mut fields = 0;
    for part in body.split(|&b| b == b':') {
        let int_part = part.split(|&b| b == b'.').next()?;
        if int_part.is_empty() || int_part.len() > 9 || !int_part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let v = int_part.iter().fold(0u64, |a, &b| a * 10 + (b - b'0') as u64); // ≤ 9 digits
        total = total * 60 + v;
        fields += 1;
    }
    if fields == 0 || fields > 3 {
        return None;
    }
    Some(total.min(32_767) as u16)
}

/// `[%eval x]` in a comment → centipawns round(100·x) half away from zero, clamped to
/// ±16,383; `[%eval #N]` → ±(32,767 − |N|) with the sign of N, `#0` → −32,766 (§6.4).
/// Decimal strings are rounded exactly (no binary floating point). `None` when absent.
pub fn parse_eval(comment: &[u8]) -> Option<i16> {
    eval_value(command_arg(comment, b"%eval")?)
}

/// The centipawns of a `%eval` argument (`0.17`, `#-3`, `0.17,20`).
fn eval_value(body: &[u8]) -> Option<i16> {
    let body = body.split(|&b| b == b',').next()?; // "0.17,20" = eval, depth
    if let Some(mate) = body.strip_prefix(b"#") {
        let (neg, digits) = match mate.first() {
            Some(b'-') => (true, &mate[1..]),
            Some(b'+') => (false, &mate[1..]),
            _ => (false, mate),
        };
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = digits.iter().fold(0u32, |a, &b| (a * 10 + (b - b'0') as u32).min(16_383));
        if n == 0 {
            return Some(-32_766); // as the spec states for `#0` (the side to move is mated)
        }
        let mag = 32_767 - n as i32;
        return Some(if neg { -mag } else { mag } as i16);
    }
    let (neg, num) = match body.first() {
        Some(b'-') => (true, &body[1..]),
        Some(b'+') => (false, &body[1..]),
        _ => (false, body),
    };
    let mut parts = num.splitn(2, |&b| b == b'.');
    let int_part = parts.next()?;
    let frac = parts.next().unwrap_or(b"");
    if (int_part.is_empty() && frac.is_empty())
        || !int_part.iter().chain(frac).all(u8::is_ascii_digit)
    {
        return None;
    }
    let whole = int_part.iter().fold(0u64, |a, &b| (a * 10 + (b - b'0') as u64).min(1_000_000));
    let digit = |k: usize| frac.get(k).map_or(0, |&b| (b - b'0') as u64);
    let mut cp = whole * 100 + digit(0) * 10 + digit(1);
    if digit(2) >= 5 {
        cp += 1;
    }
    let cp = cp.min(16_383) as i16;
    Some(if neg { -cp } else { cp })
}

/// The argument of a `[%cmd arg]` command inside a comment, trimmed.
fn command_arg<'a>(comment: &'a [u8], cmd: &[u8]) -> Option<&'a [u8]> {
    let at = memchr::memchr_iter(b'%', comment).find(|&k| comment[k..].starts_with(cmd))?;
    command_body(&comment[at + cmd.len()..])
}

/// A command's argument from `rest`, the text just after its name: whitespace, then the
/// argument up to `]`, trimmed; `None` when empty or unterminated.
fn command_body(rest: &[u8]) -> Option<&[u8]> {
    if !rest.first().is_some_and(|b| b.is_ascii_whitespace()) {
        return None;
    }
    let end = rest.iter().position(|&b| b == b']')?;
    let arg = rest[..end].trim_ascii();
    (!arg.is_empty()).then_some(arg)
}

/// `pgn-reader` visitor that reads the tag pairs of one game and stops at its movetext. The
/// headers accumulate over `read_game` calls, so tag pairs after a `;` comment line (where
/// `pgn-reader` sees a movetext) are kept.
#[derive(Default)]
struct Tags {
    headers: Headers,
}

impl Visitor for Tags {
    type Tags = Headers;
    type Movetext = std::convert::Infallible;
    type Output = ();

    fn begin_tags(&mut self) -> ControlFlow<(), Headers> {
        ControlFlow::Continue(std::mem::take(&mut self.headers))
    }

    fn tag(&mut self, h: &mut Headers, name: &[u8], value: RawTag<'_>) -> ControlFlow<()> {
        set_tag(h, name, &value.decode());
        ControlFlow::Continue(())
    }

    fn begin_movetext(&mut self, headers: Headers) -> ControlFlow<(), Self::Movetext> {
        self.headers = headers;
        ControlFlow::Break(())
    }

    fn end_game(&mut self, movetext: Self::Movetext) {
        match movetext {}
    }
}

/// Store one tag pair's (unescaped) value in `h` if it is a tag PAWN reads.
fn set_tag(h: &mut Headers, name: &[u8], value: &[u8]) {
    match name {
        b"WhiteElo" => h.white_elo = elo(value),
        b"BlackElo" => h.black_elo = elo(value),
        _ => {
            if let Some(tag) = Tag::from_name(name) {
                h.set(tag, value);
            }
        }
    }
}

/// An Elo tag value: an unsigned 16-bit integer (surrounding whitespace allowed), else 0.
fn elo(value: &[u8]) -> u16 {
    std::str::from_utf8(value).ok().and_then(|s| s.trim().parse::<u16>().ok()).unwrap_or(0)
}

/// The common case of a header block, read without `pgn-reader`: every non-blank line is
/// exactly `[Name "value"]` (one space, a name of ASCII letters, digits and `_`, a value with no
/// `"` or `\`). Returns `None` for anything else, which `pgn-reader` then reads (same values:
/// with no escapes its unescaped value is the raw one).
fn simple_tags(hdr: &[u8]) -> Option<Headers> {
    let mut h = Headers { text: String::with_capacity(hdr.len()), ..Headers::default() };
    // One UTF-8 check for the block instead of one a value (values end at ASCII quotes, so a
    // valid block slices into valid values).
    let utf8 = std::str::from_utf8(hdr).ok();
    for line in hdr.split(|&b| b == b'\n') {
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        let inner = line.strip_prefix(b"[")?.strip_suffix(b"]")?;
        let sp = memchr::memchr(b' ', inner)?;
        let (name, rest) = (&inner[..sp], &inner[sp + 1..]);
        if name.is_empty() || !name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_') {
            return None;
        }
        let value = rest.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
        if memchr::memchr2(b'"', b'\\', value).is_some() {
            return None;
        }
        match (utf8, Tag::from_name(name)) {
            (Some(text), Some(tag)) => {
                let at = value.as_ptr() as usize - hdr.as_ptr() as usize;
                h.set_str(tag, &text[at..at + value.len()]);
            }
            _ => set_tag(&mut h, name, value),
        }
    }
    Some(h)
}

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

fn outcome_str(o: Outcome) -> &'static str {
    match o {
        Outcome::Known(KnownOutcome::Decisive { winner: Color::White }) => "1-0",
        Outcome::Known(KnownOutcome::Decisive { winner: Color::Black }) => "0-1",
        Outcome::Known(KnownOutcome::Draw) => "1/2-1/2",
        Outcome::Unknown => "*",
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

/// Parse every game of a PGN input (bytes in UTF-8 or Latin-1, optional BOM, LF or CRLF).
///
/// Games are parsed in parallel with rayon and returned in file order. Kept games hold at most
/// `max_ply` tokens (longer games are truncated and get outcome PLY_LIMIT, §6.3; the whole
/// game is still replayed). Games are skipped and reported (never silently truncated) for an
/// illegal or unreadable move, a variant or set-up start, no §6.3 outcome, or fewer than
/// `min_ply` plies. Callers validate `max_ply ≥ 1`.
///
/// ```
/// use pawn_engine::pgn::{parse_pgn, SkipReason};
/// use pawn_engine::vocab::outcome::WHITE_CHECKMATES;
///
/// let pgn = b"[Result \"1-0\"]\n[Termination \"Normal\"]\n\n1. e4 e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# 1-0\n\n\
///             [Result \"0-1\"]\n\n1. e4 e5 2. Ke3 0-1\n";
/// let batch = parse_pgn(pgn, 512, 1);
/// assert_eq!((batch.n_read, batch.games.len()), (2, 1));
/// assert_eq!(batch.games[0].tokens.len(), 7);
/// assert_eq!(batch.games[0].outcome, WHITE_CHECKMATES);
/// assert_eq!((batch.skipped[0].game, batch.skipped[0].ply), (2, 2));
/// assert_eq!(batch.skipped[0].reason, SkipReason::IllegalMove);
/// ```
pub fn parse_pgn(data: &[u8], max_ply: usize, min_ply: usize) -> PgnBatch {
    // Games are cut on one pool thread and parsed in batches as they are cut, so the other
    // threads need not wait for the cutting (~8 % of the work) to end; batches finish in any
    // order and are put back in file order. Small batches (32 games, ~0.3 ms each) leave the
    // other threads little idle time at the end of a file.
    let done: Mutex<Vec<(usize, Parsed)>> = Mutex::new(Vec::new());
    let mut spans = Vec::new();
    rayon::scope(|s| {
        let queue = |chunk: Vec<GameSpan>, first: usize| {
            let done = &done;
            s.spawn(move |_| parse_chunk(data, &chunk, first, max_ply, min_ply, done));
        };
        let mut first = 0;
        each_game_span(data, |span| {
            spans.push(span);
            if spans.len() - first == PARSE_BATCH {
                queue(spans[first..].to_vec(), first);
                first = spans.len();
            }
        });
        if first < spans.len() {
            queue(spans[first..].to_vec(), first);
        }
    });
    let head = &data[..data.len().min(PGN_LIKE_HEAD)];
    let no_nul = memchr::memchr(0, head).is_none();
    let blank = data.iter().all(|b| b.is_ascii_whitespace());
    let tagged = spans.iter().any(|s| s.movetext > s.start && is_tag_start(data, s.start));
    assemble(done, spans.len(), no_nul, blank, tagged)
}

/// Games per parse task of [`parse_pgn`] and [`parse_pgn_read`].
const PARSE_BATCH: usize = 32;
/// The leading bytes in which a NUL byte marks an input as not PGN.
const PGN_LIKE_HEAD: usize = 64 << 10;
/// Bytes [`parse_pgn_read`] reads before cutting: small enough that the first read (the only
/// one no parsing overlaps) is short, large enough that a read call moves a lot at once.
const READ_BLOCK: usize = 256 << 10;

/// Bytes of read blocks whose games [`parse_pgn_read`] lets wait for a parse before its reading
/// thread parses some itself (16 blocks).
const READ_AHEAD: usize = 16 * READ_BLOCK;

/// A read block shared by the parse tasks of its games; dropping the last one takes its bytes
/// off the count of bytes waiting.
struct Segment<'a> {
    bytes: Vec<u8>,
    waiting: &'a std::sync::atomic::AtomicUsize,
}

impl Drop for Segment<'_> {
    fn drop(&mut self) {
        self.waiting.fetch_sub(self.bytes.len(), std::sync::atomic::Ordering::Relaxed);
    }
}

/// Parse results of one task: its kept games and its skipped ones, each in file order (apart,
/// so a skipped game takes the size of a [`Skipped`], not of a [`Game`]).
type Parsed = (Vec<Game>, Vec<Skipped>);

/// Parse the games at `spans` of `data` (games `first + 1 …`, 1-based) into `done`.
fn parse_chunk(data: &[u8], spans: &[GameSpan], first: usize, max_ply: usize, min_ply: usize, done: &Mutex<Vec<(usize, Parsed)>>) {
    let mut parsed: Parsed = (Vec::with_capacity(spans.len()), Vec::new());
    for (k, &span) in spans.iter().enumerate() {
        match parse_game(data, span, first + k + 1, max_ply, min_ply) {
            Ok(g) => parsed.0.push(g),
            Err(s) => parsed.1.push(s),
        }
    }
    done.lock().unwrap_or_else(|e| e.into_inner()).push((first, parsed));
}

/// The batch of the parse tasks' results, in file order; `pgn_like` as [`PgnBatch`] defines it.
fn assemble(done: Mutex<Vec<(usize, Parsed)>>, n_read: usize, no_nul: bool, blank: bool, tagged: bool) -> PgnBatch {
    let mut parts = done.into_inner().unwrap_or_else(|e| e.into_inner());
    parts.sort_unstable_by_key(|(first, _)| *first);
    let mut batch = PgnBatch { n_read, ..PgnBatch::default() };
    batch.games.reserve(parts.iter().map(|(_, (g, _))| g.len()).sum());
    for (_, (games, skipped)) in parts {
        batch.games.extend(games);
        batch.skipped.extend(skipped);
    }
    batch.pgn_like = no_nul && (blank || !batch.games.is_empty() || batch.skipped.iter().any(|s| s.ply > 0) || tagged);
    batch
}

/// Append up to `want` bytes of `input` to `buf`; true when `input` ended before that.
fn read_block(input: &mut impl std::io::Read, buf: &mut Vec<u8>, want: usize) -> std::io::Result<bool> {
    use std::io::Read;
    let n = input.by_ref().take(want as u64).read_to_end(buf)?;
    Ok(n < want)
}

/// [`parse_pgn`] on everything `input` yields (a file, a decoder), the same games, skips and
/// `pgn_like`, with the reading overlapped with the parsing.
///
/// The input is read in blocks of 256 KiB on one pool thread, which cuts each block (with the
/// unfinished game carried over from the block before) as soon as it is read and hands its
/// games to the other threads in batches of 32, so with two threads or more only the first
/// block's read runs before any parsing. When more than 4 MiB of read blocks wait for their
/// games to be parsed, the reading thread parses waiting batches itself until they fit again
/// (on one thread: read 4 MiB, parse, read on). A game longer than a block (or bytes that never
/// end a game) makes the next block as large as what is carried, so the cut work stays linear
/// in the input. Memory: ≈ 4 MiB of input (more only for a game longer than that) plus the
/// parsed games.
///
/// Errors: the first read error of `input` (nothing is returned for a part of the input).
pub fn parse_pgn_read(input: impl std::io::Read + Send, max_ply: usize, min_ply: usize) -> std::io::Result<PgnBatch> {
    parse_pgn_blocks(input, READ_BLOCK, READ_AHEAD, max_ply, min_ply).map(|(batch, _)| batch)
}

/// [`parse_pgn_read`] reading `block` bytes at a time and letting `read_ahead` bytes wait (tests
/// cut games across many blocks), also returning the most bytes that waited at once.
fn parse_pgn_blocks(
    mut input: impl std::io::Read + Send,
    block: usize,
    read_ahead: usize,
    max_ply: usize,
    min_ply: usize,
) -> std::io::Result<(PgnBatch, usize)> {
    let done: Mutex<Vec<(usize, Parsed)>> = Mutex::new(Vec::new());
    let (mut n_read, mut seen) = (0usize, 0usize);
    let (mut no_nul, mut blank, mut tagged) = (true, true, false);
    let mut failed = None;
    let (waiting, mut peak) = (std::sync::atomic::AtomicUsize::new(0), 0);
    rayon::scope(|s| {
        let mut carry: Vec<u8> = Vec::new();
        let mut want = block;
        loop {
            let mut buf = Vec::with_capacity(carry.len() + want);
            buf.extend_from_slice(&carry);
            let eof = match read_block(&mut input, &mut buf, want) {
                Ok(eof) => eof,
                Err(e) => {
                    failed = Some(e);
                    return;
                }
            };
            let fresh = &buf[carry.len()..];
            if seen < PGN_LIKE_HEAD {
                no_nul &= memchr::memchr(0, &fresh[..fresh.len().min(PGN_LIKE_HEAD - seen)]).is_none();
            }
            seen += fresh.len();
            blank = blank && fresh.iter().all(|b| b.is_ascii_whitespace());
            peak = peak.max(waiting.fetch_add(buf.len(), std::sync::atomic::Ordering::Relaxed) + buf.len());
            let segment = std::sync::Arc::new(Segment { bytes: buf, waiting: &waiting });
            let queue = |chunk: Vec<GameSpan>, first: usize| {
                let (segment, done) = (std::sync::Arc::clone(&segment), &done);
                s.spawn(move |_| parse_chunk(&segment.bytes, &chunk, first, max_ply, min_ply, done));
            };
            let mut chunk = Vec::with_capacity(PARSE_BATCH);
            let cut = cut_games(&segment.bytes, eof, |span| {
                tagged |= span.movetext > span.start && is_tag_start(&segment.bytes, span.start);
                chunk.push(span);
                if chunk.len() == PARSE_BATCH {
                    queue(std::mem::replace(&mut chunk, Vec::with_capacity(PARSE_BATCH)), n_read);
                    n_read += PARSE_BATCH;
                }
            });
            if !chunk.is_empty() {
                let k = chunk.len();
                queue(chunk, n_read);
                n_read += k;
            }
            if eof {
                break;
            }
            carry = segment.bytes[cut..].to_vec();
            drop(segment);
            // read-ahead bound: parse waiting batches here while too many bytes wait (none
            // left to take: the other threads hold them all, and they are soon done)
            while waiting.load(std::sync::atomic::Ordering::Relaxed) > read_ahead {
                if rayon::yield_now() != Some(rayon::Yield::Executed) {
                    break;
                }
            }
            // no game ended in this block: read as much again as is carried (geometric growth)
            want = if cut == 0 { carry.len().max(block) } else { block };
        }
    });
    match failed {
        Some(e) => Err(e),
        None => Ok((assemble(done, n_read, no_nul, blank, tagged), peak)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HEAD: &str = "[Event \"Rated Blitz game\"]\n[Result \"1-0\"]\n[Termination \"Normal\"]\n[WhiteElo \"1500\"]\n\n";

    fn one(pgn: &str) -> Result<Game, Skipped> {
        let b = parse_pgn(pgn.as_bytes(), 512, 1);
        assert_eq!(b.n_read, 1, "{pgn:?}");
        b.games.into_iter().next().ok_or_else(|| b.skipped[0].clone())
    }

    fn ucis(g: &Game) -> Vec<String> {
        g.tokens.iter().map(|&t| vocab::token_to_uci(t).unwrap()).collect()
    }

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

    const PROMO: &str = "1. e4 d5 2. exd5 c6 3. dxc6 Nf6 4. cxb7 Nbd7 5. ";

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
    fn long_algebraic_and_lenient_capture_marks() {
        let g = one(&format!("{HEAD}1. e2-e4 e7-e5 2. Ng1-f3 Nb8xc6 3. Bf1c4 g8f6 4. e1g1 Nf6xe4 5. ed5 1-0\n"));
        // 5. ed5 is not legal here (no pawn on d5): the game is skipped at that ply.
        assert_eq!(g.unwrap_err(), Skipped { game: 1, ply: 8, reason: SkipReason::IllegalMove });
        let g = one(&format!("{HEAD}1. e2-e4 d7d5 2. ed5 Qd5 3. Nc3 Qxd8 4. Nf3 Nxf6 5. Bc4 Nc6 6. e1g1 1-0\n")).unwrap();
        assert_eq!(ucis(&g), ["e2e4", "d7d5", "e4d5", "d8d5", "b1c3", "d5d8", "g1f3", "g8f6", "f1c4", "b8c6", "e1g1"]);
        // Without a file a pawn move stays on its file, as in python-chess: `d5` is not `exd5`.
        let s = one(&format!("{HEAD}1. e4 d5 2. d5 1-0\n")).unwrap_err();
        assert_eq!((s.ply, s.reason), (2, SkipReason::IllegalMove));
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
    fn eval_and_clock_encodings_follow_spec() {
        assert_eq!(parse_eval(b"[%eval -0.35]"), Some(-35));
        assert_eq!(parse_eval(b"[%eval 0.005]"), Some(1));
        assert_eq!(parse_eval(b"[%eval -0.005]"), Some(-1));
        assert_eq!(parse_eval(b"[%eval 1000]"), Some(16_383));
        assert_eq!(parse_eval(b"[%eval #-3]"), Some(-32_764));
        assert_eq!(parse_eval(b"[%eval #2]"), Some(32_765));
        assert_eq!(parse_eval(b"[%eval #0]"), Some(-32_766));
        assert_eq!(parse_clock(b" [%eval 0.1] [%clk 0:00:07] "), Some(7));
        assert_eq!(parse_clock(b"[%clk 1:02:03]"), Some(3723));
        assert_eq!(parse_clock(b"[%clk 99:00:00]"), Some(32_767));
        assert_eq!(parse_clock(b"[%clk x]"), None);
    }

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
    fn split_games_keeps_headers_with_movetext() {
        let pgn = b"[A \"1\"]\n\n1. e4 *\n\n[A \"2\"]\n[B \"3\"]\n1. d4\n{ a\n\nb } *\n\n\n";
        let spans = split_games(pgn);
        assert_eq!(spans.len(), 2);
        assert!(pgn[spans[1].movetext..spans[1].end].starts_with(b"1. d4"));
    }

    fn sample() -> Vec<u8> {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.extend_from_slice(format!("{HEAD}1. e4 {{ [%clk 0:01:00] [%eval 0.2] }} e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# 1-0\n\n").as_bytes());
        }
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
        #[test]
        fn fast_san_paths_agree_with_shakmaty_candidates(picks in proptest::collection::vec(any::<prop::sample::Index>(), 1..120)) {
            // Along a random legal game, every SAN a piece, pawn or king could be given (each
            // role to each square, with and without a file or rank) resolves to the same move
            // (or none) by the fast paths as by shakmaty's candidate list.
            let mut pos = Chess::default();
            for pick in picks {
                for role in [Role::Pawn, Role::Knight, Role::Bishop, Role::Rook, Role::Queen, Role::King] {
                    for to in Square::ALL {
                        for (file, rank) in [(None, None), (Some(File::E), None), (None, Some(shakmaty::Rank::Second))] {
                            let san = San::Normal { role, file, rank, capture: false, to, promotion: None };
                            prop_assert_eq!(san_to_move(&pos, &san), general_san_to_move(&pos, &san), "{:?} in {}", san,
                                shakmaty::fen::Fen::from_position(&pos, shakmaty::EnPassantMode::Legal));
                        }
                    }
                }
                let moves = pos.legal_moves();
                if moves.is_empty() {
                    break;
                }
                pos.play_unchecked(moves[pick.index(moves.len())]);
            }
        }

        #[test]
        fn one_scan_reads_clock_and_eval_as_the_two_readers(
            parts in proptest::collection::vec(prop::sample::select(vec![
                "[%clk 0:03:00]", "[%eval 0.17]", "[%eval #-3]", "%clk", "%eval", "%clkx 1", "%evalx", " ", "]", "[",
                "%", "1:02:03.5", "-0.35", "#0", ",20", "x", "%clk  0:00:07 ]", "[%eval\t+2.5]",
            ]), 0..8)
        ) {
            let comment = parts.concat();
            let c = comment.as_bytes();
            prop_assert_eq!(clock_and_eval(c), (parse_clock(c), parse_eval(c)));
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            let b = parse_pgn(&data, 16, 1);
            prop_assert_eq!(b.n_read, b.games.len() + b.skipped.len());
        }

        #[test]
        fn mutated_real_pgn_never_panics(edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..20)) {
            let mut data = sample();
            for (at, byte) in edits {
                let i = at.index(data.len());
                data[i] = byte;
            }
            let b = parse_pgn(&data, 8, 1);
            prop_assert_eq!(b.n_read, b.games.len() + b.skipped.len());
            for g in &b.games {
                prop_assert!(g.tokens.len() <= 8);
                prop_assert_eq!(g.tokens.len(), g.clocks.len());
            }
        }
    }

    /// PGN made of pieces that end games in every way the cut knows, and some that never do.
    fn pgn_pieces() -> impl Strategy<Value = Vec<u8>> {
        let pieces = vec![
            "[Event \"a\"]\n", "[Result \"1-0\"]\n", "[Termination \"Normal\"]\n", "\n", "\r\n", "\n\n", " ",
            "1. e4 ", "e5 ", "2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# ", "1-0", "0-1 ", "*", "{ [%clk 0:01:00] }", "{ a\n\nb }",
            "{ unclosed ", "}", "; line\n", "%escape\n", "\u{feff}", "1-0[Event \"glued\"]", "[Ev", "ent \"x\"]",
            "[Site  \t\"s\"]\n", "(2. d4 d5)", "\u{a0}", "\0", "[", "\n[",
        ];
        proptest::collection::vec(prop::sample::select(pieces), 0..60).prop_map(|v| v.concat().into_bytes())
    }

    /// A reader handing out its bytes in pieces of the given lengths (cycled), as pipes do.
    struct Dribble<'a> {
        data: &'a [u8],
        at: usize,
        sizes: Vec<usize>,
        k: usize,
    }

    impl std::io::Read for Dribble<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.sizes[self.k % self.sizes.len()].min(buf.len()).min(self.data.len() - self.at);
            self.k += 1;
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn same_batch(a: &PgnBatch, b: &PgnBatch) -> bool {
        (a.n_read, a.pgn_like, &a.skipped, format!("{:?}", a.games)) == (b.n_read, b.pgn_like, &b.skipped, format!("{:?}", b.games))
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

        #[test]
        fn reading_in_blocks_gives_the_batch_of_the_whole_bytes(
            data in pgn_pieces(),
            block in 1usize..48,
            sizes in proptest::collection::vec(1usize..20, 1..4),
        ) {
            let whole = parse_pgn(&data, 8, 0);
            let (read, _) = parse_pgn_blocks(Dribble { data: &data, at: 0, sizes, k: 0 }, block, 4 * block, 8, 0).unwrap();
            prop_assert!(same_batch(&read, &whole), "{:?}\nblocks {:?}\nwhole {:?}", String::from_utf8_lossy(&data), read, whole);
        }
    }

    #[test]
    fn a_game_longer_than_many_blocks_and_a_read_error() {
        let long = format!("{HEAD}{} 1-0\n\n", "{ a comment that runs on } ".repeat(2000));
        let data = format!("{long}{HEAD}1. e4 e5 1-0\n\n{long}").into_bytes();
        let (read, _) = parse_pgn_blocks(&data[..], 64, 256, 512, 0).unwrap();
        assert!(same_batch(&read, &parse_pgn(&data, 512, 0)));
        assert_eq!((read.n_read, read.games.len(), read.games[1].tokens.len()), (3, 3, 2));
        struct Broken(usize);
        impl std::io::Read for Broken {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::Error::other("disk gone"));
                }
                self.0 -= 1;
                let n = buf.len().min(HEAD.len());
                buf[..n].copy_from_slice(&HEAD.as_bytes()[..n]);
                Ok(n)
            }
        }
        let err = parse_pgn_blocks(Broken(3), 64, 256, 512, 0).unwrap_err();
        assert_eq!(err.to_string(), "disk gone");
    }

    #[test]
    fn read_ahead_is_bounded_and_one_thread_parses_as_it_reads() {
        // 2,000 games (≈ 330 KB) in 1 KiB blocks: on one thread the reading thread must parse
        // waiting games itself once 8 KiB wait, instead of reading the whole input first.
        let game = format!("{HEAD}1. e4 {{ [%clk 0:01:00] }} e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# 1-0\n\n");
        let data = game.repeat(2000).into_bytes();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        for threads in [1, 2] {
            let pool = if threads == 1 { &pool } else { &rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap() };
            let (batch, peak) = pool.install(|| parse_pgn_blocks(&data[..], 1024, 8192, 512, 0)).unwrap();
            assert!(same_batch(&batch, &parse_pgn(&data, 512, 0)));
            assert_eq!(batch.games.len(), 2000);
            // the bound plus one block and its carried game (each a batch of 32 games holds)
            assert!(peak <= 8192 + 2 * 1024 + 32 * game.len(), "{threads} threads: {peak} bytes waited");
        }
        let (_, unbounded) = pool.install(|| parse_pgn_blocks(&data[..], 1024, usize::MAX, 512, 0)).unwrap();
        assert!(unbounded > data.len() / 2, "without the bound one thread reads first: {unbounded}");
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

    #[test]
    fn json_and_binary_inputs_are_not_pgn_like() {
        for data in [&b"{\"games\": [1, 2, 3]}\n"[..], b"[\n  {\"a\": 1}\n]\n", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR e4 e5", b"{x}"] {
            assert!(!parse_pgn(data, 512, 1).pgn_like, "{data:?}");
        }
        for data in [&b""[..], b" \n\n", b"1. e4 *", b"[Event \"x\"]\n\n*\n"] {
            assert!(parse_pgn(data, 512, 1).pgn_like, "{data:?}");
        }
    }

    #[test]
    fn simple_tags_agree_with_pgn_reader() {
        let hdrs: [&[u8]; 6] = [
            b"[Event \"Rated Blitz game\"]\n[Site \"https://lichess.org/abc\"]\n[WhiteElo \"1500\"]\n\n",
            b"[Event \"a]b\"]\r\n[White \"caf\xe9\"]\r\n",
            b"[Event \"esc \\\"q\\\" \\\\\"]\n",
            b"[Event  \"two spaces\"]\n",
            b"[Event \"x\"] [Site \"y\"]\n",
            b"[Event \"x\"]\n; c\n[Site \"y\"]\n",
        ];
        for (k, hdr) in hdrs.iter().enumerate() {
            let mut reader = Reader::new(std::io::Read::chain(*hdr, &TAIL_PADDING[..]));
            let mut tags = Tags::default();
            while let Ok(Some(())) = reader.read_game(&mut tags) {}
            match simple_tags(hdr) {
                Some(h) => assert_eq!(h, tags.headers, "{k}"),
                None => assert!(k >= 2, "{k} should take the fast path"),
            }
        }
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
