//! Legal-move masks and perft (spec `engine.md` §4, §1.7, §2.4).
//!
//! Every mask replays a batch of games with [`game::replay`]; entry `t` of a game describes the
//! position *before* move `t` (the options of the side about to play `tokens[t]`). Games are
//! processed in parallel with rayon, one game per task, and outputs are written in game order.

use std::sync::OnceLock;

use rayon::prelude::*;

use crate::game::{self, FenError, GameState, IllegalToken};
use crate::vocab::{self, NUM_ACTIONS, PAD_TOKEN};

/// An illegal token met while replaying game `game` of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchError {
    /// Index of the game in the batch.
    pub game: usize,
    /// Ply and token of the failing move.
    pub illegal: IllegalToken,
}

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "game {}: {}", self.game, self.illegal)
    }
}

impl std::error::Error for BatchError {}

/// Run `fill(game_index, game_tokens, out_chunk)` for every game in parallel, where
/// `out_chunk` is that game's `stride`-element slice of `out`. Returns the error of the
/// lowest-indexed failing game, so error reports do not depend on thread scheduling.
fn per_game<T, F>(games: &[&[u16]], out: &mut [T], stride: usize, fill: F) -> Result<(), BatchError>
where
    T: Send,
    F: Fn(&[u16], &mut [T]) -> Result<(), IllegalToken> + Sync,
{
    debug_assert_eq!(out.len(), games.len() * stride);
    if stride == 0 {
        // Nothing to write, but the games must still be legal.
        return games
            .par_iter()
            .enumerate()
            .map(|(b, g)| fill(g, &mut []).map_err(|illegal| BatchError { game: b, illegal }))
            .collect::<Vec<_>>()
            .into_iter()
            .collect();
    }
    out.par_chunks_mut(stride)
        .zip(games.par_iter())
        .enumerate()
        .map(|(b, (chunk, g))| fill(g, chunk).map_err(|illegal| BatchError { game: b, illegal }))
        .collect::<Vec<_>>()
        .into_iter()
        .collect()
}

/// Dense legal-token masks: bool `[B, T, V]` flattened row-major, `V = vocab_size`.
///
/// `games[b]` holds game b's tokens (its length; at most `max_ply` = T). Entry `[b, t, k]` is
/// true iff token k is legal before move t (t < length). When `vocab_size > 1968` the PAD column
/// (1968) is set at `t = length` for games with `length < T`: "the game is over, the correct
/// prediction is end-of-game" (spec §3.4: the final supervised target is PAD). With
/// `vocab_size == 1968` there is no PAD column and the output equals the spec's
/// `compute_legal_token_masks`. Rows with `t > length` are all false.
///
/// Panics if `vocab_size < 1968` or a game is longer than `max_ply` (callers validate).
/// Errors: [`BatchError`] for the first game (by index) holding an illegal token.
pub fn legal_token_masks(games: &[&[u16]], max_ply: usize, vocab_size: usize) -> Result<Vec<bool>, BatchError> {
    assert!(vocab_size >= NUM_ACTIONS, "vocab_size must be at least {NUM_ACTIONS}");
    let mut out = vec![false; games.len() * max_ply * vocab_size];
    per_game(games, &mut out, max_ply * vocab_size, |g, chunk| {
        game::replay(g, |state, t| {
            if t < g.len() {
                let row = &mut chunk[t * vocab_size..(t + 1) * vocab_size];
                for tok in state.legal_tokens() {
                    row[tok as usize] = true;
                }
            } else if t < max_ply && vocab_size > PAD_TOKEN as usize {
                chunk[t * vocab_size + PAD_TOKEN as usize] = true;
            }
        })
        .map(|_| ())
    })?;
    Ok(out)
}

/// Sparse legal-token masks (spec §4 `compute_legal_token_masks_sparse`): int64 flat indices
/// `b·seq_len·V + t·V + token` of every legal token at every ply t < length, in game order,
/// then ply order, then shakmaty's legal-move order (§2.4), plus one PAD entry
/// `b·seq_len·V + length·V + 1968` after each game whose `length < seq_len`.
///
/// Panics if `vocab_size <= 1968` or a game is longer than `seq_len` (callers validate).
/// Errors: [`BatchError`] for the first game (by index) holding an illegal token.
pub fn legal_token_masks_sparse(games: &[&[u16]], seq_len: usize, vocab_size: usize) -> Result<Vec<i64>, BatchError> {
    assert!(vocab_size > PAD_TOKEN as usize, "sparse masks need a PAD column");
    let v = vocab_size as i64;
    let per: Vec<Result<Vec<i64>, BatchError>> = games
        .par_iter()
        .enumerate()
        .map(|(b, g)| {
            assert!(g.len() <= seq_len, "game longer than seq_len");
            let base = b as i64 * seq_len as i64 * v;
            let mut idx = Vec::with_capacity(g.len() * 24 + 1);
            game::replay(g, |state, t| {
                if t < g.len() {
                    let row = base + t as i64 * v;
                    idx.extend(state.legal_tokens().into_iter().map(|k| row + k as i64));
                } else if t < seq_len {
                    idx.push(base + t as i64 * v + PAD_TOKEN as i64);
                }
            })
            .map_err(|illegal| BatchError { game: b, illegal })?;
            Ok(idx)
        })
        .collect();
    let mut out = Vec::new();
    for r in per {
        out.extend(r?);
    }
    Ok(out)
}

