//! Stateful games for interactive use and autoregressive generation (spec `engine.md` §8): move
//! views of one game (grid masks, FEN, UCI position) and [`BatchEnv`], N concurrent games with a
//! shared ChaCha8 RNG for random opponents.

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use shakmaty::fen::Fen;
use shakmaty::{Color, EnPassantMode, Move, Position};

use crate::game::{GameState, Termination};
use crate::random::uniform_index;
use crate::vocab;

/// Termination code of a running game (§8.2).
pub const RUNNING: i8 = -1;
/// Termination code of a generated game in which the model sampled PAD while the game was still
/// running (sentinel of autoregressive generation; never set by [`BatchEnv`] itself).
pub const PREMATURE_PAD: i8 = -2;
/// Termination code of a game ended by an illegal token (§8.2 sentinel).
pub const FORFEIT: i8 = -3;

/// Grid index `src·64 + dst` of a legal move (castling as the king's two-square step).
pub fn grid_index(m: &Move) -> usize {
    let a = vocab::decompose(vocab::move_to_token(m).expect("standard chess move has a token"))
        .expect("move tokens decompose");
    a.src as usize * 64 + a.dst as usize
}

/// 4,096 flags, `src·64 + dst`: true iff some legal move goes src → dst (§8.1).
pub fn legal_grid_mask(g: &GameState) -> Vec<bool> {
    let mut mask = vec![false; 4096];
    for m in g.legal_moves() {
        mask[grid_index(&m)] = true;
    }
    mask
}

/// Legal moves as `(grid_indices, promotions)` (§8.1): one grid index per (src, dst) pair in
/// first-occurrence generation order, the four promotions of a pair collapsed; `promotions`
/// lists `(pair index §1.7, pieces 0–3 = q r b n)` per promotion pair.
pub fn legal_structured(g: &GameState) -> (Vec<u16>, Vec<(u8, Vec<u8>)>) {
    let mut grid: Vec<u16> = Vec::new();
    let mut promos: Vec<(u8, Vec<u8>)> = Vec::new();
    for m in g.legal_moves() {
        let idx = grid_index(&m) as u16;
        if !grid.contains(&idx) {
            grid.push(idx);
        }
        if let Some(role) = m.promotion() {
            let (src, dst) = (idx / 64, idx % 64);
            let pair = vocab::promo_pair_index(src as u8, dst as u8).expect("promotion pair") as u8;
            let piece = vocab::PROMO_ROLES.iter().position(|&r| r == role).expect("promotion role") as u8;
            match promos.iter_mut().find(|(p, _)| *p == pair) {
                Some((_, v)) => v.push(piece),
                None => promos.push((pair, vec![piece])),
            }
        }
    }
    (grid, promos)
}

/// FEN of the current position; the en-passant field is set only when a capture is legal.
pub fn fen(g: &GameState) -> String {
    Fen::from_position(g.position(), EnPassantMode::Legal).to_string()
}

/// `"position startpos"` or `"position startpos moves e2e4 …"`.
pub fn uci_position(g: &GameState) -> String {
    let mut s = String::from("position startpos");
    if !g.tokens().is_empty() {
        s.push_str(" moves");
        for &t in g.tokens() {
            s.push(' ');
            s.push_str(&vocab::token_to_uci(t).expect("history holds move tokens"));
        }
    }
    s
}

/// Errors of [`BatchEnv`] methods (bad calls, never bad moves).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvError {
    /// A method other than `reset` was called before the first `reset`.
    NotReset,
    /// A game index ≥ n_games.
    BadIndex { index: i64, n_games: usize },
    /// An agent (opponent) move was offered while it is not the agent's (opponent's) turn.
    WrongTurn { index: usize, agent: bool },
}

impl std::fmt::Display for EnvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnvError::NotReset => f.write_str("BatchEnv.reset() must be called before any other method"),
            EnvError::BadIndex { index, n_games } => {
                write!(f, "game index {index} is out of range for {n_games} games")
            }
            EnvError::WrongTurn { index, agent } => write!(
                f,
                "game {index} is not waiting for the {}'s move",
                if *agent { "agent" } else { "opponent" }
            ),
        }
    }
}

impl std::error::Error for EnvError {}

