//! One error type for the whole engine: every fallible core function returns (or converts
//! into) [`EngineError`], and the binding layer maps it to a Python exception in one place
//! (`python/error.rs`). The variants keep the messages of the errors they wrap unchanged.

use crate::env::EnvError;
use crate::game::{FenError, IllegalToken};
use crate::masks::BatchError;
use crate::random::OptionError;
use crate::uci::MoveError;

/// Everything that can go wrong in the engine, by cause.
///
/// Input errors (`Batch`, `Move`, `Fen`) come from the games or positions a user supplied;
/// `Argument` and `Options` from an argument outside its domain; `Dtype` from an argument of the
/// wrong type, dtype or rank; `TooLarge` from a request whose output cannot be allocated; `Env`
/// from a call the [`crate::env::BatchEnv`] state does not allow; `Io` from reading a file.
///
/// ```
/// use pawn_engine::error::EngineError;
/// use pawn_engine::masks::legal_move_counts;
///
/// // Token 1968 (PAD) is not a move: game 0 fails at ply 1.
/// let game: &[u16] = &[317, 1968];
/// let err: EngineError = legal_move_counts(&[game], 2).unwrap_err().into();
/// assert_eq!(err.to_string(), "game 0, ply 1: token 1968 is not a move token (0..1967)");
/// assert!(err.is_input_error());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum EngineError {
    /// Game `game` of a batch holds an illegal or non-move token (`game g: illegal move token …
    /// at ply p`, the wording of the diagnostics).
    Batch(BatchError),
    /// As `Batch`, worded for the masks and board states (`game g, ply p: move token … is
    /// illegal in the replayed position`).
    Replay(BatchError),
    /// Game `game` (0-based) of a move list holds a malformed or illegal move.
    Move { game: usize, error: MoveError },
    /// A FEN that is malformed or describes an illegal position.
    Fen(FenError),
    /// Generation options outside their domain.
    Options(OptionError),
    /// A call the `BatchEnv` state does not allow.
    Env(EnvError),
    /// An argument outside its domain (the message names it and the allowed range).
    Argument(String),
    /// An argument of the wrong type, dtype or rank (the message names it, what is expected and
    /// what was given).
    Dtype(String),
    /// An output of `dims` elements that cannot be allocated: `bytes` is its size, None when the
    /// size overflows `usize`. `what` names the call and the array.
    TooLarge { what: String, dims: Vec<usize>, bytes: Option<usize> },
    /// A file that cannot be read.
    Io { path: String, kind: std::io::ErrorKind, message: String },
}

impl EngineError {
    /// An argument error with this message.
    pub fn argument(message: impl Into<String>) -> Self {
        EngineError::Argument(message.into())
    }

    /// The error of reading `path`.
    pub fn io(path: &str, e: &std::io::Error) -> Self {
        EngineError::Io { path: path.to_owned(), kind: e.kind(), message: e.to_string() }
    }

    /// `Ok` if an array of `dims` elements of `elem_bytes` bytes each can be allocated, else
    /// [`EngineError::TooLarge`] naming `what`: the size must not overflow and the allocator
    /// must grant it (tried and released at once), so a huge request (`n_games = 10**12`) is an
    /// error instead of an abort.
    ///
    /// ```
    /// use pawn_engine::error::EngineError;
    ///
    /// assert!(EngineError::check_allocatable("tokens", &[4, 8], 2).is_ok());
    /// let err = EngineError::check_allocatable("tokens", &[1 << 62, 8], 2).unwrap_err();
    /// assert_eq!(err.to_string(), "tokens of shape [4611686018427387904, 8] needs more than 2**64 bytes, which cannot be allocated");
    /// ```
    pub fn check_allocatable(what: &str, dims: &[usize], elem_bytes: usize) -> EngineResult<()> {
        let bytes = dims.iter().try_fold(elem_bytes, |acc, &d| acc.checked_mul(d));
        let granted =
            bytes.is_some_and(|b| b <= isize::MAX as usize && Vec::<u8>::new().try_reserve_exact(b).is_ok());
        if granted {
            return Ok(());
        }
        Err(EngineError::TooLarge { what: what.to_owned(), dims: dims.to_vec(), bytes })
    }

