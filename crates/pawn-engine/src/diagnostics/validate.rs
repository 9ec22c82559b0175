//! Game validation (spec `engine.md` §7.4): the first illegal ply of each game.

use rayon::prelude::*;

use crate::game::GameState;

/// Ply of the first token of `tokens` that is not a legal move in the position reached so far,
/// or `None` when every token is legal (§7.4). PAD and outcome tokens are never legal moves.
/// Only legality is checked: moves after a draw rule or ply cap would have ended the game pass.
pub fn first_illegal_ply(tokens: &[u16]) -> Option<usize> {
    let mut g = GameState::new();
    tokens.iter().position(|&t| g.play_token(t).is_err())
}

/// [`first_illegal_ply`] for every game of a row-major batch `tokens` [n × max_ply] cut to
/// `lengths` [n], in parallel. Never fails on illegal moves.
pub fn validate_games(tokens: &[u16], lengths: &[usize], max_ply: usize) -> Vec<Option<usize>> {
    lengths
        .par_iter()
        .enumerate()
        .map(|(b, &l)| first_illegal_ply(&tokens[b * max_ply..b * max_ply + l]))
        .collect()
}