/// One game of a [`BatchEnv`] with its RL metadata (§8.2).
#[derive(Clone, Debug)]
pub struct Slot {
    pub game: GameState,
    pub agent_is_white: bool,
    pub terminated: bool,
    pub forfeited: bool,
    pub reward: f32,
    pub agent_plies: u32,
    /// §2.2 code 0–5, −1 while running, −3 after a forfeit through [`BatchEnv::apply_move`].
    pub code: i8,
}

impl Slot {
    fn new(agent_is_white: bool) -> Self {
        Slot {
            game: GameState::new(),
            agent_is_white,
            terminated: false,
            forfeited: false,
            reward: 0.0,
            agent_plies: 0,
            code: RUNNING,
        }
    }

    fn agents_turn(&self) -> bool {
        (self.game.position().turn() == Color::White) == self.agent_is_white
    }

    /// Run §2.2 after a move; on termination set the code and, with `rewards`, the reward
    /// (+1 opponent mated, −1 agent mated, 0 otherwise).
    fn finalise(&mut self, max_ply: usize, rewards: bool) {
        if let Some(t) = self.game.termination(max_ply) {
            self.terminated = true;
            self.code = t.code() as i8;
            if rewards && t == Termination::Checkmate {
                // The side to move is the mated one.
                self.reward = if self.agents_turn() { -1.0 } else { 1.0 };
            }
        }
    }

    /// Outcome token of a game that ended by a chess rule (§2.3); `None` while running or after
    /// a forfeit.
    pub fn outcome_token(&self) -> Option<u16> {
        if !self.terminated || self.code < 0 {
            return None;
        }
        let t = crate::diagnostics::termination_from_code(self.code as u8);
        Some(t.outcome_token(self.game.ply()))
    }
}

/// N concurrent games from the start position plus a shared ChaCha8 RNG seeded with `seed`
/// (used only by [`BatchEnv::apply_random_opponent_moves`]; `reset` does not reseed it).
#[derive(Clone, Debug)]
pub struct BatchEnv {
    n_games: usize,
    max_ply: usize,
    rng: ChaCha8Rng,
    slots: Option<Vec<Slot>>,
}

impl BatchEnv {
    /// An environment of `n_games` games capped at `max_ply` plies; call [`reset`](Self::reset)
    /// before use.
    pub fn new(n_games: usize, max_ply: usize, seed: u64) -> Self {
        BatchEnv { n_games, max_ply, rng: ChaCha8Rng::seed_from_u64(seed), slots: None }
    }

    pub fn n_games(&self) -> usize {
        self.n_games
    }

    pub fn max_ply(&self) -> usize {
        self.max_ply
    }

    /// N fresh games; games 0 … ⌊N/2⌋−1 have the agent as white, the rest as black.
    pub fn reset(&mut self) {
        let half = self.n_games / 2;
        self.slots = Some((0..self.n_games).map(|i| Slot::new(i < half)).collect());
    }

    /// All games (errors before `reset`).
    pub fn slots(&self) -> Result<&[Slot], EnvError> {
        self.slots.as_deref().ok_or(EnvError::NotReset)
    }

    fn slots_mut(&mut self) -> Result<&mut Vec<Slot>, EnvError> {
        self.slots.as_mut().ok_or(EnvError::NotReset)
    }

    /// Game `i`, checking the index.
    pub fn slot(&self, i: i64) -> Result<&Slot, EnvError> {
        let n = self.n_games;
        let s = self.slots()?;
        usize::try_from(i).ok().and_then(|i| s.get(i)).ok_or(EnvError::BadIndex { index: i, n_games: n })
    }

    /// Check every index of `indices` before anything is changed.
    pub fn check_indices(&self, indices: &[i64]) -> Result<Vec<usize>, EnvError> {
        self.slots()?;
        indices
            .iter()
            .map(|&i| match usize::try_from(i) {
                Ok(u) if u < self.n_games => Ok(u),
                _ => Err(EnvError::BadIndex { index: i, n_games: self.n_games }),
            })
            .collect()
    }

    pub fn all_terminated(&self) -> Result<bool, EnvError> {
        Ok(self.slots()?.iter().all(|s| s.terminated))
    }