    /// True for errors caused by the games, moves or positions given (not by the call).
    pub fn is_input_error(&self) -> bool {
        matches!(self, EngineError::Batch(_) | EngineError::Replay(_) | EngineError::Move { .. } | EngineError::Fen(_))
    }
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Batch(e) => e.fmt(f),
            EngineError::Replay(e) => {
                let tok = e.illegal.token as i16;
                write!(f, "game {}, ply {}: ", e.game, e.illegal.ply)?;
                match crate::vocab::token_to_uci(e.illegal.token) {
                    Some(uci) => write!(f, "move token {tok} ({uci}) is illegal in the replayed position"),
                    None => write!(f, "token {tok} is not a move token (0..1967)"),
                }
            }
            EngineError::Move { game, error } => write!(f, "game {game}: {error}"),
            EngineError::Fen(e) => e.fmt(f),
            EngineError::Options(e) => e.fmt(f),
            EngineError::Env(e) => e.fmt(f),
            EngineError::Argument(m) | EngineError::Dtype(m) => f.write_str(m),
            EngineError::TooLarge { what, dims, bytes } => {
                let size = bytes.map_or_else(|| "more than 2**64 bytes".to_owned(), |b| format!("{b} bytes"));
                write!(f, "{what} of shape {dims:?} needs {size}, which cannot be allocated")
            }
            EngineError::Io { path, kind, message } => match kind {
                std::io::ErrorKind::NotFound => write!(f, "no such file: {path}"),
                _ => write!(f, "cannot read {path}: {message}"),
            },
        }
    }
}

impl std::error::Error for EngineError {}

impl From<BatchError> for EngineError {
    /// A failed replay of the masks and board states ([`EngineError::Replay`]).
    fn from(e: BatchError) -> Self {
        EngineError::Replay(e)
    }
}

impl From<FenError> for EngineError {
    fn from(e: FenError) -> Self {
        EngineError::Fen(e)
    }
}

impl From<OptionError> for EngineError {
    fn from(e: OptionError) -> Self {
        EngineError::Options(e)
    }
}

impl From<EnvError> for EngineError {
    fn from(e: EnvError) -> Self {
        EngineError::Env(e)
    }
}

impl From<(usize, IllegalToken)> for EngineError {
    /// `(game index, illegal token)` as met while replaying a batch.
    fn from((game, illegal): (usize, IllegalToken)) -> Self {
        EngineError::Batch(BatchError { game, illegal })
    }
}

impl From<(usize, MoveError)> for EngineError {
    /// `(game index, move error)` as met while converting move lists.
    fn from((game, error): (usize, MoveError)) -> Self {
        EngineError::Move { game, error }
    }
}

/// Result of a fallible engine call.
pub type EngineResult<T> = Result<T, EngineError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_those_of_the_wrapped_errors() {
        let illegal = IllegalToken { ply: 3, token: 317 };
        let e: EngineError = (2, illegal.clone()).into();
        assert_eq!(e.to_string(), format!("game 2: {illegal}"));
        let m = MoveError { ply: 1, text: "e2e5".into(), malformed: false };
        assert_eq!(EngineError::from((4, m)).to_string(), "game 4: illegal move \"e2e5\" at ply 1");
        let nf = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(EngineError::io("x.pgn", &nf).to_string(), "no such file: x.pgn");
        assert!(!EngineError::argument("max_ply must be in 1..=32767, got 0").is_input_error());
        let big = EngineError::check_allocatable("masks", &[usize::MAX / 2, 4], 1).unwrap_err();
        assert_eq!(big.to_string(), format!("masks of shape [{}, 4] needs more than 2**64 bytes, which cannot be allocated", usize::MAX / 2));
        assert!(!big.is_input_error());
        assert_eq!(EngineError::check_allocatable("x", &[3, 5], 8), Ok(()));
        assert_eq!(
            EngineError::from(EnvError::BadIndex { index: 9, n_games: 2 }).to_string(),
            "game index 9 is out of range for 2 games"
        );
    }
}
