//! The PyO3 binding layer: the only code that knows Python. Each submodule converts NumPy
//! arrays and Python objects to and from the pure-Rust core and registers its functions.
//! Errors from bad input become Python exceptions (`TypeError`, `ValueError`), never aborts.

use pyo3::prelude::*;

/// Rust-side heap of the extension module: mimalloc (per-thread free lists) instead of the system
/// malloc. PGN parsing and random-game generation allocate a few small vectors per game on every
/// rayon thread; see `docs/measurements.md` for the A/B.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod common;
mod diagnostics;
mod env;
mod error;
mod games;
mod masks;
mod pgn;
mod vocab;

/// The native module `pawn._engine`.
#[pymodule]
fn _engine(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(hello, m)?)?;
    vocab::register(m)?;
    games::register(m)?;
    masks::register(m)?;
    pgn::register(m)?;
    diagnostics::register(m)?;
    env::register(m)?;
    Ok(())
}

/// Liveness check: returns `"pawn-engine ready"`.
#[pyfunction]
fn hello() -> &'static str {
    crate::hello()
}