    /// Running games (ascending); with `agent = Some(true/false)` only those where it is the
    /// agent's / opponent's turn.
    pub fn active(&self, agent: Option<bool>) -> Result<Vec<usize>, EnvError> {
        Ok(self
            .slots()?
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.terminated && agent.is_none_or(|a| s.agents_turn() == a))
            .map(|(i, _)| i)
            .collect())
    }

    /// Side-agnostic move (§8.2 `apply_moves`): a terminated game answers `(false, its code)`;
    /// an illegal token terminates and forfeits the game with code −3; a legal one is played and
    /// answers `(true, new code or −1)`. No rewards.
    pub fn apply_move(&mut self, i: usize, token: u16) -> Result<(bool, i8), EnvError> {
        let max_ply = self.max_ply;
        let s = &mut self.slots_mut()?[i];
        if s.terminated {
            return Ok((false, s.code));
        }
        match s.game.play_token(token) {
            Ok(_) => {
                s.finalise(max_ply, false);
                Ok((true, s.code))
            }
            Err(_) => {
                s.terminated = true;
                s.forfeited = true;
                s.code = FORFEIT;
                Ok((false, FORFEIT))
            }
        }
    }

    /// Replay `tokens` into game `i` from its current state (§8.2 `load_prefixes`): stops at the
    /// first illegal token (forfeit, −3) or at termination (its code); −1 if still running.
    pub fn load_prefix(&mut self, i: usize, tokens: &[u16]) -> Result<i8, EnvError> {
        let mut code = self.slots()?[i].code;
        for &t in tokens {
            let (_, c) = self.apply_move(i, t)?;
            code = c;
            if c != RUNNING {
                break;
            }
        }
        Ok(code)
    }

    /// Check, before anything is applied, that every running game in `indices` waits for the
    /// agent's (`agent = true`) or the opponent's move, so a batch is applied whole or not at
    /// all. A running game listed twice fails too: after its first move the other side is to
    /// play.
    pub fn check_turns(&self, indices: &[usize], agent: bool) -> Result<(), EnvError> {
        let slots = self.slots()?;
        let mut seen = vec![false; slots.len()];
        for &i in indices {
            let s = &slots[i];
            if !s.terminated && (seen[i] || s.agents_turn() != agent) {
                return Err(EnvError::WrongTurn { index: i, agent });
            }
            seen[i] = true;
        }
        Ok(())
    }

    /// Agent move (§8.2): terminated game → false; illegal → terminated, forfeited, reward −1
    /// (code stays −1); legal → agent plies + 1 and finalisation with rewards.
    pub fn apply_agent_move(&mut self, i: usize, token: u16) -> Result<bool, EnvError> {
        let max_ply = self.max_ply;
        let s = &mut self.slots_mut()?[i];
        if s.terminated {
            return Ok(false);
        }
        if !s.agents_turn() {
            return Err(EnvError::WrongTurn { index: i, agent: true });
        }
        if s.game.play_token(token).is_err() {
            s.terminated = true;
            s.forfeited = true;
            s.reward = -1.0;
            return Ok(false);
        }
        s.agent_plies += 1;
        s.finalise(max_ply, true);
        Ok(true)
    }

    /// External opponent move (§8.2): terminated game → false; illegal → terminated with
    /// reward 0, not forfeited; legal → played and finalised with rewards.
    pub fn apply_opponent_move(&mut self, i: usize, token: u16) -> Result<bool, EnvError> {
        let max_ply = self.max_ply;
        let s = &mut self.slots_mut()?[i];
        if s.terminated {
            return Ok(false);
        }
        if s.agents_turn() {
            return Err(EnvError::WrongTurn { index: i, agent: false });
        }
        if s.game.play_token(token).is_err() {
            s.terminated = true;
            s.reward = 0.0;
            return Ok(false);
        }
        s.finalise(max_ply, true);
        Ok(true)
    }

    /// Every running game where it is the opponent's turn (ascending) plays a uniform random
    /// legal move drawn from the shared RNG (§3.2 widening multiply); returns those games.
    pub fn apply_random_opponent_moves(&mut self) -> Result<Vec<usize>, EnvError> {
        let games = self.active(Some(false))?;
        let max_ply = self.max_ply;
        let slots = self.slots.as_mut().ok_or(EnvError::NotReset)?;
        for &i in &games {
            let s = &mut slots[i];
            let moves = s.game.legal_moves();
            let m = moves[uniform_index(&mut self.rng, moves.len() as u64) as usize];
            s.game.play_unchecked(&m);
            s.finalise(max_ply, true);
        }
        Ok(games)
    }
}

