//! Lichess PGN parsing (spec `engine.md` §6.1–§6.4): games → move tokens, outcome tokens,
//! clocks, evals and header columns, with every dropped game reported instead of truncated.
//!
//! The work runs in three steps: [`split_games`] cuts the bytes into game spans (the same game
//! boundaries `pgn-reader` uses), then each span is read with `pgn-reader`'s streaming
//! [`Visitor`] and replayed with shakmaty, in parallel (rayon) and in file order.
//!
//! Departures from the v1 parser (§6.1), all deliberate: move-quality glyphs (`e4!?`), NAGs,
//! `;` comments, nested variations, `0-0` castling, a UTF-8 BOM and CRLF line ends are read
//! correctly; a game with an illegal or unreadable move is *skipped and reported* with its ply
//! instead of being silently cut short; variant and FEN-start games are skipped and reported.

use std::ops::ControlFlow;

use pgn_reader::{KnownOutcome, Outcome, RawComment, RawTag, Reader, SanPlus, Skip, Visitor};
use rayon::prelude::*;
use shakmaty::san::San;
use shakmaty::{Chess, Color, Position};

use crate::vocab::{self, outcome};

/// Clock sentinel of a move inside a game that carries no `[%clk]` annotation (§6.4).
pub const CLOCK_MISSING: u16 = 0x8000;
/// Eval sentinel of a move inside a game that carries no `[%eval]` annotation (§6.4).
pub const EVAL_MISSING: i16 = i16::MIN;

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
}

/// A game left out: its 1-based number in the input, the 0-based ply at which the problem
/// was found (the number of plies for game-level reasons) and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub game: usize,
    pub ply: usize,
    pub reason: SkipReason,
}

/// Header values of one game. Strings are decoded as UTF-8, or Latin-1 when not valid UTF-8;
/// missing tags are empty. Elo values are 0 when missing or not an unsigned 16-bit integer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers {
    pub event: String,
    pub site: String,
    pub date: String,
    pub utc_date: String,
    pub utc_time: String,
    pub white: String,
    pub black: String,
    pub result: String,
    pub termination: String,
    pub time_control: String,
    pub eco: String,
    pub opening: String,
    pub variant: String,
    pub fen: String,
    pub setup: String,
    pub white_elo: u16,
    pub black_elo: u16,
}

/// One kept game.
#[derive(Clone, Debug)]
pub struct Game {
    /// 1-based game number in the input.
    pub index: usize,
    /// Move tokens, at most `max_ply` (the game is truncated there).
    pub tokens: Vec<u16>,
    /// SAN of each kept move as written (normalised by shakmaty: `0-0` → `O-O`, glyphs dropped).
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
    data.get(from..)?.iter().position(|&b| b == needle).map(|p| p + from)
}

/// Skip whitespace and `%` escape lines (at line starts), as `pgn-reader` does between games.
fn skip_whitespace(data: &[u8], mut i: usize, mut new_line: bool) -> usize {
    while let Some(&c) = data.get(i) {
        match c {
            b' ' | b'\t' | b'\r' => i += 1,
            b'\n' => {
                new_line = true;
                i += 1;
            }
            b'%' if new_line => i = find_from(data, i, b'\n').map_or(data.len(), |p| p + 1),
            _ => break,
        }
    }
    i
}

/// Cut `data` into games with `pgn-reader`'s boundary rules: header lines start with `[`
/// (blank lines between them and the movetext do not split a game); the movetext ends at a
/// newline followed by `[` or by an empty line, except inside a `{…}` comment. A UTF-8 BOM
/// before a game is skipped.
pub fn split_games(data: &[u8]) -> Vec<GameSpan> {
    let mut spans = Vec::new();
    let mut i = 0;
    loop {
        if data[i.min(data.len())..].starts_with(BOM) {
            i += BOM.len();
        }
        i = skip_whitespace(data, i, true);
        if i >= data.len() {
            break;
        }
        let start = i;
        while data.get(i) == Some(&b'[') {
            i = find_from(data, i, b'\n').map_or(data.len(), |p| p + 1);
            i = skip_whitespace(data, i, true);
        }
        let movetext = i;
        while let Some(&c) = data.get(i) {
            match c {
                b'{' => i = find_from(data, i + 1, b'}').map_or(data.len(), |p| p + 1),
                b';' => i = find_from(data, i, b'\n').unwrap_or(data.len()),
                b'\n' => {
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
                _ => i += 1,
            }
        }
        let end = i.min(data.len());
        spans.push(GameSpan { start, movetext, end });
        i = end;
    }
    spans
}

fn is_token_end(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'{' | b'}' | b'(' | b')' | b'!' | b'?' | b'$' | b';' | b'.' | b'*')
}

