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
//!
//! Parts: `records` (what it returns), `cut` (games out of bytes), `tags`, `movetext` (tokens
//! and main line), `annotations` (clocks and evals), `san` (SAN to a legal move), `game` (one
//! game) and `reader` (the parallel driver).

mod annotations;
mod cut;
mod game;
mod movetext;
mod reader;
mod records;
mod san;
mod tags;
#[cfg(test)]
mod testing;

pub use annotations::{parse_clock, parse_eval};
pub use cut::{cut_games, each_game_span, split_games, GameSpan};
pub use game::{lichess_outcome, parse_game};
pub use movetext::{normalise_result, read_mainline, read_san, Mainline};
pub use reader::{parse_pgn, parse_pgn_read};
pub use records::{decode_text, Game, Headers, PgnBatch, SkipReason, Skipped, Tag};
pub use san::san_to_move;

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

/// The first `needle` in `data` at or after `from`.
fn find_from(data: &[u8], from: usize, needle: u8) -> Option<usize> {
    memchr::memchr(needle, data.get(from..)?).map(|p| p + from)
}
