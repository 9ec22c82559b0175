//! Quota-driven diagnostic sets (spec `engine.md` §7.3): random games kept until each edge case
//! has its quota of positions.

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rayon::prelude::*;

use super::edge_cases::{edge_stats, EdgeStats};
use crate::game::Termination;
use crate::random::play_random_game;
use crate::vocab::PAD_TOKEN;

/// Output of [`diagnostic_sets`]; row-major arrays over the N accepted games.
#[derive(Clone, Debug)]
pub struct DiagnosticSets {
    pub n_games: usize,
    pub max_ply: usize,
    /// [N × max_ply] move tokens, PAD after each game's end.
    pub tokens: Vec<u16>,
    pub lengths: Vec<u16>,
    pub termination: Vec<u8>,
    /// [N × max_ply] edge bits as in [`edge_stats_batch`].
    pub per_ply: Vec<u64>,
    /// OR of the stored `per_ply` entries at even / odd t (the final position is included only
    /// when it fits, i.e. length < max_ply).
    pub white: Vec<u64>,
    pub black: Vec<u64>,
    /// One-hot mask of the (bit, white) quota the game was credited to, else 0.
    pub assignment_white: Vec<u64>,
    pub assignment_black: Vec<u64>,
    pub filled_white: [i32; 64],
    pub filled_black: [i32; 64],
    /// Games simulated in total (accepted or not).
    pub n_simulated: usize,
}

/// Generate games whose edge-case bits fill per-bit quotas (§7.3).
///
/// Games are simulated in batches of 256 with plain sequential seeds (game g plays with a
/// ChaCha8 generator seeded from `seed + g`, no mate boost) until `total_games` are accepted or
/// ⌊total_games × max_simulated_factor⌋ were simulated. Per game, in order: the generator is
/// selective when the remaining slots are ≤ the remaining need Σ max(quota − filled, 0) over all
/// bits and colours; the candidate is the (bit, colour) present in the game's accumulators with
/// the largest positive need (bits 0→63, white before black, later candidates win ties).
/// Selective mode rejects games without a candidate; otherwise the game is accepted and credited
/// to its candidate, if any. May return fewer than `total_games` games.
pub fn diagnostic_sets(
    quotas_white: &[i32; 64],
    quotas_black: &[i32; 64],
    total_games: usize,
    max_ply: usize,
    seed: u64,
    max_simulated_factor: f64,
) -> DiagnosticSets {
    let max_sim = (total_games as f64 * max_simulated_factor).floor().max(0.0) as usize;
    let mut out = DiagnosticSets {
        n_games: 0,
        max_ply,
        tokens: Vec::new(),
        lengths: Vec::new(),
        termination: Vec::new(),
        per_ply: Vec::new(),
        white: Vec::new(),
        black: Vec::new(),
        assignment_white: Vec::new(),
        assignment_black: Vec::new(),
        filled_white: [0; 64],
        filled_black: [0; 64],
        n_simulated: 0,
    };
    while out.n_games < total_games && out.n_simulated < max_sim {
        let batch = 256.min(max_sim - out.n_simulated);
        let first = out.n_simulated as u64;
        let games: Vec<(Vec<u16>, Termination, EdgeStats)> = (0..batch as u64)
            .into_par_iter()
            .map(|i| {
                let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_add(first + i));
                let game = play_random_game(&mut rng, max_ply, 0.0);
                let stats = edge_stats(&game.tokens).expect("random games are legal");
                (game.tokens, game.termination, stats)
            })
            .collect();
        for (tokens, term, stats) in games {
            if out.n_games == total_games {
                break;
            }
            out.n_simulated += 1;
            let need = |q: &[i32; 64], f: &[i32; 64], b: usize| (q[b] - f[b]).max(0) as i64;
            let remaining_need: i64 = (0..64)
                .map(|b| need(quotas_white, &out.filled_white, b) + need(quotas_black, &out.filled_black, b))
                .sum();
            let selective = ((total_games - out.n_games) as i64) <= remaining_need;
            let mut cand: Option<(usize, bool)> = None; // (bit, is_white)
            let mut best = 0i64;
            for b in 0..64 {
                for white in [true, false] {
                    let (acc, n) = if white {
                        (stats.white, need(quotas_white, &out.filled_white, b))
                    } else {
                        (stats.black, need(quotas_black, &out.filled_black, b))
                    };
                    if acc & (1u64 << b) != 0 && n > 0 && n >= best {
                        best = n;
                        cand = Some((b, white));
                    }
                }
            }
            if selective && cand.is_none() {
                continue;
            }
            let (mut aw, mut ab) = (0u64, 0u64);
            match cand {
                Some((b, true)) => {
                    out.filled_white[b] += 1;
                    aw = 1 << b;
                }
                Some((b, false)) => {
                    out.filled_black[b] += 1;
                    ab = 1 << b;
                }
                None => {}
            }
            let l = tokens.len();
            let mut row = vec![PAD_TOKEN; max_ply];
            row[..l].copy_from_slice(&tokens);
            let k = stats.positions.len().min(max_ply);
            let mut stored = vec![0u64; max_ply];
            stored[..k].copy_from_slice(&stats.positions[..k]);
            let (mut w, mut bl) = (0u64, 0u64);
            for (t, &bits) in stored[..k].iter().enumerate() {
                if t % 2 == 0 {
                    w |= bits;
                } else {
                    bl |= bits;
                }
            }
            out.tokens.extend_from_slice(&row);
            out.per_ply.extend_from_slice(&stored);
            out.lengths.push(l as u16);
            out.termination.push(term.code());
            out.white.push(w);
            out.black.push(bl);
            out.assignment_white.push(aw);
            out.assignment_black.push(ab);
            out.n_games += 1;
        }
    }
    out
}
