//! Uniformly random legal games (spec `engine.md` §3) with the determinism contract of §3.2:
//! game i of a call with base seed s is a function of (s, i, max_ply, mate_boost) alone,
//! whatever the thread count.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use rayon::prelude::*;
use shakmaty::{Move, Position};

use crate::game::{GameState, Termination};
use crate::vocab::PAD_TOKEN;

/// Uniform index in `[0, n)` by rand 0.8's widening-multiply rejection method (spec §3.2):
/// draw v, form the 128-bit product v·n, accept when its low half ≤ zone, return the high half.
///
/// Panics if `n == 0` (callers only draw among a non-empty move list).
pub fn uniform_index(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    assert!(n > 0, "uniform_index over an empty range");
    let zone = (n << n.leading_zeros()).wrapping_sub(1);
    loop {
        let v = rng.next_u64();
        let m = (v as u128) * (n as u128);
        if (m as u64) <= zone {
            return (m >> 64) as u64;
        }
    }
}

/// Uniform float in [0, 1): (next 64-bit word >> 11) × 2⁻⁵³ (spec §3.2).
pub fn uniform_f64(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Per-game seeds of a call (spec §3.2): a ChaCha8 generator seeded from `seed` emits one
/// 64-bit word per game, in game order. Returns `n` seeds for games `offset .. offset + n`.
pub fn game_seeds(seed: u64, offset: usize, n: usize) -> Vec<u64> {
    let mut master = ChaCha8Rng::seed_from_u64(seed);
    // Each seed is one 64-bit draw = two 32-bit words of the stream: jump straight to game `offset`.
    master.set_word_pos(2 * offset as u128);
    (0..n).map(|_| master.next_u64()).collect()
}

/// One random game: its move tokens (no padding) and why it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RandomGame {
    pub tokens: Vec<u16>,
    pub termination: Termination,
}

/// The first legal move (in generation order) that checkmates at once, if any.
fn first_mating_move(g: &GameState, moves: &[Move]) -> Option<Move> {
    moves.iter().copied().find(|m| {
        let mut p = g.position().clone();
        p.play_unchecked(*m);
        p.is_checkmate()
    })
}

/// Play one game from the start position with `rng` (spec §3.1): run the termination check with
/// `max_ply`, stop if over, else choose uniformly among legal moves. With `mate_boost > 0`, an
/// available mate is played with probability `mate_boost` (always, and without using the RNG,
/// when `mate_boost ≥ 1`).
pub fn play_random_game(rng: &mut ChaCha8Rng, max_ply: usize, mate_boost: f64) -> RandomGame {
    let mut g = GameState::with_capacity(max_ply);
    loop {
        let moves = g.legal_moves();
        if let Some(t) = g.termination_with(moves.len(), max_ply) {
            return RandomGame { tokens: g.into_tokens(), termination: t };
        }
        let mut chosen = None;
        if mate_boost > 0.0 {
            if let Some(m) = first_mating_move(&g, &moves) {
                if mate_boost >= 1.0 || uniform_f64(rng) < mate_boost {
                    chosen = Some(m);
                }
            }
        }
        let m = chosen.unwrap_or_else(|| moves[uniform_index(rng, moves.len() as u64) as usize]);
        g.play_unchecked(&m);
    }
}

/// A batch of random games, row-major: `tokens[i * max_ply + t]`, PAD after each game's end.
#[derive(Clone, Debug)]
pub struct GameBatch {
    pub n_games: usize,
    pub max_ply: usize,
    /// [n_games × max_ply] move tokens; every slot at or after a game's length is PAD.
    pub tokens: Vec<u16>,
    /// [n_games] plies played, 0 ≤ length ≤ max_ply.
    pub lengths: Vec<u16>,
    /// [n_games] termination codes (§2.2).
    pub termination: Vec<u8>,
    /// [n_games] outcome tokens (§2.3).
    pub outcome: Vec<u16>,
}

impl GameBatch {
    fn with_capacity(n_games: usize, max_ply: usize) -> Self {
        GameBatch {
            n_games,
            max_ply,
            tokens: vec![PAD_TOKEN; n_games * max_ply],
            lengths: vec![0; n_games],
            termination: vec![0; n_games],
            outcome: vec![0; n_games],
        }
    }

