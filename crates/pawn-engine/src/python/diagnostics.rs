//! Diagnostics bindings (spec §7): validation, edge-case bits and statistics, diagnostic sets,
//! accuracy ceiling.
// Bindings return tuples of NumPy arrays, which clippy counts as complex types.
#![allow(clippy::type_complexity)]

use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::common::{as_dict, describe, ensure_allocatable, game_batch, item};
use super::error::{arg_err, dtype_err};
use crate::error::EngineError;
use crate::diagnostics as d;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(validate_games, m)?)?;
    m.add_function(wrap_pyfunction!(edge_case_bits, m)?)?;
    m.add_function(wrap_pyfunction!(edge_stats_per_ply, m)?)?;
    m.add_function(wrap_pyfunction!(generate_diagnostic_sets, m)?)?;
    m.add_function(wrap_pyfunction!(accuracy_ceiling, m)?)?;
    m.add_function(wrap_pyfunction!(accuracy_ceiling_of, m)?)?;
    m.add_class::<DiagnosticSets>()?;
    m.add_class::<AccuracyCeiling>()?;
    Ok(())
}

/// A 1-D NumPy array owning `v`.
fn vec1<T: numpy::Element>(py: Python<'_>, v: Vec<T>) -> Py<PyArray1<T>> {
    PyArray1::from_vec(py, v).unbind()
}

fn array2<'py, T: numpy::Element>(py: Python<'py>, v: Vec<T>, rows: usize, cols: usize) -> PyResult<Bound<'py, PyArray2<T>>> {
    PyArray1::from_vec(py, v).reshape([rows, cols])
}

/// Legality check of every game (§7.4). `tokens` int16 [B, T], `lengths` int16 [B] →
/// `(is_valid bool [B], first_illegal int16 [B])`, −1 when all moves are legal. Never raises on
/// illegal moves (PAD/outcome tokens inside the length are illegal); TypeError/ValueError on a
/// wrong dtype, shape or length.
#[pyfunction]
fn validate_games<'py>(
    py: Python<'py>,
    tokens: &Bound<'py, PyAny>,
    lengths: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyArray1<bool>>, Bound<'py, PyArray1<i16>>)> {
    let b = game_batch(tokens, lengths)?;
    let res = py.detach(|| d::validate_games(&b.tokens, &b.lengths, b.max_ply));
    let valid: Vec<bool> = res.iter().map(|r| r.is_none()).collect();
    let first: Vec<i16> = res.iter().map(|r| r.map_or(-1, |p| p as i16)).collect();
    Ok((PyArray1::from_vec(py, valid), PyArray1::from_vec(py, first)))
}

/// The 43 edge-case bits of §7.1 as a dict name → uint64 mask (`1 << bit`), in bit order.
#[pyfunction]
fn edge_case_bits(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for (name, mask) in d::edge_case_bits() {
        out.set_item(name, mask)?;
    }
    Ok(out)
}

/// Per-ply edge statistics (§7.2). `tokens` int16 [B, T], `lengths` int16 [B] →
/// `(per_ply uint64 [B, T], white uint64 [B], black uint64 [B])`. ValueError naming the game and
/// ply of the first illegal move.
#[pyfunction]
fn edge_stats_per_ply<'py>(
    py: Python<'py>,
    tokens: &Bound<'py, PyAny>,
    lengths: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyArray2<u64>>, Bound<'py, PyArray1<u64>>, Bound<'py, PyArray1<u64>>)> {
    let b = game_batch(tokens, lengths)?;
    let (per_ply, white, black) = py
        .detach(|| d::edge_stats_batch(&b.tokens, &b.lengths, b.max_ply))
        .map_err(EngineError::from)?;
    Ok((array2(py, per_ply, b.n_games, b.max_ply)?, PyArray1::from_vec(py, white), PyArray1::from_vec(py, black)))
}