/// Legal-token mask of one game, `vocab_size` wide: true for every legal move token < V. A
/// terminated game has no legal moves and PAD (if < V) is marked legal instead, so a masked
/// sampler always has one admissible token and emits PAD after the game's end.
pub fn legal_token_mask(s: &Slot, vocab_size: usize) -> Vec<bool> {
    let mut mask = vec![false; vocab_size];
    if s.terminated {
        if (vocab::PAD_TOKEN as usize) < vocab_size {
            mask[vocab::PAD_TOKEN as usize] = true;
        }
        return mask;
    }
    for t in s.game.legal_tokens() {
        if (t as usize) < vocab_size {
            mask[t as usize] = true;
        }
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(u: &str) -> u16 {
        vocab::uci_to_token(u).unwrap()
    }

    #[test]
    fn methods_before_reset_fail_cleanly() {
        let mut env = BatchEnv::new(4, 64, 1);
        assert_eq!(env.all_terminated(), Err(EnvError::NotReset));
        assert_eq!(env.apply_move(0, 317).unwrap_err(), EnvError::NotReset);
        env.reset();
        assert_eq!(env.all_terminated(), Ok(false));
    }

    #[test]
    fn a_batch_with_one_wrong_turn_changes_no_game() {
        let mut env = BatchEnv::new(4, 512, 0);
        env.reset();
        // Games 0, 1: agent white (its turn); games 2, 3: agent black (opponent's turn).
        assert!(env.check_turns(&[0, 3], true).is_err());
        assert!(env.check_turns(&[0, 0], true).is_err());
        assert!(env.check_turns(&[0, 1], true).is_ok());
        assert!(env.check_turns(&[2, 3], false).is_ok());
        assert!(env.slots().unwrap().iter().all(|s| s.game.ply() == 0));
    }

    #[test]
    fn illegal_token_forfeits_with_code_minus_three() {
        let mut env = BatchEnv::new(2, 64, 1);
        env.reset();
        assert_eq!(env.apply_move(0, tok("e2e5")).unwrap(), (false, FORFEIT));
        assert!(env.slots().unwrap()[0].forfeited);
        assert_eq!(env.apply_move(0, tok("e2e4")).unwrap(), (false, FORFEIT));
        assert_eq!(env.apply_move(1, tok("e2e4")).unwrap(), (true, RUNNING));
    }

    #[test]
    fn fools_mate_ends_with_black_checkmates_and_agent_reward() {
        // Game 0: agent white. Agent plays f3, g4; opponent e5, Qh4#.
        let mut env = BatchEnv::new(2, 64, 1);
        env.reset();
        assert!(env.apply_agent_move(0, tok("f2f3")).unwrap());
        assert!(env.apply_opponent_move(0, tok("e7e5")).unwrap());
        assert!(env.apply_agent_move(0, tok("g2g4")).unwrap());
        assert!(env.apply_opponent_move(0, tok("d8h4")).unwrap());
        let s = &env.slots().unwrap()[0];
        assert_eq!((s.terminated, s.code, s.reward, s.agent_plies), (true, 0, -1.0, 2));
        assert_eq!(s.outcome_token(), Some(vocab::outcome::BLACK_CHECKMATES));
    }

    #[test]
    fn ply_cap_terminates_with_ply_limit() {
        let mut env = BatchEnv::new(1, 2, 1);
        env.reset();
        assert_eq!(env.load_prefix(0, &[tok("e2e4"), tok("e7e5"), tok("g1f3")]).unwrap(), 5);
        let s = &env.slots().unwrap()[0];
        assert_eq!(s.game.ply(), 2);
        assert_eq!(s.outcome_token(), Some(vocab::outcome::PLY_LIMIT));
    }

    #[test]
    fn random_opponents_only_move_in_their_games() {
        let mut env = BatchEnv::new(4, 64, 9);
        env.reset();
        // Games 2, 3 have the agent as black, so the opponent (white) moves first there.
        assert_eq!(env.apply_random_opponent_moves().unwrap(), vec![2, 3]);
        assert_eq!(env.active(Some(true)).unwrap(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn grid_mask_and_uci_position() {
        let mut g = GameState::new();
        assert_eq!(legal_grid_mask(&g).iter().filter(|&&b| b).count(), 20);
        g.play_token(tok("e2e4")).unwrap();
        assert_eq!(uci_position(&g), "position startpos moves e2e4");
        assert_eq!(fen(&g), "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1");
    }
}