    /// Play the games whose RNG seeds are `seeds` into the batch rows, in parallel.
    fn fill(&mut self, seeds: &[u64], mate_boost: f64) {
        let max_ply = self.max_ply;
        let rows = self.tokens.par_chunks_mut(max_ply.max(1));
        rows.zip(self.lengths.par_iter_mut())
            .zip(self.termination.par_iter_mut())
            .zip(self.outcome.par_iter_mut())
            .zip(seeds.par_iter())
            .for_each(|((((row, len), term), out), &s)| {
                let mut rng = ChaCha8Rng::seed_from_u64(s);
                let game = play_random_game(&mut rng, max_ply, mate_boost);
                let l = game.tokens.len();
                row[..l].copy_from_slice(&game.tokens);
                *len = l as u16;
                *term = game.termination.code();
                *out = game.termination.outcome_token(l);
            });
    }
}

/// Options of [`random_games`].
#[derive(Clone, Copy, Debug)]
pub struct RandomGameOptions {
    /// Ply cap (1 ≤ max_ply ≤ 65535).
    pub max_ply: usize,
    /// Base seed of the call (§3.2).
    pub seed: u64,
    /// Probability of playing an available mate in one (§3.1); 0 = uniform play.
    pub mate_boost: f64,
    /// Keep only games that did not hit the ply cap, generated in rounds (§3.3).
    pub discard_ply_limit: bool,
    /// Index of the first game in the seed's stream: the call returns games
    /// `first_game .. first_game + n` (ignored with `discard_ply_limit`).
    pub first_game: usize,
}

/// Error for options outside their domain.
#[derive(Clone, Debug, PartialEq)]
pub struct OptionError(pub String);

impl std::fmt::Display for OptionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OptionError {}

