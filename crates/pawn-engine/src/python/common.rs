//! Shared conversions for the binding layer: validated views of game batches, dict-style access
//! to the `#[pyclass]` records.

use numpy::{PyReadonlyArray1, PyReadonlyArray2};
use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::error::{arg_err, dtype_err};
use crate::error::EngineError;

/// A batch of games borrowed from NumPy: `tokens` int16 [B, T] row-major, `lengths` int16 [B].
pub struct GameBatch {
    pub tokens: Vec<u16>,
    pub lengths: Vec<usize>,
    pub n_games: usize,
    pub max_ply: usize,
}

impl GameBatch {
    /// Row `b` of the token matrix, cut to the game's length.
    pub fn game(&self, b: usize) -> &[u16] {
        let start = b * self.max_ply;
        &self.tokens[start..start + self.lengths[b]]
    }
}

/// Validate and copy `(tokens int16 [B, T], lengths int16 [B])`.
///
/// Raises `EngineTypeError` (a `TypeError`) for a wrong dtype or rank, `EngineUsageError` (a
/// `ValueError`) for mismatched batch sizes, a negative length or a length above T.
pub fn game_batch(tokens: &Bound<'_, PyAny>, lengths: &Bound<'_, PyAny>) -> PyResult<GameBatch> {
    let tok: PyReadonlyArray2<i16> = tokens.extract().map_err(|_| {
        dtype_err(format!(
            "tokens must be a 2-D int16 NumPy array [n_games, max_ply], got {}",
            describe(tokens)
        ))
    })?;
    let len: PyReadonlyArray1<i16> = lengths.extract().map_err(|_| {
        dtype_err(format!(
            "lengths must be a 1-D int16 NumPy array [n_games], got {}",
            describe(lengths)
        ))
    })?;
    let view = tok.as_array();
    let (n_games, max_ply) = view.dim();
    let lens = len.as_array();
    if lens.len() != n_games {
        return Err(arg_err(format!(
            "lengths has {} entries but tokens has {} games",
            lens.len(),
            n_games
        )));
    }
    let mut lengths_out = Vec::with_capacity(n_games);
    for (b, &l) in lens.iter().enumerate() {
        if l < 0 || l as usize > max_ply {
            return Err(arg_err(format!(
                "lengths[{b}] = {l} is outside 0..={max_ply} (the token array's ply axis)"
            )));
        }
        lengths_out.push(l as usize);
    }
    let tokens_out: Vec<u16> = view.iter().map(|&t| t as u16).collect();
    Ok(GameBatch { tokens: tokens_out, lengths: lengths_out, n_games, max_ply })
}

/// Short description of a Python object for error messages: dtype and shape for arrays.
pub fn describe(obj: &Bound<'_, PyAny>) -> String {
    let dtype = obj.getattr("dtype").map(|d| d.to_string()).ok();
    let shape = obj.getattr("shape").map(|s| s.to_string()).ok();
    match (dtype, shape) {
        (Some(d), Some(s)) => format!("array of dtype {d} and shape {s}"),
        _ => format!("an object of type {}", obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()),
    }
}

/// [`EngineError::check_allocatable`] as a Python exception (`EngineMemoryError`, a
/// `MemoryError`) naming `what` and its shape. Without this check a huge request
/// (`n_games=10**12`, `vocab_size=2**62`) aborts the process or panics instead of raising.
pub fn ensure_allocatable(what: &str, dims: &[usize], elem_bytes: usize) -> PyResult<()> {
    Ok(EngineError::check_allocatable(what, dims, elem_bytes)?)
}

/// `getattr(record, key)` for a field name in `fields`, else KeyError: the `record["field"]`
/// access every record keeps from the dicts the engine returned before.
pub fn item(obj: &Bound<'_, PyAny>, fields: &[&str], key: &str) -> PyResult<Py<PyAny>> {
    if fields.contains(&key) {
        Ok(obj.getattr(key)?.unbind())
    } else {
        Err(PyKeyError::new_err(key.to_owned()))
    }
}

/// `{field: value}` for every field in `fields`, in that order (a record's `to_dict()`).
pub fn as_dict<'py>(obj: &Bound<'py, PyAny>, fields: &[&str]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(obj.py());
    for f in fields {
        d.set_item(f, obj.getattr(*f)?)?;
    }
    Ok(d)
}
