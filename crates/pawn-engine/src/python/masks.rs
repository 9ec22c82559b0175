//! Bindings for legal-move masks, board states (spec §4, §5) and perft.

use numpy::ndarray::{Array2, Array3, Array4};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyArray3, PyArray4, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::common::{as_dict, ensure_allocatable, game_batch, item, GameBatch};
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
    m.add_class::<BoardStates>()?;
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

const BOARD_FIELDS: [&str; 6] = ["boards", "side_to_move", "castling_rights", "ep_square", "is_check", "halfmove_clock"];

/// The six spec §5 arrays of a batch (B games, T plies): entry t is the position before move t
/// for t < length; later entries hold the fill named per field. Returned by `board_states`;
/// read-only. `states["boards"]` and `to_dict()` give dict-style access.
#[pyclass(name = "BoardStates", module = "pawn._engine", frozen)]
pub struct BoardStates {
    /// int8 [B, T, 8, 8] piece codes `[rank][file]` (rank 0 = rank 1): 0 empty, 1–6 white
    /// P N B R Q K, 7–12 black. Fill 0.
    #[pyo3(get)]
    boards: Py<PyArray4<i8>>,
    /// bool [B, T], true = white to move. Fill false.
    #[pyo3(get)]
    side_to_move: Py<PyArray2<bool>>,
    /// uint8 [B, T], bit0 K, bit1 Q, bit2 k, bit3 q. Fill 0.
    #[pyo3(get)]
    castling_rights: Py<PyArray2<u8>>,
    /// int8 [B, T], en-passant target square if an en-passant capture is legal, else −1. Fill −1.
    #[pyo3(get)]
    ep_square: Py<PyArray2<i8>>,
    /// bool [B, T], the side to move is in check. Fill false.
    #[pyo3(get)]
    is_check: Py<PyArray2<bool>>,
    /// uint8 [B, T], plies since the last pawn move or capture (§2.1), capped at 255. Fill 0.
    #[pyo3(get)]
    halfmove_clock: Py<PyArray2<u8>>,
}

#[pymethods]
impl BoardStates {
    fn __getitem__(slf: &Bound<'_, Self>, key: &str) -> PyResult<Py<PyAny>> {
        item(slf.as_any(), &BOARD_FIELDS, key)
    }

    /// Every field as a dict.
    fn to_dict<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        as_dict(slf.as_any(), &BOARD_FIELDS)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let shape = self.side_to_move.bind(py).shape().to_vec();
        format!("BoardStates(n={}, max_ply={})", shape[0], shape[1])
    }
}

/// Spec §5 board states of every game and ply as a `BoardStates` record (arrays [B, T, …]).
#[pyfunction]
fn board_states(py: Python<'_>, tokens: &Bound<'_, PyAny>, lengths: &Bound<'_, PyAny>) -> PyResult<BoardStates> {
    let gb = game_batch(tokens, lengths)?;
    let (b, t) = (gb.n_games, gb.max_ply);
    ensure_allocatable("board_states: boards", &[b, t], 64 + 5)?;
    let s = py.detach(|| board::board_states(&games(&gb), t)).map_err(batch_error)?;
    fn bt<T: numpy::Element>(py: Python<'_>, v: Vec<T>, b: usize, t: usize) -> PyResult<Py<PyArray2<T>>> {
        Ok(Array2::from_shape_vec((b, t), v).map_err(shape_err)?.into_pyarray(py).unbind())
    }
    Ok(BoardStates {
        boards: Array4::from_shape_vec((b, t, 8, 8), s.boards).map_err(shape_err)?.into_pyarray(py).unbind(),
        side_to_move: bt(py, s.side_to_move, b, t)?,
        castling_rights: bt(py, s.castling_rights, b, t)?,
        ep_square: bt(py, s.ep_square, b, t)?,
        is_check: bt(py, s.is_check, b, t)?,
        halfmove_clock: bt(py, s.halfmove_clock, b, t)?,
    })
}

/// Perft leaf count from a FEN (or "startpos") to `depth` through the engine's token path.
#[pyfunction]
fn perft(py: Python<'_>, fen: &str, depth: i64) -> PyResult<u64> {
    let depth = u32::try_from(depth).map_err(|_| arg_err(format!("depth = {depth} must be ≥ 0")))?;
    let fen = fen.to_owned();
    Ok(py.detach(move || masks::perft(&fen, depth)).map_err(EngineError::from)?)
}
