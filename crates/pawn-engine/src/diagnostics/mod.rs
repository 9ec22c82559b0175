//! Diagnostics (spec `engine.md` §7), one module per topic: game validation ([`validate`]),
//! edge-case bits and per-ply edge statistics ([`edge_cases`]), quota-driven diagnostic sets
//! ([`sets`]) and the Monte-Carlo accuracy ceiling ([`ceiling`]). Every public item is
//! re-exported here, so `diagnostics::validate_games` and the like keep their paths.

pub mod ceiling;
pub mod edge_cases;
pub mod sets;
pub mod validate;

pub use ceiling::*;
pub use edge_cases::*;
pub use sets::*;
pub use validate::*;

#[cfg(test)]
mod tests;
