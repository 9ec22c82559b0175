//! Stateful classes (spec §8): `GameState` (one game) and `BatchEnv` (N games for generation and
//! RL). Documented in `pawn.engine.state`.
// Bindings return tuples of NumPy arrays, which clippy counts as complex types.
#![allow(clippy::type_complexity)]

use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1};
use pyo3::prelude::*;

use super::common::{describe, ensure_allocatable, game_batch};
use super::error::{arg_err, dtype_err};
use crate::error::EngineError;
use crate::env::{self, BatchEnv, EnvError};
use crate::game::GameState;
use crate::vocab;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGameState>()?;
    m.add_class::<PyBatchEnv>()?;
    Ok(())
}

/// `EngineStateError` (RuntimeError), `EngineIndexError` (IndexError) or `EngineUsageError`
/// (ValueError), through the one mapping of `python/error.rs`.
fn env_err(e: EnvError) -> PyErr {
    EngineError::from(e).into()
}

fn check_max_ply(max_ply: usize) -> PyResult<()> {
    if max_ply == 0 || max_ply > i16::MAX as usize {
        return Err(arg_err(format!("max_ply must be in 1..=32767, got {max_ply}")));
    }
    Ok(())
}

/// Token argument: a Python int; anything outside 0..=65535 can never be legal and maps to PAD.
fn token_u16(t: i64) -> u16 {
    u16::try_from(t).unwrap_or(vocab::PAD_TOKEN)
}

/// [`env::legal_structured`] with the piece lists widened so PyO3 returns lists, not `bytes`.
fn structured(g: &GameState) -> (Vec<u16>, Vec<(u8, Vec<u16>)>) {
    let (grid, promos) = env::legal_structured(g);
    (grid, promos.into_iter().map(|(p, v)| (p, v.into_iter().map(u16::from).collect())).collect())
}

/// One game from the standard start position (spec §8.1). `max_ply` only affects
/// `check_termination` (PlyLimit); moves are never refused for the cap or a draw rule.
#[pyclass(name = "GameState", module = "pawn._engine")]
pub struct PyGameState {
    game: GameState,
    max_ply: usize,
}

#[pymethods]
impl PyGameState {
    #[new]
    #[pyo3(signature = (max_ply=512))]
    fn new(max_ply: usize) -> PyResult<Self> {
        check_max_ply(max_ply)?;
        Ok(PyGameState { game: GameState::new(), max_ply })
    }

    /// Play `token` if it is a legal move here; returns False and leaves the state unchanged
    /// otherwise (PAD, outcome and out-of-range ids included).
    fn make_move(&mut self, token: i64) -> bool {
        self.game.play_token(token_u16(token)).is_ok()
    }

    /// Play a UCI move (`e2e4`, `e7e8q`, castling as `e1g1`); returns its normalised UCI string
    /// or None (state unchanged) when it is malformed or illegal.
    fn make_move_uci(&mut self, uci: &str) -> Option<String> {
        let t = vocab::uci_to_token(uci)?;
        self.game.play_token(t).ok()?;
        vocab::token_to_uci(t)
    }

    /// Legal move tokens in generation order (§2.4).
    fn legal_move_tokens(&self) -> Vec<u16> {
        self.game.legal_tokens()
    }

    /// Plies played so far.
    fn ply(&self) -> usize {
        self.game.ply()
    }

    /// True when white is to move.
    fn is_white_to_move(&self) -> bool {
        self.game.ply().is_multiple_of(2)
    }

    /// True when the side to move is in check.
    fn is_check(&self) -> bool {
        use shakmaty::Position;
        self.game.position().is_check()
    }

    /// Termination code 0–5 of §2.2 (with this object's max_ply), −1 while the game runs.
    fn check_termination(&self) -> i8 {
        self.game.termination(self.max_ply).map_or(-1, |t| t.code() as i8)
    }

    /// True when `check_termination() != -1`.
    fn is_game_over(&self) -> bool {
        self.game.termination(self.max_ply).is_some()
    }

    /// True when the side to move is checkmated.
    fn is_checkmate(&self) -> bool {
        self.game.termination(self.max_ply) == Some(crate::game::Termination::Checkmate)
    }

    /// Outcome token (§2.3, 1969–1973) of the ended game, None while it runs.
    fn outcome_token(&self) -> Option<u16> {
        self.game.termination(self.max_ply).map(|t| t.outcome_token(self.game.ply()))
    }

    /// Tokens played so far.
    fn move_history(&self) -> Vec<u16> {
        self.game.tokens().to_vec()
    }