fn is_result(tok: &[u8]) -> bool {
    matches!(tok, b"1-0" | b"0-1" | b"1/2-1/2" | b"\xc2\xbd-\xc2\xbd")
}

/// Parse one movetext token as SAN; `0-0` / `0-0-0` (zeros) are castling.
fn parse_san_token(tok: &[u8]) -> Option<SanPlus> {
    let mut buf = [0u8; 16];
    let tok = if tok.starts_with(b"0-0") && tok.len() <= buf.len() {
        buf[..tok.len()].copy_from_slice(tok);
        for b in buf[..tok.len()].iter_mut() {
            if *b == b'0' {
                *b = b'O';
            }
        }
        &buf[..tok.len()]
    } else {
        tok
    };
    SanPlus::from_ascii(tok).ok()
}

/// Strict pass over the main line of a movetext, independent of `pgn-reader`: every token
/// outside comments and variations must be a move number, a NAG (`$n`), a glyph (`!`, `?!`,
/// ...), a result or a SAN move. Returns the number of SAN moves before the first result, or
/// `Err(ply)` at the first unreadable token. This is the guard that turns tokens `pgn-reader`
/// would silently drop into a reported skip.
pub fn count_mainline_moves(movetext: &[u8]) -> Result<usize, usize> {
    let d = movetext;
    let (mut i, mut depth, mut n, mut line_start) = (0usize, 0usize, 0usize, true);
    while let Some(&c) = d.get(i) {
        match c {
            b'\n' => {
                line_start = true;
                i += 1;
                continue;
            }
            b' ' | b'\t' | b'\r' => {
                i += 1;
                continue;
            }
            b'%' if line_start => {
                i = find_from(d, i, b'\n').unwrap_or(d.len());
                continue;
            }
            _ => {}
        }
        line_start = false;
        match c {
            b'.' | b'!' | b'?' => i += 1,
            b'{' => match find_from(d, i + 1, b'}') {
                Some(p) => i = p + 1,
                None => return Err(n),
            },
            b';' => i = find_from(d, i, b'\n').unwrap_or(d.len()),
            b'(' => {
                depth += 1;
                i += 1;
            }
            b')' => {
                if depth == 0 {
                    return Err(n);
                }
                depth -= 1;
                i += 1;
            }
            b'*' if depth == 0 => return Ok(n),
            b'*' => i += 1,
            _ => {
                let len = d[i..].iter().position(|&b| is_token_end(b)).unwrap_or(d.len() - i);
                let tok = &d[i..i + len.max(1)];
                i += len.max(1);
                if depth > 0 {
                    continue;
                }
                if tok[0] == b'$' {
                    // '$' is a token end itself: the NAG number is the next token.
                    let digits = d[i..].iter().take_while(|b| b.is_ascii_digit()).count();
                    let rest_ok = d.get(i + digits).is_none_or(|&b| is_token_end(b));
                    if digits == 0 || !rest_ok {
                        return Err(n);
                    }
                    i += digits;
                } else if is_result(tok) {
                    return Ok(n);
                } else if tok.iter().all(u8::is_ascii_digit) {
                    // move number (its dots are separate tokens)
                } else if let Some(sp) = parse_san_token(tok) {
                    if sp.san == San::Null {
                        return Err(n);
                    }
                    n += 1;
                } else {
                    return Err(n);
                }
            }
        }
    }
    Ok(n)
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
    let body = command_arg(comment, b"%clk")?;
    let mut total: u64 = 0;
    let mut fields = 0;
    for part in body.split(|&b| b == b':') {
        let int_part = part.split(|&b| b == b'.').next()?;
        if int_part.is_empty() || int_part.len() > 9 || !int_part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let v: u64 = std::str::from_utf8(int_part).ok()?.parse().ok()?;
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
    let body = command_arg(comment, b"%eval")?;
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
    let at = comment.windows(cmd.len()).position(|w| w == cmd)?;
    let rest = &comment[at + cmd.len()..];
    if !rest.first().is_some_and(|b| b.is_ascii_whitespace()) {
        return None;
    }
    let end = rest.iter().position(|&b| b == b']')?;
    let arg = rest[..end].trim_ascii();
    (!arg.is_empty()).then_some(arg)
}

/// What the visitor collects from one game, before legality is checked.
#[derive(Default)]
struct RawGame {
    headers: Headers,
    sans: Vec<SanPlus>,
    clocks: Vec<u16>,
    evals: Vec<i16>,
    /// Result token seen in the movetext; moves after it are ignored (§6.1).
    result: Option<Outcome>,
}

struct Collect;

impl Visitor for Collect {
    type Tags = Headers;
    type Movetext = RawGame;
    type Output = RawGame;

    fn begin_tags(&mut self) -> ControlFlow<RawGame, Headers> {
        ControlFlow::Continue(Headers::default())
    }

    fn tag(&mut self, h: &mut Headers, name: &[u8], value: RawTag<'_>) -> ControlFlow<RawGame> {
        let v = || decode_text(&value.decode());
        let elo = || std::str::from_utf8(value.as_bytes()).ok().and_then(|s| s.trim().parse::<u16>().ok()).unwrap_or(0);
        match name {
            b"Event" => h.event = v(),
            b"Site" => h.site = v(),
            b"Date" => h.date = v(),
            b"UTCDate" => h.utc_date = v(),
            b"UTCTime" => h.utc_time = v(),
            b"White" => h.white = v(),
            b"Black" => h.black = v(),
            b"Result" => h.result = v(),
            b"Termination" => h.termination = v(),
            b"TimeControl" => h.time_control = v(),
            b"ECO" => h.eco = v(),
            b"Opening" => h.opening = v(),
            b"Variant" => h.variant = v(),
            b"FEN" => h.fen = v(),
            b"SetUp" => h.setup = v(),
            b"WhiteElo" => h.white_elo = elo(),
            b"BlackElo" => h.black_elo = elo(),
            _ => {}
        }
        ControlFlow::Continue(())
    }

    fn begin_movetext(&mut self, headers: Headers) -> ControlFlow<RawGame, RawGame> {
        ControlFlow::Continue(RawGame { headers, sans: Vec::with_capacity(128), ..RawGame::default() })
    }

    fn san(&mut self, g: &mut RawGame, san: SanPlus) -> ControlFlow<RawGame> {
        if g.result.is_none() {
            g.sans.push(san);
            g.clocks.push(CLOCK_MISSING);
            g.evals.push(EVAL_MISSING);
        }
        ControlFlow::Continue(())
    }

    fn comment(&mut self, g: &mut RawGame, comment: RawComment<'_>) -> ControlFlow<RawGame> {
        if g.result.is_none() && !g.sans.is_empty() {
            let c = comment.as_bytes();
            let last = g.sans.len() - 1;
            if let Some(clk) = parse_clock(c) {
                g.clocks[last] = clk;
            }
            if let Some(ev) = parse_eval(c) {
                g.evals[last] = ev;
            }
        }
        ControlFlow::Continue(())
    }

    fn begin_variation(&mut self, _g: &mut RawGame) -> ControlFlow<RawGame, Skip> {
        ControlFlow::Continue(Skip(true))
    }

    fn outcome(&mut self, g: &mut RawGame, outcome: Outcome) -> ControlFlow<RawGame> {
        g.result.get_or_insert(outcome);
        ControlFlow::Continue(())
    }

    fn end_game(&mut self, g: RawGame) -> RawGame {
        g
    }
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
    let bytes = &data[span.start..span.end];
    // The padding keeps pgn-reader's look-ahead (`ensure_bytes`) satisfied up to the game's
    // last byte; without it every token near the end of the slice shifts the buffer.
    let mut reader = Reader::new(std::io::Read::chain(bytes, &TAIL_PADDING[..]));
    let raw = match reader.read_game(&mut Collect) {
        Ok(Some(raw)) => raw,
        Ok(None) => return Err(skip(0, SkipReason::TooShort)),
        Err(_) => {
            let ply = count_mainline_moves(&data[span.movetext..span.end]).unwrap_or_else(|p| p);
            return Err(skip(ply, SkipReason::Malformed));
        }
    };
    let h = &raw.headers;
    let variant = h.variant.trim();
    let standard = variant.is_empty() || variant.eq_ignore_ascii_case("standard") || variant.eq_ignore_ascii_case("chess");
    if variant.eq_ignore_ascii_case("from position") || (standard && (!h.fen.is_empty() || h.setup.trim() == "1")) {
        return Err(skip(0, SkipReason::FenStart));
    }
    if !standard {
        return Err(skip(0, SkipReason::Variant));
    }
    // Guard against tokens pgn-reader skips silently: both readings must agree.
    match count_mainline_moves(&data[span.movetext..span.end]) {
        Err(ply) => return Err(skip(ply.min(raw.sans.len()), SkipReason::UnreadableMove)),
        Ok(n) if n != raw.sans.len() => return Err(skip(n.min(raw.sans.len()), SkipReason::UnreadableMove)),
        Ok(_) => {}
    }
    let mut pos = Chess::default();
    let mut tokens = Vec::with_capacity(raw.sans.len().min(max_ply));
    for (ply, sp) in raw.sans.iter().enumerate() {
        let m = sp.san.to_move(&pos).map_err(|_| skip(ply, SkipReason::IllegalMove))?;
        if ply < max_ply {
            tokens.push(vocab::move_to_token(&m).ok_or_else(|| skip(ply, SkipReason::IllegalMove))?);
        }
        pos.play_unchecked(m);
    }
    let full_length = raw.sans.len();
    let result = if h.result.is_empty() { raw.result.map(outcome_str).unwrap_or("") } else { h.result.trim() };
    let outcome = lichess_outcome(h.termination.trim(), result, &pos, full_length > max_ply)
        .ok_or_else(|| skip(full_length, SkipReason::NoOutcome))?;
    if full_length < min_ply {
        return Err(skip(full_length, SkipReason::TooShort));
    }
    let kept = tokens.len();
    let RawGame { headers, mut sans, mut clocks, mut evals, .. } = raw;
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
pub fn parse_pgn(data: &[u8], max_ply: usize, min_ply: usize) -> PgnBatch {
    let spans = split_games(data);
    let results: Vec<Result<Game, Skipped>> = spans
        .par_iter()
        .enumerate()
        .map(|(i, &span)| parse_game(data, span, i + 1, max_ply, min_ply))
        .collect();
    let mut batch = PgnBatch { n_read: spans.len(), ..PgnBatch::default() };
    for r in results {
        match r {
            Ok(g) => batch.games.push(g),
            Err(s) => batch.skipped.push(s),
        }
    }
    batch
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
        let s = one(&format!("{HEAD}1. e4 e5 2. Nf3 xyz 3. Bb5 1-0\n")).unwrap_err();
        assert_eq!((s.ply, s.reason), (3, SkipReason::UnreadableMove));
        let s = one(&format!("{HEAD}1. e4 e5 2. Ke3 1-0\n")).unwrap_err();
        assert_eq!((s.ply, s.reason), (2, SkipReason::IllegalMove));
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

    #[test]
    fn sample_checkmate_is_white_checkmates() {
        let b = parse_pgn(&sample(), 512, 1);
        assert_eq!(b.games.len(), 3);
        assert!(b.games.iter().all(|g| g.outcome == outcome::WHITE_CHECKMATES));
        assert_eq!(b.games[0].evals[0], 20);
        assert_eq!(b.games[2].index, 3);
    }
}
