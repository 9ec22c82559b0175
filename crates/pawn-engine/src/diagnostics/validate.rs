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
///
/// ```
/// use pawn_engine::diagnostics::validate_games;
/// use pawn_engine::vocab::{uci_to_token, PAD_TOKEN};
///
/// let t = |u: &str| uci_to_token(u).unwrap();
/// // Row 0 is legal; row 1 plays e4 twice (illegal at ply 1). Rows are max_ply = 2 wide.
/// let tokens = [t("e2e4"), t("e7e5"), t("e2e4"), t("e2e4")];
/// assert_eq!(validate_games(&tokens, &[2, 2], 2), vec![None, Some(1)]);
/// assert_eq!(validate_games(&[t("e2e4"), PAD_TOKEN], &[2], 2), vec![Some(1)]);
/// ```
pub fn validate_games(tokens: &[u16], lengths: &[usize], max_ply: usize) -> Vec<Option<usize>> {
    lengths
        .par_iter()
        .enumerate()
        .map(|(b, &l)| first_illegal_ply(&tokens[b * max_ply..b * max_ply + l]))
        .collect()
}