    /// `(grid_indices, promotions)`: `src*64+dst` per legal (src, dst) pair (promotions of a pair
    /// collapsed) and `(pair_index §1.7, [piece 0–3 = q r b n])` per promotion pair.
    fn legal_moves_structured(&self) -> (Vec<u16>, Vec<(u8, Vec<u16>)>) {
        structured(&self.game)
    }

    /// 4,096 bools, index `src*64+dst`: some legal move goes src → dst.
    fn legal_moves_grid_mask(&self) -> Vec<bool> {
        env::legal_grid_mask(&self.game)
    }

    /// `(grid_indices, promotions, mask)`: the two calls above at once.
    fn legal_moves_full(&self) -> (Vec<u16>, Vec<(u8, Vec<u16>)>, Vec<bool>) {
        let (g, p) = structured(&self.game);
        (g, p, env::legal_grid_mask(&self.game))
    }

    /// `"position startpos"` or `"position startpos moves e2e4 …"`.
    fn uci_position(&self) -> String {
        env::uci_position(&self.game)
    }

    /// FEN; the en-passant field is set only when an en-passant capture is legal.
    fn fen(&self) -> String {
        env::fen(&self.game)
    }

    fn __repr__(&self) -> String {
        format!("GameState(ply={}, fen='{}')", self.game.ply(), env::fen(&self.game))
    }
}

/// N concurrent games for autoregressive generation and RL (spec §8.2). Call `reset()` first.
#[pyclass(name = "BatchEnv", module = "pawn._engine")]
pub struct PyBatchEnv {
    env: BatchEnv,
}

fn indices_vec(obj: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    if let Ok(a) = obj.extract::<PyReadonlyArray1<i64>>() {
        return Ok(a.as_array().to_vec());
    }
    if let Ok(a) = obj.extract::<PyReadonlyArray1<i32>>() {
        return Ok(a.as_array().iter().map(|&x| x as i64).collect());
    }
    obj.extract::<Vec<i64>>().map_err(|_| {
        dtype_err(format!(
            "indices must be a sequence of ints or a 1-D int32/int64 array, got {}",
            describe(obj)
        ))
    })
}

fn tokens_vec(obj: &Bound<'_, PyAny>, k: usize) -> PyResult<Vec<u16>> {
    let v: Vec<i64> = if let Ok(a) = obj.extract::<PyReadonlyArray1<i16>>() {
        a.as_array().iter().map(|&x| x as i64).collect()
    } else if let Ok(a) = obj.extract::<PyReadonlyArray1<i64>>() {
        a.as_array().to_vec()
    } else if let Ok(a) = obj.extract::<PyReadonlyArray1<i32>>() {
        a.as_array().iter().map(|&x| x as i64).collect()
    } else {
        obj.extract::<Vec<i64>>().map_err(|_| {
            dtype_err(format!(
                "tokens must be a sequence of ints or a 1-D int16/int32/int64 array, got {}",
                describe(obj)
            ))
        })?
    };
    if v.len() != k {
        return Err(arg_err(format!("got {} tokens for {k} game indices", v.len())));
    }
    Ok(v.into_iter().map(token_u16).collect())
}

#[pymethods]
impl PyBatchEnv {
    #[new]
    #[pyo3(signature = (n_games, max_ply=512, seed=42))]
    fn new(n_games: usize, max_ply: usize, seed: u64) -> PyResult<Self> {
        check_max_ply(max_ply)?;
        ensure_allocatable("BatchEnv: games", &[n_games], std::mem::size_of::<env::Slot>())?;
        Ok(PyBatchEnv { env: BatchEnv::new(n_games, max_ply, seed) })
    }

    /// Start N fresh games (games 0 … N/2−1: agent white; the rest: agent black). Does not
    /// reseed the shared RNG.
    fn reset(&mut self) {
        self.env.reset()
    }

    fn n_games(&self) -> usize {
        self.env.n_games()
    }

    fn max_ply(&self) -> usize {
        self.env.max_ply()
    }

    /// True when every game has ended (rule, ply cap or forfeit).
    fn all_terminated(&self) -> PyResult<bool> {
        self.env.all_terminated().map_err(env_err)
    }

    /// Indices (ascending) of running games.
    fn active_games(&self) -> PyResult<Vec<usize>> {
        self.env.active(None).map_err(env_err)
    }

    /// Indices (ascending) of running games where it is the agent's turn.
    fn active_agent_games(&self) -> PyResult<Vec<usize>> {
        self.env.active(Some(true)).map_err(env_err)
    }

