//! Inputs and helpers the parser's tests share.

use proptest::prelude::*;

use crate::pgn::{parse_pgn, Game, Skipped};
use crate::vocab;

pub(super) const HEAD: &str = "[Event \"Rated Blitz game\"]\n[Result \"1-0\"]\n[Termination \"Normal\"]\n[WhiteElo \"1500\"]\n\n";

pub(super) fn one(pgn: &str) -> Result<Game, Skipped> {
    let b = parse_pgn(pgn.as_bytes(), 512, 1);
    assert_eq!(b.n_read, 1, "{pgn:?}");
    b.games.into_iter().next().ok_or_else(|| b.skipped[0].clone())
}

pub(super) fn ucis(g: &Game) -> Vec<String> {
    g.tokens.iter().map(|&t| vocab::token_to_uci(t).unwrap()).collect()
}

pub(super) fn sample() -> Vec<u8> {
    let mut v = Vec::new();
    for _ in 0..3 {
        v.extend_from_slice(format!("{HEAD}1. e4 {{ [%clk 0:01:00] [%eval 0.2] }} e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# 1-0\n\n").as_bytes());
    }
    v
}

/// PGN made of pieces that end games in every way the cut knows, and some that never do.
pub(super) fn pgn_pieces() -> impl Strategy<Value = Vec<u8>> {
    let pieces = vec![
        "[Event \"a\"]\n", "[Result \"1-0\"]\n", "[Termination \"Normal\"]\n", "\n", "\r\n", "\n\n", " ",
        "1. e4 ", "e5 ", "2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# ", "1-0", "0-1 ", "*", "{ [%clk 0:01:00] }", "{ a\n\nb }",
        "{ unclosed ", "}", "; line\n", "%escape\n", "\u{feff}", "1-0[Event \"glued\"]", "[Ev", "ent \"x\"]",
        "[Site  \t\"s\"]\n", "(2. d4 d5)", "\u{a0}", "\0", "[", "\n[",
    ];
    proptest::collection::vec(prop::sample::select(pieces), 0..60).prop_map(|v| v.concat().into_bytes())
}
