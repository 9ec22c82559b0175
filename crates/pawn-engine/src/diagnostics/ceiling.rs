//! The Monte-Carlo accuracy ceiling (spec `engine.md` §7.5): the best top-1 accuracy any
//! predictor can reach against a uniform random mover, unconditional and outcome-conditioned.

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rayon::prelude::*;
use shakmaty::MoveList;

use crate::game::{GameState, IllegalToken, Termination};
use crate::random::{game_seeds, random_games, uniform_f64, uniform_index, OptionError, RandomGameOptions};

/// 1/N_legal at every position t < len of a game (the best any predictor can do in expectation
/// against a uniform random mover). Errors with the first illegal token.
pub fn inverse_legal_counts(tokens: &[u16]) -> Result<Vec<f64>, IllegalToken> {
    let mut g = GameState::new();
    let mut out = Vec::with_capacity(tokens.len());
    for (ply, &tok) in tokens.iter().enumerate() {
        let moves = g.legal_moves();
        out.push(1.0 / moves.len().max(1) as f64);
        let m = moves
            .iter()
            .find(|m| crate::vocab::move_to_token(m) == Some(tok))
            .copied()
            .ok_or(IllegalToken { ply, token: tok })?;
        g.play_unchecked(&m);
    }
    Ok(out)
}

/// Side-aware outcome class of §7.5 for a game that ended with `term` after `length` plies:
/// 0 white is mated, 1 black is mated, 2 stalemate, 3 75-move, 4 fivefold, 5 insufficient
/// material, 6 ply limit.
pub fn outcome_class(term: Termination, length: usize) -> u8 {
    match term {
        Termination::Checkmate => (length % 2) as u8,
        Termination::Stalemate => 2,
        Termination::SeventyFiveMoveRule => 3,
        Termination::FivefoldRepetition => 4,
        Termination::InsufficientMaterial => 5,
        Termination::PlyLimit => 6,
    }
}

/// The [`Termination`] of a §2.2 code 0–5 (codes above 5 read as PlyLimit).
pub fn termination_from_code(code: u8) -> Termination {
    match code {
        0 => Termination::Checkmate,
        1 => Termination::Stalemate,
        2 => Termination::SeventyFiveMoveRule,
        3 => Termination::FivefoldRepetition,
        4 => Termination::InsufficientMaterial,
        _ => Termination::PlyLimit,
    }
}

/// Options of [`accuracy_ceiling`].
#[derive(Clone, Copy, Debug)]
pub struct CeilingOptions {
    pub n_games: usize,
    pub max_ply: usize,
    /// Random playouts per legal move (0 = no rollout estimates; then the two conditional
    /// rollout estimates equal the unconditional one).
    pub n_rollouts: usize,
    /// Fraction of positions sampled (≥ 1 keeps every position).
    pub sample_rate: f64,
    pub seed: u64,
}

/// Result of [`accuracy_ceiling`]: per-position arrays (one entry per sampled position, in
/// game-then-ply order) and their means.
#[derive(Clone, Debug, Default)]
pub struct Ceiling {
    pub n_games: usize,
    pub ply: Vec<u16>,
    pub game_length: Vec<u16>,
    pub n_legal: Vec<u16>,
    pub unconditional: Vec<f64>,
    pub naive_conditional: Vec<f64>,
    pub conditional: Vec<f64>,
    pub conditional_corrected: Vec<f64>,
    pub outcome: Vec<u8>,
    pub game_idx: Vec<u32>,
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
}

impl Ceiling {
    pub fn unconditional_ceiling(&self) -> f64 {
        mean(&self.unconditional)
    }
    pub fn naive_conditional_ceiling(&self) -> f64 {
        mean(&self.naive_conditional)
    }
    pub fn conditional_ceiling(&self) -> f64 {
        mean(&self.conditional)
    }
    pub fn conditional_corrected_ceiling(&self) -> f64 {
        mean(&self.conditional_corrected)
    }
}

/// Continue a random game from `g` with `rng` until §2.2 ends it; return its outcome class.
fn playout_class(mut g: GameState, rng: &mut ChaCha8Rng, max_ply: usize) -> u8 {
    loop {
        let moves = g.legal_moves();
        if let Some(t) = g.termination_with(moves.len(), max_ply) {
            return outcome_class(t, g.ply());
        }
        let m = moves[uniform_index(rng, moves.len() as u64) as usize];
        g.play_unchecked(&m);
    }
}

/// Per-move hit counts of reaching `class` over `half` playouts per move, seeded move-major from
/// the per-game seeds of `base` (§3.2).
fn rollout_hits(g: &GameState, moves: &MoveList, class: u8, half: usize, base: u64, max_ply: usize) -> Vec<u32> {
    let seeds = game_seeds(base, 0, moves.len() * half);
    moves
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut after = g.clone();
            after.play_unchecked(m);
            (0..half)
                .filter(|&r| {
                    let mut rng = ChaCha8Rng::seed_from_u64(seeds[i * half + r]);
                    playout_class(after.clone(), &mut rng, max_ply) == class
                })
                .count() as u32
        })
        .collect()
}