/// Generate `n_games` uniformly random games (spec §3), in parallel over rayon's pool.
///
/// Game i uses the i-th per-game seed of `opts.seed` (§3.2). With `discard_ply_limit`, games are
/// made in rounds of max(4096, 2n); round k uses base seed `seed + k·round_size`, and games that
/// ended by the ply cap are dropped until n are collected (§3.3).
///
/// Errors: `max_ply` of 0 or above 65,535; `mate_boost` outside [0, 1] or NaN; `max_ply` below
/// 4 with `discard_ply_limit` (every game would hit the cap).
///
/// ```
/// use pawn_engine::random::{random_games, RandomGameOptions};
///
/// let opts = RandomGameOptions { max_ply: 64, seed: 7, mate_boost: 0.0, discard_ply_limit: false, first_game: 0 };
/// let a = random_games(3, opts).unwrap();
/// assert_eq!(a.tokens.len(), 3 * 64);
/// assert!(a.lengths.iter().all(|&l| (1..=64).contains(&l)));
/// // Same seed, same games; game i does not depend on how many games are asked for.
/// let b = random_games(1, opts).unwrap();
/// assert_eq!(a.tokens[..64], b.tokens[..]);
/// ```
pub fn random_games(n_games: usize, opts: RandomGameOptions) -> Result<GameBatch, OptionError> {
    if opts.max_ply == 0 || opts.max_ply > u16::MAX as usize {
        return Err(OptionError(format!("max_ply must be in 1..=65535, got {}", opts.max_ply)));
    }
    if !(0.0..=1.0).contains(&opts.mate_boost) {
        return Err(OptionError(format!("mate_boost must be in [0, 1], got {}", opts.mate_boost)));
    }
    // The shortest game that ends before the cap is fool's mate (4 plies): below that every game
    // hits the cap and the discard loop would never finish.
    if opts.discard_ply_limit && n_games > 0 && opts.max_ply < 4 {
        return Err(OptionError(format!(
            "discard_ply_limit needs max_ply ≥ 4 (no game can end before ply 4), got {}",
            opts.max_ply
        )));
    }
    if !opts.discard_ply_limit {
        let mut batch = GameBatch::with_capacity(n_games, opts.max_ply);
        batch.fill(&game_seeds(opts.seed, opts.first_game, n_games), opts.mate_boost);
        return Ok(batch);
    }
    let round = (2 * n_games).max(4096);
    let mut out = GameBatch::with_capacity(n_games, opts.max_ply);
    let mut kept = 0usize;
    let mut k = 0u64;
    while kept < n_games {
        let base = opts.seed.wrapping_add(k.wrapping_mul(round as u64));
        let mut batch = GameBatch::with_capacity(round, opts.max_ply);
        batch.fill(&game_seeds(base, 0, round), opts.mate_boost);
        for i in 0..round {
            if kept == n_games {
                break;
            }
            if batch.termination[i] == Termination::PlyLimit.code() {
                continue;
            }
            let (src, dst) = (i * opts.max_ply, kept * opts.max_ply);
            out.tokens[dst..dst + opts.max_ply].copy_from_slice(&batch.tokens[src..src + opts.max_ply]);
            out.lengths[kept] = batch.lengths[i];
            out.termination[kept] = batch.termination[i];
            out.outcome[kept] = batch.outcome[i];
            kept += 1;
        }
        k += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chacha8_seeded_from_42_matches_spec_check_values() {
        let mut r = ChaCha8Rng::seed_from_u64(42);
        assert_eq!(r.next_u64(), 12578764544318200737);
        assert_eq!(r.next_u64(), 17529487244874322312);
        assert_eq!(r.next_u64(), 7886285670807131020);
    }

    #[test]
    fn uniform_index_matches_spec_check_values() {
        let mut r = ChaCha8Rng::seed_from_u64(12578764544318200737);
        let got: Vec<u64> = [20, 20, 29].iter().map(|&n| uniform_index(&mut r, n)).collect();
        assert_eq!(got, vec![12, 12, 20]);
    }

    #[test]
    fn games_do_not_depend_on_batch_size_or_threads() {
        let opts = RandomGameOptions { max_ply: 128, seed: 7, mate_boost: 0.0, discard_ply_limit: false, first_game: 0 };
        let big = random_games(40, opts).unwrap();
        let small = random_games(5, opts).unwrap();
        assert_eq!(&big.tokens[..5 * 128], &small.tokens[..]);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let single = pool.install(|| random_games(40, opts).unwrap());
        assert_eq!(single.tokens, big.tokens);
        assert_eq!(single.termination, big.termination);
    }

    #[test]
    fn first_game_offset_selects_a_window_of_the_same_stream() {
        let opts = RandomGameOptions { max_ply: 64, seed: 99, mate_boost: 0.0, discard_ply_limit: false, first_game: 0 };
        let all = random_games(30, opts).unwrap();
        let window = random_games(10, RandomGameOptions { first_game: 17, ..opts }).unwrap();
        assert_eq!(&all.tokens[17 * 64..27 * 64], &window.tokens[..]);
        assert_eq!(&all.lengths[17..27], &window.lengths[..]);
    }

    #[test]
    fn every_game_replays_and_pads_with_pad() {
        let opts = RandomGameOptions { max_ply: 512, seed: 0, mate_boost: 0.0, discard_ply_limit: false, first_game: 0 };
        let b = random_games(64, opts).unwrap();
        for i in 0..64 {
            let l = b.lengths[i] as usize;
            let row = &b.tokens[i * 512..(i + 1) * 512];
            assert!(row[l..].iter().all(|&t| t == PAD_TOKEN));
            let g = crate::game::replay(&row[..l], |_, _| {}).unwrap();
            let t = g.termination(512).unwrap();
            assert_eq!(t.code(), b.termination[i]);
        }
    }

    #[test]
    fn discard_ply_limit_keeps_no_capped_game() {
        let opts = RandomGameOptions { max_ply: 60, seed: 3, mate_boost: 0.0, discard_ply_limit: true, first_game: 0 };
        let b = random_games(10, opts).unwrap();
        assert!(b.termination.iter().all(|&t| t != Termination::PlyLimit.code()));
        assert!(b.lengths.iter().all(|&l| l < 60));
    }

    #[test]
    fn discard_ply_limit_below_four_plies_is_an_error_not_an_endless_loop() {
        let opts = RandomGameOptions { max_ply: 3, seed: 0, mate_boost: 0.0, discard_ply_limit: true, first_game: 0 };
        assert!(random_games(1, opts).is_err());
        assert_eq!(random_games(0, opts).unwrap().lengths.len(), 0);
    }

    #[test]
    fn mate_boost_one_always_takes_the_mate() {
        // With mate_boost = 1 no game can end with a mate-in-one left unplayed; checkmates rise.
        let opts = RandomGameOptions { max_ply: 512, seed: 11, mate_boost: 1.0, discard_ply_limit: false, first_game: 0 };
        let boosted = random_games(200, opts).unwrap();
        let plain = random_games(200, RandomGameOptions { mate_boost: 0.0, ..opts }).unwrap();
        let mates = |b: &GameBatch| b.termination.iter().filter(|&&t| t == 0).count();
        assert!(mates(&boosted) > mates(&plain), "{} vs {}", mates(&boosted), mates(&plain));
    }

    #[test]
    fn option_errors_are_reported() {
        let bad = RandomGameOptions { max_ply: 0, seed: 0, mate_boost: 0.0, discard_ply_limit: false, first_game: 0 };
        assert!(random_games(1, bad).is_err());
        let bad = RandomGameOptions { max_ply: 10, seed: 0, mate_boost: 1.5, discard_ply_limit: false, first_game: 0 };
        assert!(random_games(1, bad).is_err());
    }
}
