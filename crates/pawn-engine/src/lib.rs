//! PAWN chess engine core: vocabulary, game rules, random games, legal-move masks, probe board
//! states, PGN/UCI parsing and diagnostics. Pure Rust; `python` (feature-gated) is the only
//! module that knows PyO3. Facts follow `shared/spec/engine.md`.

pub mod board;
pub mod diagnostics;
pub mod env;
pub mod error;
pub mod game;
pub mod masks;
pub mod pgn;
pub mod random;
pub mod uci;
pub mod vocab;

/// Liveness check string, as in the original engine (spec §9).
pub fn hello() -> &'static str {
    "pawn-engine ready"
}

#[cfg(feature = "python")]
mod python;
