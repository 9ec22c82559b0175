# Type stubs for the native module pawn._engine (Rust, crates/pawn-engine/src/python/).
# Shapes use B = games, T = plies (max_ply), V = vocabulary width.
# Errors: one Rust enum (crates/pawn-engine/src/error.rs) mapped once (python/error.rs) to the
# classes of pawn.engine.errors: EngineInputError (bad games/moves/tokens/FEN; a ValueError),
# EngineUsageError (argument out of domain; a ValueError), EngineIndexError (IndexError),
# EngineStateError (RuntimeError); FileNotFoundError/OSError for files, TypeError for dtypes.
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__version__: str

def hello() -> str: ...

# --- vocabulary (spec engine.md §1) -------------------------------------------------------------
NUM_ACTIONS: int
PAD_TOKEN: int
OUTCOME_TOKEN_BASE: int
N_OUTCOMES: int
VOCAB_SIZE: int
MAX_SEQ_LEN: int
OUTCOME_NAMES: list[str]

# --- terminations (spec engine.md §2.2, §8.2) ---------------------------------------------------
TERMINATION_NAMES: list[str]
"""Names of termination codes 0–5, by code: checkmate, stalemate, seventy_five_move_rule,
fivefold_repetition, insufficient_material, ply_limit."""
RUNNING: int
"""Termination code of a game still running, -1."""
PREMATURE_PAD: int
"""Termination code of a generated game where the model sampled PAD too early, -2."""
FORFEIT: int
"""Termination code of a game ended by an illegal token, -3."""

def termination_outcome(code: int, length: int) -> int | None:
    """Outcome token (1969–1973) of termination ``code`` 0–5 after ``length`` plies (checkmate
    is WHITE_CHECKMATES when length is odd); None for the sentinels and any other code."""

def token_to_uci(token: int) -> str | None: ...
def uci_to_token(uci: str) -> int | None: ...
def action_table() -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8], npt.NDArray[np.uint8]]: ...
def promo_pairs() -> list[tuple[int, int]]: ...
def export_move_vocabulary() -> dict: ...

# --- games (spec engine.md §3) ------------------------------------------------------------------
def random_games(
    n_games: int, max_ply: int = 512, seed: int = 0, mate_boost: float = 0.0, discard_ply_limit: bool = False,
    first_game: int = 0,
) -> dict[str, npt.NDArray]: ...

# --- masks and board states (spec engine.md §4, §5) ---------------------------------------------
def legal_move_masks(
    tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16], vocab_size: int = 1969
) -> npt.NDArray[np.bool_]: ...  # [B, T, V]
def legal_move_masks_sparse(
    tokens: npt.NDArray[np.int16],
    lengths: npt.NDArray[np.int16],
    seq_len: int | None = None,
    vocab_size: int = 1980,
) -> npt.NDArray[np.int64]: ...  # [N] flat indices b*seq_len*V + t*V + token
def legal_move_grid(
    tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16]
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.bool_]]: ...  # [B, T, 64], [B, T, 44, 4]
def legal_move_counts(tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16]) -> npt.NDArray[np.int16]: ...
def board_states(tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16]) -> dict[str, np.ndarray]: ...
def perft(fen: str, depth: int) -> int: ...
# --- pgn / uci (spec engine.md §6) ----------------------------------------------------------------
SKIP_REASONS: list[str]
"""Reasons a game is skipped, in ``counts`` order: illegal_move, unreadable_move, malformed,
variant, fen_start, no_outcome, too_short."""
CLOCK_MISSING: int
"""Clock of a move without ``[%clk]`` inside a game, 32768 (spec §6.4)."""
EVAL_MISSING: int
"""Eval of a move without ``[%eval]`` inside a game, -32768 (spec §6.4)."""

