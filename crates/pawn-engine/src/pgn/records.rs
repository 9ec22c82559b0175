//! What the parser returns: kept [`Game`]s with their [`Headers`], and [`Skipped`] games with
//! their [`SkipReason`], gathered in a [`PgnBatch`].

use pgn_reader::SanPlus;

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
    pub(super) text: String,
    pub(super) spans: [(usize, usize); Tag::ALL.len()],
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
    /// Clock after each kept move in seconds, or [`CLOCK_MISSING`](super::CLOCK_MISSING).
    pub clocks: Vec<u16>,
    /// Engine eval after each kept move (§6.4 encoding), or [`EVAL_MISSING`](super::EVAL_MISSING).
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

/// Decode bytes as UTF-8, or as Latin-1 when they are not valid UTF-8.
pub fn decode_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => bytes.iter().map(|&b| b as char).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_keep_the_last_value_and_read_latin1() {
        let mut h = Headers::default();
        h.set(Tag::Event, b"first");
        h.set(Tag::White, b"caf\xe9");
        h.set(Tag::Event, "Rated Blitz game".as_bytes());
        assert_eq!((h.get(Tag::Event), h.get(Tag::White), h.get(Tag::Black)), ("Rated Blitz game", "caf\u{e9}", ""));
        assert_eq!(decode_text(b"caf\xe9"), decode_text("caf\u{e9}".as_bytes()));
        for tag in Tag::ALL {
            let name = format!("{tag:?}").replace("UtcDate", "UTCDate").replace("UtcTime", "UTCTime").replace("Eco", "ECO")
                .replace("Fen", "FEN");
            assert_eq!(Tag::from_name(name.as_bytes()), Some(tag));
        }
    }

    #[test]
    fn skip_reasons_have_distinct_names_and_only_too_short_is_no_fault() {
        let names: std::collections::HashSet<_> = SkipReason::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), SkipReason::ALL.len());
        assert!(SkipReason::ALL.iter().all(|r| r.is_parse_fault() == (*r != SkipReason::TooShort) && !r.describe().is_empty()));
    }
}
