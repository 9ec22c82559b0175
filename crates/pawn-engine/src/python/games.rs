//! Random-game bindings (spec §3): the `RandomGames` record.

use numpy::ndarray::{Array1, Array2};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::common::{as_dict, ensure_allocatable, item};
use super::error::arg_err;
use crate::error::EngineError;
use crate::random::{self, RandomGameOptions};
use crate::vocab;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(random_games, m)?)?;
    m.add_class::<RandomGames>()?;
    Ok(())
}

const FIELDS: [&str; 5] = ["tokens", "lengths", "termination", "outcome", "seed"];

/// A batch of uniformly random games (spec §3; N games, T = `max_ply`). Returned by
/// `random_games`; read-only. `record["tokens"]` and `to_dict()` give dict-style access.
#[pyclass(name = "RandomGames", module = "pawn._engine", frozen)]
pub struct RandomGames {
    /// int16 [N, T] move tokens in slots 0 … length−1, PAD (1968) after.
    #[pyo3(get)]
    tokens: Py<PyArray2<i16>>,
    /// int16 [N] plies played, 0 ≤ length ≤ T.
    #[pyo3(get)]
    lengths: Py<PyArray1<i16>>,
    /// uint8 [N] termination codes of spec §2.2 (0 checkmate … 5 ply limit).
    #[pyo3(get)]
    termination: Py<PyArray1<u8>>,
    /// int16 [N] outcome token per spec §2.3 (1969–1973).
    #[pyo3(get)]
    outcome: Py<PyArray1<i16>>,
    /// The call's base seed.
    #[pyo3(get)]
    seed: u64,
    n_games: usize,
    max_ply: usize,
}

#[pymethods]
impl RandomGames {
    /// Width T of the ply axis of `tokens`.
    #[getter]
    fn max_ply(&self) -> usize {
        self.max_ply
    }

    /// bool [N, T]: true on real move slots (`token != PAD`).
    fn attention_mask<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray2<bool>> {
        let pad = vocab::PAD_TOKEN as i16;
        self.tokens.bind(py).readonly().as_array().mapv(|t| t != pad).into_pyarray(py)
    }

    fn __len__(&self) -> usize {
        self.n_games
    }

    fn __getitem__(slf: &Bound<'_, Self>, key: &str) -> PyResult<Py<PyAny>> {
        item(slf.as_any(), &FIELDS, key)
    }

    /// Every field as a dict.
    fn to_dict<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        as_dict(slf.as_any(), &FIELDS)
    }

    fn __repr__(&self) -> String {
        format!("RandomGames(n={}, max_ply={}, seed={})", self.n_games, self.max_ply, self.seed)
    }
}

/// Random games as a `RandomGames` record (tokens int16 [N, max_ply] PAD-filled, lengths int16
/// [N], termination uint8 [N], outcome int16 [N]). Plays without the GIL in blocks of `block`
/// games (one block with `discard_ply_limit`), checking for Ctrl-C between blocks; by the
/// determinism contract (spec §3.2) the games do not depend on the block size.
#[pyfunction]
#[pyo3(signature = (n_games, max_ply=512, seed=0, mate_boost=0.0, discard_ply_limit=false, first_game=0, block=32768))]
#[allow(clippy::too_many_arguments)]
fn random_games(
    py: Python<'_>,
    n_games: i64,
    max_ply: i64,
    seed: u64,
    mate_boost: f64,
    discard_ply_limit: bool,
    first_game: u64,
    block: i64,
) -> PyResult<RandomGames> {
    if n_games < 0 {
        return Err(arg_err(format!("n_games must be ≥ 0, got {n_games}")));
    }
    if !(1..=u16::MAX as i64).contains(&max_ply) {
        return Err(arg_err(format!("max_ply must be in 1..=65535, got {max_ply}")));
    }
    if block < 1 {
        return Err(arg_err(format!("block must be ≥ 1, got {block}")));
    }
    let (n, t) = (n_games as usize, max_ply as usize);
    // The engine's uint16 tokens and the int16 copy handed to NumPy.
    ensure_allocatable("random_games: tokens", &[n, t], 2 * std::mem::size_of::<u16>())?;
    let block = if discard_ply_limit { n.max(1) } else { block as usize };
    let mut tokens = Vec::<i16>::with_capacity(n * t);
    let (mut lengths, mut termination, mut outcome) =
        (Vec::<i16>::with_capacity(n), Vec::<u8>::with_capacity(n), Vec::<i16>::with_capacity(n));
    let mut start = 0usize;
    loop {
        let count = block.min(n - start);
        let first = (first_game as usize)
            .checked_add(start)
            .ok_or_else(|| arg_err(format!("first_game + n_games must be < 2**64, got first_game = {first_game}")))?;
        let opts = RandomGameOptions { max_ply: t, seed, mate_boost, discard_ply_limit, first_game: first };
        let b = py.detach(|| random::random_games(count, opts)).map_err(EngineError::from)?;
        tokens.extend(b.tokens.iter().map(|&x| x as i16));
        lengths.extend(b.lengths.iter().map(|&l| l as i16));
        termination.extend_from_slice(&b.termination);
        outcome.extend(b.outcome.iter().map(|&o| o as i16));
        start += count;
        if start >= n {
            break;
        }
        py.check_signals()?;
    }
    let tokens = Array2::from_shape_vec((n, t), tokens).map_err(|e| arg_err(format!("internal shape error: {e}")))?;
    Ok(RandomGames {
        tokens: tokens.into_pyarray(py).unbind(),
        lengths: Array1::from(lengths).into_pyarray(py).unbind(),
        termination: Array1::from(termination).into_pyarray(py).unbind(),
        outcome: Array1::from(outcome).into_pyarray(py).unbind(),
        seed,
        n_games: n,
        max_ply: t,
    })
}
