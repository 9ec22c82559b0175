//! The one mapping from [`EngineError`] to Python exceptions. The classes live in
//! `pawn.engine.errors` (subclasses of `pawn.errors.PawnError`, and of the builtin the engine
//! raised before, so `except ValueError` keeps working); if that module cannot be imported the
//! builtin is raised. Messages are the core error's `Display`, unchanged.

use pyo3::exceptions::{
    PyFileNotFoundError, PyIndexError, PyMemoryError, PyOSError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::env::EnvError;
use crate::error::EngineError;

static INPUT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static USAGE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static INDEX: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static STATE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static DTYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static TOO_LARGE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `cls(message)` for the class `name` of `pawn.engine.errors`, or `fallback(message)`.
fn raise(
    py: Python<'_>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
    message: String,
    fallback: fn(String) -> PyErr,
) -> PyErr {
    match cell.import(py, "pawn.engine.errors", name) {
        Ok(cls) => PyErr::from_type(cls.clone(), message),
        Err(_) => fallback(message),
    }
}

impl From<EngineError> for PyErr {
    fn from(e: EngineError) -> PyErr {
        let message = e.to_string();
        Python::attach(|py| match &e {
            EngineError::Batch(_) | EngineError::Replay(_) | EngineError::Move { .. } | EngineError::Fen(_) => {
                raise(py, &INPUT, "EngineInputError", message, PyValueError::new_err)
            }
            EngineError::Argument(_) | EngineError::Options(_) | EngineError::Env(EnvError::WrongTurn { .. }) => {
                raise(py, &USAGE, "EngineUsageError", message, PyValueError::new_err)
            }
            EngineError::Env(EnvError::BadIndex { .. }) => raise(py, &INDEX, "EngineIndexError", message, PyIndexError::new_err),
            EngineError::Dtype(_) => raise(py, &DTYPE, "EngineTypeError", message, PyTypeError::new_err),
            EngineError::TooLarge { .. } => raise(py, &TOO_LARGE, "EngineMemoryError", message, PyMemoryError::new_err),
            EngineError::Env(EnvError::NotReset) => raise(py, &STATE, "EngineStateError", message, PyRuntimeError::new_err),
            EngineError::Io { kind: std::io::ErrorKind::NotFound, .. } => PyFileNotFoundError::new_err(message),
            EngineError::Io { .. } => PyOSError::new_err(message),
        })
    }
}

/// An argument outside its domain, as a Python exception (`EngineUsageError`, a `ValueError`).
pub fn arg_err(message: String) -> PyErr {
    EngineError::Argument(message).into()
}

/// An argument of the wrong type, dtype or rank (`EngineTypeError`, a `TypeError`).
pub fn dtype_err(message: String) -> PyErr {
    EngineError::Dtype(message).into()
}
