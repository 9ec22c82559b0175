//! Shared conversions for the binding layer: validated views of game batches.

use numpy::{PyReadonlyArray1, PyReadonlyArray2};
use pyo3::exceptions::{PyMemoryError, PyTypeError};

use super::error::arg_err;
use pyo3::prelude::*;

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
/// Raises `TypeError` for a wrong dtype or rank, `ValueError` for mismatched batch sizes, a
/// negative length or a length above T.
pub fn game_batch(tokens: &Bound<'_, PyAny>, lengths: &Bound<'_, PyAny>) -> PyResult<GameBatch> {
    let tok: PyReadonlyArray2<i16> = tokens.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "tokens must be a 2-D int16 NumPy array [n_games, max_ply], got {}",
            describe(tokens)
        ))
    })?;
    let len: PyReadonlyArray1<i16> = lengths.extract().map_err(|_| {
        PyTypeError::new_err(format!(
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

/// Raise `MemoryError` naming `what` and its shape unless an array of `dims` elements of
/// `elem_bytes` bytes each can be allocated: the size must not overflow and the allocator must
/// grant it (tried and released at once). Without this check a huge request (`n_games=10**12`,
/// `vocab_size=2**62`) aborts the process or panics instead of raising.
pub fn ensure_allocatable(what: &str, dims: &[usize], elem_bytes: usize) -> PyResult<()> {
    let bytes = dims.iter().try_fold(elem_bytes, |acc, &d| acc.checked_mul(d));
    let granted = bytes.is_some_and(|b| b <= isize::MAX as usize && Vec::<u8>::new().try_reserve_exact(b).is_ok());
    if granted {
        return Ok(());
    }
    let size = bytes.map_or_else(|| "more than 2**64 bytes".to_owned(), |b| format!("{b} bytes"));
    Err(PyMemoryError::new_err(format!("{what} of shape {dims:?} needs {size}, which cannot be allocated")))
}