    /// Indices (ascending) of running games where it is the opponent's turn.
    fn active_opponent_games(&self) -> PyResult<Vec<usize>> {
        self.env.active(Some(false)).map_err(env_err)
    }

    /// Side-agnostic moves for generation: `indices` [k], `tokens` [k] → `(played bool [k],
    /// code int8 [k])`. Terminated game → (False, its code); illegal token → game forfeited,
    /// (False, −3); legal → (True, new §2.2 code or −1). Applied in order. IndexError for a bad
    /// index (nothing applied), RuntimeError before reset().
    fn apply_moves<'py>(
        &mut self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
        tokens: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyArray1<bool>>, Bound<'py, PyArray1<i8>>)> {
        let idx = self.env.check_indices(&indices_vec(indices)?).map_err(env_err)?;
        let toks = tokens_vec(tokens, idx.len())?;
        let env = &mut self.env;
        let res: Result<Vec<(bool, i8)>, EnvError> =
            py.detach(|| idx.iter().zip(&toks).map(|(&i, &t)| env.apply_move(i, t)).collect());
        let res = res.map_err(env_err)?;
        Ok((
            PyArray1::from_vec(py, res.iter().map(|r| r.0).collect()),
            PyArray1::from_vec(py, res.iter().map(|r| r.1).collect()),
        ))
    }

    /// Replay prefixes into every game from its current state: `tokens` int16 [N, W], `lengths`
    /// int16 [N] (row i → game i) → int8 [N]: −3 at the first illegal token (forfeit), the §2.2
    /// code when the game ended, −1 if still running.
    fn load_prefixes<'py>(
        &mut self,
        py: Python<'py>,
        tokens: &Bound<'py, PyAny>,
        lengths: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<i8>>> {
        self.env.slots().map_err(env_err)?;
        let b = game_batch(tokens, lengths)?;
        if b.n_games != self.env.n_games() {
            return Err(arg_err(format!(
                "tokens has {} rows but the environment has {} games",
                b.n_games,
                self.env.n_games()
            )));
        }
        let env = &mut self.env;
        let res: Result<Vec<i8>, EnvError> = py.detach(|| (0..b.n_games).map(|i| env.load_prefix(i, b.game(i))).collect());
        Ok(PyArray1::from_vec(py, res.map_err(env_err)?))
    }

    /// Agent moves (RL): returns played flags [k]. Illegal → game terminated and forfeited,
    /// reward −1; ValueError, with no game changed, if a running game is not waiting for the
    /// agent (or is listed twice).
    fn apply_agent_moves(&mut self, indices: &Bound<'_, PyAny>, tokens: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let idx = self.env.check_indices(&indices_vec(indices)?).map_err(env_err)?;
        let toks = tokens_vec(tokens, idx.len())?;
        self.env.check_turns(&idx, true).map_err(env_err)?;
        idx.iter().zip(&toks).map(|(&i, &t)| self.env.apply_agent_move(i, t).map_err(env_err)).collect()
    }

    /// External opponent moves: played flags [k]. Illegal → game terminated, reward 0, not
    /// forfeited; ValueError, with no game changed, if a running game is not waiting for the
    /// opponent (or is listed twice).
    fn apply_opponent_moves(&mut self, indices: &Bound<'_, PyAny>, tokens: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let idx = self.env.check_indices(&indices_vec(indices)?).map_err(env_err)?;
        let toks = tokens_vec(tokens, idx.len())?;
        self.env.check_turns(&idx, false).map_err(env_err)?;
        idx.iter().zip(&toks).map(|(&i, &t)| self.env.apply_opponent_move(i, t).map_err(env_err)).collect()
    }

    /// Every running game waiting for the opponent plays a uniform random legal move from the
    /// shared ChaCha8 RNG (ascending game order); returns the games acted on.
    fn apply_random_opponent_moves(&mut self) -> PyResult<Vec<usize>> {
        self.env.apply_random_opponent_moves().map_err(env_err)
    }

    /// bool [k, vocab_size]: legal move tokens of each game. Terminated games have only PAD
    /// (1968, when < vocab_size) set, so masked sampling emits PAD after a game's end.
    #[pyo3(signature = (indices, vocab_size=1980))]
    fn legal_token_masks<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
        vocab_size: usize,
    ) -> PyResult<Bound<'py, PyArray2<bool>>> {
        use rayon::prelude::*;
        let idx = self.env.check_indices(&indices_vec(indices)?).map_err(env_err)?;
        let slots = self.env.slots().map_err(env_err)?;
        ensure_allocatable("legal_token_masks: mask", &[idx.len(), vocab_size], 1)?;
        let flat: Vec<bool> =
            py.detach(|| idx.par_iter().flat_map_iter(|&i| env::legal_token_mask(&slots[i], vocab_size)).collect());
        PyArray1::from_vec(py, flat).reshape([idx.len(), vocab_size])
    }

    /// `(histories int16 [k, max_ply] PAD-filled, lengths int16 [k])`.
    fn move_histories<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyArray2<i16>>, Bound<'py, PyArray1<i16>>)> {
        let idx = self.env.check_indices(&indices_vec(indices)?).map_err(env_err)?;
        let slots = self.env.slots().map_err(env_err)?;
        let w = self.env.max_ply();
        let mut out = vec![vocab::PAD_TOKEN as i16; idx.len() * w];
        let mut lens = Vec::with_capacity(idx.len());
        for (r, &i) in idx.iter().enumerate() {
            let t = slots[i].game.tokens();
            for (j, &x) in t.iter().enumerate() {
                out[r * w + j] = x as i16;
            }
            lens.push(t.len() as i16);
        }
        Ok((PyArray1::from_vec(py, out).reshape([idx.len(), w])?, PyArray1::from_vec(py, lens)))
    }

    /// FEN of each game (en-passant field only when a capture is legal).
    fn fens(&self, indices: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let idx = self.env.check_indices(&indices_vec(indices)?).map_err(env_err)?;
        let slots = self.env.slots().map_err(env_err)?;
        Ok(idx.iter().map(|&i| env::fen(&slots[i].game)).collect())
    }

    /// UCI `position` command of each game.
    fn uci_positions(&self, indices: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let idx = self.env.check_indices(&indices_vec(indices)?).map_err(env_err)?;
        let slots = self.env.slots().map_err(env_err)?;
        Ok(idx.iter().map(|&i| env::uci_position(&slots[i].game)).collect())
    }

    /// Plies played, int32 [k].
    fn plies<'py>(&self, py: Python<'py>, indices: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyArray1<i32>>> {
        let idx = self.env.check_indices(&indices_vec(indices)?).map_err(env_err)?;
        let slots = self.env.slots().map_err(env_err)?;
        Ok(PyArray1::from_vec(py, idx.iter().map(|&i| slots[i].game.ply() as i32).collect()))
    }

    /// `(codes int8 [N], outcome_tokens int16 [N])` over all games: code −1 running, −3
    /// forfeited, else §2.2; outcome token §2.3, −1 while running or after a forfeit.
    fn outcomes<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyArray1<i8>>, Bound<'py, PyArray1<i16>>)> {
        let slots = self.env.slots().map_err(env_err)?;
        Ok((
            PyArray1::from_vec(py, slots.iter().map(|s| s.code).collect()),
            PyArray1::from_vec(py, slots.iter().map(|s| s.outcome_token().map_or(-1, |t| t as i16)).collect()),
        ))
    }

    /// RL state of all games: `(terminated bool [N], forfeited bool [N], reward float32 [N],
    /// agent_plies uint32 [N], code int8 [N], agent_is_white bool [N])`.
    fn rl_outcomes<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(
        Bound<'py, PyArray1<bool>>,
        Bound<'py, PyArray1<bool>>,
        Bound<'py, PyArray1<f32>>,
        Bound<'py, PyArray1<u32>>,
        Bound<'py, PyArray1<i8>>,
        Bound<'py, PyArray1<bool>>,
    )> {
        let s = self.env.slots().map_err(env_err)?;
        Ok((
            PyArray1::from_vec(py, s.iter().map(|x| x.terminated).collect()),
            PyArray1::from_vec(py, s.iter().map(|x| x.forfeited).collect()),
            PyArray1::from_vec(py, s.iter().map(|x| x.reward).collect()),
            PyArray1::from_vec(py, s.iter().map(|x| x.agent_plies).collect()),
            PyArray1::from_vec(py, s.iter().map(|x| x.code).collect()),
            PyArray1::from_vec(py, s.iter().map(|x| x.agent_is_white).collect()),
        ))
    }

    /// Rewards float32 [N]: +1 opponent checkmated, −1 agent checkmated or agent forfeited, 0
    /// otherwise (0 while running).
    fn rewards<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let s = self.env.slots().map_err(env_err)?;
        Ok(PyArray1::from_vec(py, s.iter().map(|x| x.reward).collect()))
    }

    fn __repr__(&self) -> String {
        format!("BatchEnv(n_games={}, max_ply={})", self.env.n_games(), self.env.max_ply())
    }
}