class PgnGames:
    """Games parsed from one PGN input, in file order (N kept games, T = max_ply); spec
    §6.1–§6.4. Read-only; ``len()`` is N; ``games["tokens"]`` and ``to_dict()`` give dict-style
    access to the attributes below."""

    @property
    def tokens(self) -> npt.NDArray[np.int16]:
        """int16 [N, T] move tokens, PAD (1968) after each game's length."""
    @property
    def lengths(self) -> npt.NDArray[np.int16]:
        """int16 [N] plies kept (≤ T; a longer game is truncated and gets outcome 1973)."""
    @property
    def outcome(self) -> npt.NDArray[np.int16]:
        """int16 [N] outcome token per spec §6.3."""
    @property
    def white_elo(self) -> npt.NDArray[np.uint16]:
        """uint16 [N], 0 when missing."""
    @property
    def black_elo(self) -> npt.NDArray[np.uint16]:
        """uint16 [N], 0 when missing."""
    @property
    def clocks(self) -> npt.NDArray[np.uint16]:
        """uint16 [N, T] seconds left after each move; CLOCK_MISSING (32768) for a move without
        ``[%clk]``, 0 beyond the length (spec §6.4)."""
    @property
    def evals(self) -> npt.NDArray[np.int16]:
        """int16 [N, T] centipawns (mate ±(32767 − |N|)); EVAL_MISSING (-32768) for a move
        without ``[%eval]``, 0 beyond the length (spec §6.4)."""
    @property
    def game_index(self) -> npt.NDArray[np.int64]:
        """int64 [N] 1-based number in the input of each kept game."""
    @property
    def full_length(self) -> npt.NDArray[np.int64]:
        """int64 [N] plies of the whole game before truncation."""
    @property
    def headers(self) -> dict[str, list[str]]:
        """str columns [N]: event, site, date, utc_date, utc_time, white, black, result,
        termination, time_control, eco, opening ('' when missing)."""
    @property
    def skipped(self) -> list[tuple[int, int, str]]:
        """(game number, ply, reason) per skipped game; reasons in SKIP_REASONS."""
    @property
    def counts(self) -> dict[str, int]:
        """``read``, ``kept`` and one count per skip reason."""
    @property
    def path(self) -> Path | None:
        """The file read, or None for text input."""
    @property
    def san(self) -> list[list[str]]:
        """SAN of each kept move, normalised (``0-0`` → ``O-O``, ``bxa8Q`` → ``bxa8=Q``, glyphs
        dropped); built on first access."""
    @property
    def uci(self) -> list[list[str]]:
        """UCI of each kept move (castling ``e1g1``); built on first access."""
    def __len__(self) -> int: ...
    def __getitem__(self, key: str) -> Any: ...
    def to_dict(self) -> dict[str, Any]: ...

class UciGames:
    """Games parsed from a UCI file (spec §6.7; N kept games, T = max_ply). Read-only;
    ``len()`` is N; ``games["tokens"]`` and ``to_dict()`` give dict-style access."""

    @property
    def tokens(self) -> npt.NDArray[np.int16]:
        """int16 [N, T] PAD-filled move tokens."""
    @property
    def lengths(self) -> npt.NDArray[np.int16]:
        """int16 [N] plies kept."""
    @property
    def game_index(self) -> npt.NDArray[np.int64]:
        """int64 [N] 1-based number of the non-empty line of each kept game."""
    @property
    def skipped(self) -> list[tuple[int, int, str]]:
        """(game number, ply, reason) per skipped game: illegal_move, unreadable_move or
        too_short."""
    @property
    def counts(self) -> dict[str, int]:
        """``read``, ``kept`` and one count per skip reason."""
    @property
    def path(self) -> Path | None:
        """The file read, or None for bytes input."""
    @property
    def uci(self) -> list[list[str]]:
        """UCI of each kept move; built on first access."""
    def __len__(self) -> int: ...
    def __getitem__(self, key: str) -> Any: ...
    def to_dict(self) -> dict[str, Any]: ...

def parse_pgn_bytes(data: bytes, max_ply: int = 512, min_ply: int = 1) -> PgnGames:
    """Parse PGN bytes (spec §6.1–§6.4). EngineUsageError for max_ply outside 1..32767 or
    min_ply outside 0..max_ply."""
def parse_pgn_path(path: str, max_ply: int = 512, min_ply: int = 1) -> PgnGames:
    """As parse_pgn_bytes, reading ``path`` (FileNotFoundError naming it if missing)."""
def parse_uci_bytes(data: bytes, max_ply: int = 512, min_ply: int = 1) -> UciGames:
    """Parse a UCI file's bytes (spec §6.7): one game per non-empty line, a trailing result
    dropped; bad games skipped and reported."""
def parse_uci_path(path: str, max_ply: int = 512, min_ply: int = 1) -> UciGames:
    """As parse_uci_bytes, reading ``path`` (FileNotFoundError naming it if missing)."""
