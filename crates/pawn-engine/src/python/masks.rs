//! Bindings for legal-move masks, board states (spec §4, §5) and perft.

use numpy::ndarray::{Array2, Array3, Array4};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyArray3, PyArray4};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::common::{ensure_allocatable, game_batch, GameBatch};
use super::error::arg_err;
use crate::error::EngineError;
use crate::masks::BatchError;
use crate::{board, masks, vocab};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(legal_move_masks, m)?)?;
    m.add_function(wrap_pyfunction!(legal_move_masks_sparse, m)?)?;
    m.add_function(wrap_pyfunction!(legal_move_grid, m)?)?;
    m.add_function(wrap_pyfunction!(legal_move_counts, m)?)?;
    m.add_function(wrap_pyfunction!(board_states, m)?)?;
    m.add_function(wrap_pyfunction!(perft, m)?)?;
    Ok(())
}

/// `EngineInputError` (a `ValueError`) naming the game, the ply and the token as the caller
/// passed it (int16): [`EngineError::Replay`].
fn batch_error(e: BatchError) -> PyErr {
    EngineError::Replay(e).into()
}

fn shape_err(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("internal shape error: {e}"))
}

/// Each game's tokens cut to its length.
fn games(gb: &GameBatch) -> Vec<&[u16]> {
    (0..gb.n_games).map(|b| gb.game(b)).collect()
}

/// Dense legal-token masks bool [B, T, vocab_size] (spec §4); PAD column set at t = length when
/// length < T and vocab_size > 1968. Raises TypeError/ValueError for bad input.
#[pyfunction]
#[pyo3(signature = (tokens, lengths, vocab_size = 1969))]
fn legal_move_masks<'py>(
    py: Python<'py>,
    tokens: &Bound<'py, PyAny>,
    lengths: &Bound<'py, PyAny>,
    vocab_size: i64,
) -> PyResult<Bound<'py, PyArray3<bool>>> {
    if vocab_size < vocab::NUM_ACTIONS as i64 {
        return Err(arg_err(format!(
            "vocab_size = {vocab_size} must be 1968 (no PAD column) or at least 1969"
        )));
    }
    let v = vocab_size as usize;
    let gb = game_batch(tokens, lengths)?;
    let (b, t) = (gb.n_games, gb.max_ply);
    ensure_allocatable("legal_move_masks: mask", &[b, t, v], 1)?;
    let flat = py.detach(|| masks::legal_token_masks(&games(&gb), t, v)).map_err(batch_error)?;
    Ok(Array3::from_shape_vec((b, t, v), flat).map_err(shape_err)?.into_pyarray(py))
}

/// Sparse legal-token masks: int64 flat indices b·seq_len·V + t·V + token (spec §4).
#[pyfunction]
#[pyo3(signature = (tokens, lengths, seq_len = None, vocab_size = 1980))]
fn legal_move_masks_sparse<'py>(
    py: Python<'py>,
    tokens: &Bound<'py, PyAny>,
    lengths: &Bound<'py, PyAny>,
    seq_len: Option<i64>,
    vocab_size: i64,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    if vocab_size <= vocab::PAD_TOKEN as i64 {
        return Err(arg_err(format!(
            "vocab_size = {vocab_size} must exceed 1968: the sparse form always writes a PAD entry"
        )));
    }
    let gb = game_batch(tokens, lengths)?;
    let seq_len = match seq_len {
        None => gb.max_ply,
        Some(s) => {
            let longest = gb.lengths.iter().copied().max().unwrap_or(0);
            if s < 0 || (s as usize) < longest {
                return Err(arg_err(format!(
                    "seq_len = {s} must be at least the longest game length ({longest})"
                )));
            }
            s as usize
        }
    };
    let v = vocab_size as usize;
    // Flat indices run up to B·seq_len·V; beyond i64 they would wrap silently.
    let span = [gb.n_games, seq_len, v].iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    if span.is_none_or(|n| n > i64::MAX as usize) {
        return Err(arg_err(format!(
            "n_games × seq_len × vocab_size = {} × {seq_len} × {v} exceeds the int64 range of the flat indices",
            gb.n_games
        )));
    }
    let flat = py.detach(|| masks::legal_token_masks_sparse(&games(&gb), seq_len, v)).map_err(batch_error)?;
    Ok(PyArray1::from_vec(py, flat))
}

