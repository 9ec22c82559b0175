//! Random-game bindings (spec §3).

use numpy::{PyArray1, PyArray2, PyArrayMethods};
use super::error::arg_err;
use crate::error::EngineError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::common::ensure_allocatable;
use crate::random::{self, RandomGameOptions};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(random_games, m)?)?;
    Ok(())
}

/// Random games as a dict of NumPy arrays: tokens int16 [N, max_ply] (PAD-filled), lengths
/// int16 [N], termination uint8 [N], outcome int16 [N]. Runs without the GIL.
#[pyfunction]
#[pyo3(signature = (n_games, max_ply=512, seed=0, mate_boost=0.0, discard_ply_limit=false, first_game=0))]
fn random_games<'py>(
    py: Python<'py>,
    n_games: i64,
    max_ply: i64,
    seed: u64,
    mate_boost: f64,
    discard_ply_limit: bool,
    first_game: u64,
) -> PyResult<Bound<'py, PyDict>> {
    if n_games < 0 {
        return Err(arg_err(format!("n_games must be ≥ 0, got {n_games}")));
    }
    if !(1..=u16::MAX as i64).contains(&max_ply) {
        return Err(arg_err(format!("max_ply must be in 1..=65535, got {max_ply}")));
    }
    let n = n_games as usize;
    ensure_allocatable("random_games: tokens", &[n, max_ply as usize], 2 * std::mem::size_of::<u16>())?;
    let opts = RandomGameOptions { max_ply: max_ply as usize, seed, mate_boost, discard_ply_limit, first_game: first_game as usize };
    let batch = py
        .detach(|| random::random_games(n, opts))
        .map_err(EngineError::from)?;
    let d = PyDict::new(py);
    let tokens: Vec<i16> = batch.tokens.iter().map(|&t| t as i16).collect();
    let tokens: Bound<'py, PyArray2<i16>> = PyArray1::from_vec(py, tokens).reshape([n, batch.max_ply])?;
    d.set_item("tokens", tokens)?;
    d.set_item("lengths", PyArray1::from_vec(py, batch.lengths.iter().map(|&l| l as i16).collect()))?;
    d.set_item("termination", PyArray1::from_vec(py, batch.termination))?;
    d.set_item("outcome", PyArray1::from_vec(py, batch.outcome.iter().map(|&o| o as i16).collect()))?;
    Ok(d)
}
