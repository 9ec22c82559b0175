//! Diagnostics bindings (spec §7): validation, edge-case bits and statistics, diagnostic sets,
//! accuracy ceiling.
// Bindings return tuples of NumPy arrays, which clippy counts as complex types.
#![allow(clippy::type_complexity)]

use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::common::{describe, ensure_allocatable, game_batch};
use super::error::arg_err;
use crate::error::EngineError;
use crate::diagnostics as d;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(validate_games, m)?)?;
    m.add_function(wrap_pyfunction!(edge_case_bits, m)?)?;
    m.add_function(wrap_pyfunction!(edge_stats_per_ply, m)?)?;
    m.add_function(wrap_pyfunction!(generate_diagnostic_sets, m)?)?;
    m.add_function(wrap_pyfunction!(accuracy_ceiling, m)?)?;
    m.add_function(wrap_pyfunction!(accuracy_ceiling_of, m)?)?;
    Ok(())
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
        PyTypeError::new_err(format!("{name} must be a 1-D int32 NumPy array of ≥ 64 entries, got {}", describe(obj)))
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

/// Quota-driven diagnostic sets (§7.3); see `pawn.engine.diagnostics.generate_diagnostic_sets`.
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
) -> PyResult<Bound<'py, PyDict>> {
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
    let out = PyDict::new(py);
    let tokens: Vec<i16> = s.tokens.iter().map(|&t| t as i16).collect();
    out.set_item("move_ids", array2(py, tokens, n, max_ply)?)?;
    out.set_item("game_lengths", PyArray1::from_vec(py, s.lengths.iter().map(|&l| l as i16).collect()))?;
    out.set_item("termination_codes", PyArray1::from_vec(py, s.termination))?;
    out.set_item("per_ply_stats", array2(py, s.per_ply, n, max_ply)?)?;
    out.set_item("white", PyArray1::from_vec(py, s.white))?;
    out.set_item("black", PyArray1::from_vec(py, s.black))?;
    out.set_item("quota_assignment_white", PyArray1::from_vec(py, s.assignment_white))?;
    out.set_item("quota_assignment_black", PyArray1::from_vec(py, s.assignment_black))?;
    out.set_item("quotas_filled_white", PyArray1::from_vec(py, s.filled_white.to_vec()))?;
    out.set_item("quotas_filled_black", PyArray1::from_vec(py, s.filled_black.to_vec()))?;
    out.set_item("n_simulated", s.n_simulated)?;
    Ok(out)
}

/// Monte-Carlo accuracy ceiling (§7.5); see `pawn.engine.diagnostics.accuracy_ceiling`.
#[pyfunction]
#[pyo3(signature = (n_games=1000, max_ply=512, sample_rate=0.01, seed=77777, n_rollouts=0))]
fn accuracy_ceiling<'py>(
    py: Python<'py>,
    n_games: usize,
    max_ply: usize,
    sample_rate: f64,
    seed: u64,
    n_rollouts: usize,
) -> PyResult<Bound<'py, PyDict>> {
    if sample_rate.is_nan() || sample_rate <= 0.0 {
        return Err(arg_err(format!("sample_rate must be > 0, got {sample_rate}")));
    }
    ensure_allocatable("accuracy_ceiling: games", &[n_games, max_ply], 2 * std::mem::size_of::<u16>())?;
    let opts = d::CeilingOptions { n_games, max_ply, n_rollouts, sample_rate, seed };
    let c = py.detach(|| d::accuracy_ceiling(opts)).map_err(EngineError::from)?;
    let out = PyDict::new(py);
    out.set_item("n_positions", c.unconditional.len())?;
    out.set_item("n_games", c.n_games)?;
    out.set_item("n_rollouts", n_rollouts)?;
    out.set_item("sample_rate", sample_rate)?;
    out.set_item("unconditional_ceiling", c.unconditional_ceiling())?;
    out.set_item("naive_conditional_ceiling", c.naive_conditional_ceiling())?;
    out.set_item("conditional_ceiling", c.conditional_ceiling())?;
    out.set_item("conditional_corrected_ceiling", c.conditional_corrected_ceiling())?;
    out.set_item("ply", PyArray1::from_vec(py, c.ply))?;
    out.set_item("game_length", PyArray1::from_vec(py, c.game_length))?;
    out.set_item("n_legal", PyArray1::from_vec(py, c.n_legal))?;
    out.set_item("unconditional", PyArray1::from_vec(py, c.unconditional))?;
    out.set_item("naive_conditional", PyArray1::from_vec(py, c.naive_conditional))?;
    out.set_item("conditional", PyArray1::from_vec(py, c.conditional))?;
    out.set_item("conditional_corrected", PyArray1::from_vec(py, c.conditional_corrected))?;
    out.set_item("outcome", PyArray1::from_vec(py, c.outcome))?;
    out.set_item("game_idx", PyArray1::from_vec(py, c.game_idx))?;
    Ok(out)
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