/// `(grid, promo)` arrays of [`legal_move_grid`].
type GridPair<'py> = (Bound<'py, PyArray3<u64>>, Bound<'py, PyArray4<bool>>);

/// Legal-move grid: (grid uint64 [B, T, 64], promo bool [B, T, 44, 4]) (spec §4).
#[pyfunction]
fn legal_move_grid<'py>(
    py: Python<'py>,
    tokens: &Bound<'py, PyAny>,
    lengths: &Bound<'py, PyAny>,
) -> PyResult<GridPair<'py>> {
    let gb = game_batch(tokens, lengths)?;
    let (b, t) = (gb.n_games, gb.max_ply);
    ensure_allocatable("legal_move_grid: grid and promo", &[b, t], 64 * 8 + 44 * 4)?;
    let (grid, promo) = py.detach(|| masks::legal_move_grid(&games(&gb), t)).map_err(batch_error)?;
    Ok((
        Array3::from_shape_vec((b, t, 64), grid).map_err(shape_err)?.into_pyarray(py),
        Array4::from_shape_vec((b, t, 44, 4), promo).map_err(shape_err)?.into_pyarray(py),
    ))
}

/// Number of legal moves before move t: int16 [B, T], 0 for t ≥ length.
#[pyfunction]
fn legal_move_counts<'py>(
    py: Python<'py>,
    tokens: &Bound<'py, PyAny>,
    lengths: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray2<i16>>> {
    let gb = game_batch(tokens, lengths)?;
    let (b, t) = (gb.n_games, gb.max_ply);
    let flat = py.detach(|| masks::legal_move_counts(&games(&gb), t)).map_err(batch_error)?;
    Ok(Array2::from_shape_vec((b, t), flat).map_err(shape_err)?.into_pyarray(py))
}

/// Spec §5 board states: dict of boards int8 [B,T,8,8], side_to_move bool [B,T],
/// castling_rights uint8 [B,T], ep_square int8 [B,T], is_check bool [B,T],
/// halfmove_clock uint8 [B,T].
#[pyfunction]
fn board_states<'py>(
    py: Python<'py>,
    tokens: &Bound<'py, PyAny>,
    lengths: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let gb = game_batch(tokens, lengths)?;
    let (b, t) = (gb.n_games, gb.max_ply);
    ensure_allocatable("board_states: boards", &[b, t], 64 + 5)?;
    let s = py.detach(|| board::board_states(&games(&gb), t)).map_err(batch_error)?;
    let d = PyDict::new(py);
    d.set_item("boards", Array4::from_shape_vec((b, t, 8, 8), s.boards).map_err(shape_err)?.into_pyarray(py))?;
    let bt = |v| Array2::from_shape_vec((b, t), v).map_err(shape_err);
    d.set_item("side_to_move", bt(s.side_to_move)?.into_pyarray(py))?;
    d.set_item("castling_rights", Array2::from_shape_vec((b, t), s.castling_rights).map_err(shape_err)?.into_pyarray(py))?;
    d.set_item("ep_square", Array2::from_shape_vec((b, t), s.ep_square).map_err(shape_err)?.into_pyarray(py))?;
    d.set_item("is_check", bt(s.is_check)?.into_pyarray(py))?;
    d.set_item("halfmove_clock", Array2::from_shape_vec((b, t), s.halfmove_clock).map_err(shape_err)?.into_pyarray(py))?;
    Ok(d)
}

/// Perft leaf count from a FEN (or "startpos") to `depth` through the engine's token path.
#[pyfunction]
fn perft(py: Python<'_>, fen: &str, depth: i64) -> PyResult<u64> {
    let depth = u32::try_from(depth).map_err(|_| arg_err(format!("depth = {depth} must be ≥ 0")))?;
    let fen = fen.to_owned();
    Ok(py.detach(move || masks::perft(&fen, depth)).map_err(EngineError::from)?)
}