fn quotas(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<[i32; 64]> {
    let a: PyReadonlyArray1<i32> = obj.extract().map_err(|_| {
        dtype_err(format!("{name} must be a 1-D int32 NumPy array of ≥ 64 entries, got {}", describe(obj)))
    })?;
    let v = a.as_array();
    if v.len() < 64 {
        return Err(arg_err(format!("{name} has {} entries; at least 64 are needed", v.len())));
    }
    let mut q = [0i32; 64];
    for (i, x) in v.iter().take(64).enumerate() {
        q[i] = *x;
    }
    Ok(q)
}

const SET_FIELDS: [&str; 11] = [
    "move_ids", "game_lengths", "termination_codes", "per_ply_stats", "white", "black", "quota_assignment_white",
    "quota_assignment_black", "quotas_filled_white", "quotas_filled_black", "n_simulated",
];

/// Random games selected to fill per-bit edge-case quotas (spec §7.3; N ≤ `total_games` games,
/// T = `max_ply`). Returned by `generate_diagnostic_sets`; read-only. `sets["move_ids"]` and
/// `to_dict()` give dict-style access.
#[pyclass(name = "DiagnosticSets", module = "pawn._engine", frozen)]
pub struct DiagnosticSets {
    /// int16 [N, T] move tokens, PAD (1968) after each game's end.
    #[pyo3(get)]
    move_ids: Py<PyArray2<i16>>,
    /// int16 [N] plies of each game.
    #[pyo3(get)]
    game_lengths: Py<PyArray1<i16>>,
    /// uint8 [N] termination codes of spec §2.2.
    #[pyo3(get)]
    termination_codes: Py<PyArray1<u8>>,
    /// uint64 [N, T] edge-case bits per position, as `edge_stats_per_ply`.
    #[pyo3(get)]
    per_ply_stats: Py<PyArray2<u64>>,
    /// uint64 [N] OR of the stored per-ply entries with white to move.
    #[pyo3(get)]
    white: Py<PyArray1<u64>>,
    /// uint64 [N] OR of the stored per-ply entries with black to move.
    #[pyo3(get)]
    black: Py<PyArray1<u64>>,
    /// uint64 [N] one-hot bit of the white quota the game was credited to, else 0.
    #[pyo3(get)]
    quota_assignment_white: Py<PyArray1<u64>>,
    /// uint64 [N] one-hot bit of the black quota the game was credited to, else 0.
    #[pyo3(get)]
    quota_assignment_black: Py<PyArray1<u64>>,
    /// int32 [64] games credited per white quota bit.
    #[pyo3(get)]
    quotas_filled_white: Py<PyArray1<i32>>,
    /// int32 [64] games credited per black quota bit.
    #[pyo3(get)]
    quotas_filled_black: Py<PyArray1<i32>>,
    /// Games simulated in total, accepted or not.
    #[pyo3(get)]
    n_simulated: usize,
    n_games: usize,
}

#[pymethods]
impl DiagnosticSets {
    fn __len__(&self) -> usize {
        self.n_games
    }

    fn __getitem__(slf: &Bound<'_, Self>, key: &str) -> PyResult<Py<PyAny>> {
        item(slf.as_any(), &SET_FIELDS, key)
    }

    /// Every field as a dict.
    fn to_dict<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        as_dict(slf.as_any(), &SET_FIELDS)
    }

    fn __repr__(&self) -> String {
        format!("DiagnosticSets(n={}, n_simulated={})", self.n_games, self.n_simulated)
    }
}