/// Index of each (src, dst) pair in the 44 promotion pairs of §1.7, or `u8::MAX`.
fn promo_pair_table() -> &'static [u8; 64 * 64] {
    static T: OnceLock<[u8; 64 * 64]> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = [u8::MAX; 64 * 64];
        for (i, &(s, d)) in vocab::promo_pairs().iter().enumerate() {
            t[s as usize * 64 + d as usize] = i as u8;
        }
        t
    })
}

/// Grid form of one position's legal tokens: `grid[s]` bit d set iff some legal move goes s→d
/// (castling as the king's two-square step, the four promotions of a pair share one bit);
/// `promo[pair * 4 + k]` true iff promotion pair `pair` (§1.7 order) with piece k (0 q, 1 r,
/// 2 b, 3 n) is legal.
pub fn fill_grid(tokens: &[u16], grid: &mut [u64], promo: &mut [bool]) {
    let pairs = promo_pair_table();
    for &tok in tokens {
        let a = vocab::decompose(tok).expect("legal move tokens are actions");
        grid[a.src as usize] |= 1u64 << a.dst;
        if a.promo > 0 {
            let pair = pairs[a.src as usize * 64 + a.dst as usize] as usize;
            promo[pair * 4 + (a.promo - 1) as usize] = true;
        }
    }
}