def uci_to_tokens(
    games: list[list[str]], max_ply: int = 512, on_error: str = "raise"
) -> tuple[npt.NDArray[np.int16], npt.NDArray[np.int16]]: ...
def tokens_to_uci(tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16]) -> list[list[str]]: ...
def tokens_to_san(tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16]) -> list[list[str]]: ...
def uci_to_san(games: list[list[str]]) -> list[list[str]]: ...
def san_to_uci(games: list[list[str]]) -> list[list[str]]: ...
# --- diagnostics (spec engine.md §7) ------------------------------------------------------------
def validate_games(
    tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int16]]: ...
def edge_case_bits() -> dict[str, int]: ...
def edge_stats_per_ply(
    tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16]
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64], npt.NDArray[np.uint64]]: ...
def generate_diagnostic_sets(
    quotas_white: npt.NDArray[np.int32],
    quotas_black: npt.NDArray[np.int32],
    total_games: int,
    max_ply: int = 256,
    seed: int = 42,
    max_simulated_factor: float = 100.0,
) -> dict: ...
def accuracy_ceiling(
    n_games: int = 1000, max_ply: int = 512, sample_rate: float = 0.01, seed: int = 77777, n_rollouts: int = 0
) -> dict: ...
def accuracy_ceiling_of(tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16]) -> npt.NDArray[np.float64]: ...

# --- state (spec engine.md §8) ------------------------------------------------------------------
class GameState:
    def __init__(self, max_ply: int = 512) -> None: ...
    def make_move(self, token: int) -> bool: ...
    def make_move_uci(self, uci: str) -> str | None: ...
    def legal_move_tokens(self) -> list[int]: ...
    def ply(self) -> int: ...
    def is_white_to_move(self) -> bool: ...
    def is_check(self) -> bool: ...
    def check_termination(self) -> int: ...
    def is_game_over(self) -> bool: ...
    def is_checkmate(self) -> bool: ...
    def outcome_token(self) -> int | None: ...
    def move_history(self) -> list[int]: ...
    def legal_moves_structured(self) -> tuple[list[int], list[tuple[int, list[int]]]]: ...
    def legal_moves_grid_mask(self) -> list[bool]: ...
    def legal_moves_full(self) -> tuple[list[int], list[tuple[int, list[int]]], list[bool]]: ...
    def uci_position(self) -> str: ...
    def fen(self) -> str: ...

class BatchEnv:
    def __init__(self, n_games: int, max_ply: int = 512, seed: int = 42) -> None: ...
    def reset(self) -> None: ...
    def n_games(self) -> int: ...
    def max_ply(self) -> int: ...
    def all_terminated(self) -> bool: ...
    def active_games(self) -> list[int]: ...
    def active_agent_games(self) -> list[int]: ...
    def active_opponent_games(self) -> list[int]: ...
    def apply_moves(
        self, indices: npt.ArrayLike, tokens: npt.ArrayLike
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int8]]: ...
    def load_prefixes(self, tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16]) -> npt.NDArray[np.int8]: ...
    def apply_agent_moves(self, indices: npt.ArrayLike, tokens: npt.ArrayLike) -> list[bool]: ...
    def apply_opponent_moves(self, indices: npt.ArrayLike, tokens: npt.ArrayLike) -> list[bool]: ...
    def apply_random_opponent_moves(self) -> list[int]: ...
    def legal_token_masks(self, indices: npt.ArrayLike, vocab_size: int = 1980) -> npt.NDArray[np.bool_]: ...
    def move_histories(self, indices: npt.ArrayLike) -> tuple[npt.NDArray[np.int16], npt.NDArray[np.int16]]: ...
    def fens(self, indices: npt.ArrayLike) -> list[str]: ...
    def uci_positions(self, indices: npt.ArrayLike) -> list[str]: ...
    def plies(self, indices: npt.ArrayLike) -> npt.NDArray[np.int32]: ...
    def outcomes(self) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int16]]: ...
    def rl_outcomes(
        self,
    ) -> tuple[
        npt.NDArray[np.bool_],
        npt.NDArray[np.bool_],
        npt.NDArray[np.float32],
        npt.NDArray[np.uint32],
        npt.NDArray[np.int8],
        npt.NDArray[np.bool_],
    ]: ...
    def rewards(self) -> npt.NDArray[np.float32]: ...