/// Quota-driven diagnostic sets (§7.3) as a `DiagnosticSets` record; see
/// `pawn.engine.diagnostics.generate_diagnostic_sets`.
#[pyfunction]
#[pyo3(signature = (quotas_white, quotas_black, total_games, max_ply=256, seed=42, max_simulated_factor=100.0))]
fn generate_diagnostic_sets<'py>(
    py: Python<'py>,
    quotas_white: &Bound<'py, PyAny>,
    quotas_black: &Bound<'py, PyAny>,
    total_games: usize,
    max_ply: usize,
    seed: u64,
    max_simulated_factor: f64,
) -> PyResult<DiagnosticSets> {
    let qw = quotas(quotas_white, "quotas_white")?;
    let qb = quotas(quotas_black, "quotas_black")?;
    if max_ply == 0 || max_ply > i16::MAX as usize {
        return Err(arg_err(format!("max_ply must be in 1..=32767, got {max_ply}")));
    }
    if !(max_simulated_factor >= 0.0 && max_simulated_factor.is_finite()) {
        return Err(arg_err(format!(
            "max_simulated_factor must be a finite number ≥ 0, got {max_simulated_factor}"
        )));
    }
    // Up to total_games rows of int16 tokens and uint64 per-ply stats.
    ensure_allocatable("generate_diagnostic_sets: games", &[total_games, max_ply], 2 + 8)?;
    let s = py.detach(|| d::diagnostic_sets(&qw, &qb, total_games, max_ply, seed, max_simulated_factor));
    let n = s.n_games;
    let tokens: Vec<i16> = s.tokens.iter().map(|&t| t as i16).collect();
    Ok(DiagnosticSets {
        move_ids: array2(py, tokens, n, max_ply)?.unbind(),
        game_lengths: vec1(py, s.lengths.iter().map(|&l| l as i16).collect()),
        termination_codes: vec1(py, s.termination),
        per_ply_stats: array2(py, s.per_ply, n, max_ply)?.unbind(),
        white: vec1(py, s.white),
        black: vec1(py, s.black),
        quota_assignment_white: vec1(py, s.assignment_white),
        quota_assignment_black: vec1(py, s.assignment_black),
        quotas_filled_white: vec1(py, s.filled_white.to_vec()),
        quotas_filled_black: vec1(py, s.filled_black.to_vec()),
        n_simulated: s.n_simulated,
        n_games: n,
    })
}

const CEILING_FIELDS: [&str; 17] = [
    "n_positions", "n_games", "n_rollouts", "sample_rate", "unconditional_ceiling", "naive_conditional_ceiling",
    "conditional_ceiling", "conditional_corrected_ceiling", "ply", "game_length", "n_legal", "unconditional",
    "naive_conditional", "conditional", "conditional_corrected", "outcome", "game_idx",
];

/// Monte-Carlo top-1 accuracy ceiling of uniformly random games (spec §7.5): per sampled
/// position (P of them, game-then-ply order) the estimates, and their means. Returned by
/// `accuracy_ceiling`; read-only. `r["ply"]` and `to_dict()` give dict-style access.
#[pyclass(name = "AccuracyCeiling", module = "pawn._engine", frozen)]
pub struct AccuracyCeiling {
    /// Number P of positions sampled.
    #[pyo3(get)]
    n_positions: usize,
    /// Games played.
    #[pyo3(get)]
    n_games: usize,
    /// Random playouts per legal move (0 = no rollout estimates).
    #[pyo3(get)]
    n_rollouts: usize,
    /// Fraction of positions sampled.
    #[pyo3(get)]
    sample_rate: f64,
    /// Mean of `unconditional`.
    #[pyo3(get)]
    unconditional_ceiling: f64,
    /// Mean of `naive_conditional`.
    #[pyo3(get)]
    naive_conditional_ceiling: f64,
    /// Mean of `conditional`.
    #[pyo3(get)]
    conditional_ceiling: f64,
    /// Mean of `conditional_corrected`.
    #[pyo3(get)]
    conditional_corrected_ceiling: f64,
    /// uint16 [P] ply of the position (0 = start position).
    #[pyo3(get)]
    ply: Py<PyArray1<u16>>,
    /// uint16 [P] length of the position's game.
    #[pyo3(get)]
    game_length: Py<PyArray1<u16>>,
    /// uint16 [P] legal moves in the position.
    #[pyo3(get)]
    n_legal: Py<PyArray1<u16>>,
    /// float64 [P] 1/N_legal.
    #[pyo3(get)]
    unconditional: Py<PyArray1<f64>>,
    /// float64 [P] 1/(N_legal − moves that end the game at once with another outcome class).
    #[pyo3(get)]
    naive_conditional: Py<PyArray1<f64>>,
    /// float64 [P] rollout estimate (equals `unconditional` without rollouts).
    #[pyo3(get)]
    conditional: Py<PyArray1<f64>>,
    /// float64 [P] split-half corrected rollout estimate (equals `unconditional` without rollouts).
    #[pyo3(get)]
    conditional_corrected: Py<PyArray1<f64>>,
    /// uint8 [P] outcome class of the game: 0 white mated, 1 black mated, 2 stalemate, 3 75-move,
    /// 4 fivefold, 5 insufficient material, 6 ply limit.
    #[pyo3(get)]
    outcome: Py<PyArray1<u8>>,
    /// uint32 [P] index of the position's game.
    #[pyo3(get)]
    game_idx: Py<PyArray1<u32>>,
}