/// Monte-Carlo accuracy ceiling (§7.5).
///
/// Plays `n_games` random games with derived seeds (§3.2, base `seed`), samples positions
/// t < length with a ChaCha8 generator seeded with `seed + 999` (kept if a uniform float is below
/// `sample_rate`, always when the rate is ≥ 1; scanning games, then plies), and computes per
/// sampled position w: unconditional 1/N_legal; naive conditional 1/(N_legal − moves that end the
/// game at once with another outcome class); and with `n_rollouts > 0` the rollout estimates
/// (halves A and B of max(⌊n/2⌋, 1) playouts per move, base seeds `seed + 1,000,000 + 2000·w`
/// and that + 1000; `conditional` = max p / Σ p, `conditional_corrected` = p_B(argmax p_A) / Σ p
/// with the last maximum winning ties, p over both halves; unconditional when Σ p = 0).
pub fn accuracy_ceiling(opts: CeilingOptions) -> Result<Ceiling, OptionError> {
    let games = random_games(
        opts.n_games,
        RandomGameOptions { max_ply: opts.max_ply, seed: opts.seed, mate_boost: 0.0, discard_ply_limit: false, first_game: 0 },
    )?;
    let mut sampler = ChaCha8Rng::seed_from_u64(opts.seed.wrapping_add(999));
    let mut picks: Vec<(usize, usize)> = Vec::new();
    for b in 0..opts.n_games {
        for t in 0..games.lengths[b] as usize {
            if opts.sample_rate >= 1.0 || uniform_f64(&mut sampler) < opts.sample_rate {
                picks.push((b, t));
            }
        }
    }
    // Group sampled plies by game so each game is replayed once.
    let mut by_game: Vec<Vec<(usize, usize)>> = vec![Vec::new(); opts.n_games];
    for (w, &(b, t)) in picks.iter().enumerate() {
        by_game[b].push((w, t));
    }
    let half = (opts.n_rollouts / 2).max(1);
    let rows: Vec<(usize, [f64; 4], u16)> = by_game
        .par_iter()
        .enumerate()
        .flat_map_iter(|(b, sel)| {
            let mut rows = Vec::with_capacity(sel.len());
            if sel.is_empty() {
                return rows;
            }
            let length = games.lengths[b] as usize;
            let class = outcome_class(termination_from_code(games.termination[b]), length);
            let row = &games.tokens[b * opts.max_ply..b * opts.max_ply + length];
            let mut g = GameState::new();
            let mut next = 0;
            for (t, &tok) in row.iter().enumerate() {
                if next < sel.len() && sel[next].1 == t {
                    let w = sel[next].0;
                    next += 1;
                    let moves = g.legal_moves();
                    let n = moves.len();
                    let unc = 1.0 / n as f64;
                    let other = moves
                        .iter()
                        .filter(|m| {
                            let mut a = g.clone();
                            a.play_unchecked(m);
                            a.termination(opts.max_ply).is_some_and(|term| outcome_class(term, a.ply()) != class)
                        })
                        .count();
                    let naive = if other < n { 1.0 / (n - other) as f64 } else { unc };
                    let (mut cond, mut corr) = (unc, unc);
                    if opts.n_rollouts > 0 {
                        let base = opts.seed.wrapping_add(1_000_000).wrapping_add(2000 * w as u64);
                        let ha = rollout_hits(&g, &moves, class, half, base, opts.max_ply);
                        let hb = rollout_hits(&g, &moves, class, half, base.wrapping_add(1000), opts.max_ply);
                        let p: Vec<f64> =
                            ha.iter().zip(&hb).map(|(&a, &b)| (a + b) as f64 / (2 * half) as f64).collect();
                        let total: f64 = p.iter().sum();
                        if total > 0.0 {
                            cond = p.iter().cloned().fold(0.0, f64::max) / total;
                            let mut arg = 0;
                            for (i, &h) in ha.iter().enumerate() {
                                if h >= ha[arg] {
                                    arg = i;
                                }
                            }
                            corr = (hb[arg] as f64 / half as f64) / total;
                        }
                    }
                    rows.push((w, [unc, naive, cond, corr], n as u16));
                }
                let m = g.find_move(tok).expect("random games are legal");
                g.play_unchecked(&m);
            }
            rows
        })
        .collect();
    let mut rows = rows;
    rows.sort_by_key(|r| r.0);
    let mut c = Ceiling { n_games: opts.n_games, ..Default::default() };
    for (w, v, n) in rows {
        let (b, t) = picks[w];
        let length = games.lengths[b];
        c.ply.push(t as u16);
        c.game_length.push(length);
        c.n_legal.push(n);
        c.unconditional.push(v[0]);
        c.naive_conditional.push(v[1]);
        c.conditional.push(v[2]);
        c.conditional_corrected.push(v[3]);
        c.outcome.push(outcome_class(termination_from_code(games.termination[b]), length as usize));
        c.game_idx.push(b as u32);
    }
    Ok(c)
}
