//! Vocabulary bindings: constants, token ↔ UCI, decomposition tables.

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::common::{as_dict, item};

use crate::game::Termination;
use crate::{env, vocab};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("NUM_ACTIONS", vocab::NUM_ACTIONS)?;
    m.add("PAD_TOKEN", vocab::PAD_TOKEN)?;
    m.add("OUTCOME_TOKEN_BASE", vocab::OUTCOME_TOKEN_BASE)?;
    m.add("N_OUTCOMES", vocab::N_OUTCOMES)?;
    m.add("VOCAB_SIZE", vocab::VOCAB_SIZE)?;
    m.add("MAX_SEQ_LEN", vocab::MAX_SEQ_LEN)?;
    m.add("OUTCOME_NAMES", vocab::outcome::NAMES.to_vec())?;
    m.add("TERMINATION_NAMES", Termination::ALL.map(|t| t.name()).to_vec())?;
    m.add("RUNNING", env::RUNNING)?;
    m.add("PREMATURE_PAD", env::PREMATURE_PAD)?;
    m.add("FORFEIT", env::FORFEIT)?;
    m.add_function(wrap_pyfunction!(termination_outcome, m)?)?;
    m.add_function(wrap_pyfunction!(token_to_uci, m)?)?;
    m.add_function(wrap_pyfunction!(uci_to_token, m)?)?;
    m.add_function(wrap_pyfunction!(action_table, m)?)?;
    m.add_function(wrap_pyfunction!(promo_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(export_move_vocabulary, m)?)?;
    m.add_class::<MoveVocabulary>()?;
    Ok(())
}

/// UCI string of a move token, or None for PAD/outcome/out-of-range ids.
#[pyfunction]
fn token_to_uci(token: i64) -> Option<String> {
    u16::try_from(token).ok().and_then(vocab::token_to_uci)
}

/// Token of a UCI string, or None if it is not in the vocabulary.
#[pyfunction]
fn uci_to_token(uci: &str) -> Option<u16> {
    vocab::uci_to_token(uci)
}

/// `(src, dst, promo)` uint8 arrays of length 1968 in id order (promo 0 none, 1 q, 2 r, 3 b, 4 n).
#[pyfunction]
fn action_table(py: Python<'_>) -> (Bound<'_, PyArray1<u8>>, Bound<'_, PyArray1<u8>>, Bound<'_, PyArray1<u8>>) {
    let a = vocab::actions();
    (
        PyArray1::from_vec(py, a.iter().map(|x| x.src).collect()),
        PyArray1::from_vec(py, a.iter().map(|x| x.dst).collect()),
        PyArray1::from_vec(py, a.iter().map(|x| x.promo).collect()),
    )
}

/// The 44 promotion (src, dst) pairs of spec §1.7.
#[pyfunction]
fn promo_pairs() -> Vec<(u8, u8)> {
    vocab::promo_pairs().to_vec()
}

const VOCAB_FIELDS: [&str; 5] = ["square_names", "promo_pieces", "promo_pairs", "token_to_move", "move_to_token"];

/// The spec §1.8 move-vocabulary export. Returned by `export_move_vocabulary`; read-only.
/// `v["move_to_token"]` and `to_dict()` give dict-style access.
#[pyclass(name = "MoveVocabulary", module = "pawn._engine", frozen)]
pub struct MoveVocabulary {
    /// The 64 square names by index, a1 = 0, b1 = 1, …, h8 = 63.
    #[pyo3(get)]
    square_names: Py<PyList>,
    /// Promotion piece letters by promotion code 1–4: q, r, b, n.
    #[pyo3(get)]
    promo_pieces: Py<PyList>,
    /// The 44 promotion (src, dst) square pairs, spec §1.7 order.
    #[pyo3(get)]
    promo_pairs: Py<PyList>,
    /// Token id (0–1967) → UCI string.
    #[pyo3(get)]
    token_to_move: Py<PyDict>,
    /// UCI string → token id.
    #[pyo3(get)]
    move_to_token: Py<PyDict>,
}

#[pymethods]
impl MoveVocabulary {
    fn __getitem__(slf: &Bound<'_, Self>, key: &str) -> PyResult<Py<PyAny>> {
        item(slf.as_any(), &VOCAB_FIELDS, key)
    }

    /// Every field as a dict.
    fn to_dict<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        as_dict(slf.as_any(), &VOCAB_FIELDS)
    }

    fn __repr__(&self) -> String {
        format!("MoveVocabulary(n_actions={})", vocab::NUM_ACTIONS)
    }
}

/// Spec §1.8 export as a `MoveVocabulary` record.
#[pyfunction]
fn export_move_vocabulary(py: Python<'_>) -> PyResult<MoveVocabulary> {
    let names: Vec<String> = (0..64u8).map(vocab::square_name).collect();
    let t2m = PyDict::new(py);
    let m2t = PyDict::new(py);
    for (id, a) in vocab::actions().iter().enumerate() {
        let u = a.uci();
        t2m.set_item(id, &u)?;
        m2t.set_item(&u, id)?;
    }
    Ok(MoveVocabulary {
        square_names: PyList::new(py, names)?.unbind(),
        promo_pieces: PyList::new(py, ["q", "r", "b", "n"])?.unbind(),
        promo_pairs: PyList::new(py, vocab::promo_pairs().iter().copied())?.unbind(),
        token_to_move: t2m.unbind(),
        move_to_token: m2t.unbind(),
    })
}

/// Outcome token of a game with termination `code` (spec §2.2: 0–5) after `length` plies (spec
/// §2.3; checkmate is a win for the side that moved last), or None for a code outside 0–5 (the
/// sentinels RUNNING, PREMATURE_PAD, FORFEIT).
#[pyfunction]
fn termination_outcome(code: i64, length: usize) -> Option<u16> {
    Termination::from_code(code).map(|t| t.outcome_token(length))
}