#[pymethods]
impl AccuracyCeiling {
    fn __getitem__(slf: &Bound<'_, Self>, key: &str) -> PyResult<Py<PyAny>> {
        item(slf.as_any(), &CEILING_FIELDS, key)
    }

    /// Every field as a dict.
    fn to_dict<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        as_dict(slf.as_any(), &CEILING_FIELDS)
    }

    fn __repr__(&self) -> String {
        format!(
            "AccuracyCeiling(n_positions={}, unconditional_ceiling={:.4})",
            self.n_positions, self.unconditional_ceiling
        )
    }
}

/// Monte-Carlo accuracy ceiling (§7.5) as an `AccuracyCeiling` record; see
/// `pawn.engine.diagnostics.accuracy_ceiling`.
#[pyfunction]
#[pyo3(signature = (n_games=1000, max_ply=512, sample_rate=0.01, seed=77777, n_rollouts=0))]
fn accuracy_ceiling(
    py: Python<'_>,
    n_games: usize,
    max_ply: usize,
    sample_rate: f64,
    seed: u64,
    n_rollouts: usize,
) -> PyResult<AccuracyCeiling> {
    if sample_rate.is_nan() || sample_rate <= 0.0 {
        return Err(arg_err(format!("sample_rate must be > 0, got {sample_rate}")));
    }
    ensure_allocatable("accuracy_ceiling: games", &[n_games, max_ply], 2 * std::mem::size_of::<u16>())?;
    let opts = d::CeilingOptions { n_games, max_ply, n_rollouts, sample_rate, seed };
    let c = py.detach(|| d::accuracy_ceiling(opts)).map_err(EngineError::from)?;
    Ok(AccuracyCeiling {
        n_positions: c.unconditional.len(),
        n_games: c.n_games,
        n_rollouts,
        sample_rate,
        unconditional_ceiling: c.unconditional_ceiling(),
        naive_conditional_ceiling: c.naive_conditional_ceiling(),
        conditional_ceiling: c.conditional_ceiling(),
        conditional_corrected_ceiling: c.conditional_corrected_ceiling(),
        ply: vec1(py, c.ply),
        game_length: vec1(py, c.game_length),
        n_legal: vec1(py, c.n_legal),
        unconditional: vec1(py, c.unconditional),
        naive_conditional: vec1(py, c.naive_conditional),
        conditional: vec1(py, c.conditional),
        conditional_corrected: vec1(py, c.conditional_corrected),
        outcome: vec1(py, c.outcome),
        game_idx: vec1(py, c.game_idx),
    })
}

/// Per-position ceiling of given games: `tokens` int16 [B, T], `lengths` int16 [B] → float64
/// [B, T] with 1/N_legal at t < length and 0 beyond. ValueError naming game and ply of an
/// illegal move.
#[pyfunction]
fn accuracy_ceiling_of<'py>(
    py: Python<'py>,
    tokens: &Bound<'py, PyAny>,
    lengths: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    use rayon::prelude::*;
    let b = game_batch(tokens, lengths)?;
    let rows: Result<Vec<Vec<f64>>, (usize, crate::game::IllegalToken)> = py.detach(|| {
        (0..b.n_games)
            .into_par_iter()
            .map(|g| d::inverse_legal_counts(b.game(g)).map_err(|e| (g, e)))
            .collect()
    });
    let rows = rows.map_err(EngineError::from)?;
    let mut out = vec![0.0f64; b.n_games * b.max_ply];
    for (g, r) in rows.iter().enumerate() {
        out[g * b.max_ply..g * b.max_ply + r.len()].copy_from_slice(r);
    }
    array2(py, out, b.n_games, b.max_ply)
}