/// Legal-move grids (spec §4 `compute_legal_move_masks`): `grid` uint64 `[B, T, 64]` and
/// `promo` bool `[B, T, 44, 4]`, flattened row-major; see [`fill_grid`] for the meaning of one
/// entry. Zero/false for t ≥ length.
///
/// Errors: [`BatchError`] for the first game (by index) holding an illegal token.
pub fn legal_move_grid(games: &[&[u16]], max_ply: usize) -> Result<(Vec<u64>, Vec<bool>), BatchError> {
    let mut grid = vec![0u64; games.len() * max_ply * 64];
    let mut promo = vec![false; games.len() * max_ply * 176];
    if max_ply == 0 {
        legal_move_counts(games, 0)?; // still validate the (empty) games
        return Ok((grid, promo));
    }
    grid.par_chunks_mut(max_ply * 64)
        .zip(promo.par_chunks_mut(max_ply * 176))
        .zip(games.par_iter())
        .enumerate()
        .map(|(b, ((grid_g, promo_g), g))| {
            game::replay(g, |state, t| {
                if t < g.len() {
                    fill_grid(
                        &state.legal_tokens(),
                        &mut grid_g[t * 64..(t + 1) * 64],
                        &mut promo_g[t * 176..(t + 1) * 176],
                    );
                }
            })
            .map(|_| ())
            .map_err(|illegal| BatchError { game: b, illegal })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .collect::<Result<(), BatchError>>()?;
    Ok((grid, promo))
}

/// Number of legal moves before move t: int16 `[B, T]` flattened, 0 for t ≥ length.
///
/// Errors: [`BatchError`] for the first game (by index) holding an illegal token.
///
/// ```
/// use pawn_engine::masks::legal_move_counts;
/// use pawn_engine::vocab::uci_to_token;
///
/// let game: Vec<u16> = ["e2e4", "e7e5"].iter().map(|u| uci_to_token(u).unwrap()).collect();
/// // 20 moves at the start, 20 after 1. e4, nothing past the game's end.
/// assert_eq!(legal_move_counts(&[&game], 3).unwrap(), vec![20, 20, 0]);
/// ```
pub fn legal_move_counts(games: &[&[u16]], max_ply: usize) -> Result<Vec<i16>, BatchError> {
    let mut out = vec![0i16; games.len() * max_ply];
    per_game(games, &mut out, max_ply, |g, chunk| {
        game::replay(g, |state, t| {
            if t < g.len() {
                chunk[t] = state.legal_moves().len() as i16;
            }
        })
        .map(|_| ())
    })?;
    Ok(out)
}

/// Perft: the number of leaf nodes of the legal-move tree of depth `depth` from `fen` (or
/// `"startpos"`), walked through the engine's own token path: at every node the legal moves are
/// converted to tokens ([`GameState::legal_tokens`]) and each child is reached by playing the
/// token ([`GameState::play_token`]), as replay does. `depth = 0` gives 1. The root's children
/// are searched in parallel.
///
/// Errors: [`FenError`] for a malformed FEN or an illegal position.
///
/// ```
/// assert_eq!(pawn_engine::masks::perft("startpos", 3).unwrap(), 8_902);
/// assert!(pawn_engine::masks::perft("not a fen", 1).is_err());
/// ```
pub fn perft(fen: &str, depth: u32) -> Result<u64, FenError> {
    let root = GameState::from_fen(fen)?;
    if depth == 0 {
        return Ok(1);
    }
    Ok(root
        .legal_tokens()
        .par_iter()
        .map(|&tok| {
            let mut child = root.clone();
            child.play_token(tok).expect("a legal token is playable");
            perft_node(&child, depth - 1)
        })
        .sum())
}

fn perft_node(state: &GameState, depth: u32) -> u64 {
    let tokens = state.legal_tokens();
    if depth <= 1 {
        return if depth == 0 { 1 } else { tokens.len() as u64 };
    }
    tokens
        .iter()
        .map(|&tok| {
            let mut child = state.clone();
            child.play_token(tok).expect("a legal token is playable");
            perft_node(&child, depth - 1)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(uci: &[&str]) -> Vec<u16> {
        uci.iter().map(|u| vocab::uci_to_token(u).unwrap()).collect()
    }

    const KIWIPETE: &str = "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1";
    const POS3: &str = "8/2p5/3p4/KP5r/1R3p1k/8/4P1P1/8 w - - 0 1";
    const POS4: &str = "r3k2r/Pppp1ppp/1b3nbN/nP6/BBP1P3/q4N2/Pp1P2PP/R2Q1RK1 w kq - 0 1";
    const POS4_MIRRORED: &str = "r2q1rk1/pP1p2pp/Q4n2/bbp1p3/Np6/1B3NBn/pPPP1PPP/R3K2R b KQ - 0 1";
    const POS5: &str = "rnbq1k1r/pp1Pbppp/2p5/8/2B5/8/PPP1NnPP/RNBQK2R w KQ - 1 8";

    #[test]
    fn perft_start_position_matches_literature() {
        for (depth, n) in [(0, 1), (1, 20), (2, 400), (3, 8_902), (4, 197_281)] {
            assert_eq!(perft("startpos", depth).unwrap(), n, "depth {depth}");
        }
    }

    #[test]
    fn perft_start_position_depth_5() {
        assert_eq!(perft("startpos", 5).unwrap(), 4_865_609);
    }

    #[test]
    fn perft_kiwipete_matches_literature() {
        assert_eq!(perft(KIWIPETE, 1).unwrap(), 48);
        assert_eq!(perft(KIWIPETE, 2).unwrap(), 2_039);
        assert_eq!(perft(KIWIPETE, 3).unwrap(), 97_862);
    }

    #[test]
    fn perft_kiwipete_depth_4() {
        assert_eq!(perft(KIWIPETE, 4).unwrap(), 4_085_603);
    }

    #[test]
    fn perft_position_3_matches_literature() {
        assert_eq!(perft(POS3, 1).unwrap(), 14);
        assert_eq!(perft(POS3, 2).unwrap(), 191);
        assert_eq!(perft(POS3, 3).unwrap(), 2_812);
        assert_eq!(perft(POS3, 4).unwrap(), 43_238);
    }

    #[test]
    fn perft_position_3_depth_5() {
        assert_eq!(perft(POS3, 5).unwrap(), 674_624);
    }

    #[test]
    fn perft_position_4_and_its_mirror_match_literature() {
        for fen in [POS4, POS4_MIRRORED] {
            assert_eq!(perft(fen, 1).unwrap(), 6);
            assert_eq!(perft(fen, 2).unwrap(), 264);
            assert_eq!(perft(fen, 3).unwrap(), 9_467);
        }
    }

    #[test]
    fn perft_position_4_depth_4() {
        assert_eq!(perft(POS4, 4).unwrap(), 422_333);
    }

    #[test]
    fn perft_position_5_matches_literature() {
        assert_eq!(perft(POS5, 1).unwrap(), 44);
        assert_eq!(perft(POS5, 2).unwrap(), 1_486);
        assert_eq!(perft(POS5, 3).unwrap(), 62_379);
    }

    #[test]
    fn perft_position_5_depth_4() {
        assert_eq!(perft(POS5, 4).unwrap(), 2_103_487);
    }

    #[test]
    fn perft_rejects_bad_fen() {
        assert!(perft("rnbqkbnr/pppppppp w", 1).is_err());
    }

    #[test]
    fn dense_mask_start_position_has_twenty_moves_and_pad_after_end() {
        let g = toks(&["e2e4"]);
        let games: Vec<&[u16]> = vec![&g];
        let m = legal_token_masks(&games, 3, 1980).unwrap();
        let row = |t: usize| &m[t * 1980..(t + 1) * 1980];
        assert_eq!(row(0).iter().filter(|&&x| x).count(), 20);
        assert!(row(0)[317]); // e2e4
        assert!(!row(0)[PAD_TOKEN as usize]);
        assert_eq!(row(1).iter().filter(|&&x| x).count(), 1);
        assert!(row(1)[PAD_TOKEN as usize]);
        assert!(row(2).iter().all(|&x| !x));
        // 1968 columns: no PAD entry at all.
        let m = legal_token_masks(&games, 3, 1968).unwrap();
        assert_eq!(m.iter().filter(|&&x| x).count(), 20);
    }

    #[test]
    fn sparse_mask_lists_flat_indices_and_pad() {
        let g = toks(&["e2e4"]);
        let empty: Vec<u16> = vec![];
        let games: Vec<&[u16]> = vec![&empty, &g];
        let s = legal_token_masks_sparse(&games, 2, 1980).unwrap();
        assert_eq!(s[0], PAD_TOKEN as i64); // game 0, t = 0
        let game1 = 2 * 1980;
        assert_eq!(s.len(), 1 + 20 + 1);
        assert!(s[1..21].iter().all(|&i| (game1..game1 + 1980).contains(&i)));
        assert_eq!(s[21], game1 + 1980 + PAD_TOKEN as i64);
        // A full-length game gets no PAD entry.
        let s = legal_token_masks_sparse(&[&g[..]], 1, 1980).unwrap();
        assert_eq!(s.len(), 20);
    }

    #[test]
    fn grid_sets_castling_as_king_two_squares_and_promotions_per_piece() {
        // After 1.e4 e5 2.Nf3 Nc6 3.Bc4 Nf6 white may castle short: e1 → g1 bit.
        let g = toks(&["e2e4", "e7e5", "g1f3", "b8c6", "f1c4", "g8f6", "a2a3"]);
        let (grid, _) = legal_move_grid(&[&g[..]], 7).unwrap();
        assert_ne!(grid[6 * 64 + 4] & (1u64 << 6), 0);
        assert_eq!(grid[6 * 64 + 4] & (1u64 << 7), 0);
        // Reach a promotion: 1.a4 b5 2.axb5 a6 3.bxa6 Bb7 4.axb7 Nc6, then b7 may push or take a8.
        let g = toks(&["a2a4", "b7b5", "a4b5", "a7a6", "b5a6", "c8b7", "a6b7", "b8c6", "b7a8q"]);
        let (grid, promo) = legal_move_grid(&[&g[..]], 9).unwrap();
        let t = 8; // white to move: pawn b7, black rook a8, b8 and c8 empty
        let b7 = 49usize;
        let bits = grid[t * 64 + b7];
        assert_ne!(bits & (1u64 << 56), 0); // b7xa8
        assert_ne!(bits & (1u64 << 57), 0); // b7b8
        let pairs = promo_pair_table();
        for (dst, expect) in [(56usize, true), (57, true), (58, false)] {
            let pair = pairs[b7 * 64 + dst] as usize;
            for k in 0..4 {
                assert_eq!(promo[t * 176 + pair * 4 + k], expect, "dst {dst} piece {k}");
            }
        }
        let counts = legal_move_counts(&[&g[..]], 9).unwrap();
        let derived: usize = grid[t * 64..(t + 1) * 64].iter().map(|w| w.count_ones() as usize).sum::<usize>()
            + 2 * 3; // two promotion pairs, three extra pieces each
        assert_eq!(counts[t] as usize, derived);
    }

    #[test]
    fn illegal_token_reports_lowest_game_and_ply() {
        let ok = toks(&["e2e4", "e7e5"]);
        let bad1 = toks(&["e2e4", "e2e4"]);
        let bad2 = toks(&["e7e5"]);
        let games: Vec<&[u16]> = vec![&ok, &bad1, &bad2];
        let err = legal_move_counts(&games, 2).unwrap_err();
        assert_eq!(err.game, 1);
        assert_eq!(err.illegal.ply, 1);
        assert_eq!(err.illegal.token, 317);
        assert!(err.to_string().starts_with("game 1: illegal move token 317 (e2e4) at ply 1"));
        let err = legal_token_masks(&games, 2, 1969).unwrap_err();
        assert_eq!(err.game, 1);
        let err = legal_token_masks_sparse(&games, 2, 1980).unwrap_err();
        assert_eq!(err.game, 1);
        assert_eq!(legal_move_grid(&games, 2).unwrap_err().game, 1);
    }

    #[test]
    fn zero_max_ply_batch_is_empty() {
        let empty: Vec<u16> = vec![];
        assert!(legal_move_counts(&[&empty[..]], 0).unwrap().is_empty());
    }
}
