# Type stubs for the native module pawn._engine (Rust, crates/pawn-engine/src/python/).
# Shapes use B = games, T = plies (max_ply), V = vocabulary width.
# Errors: one Rust enum (crates/pawn-engine/src/error.rs) mapped once (python/error.rs) to the
# classes of pawn.engine.errors: EngineInputError (bad games/moves/tokens/FEN; a ValueError),
# EngineUsageError (argument out of domain; a ValueError), EngineIndexError (IndexError),
# EngineStateError (RuntimeError), EngineTypeError (wrong type/dtype/rank; a TypeError),
# EngineMemoryError (output too large to allocate; a MemoryError); FileNotFoundError/OSError for
# files. Records are read-only #[pyclass] objects; ``record["field"]`` and ``to_dict()`` give the
# dict-style access of the dicts the engine returned before.
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

class MoveVocabulary:
    """The spec §1.8 move-vocabulary export. Read-only; ``v["move_to_token"]`` and
    ``to_dict()`` (the §1.8 JSON layout) give dict-style access."""

    @property
    def square_names(self) -> list[str]:
        """The 64 square names by index: a1 = 0, b1 = 1, …, h8 = 63."""
    @property
    def promo_pieces(self) -> list[str]:
        """Promotion letters by promotion code 1–4: q, r, b, n."""
    @property
    def promo_pairs(self) -> list[tuple[int, int]]:
        """The 44 promotion (src, dst) square pairs, spec §1.7 order."""
    @property
    def token_to_move(self) -> dict[int, str]:
        """Token id 0–1967 → UCI string (1,968 entries)."""
    @property
    def move_to_token(self) -> dict[str, int]:
        """UCI string → token id (1,968 entries)."""
    def __getitem__(self, key: str) -> Any: ...
    def to_dict(self) -> dict[str, Any]: ...

def export_move_vocabulary() -> MoveVocabulary:
    """The spec §1.8 export as a ``MoveVocabulary`` record."""

# --- games (spec engine.md §3) ------------------------------------------------------------------
class RandomGames:
    """A batch of uniformly random games (spec §3; N games, T = max_ply). Read-only; ``len()``
    is N; ``games["tokens"]`` and ``to_dict()`` give dict-style access to the fields (all
    attributes below but ``max_ply``)."""

    @property
    def tokens(self) -> npt.NDArray[np.int16]:
        """int16 [N, T] move tokens in slots 0 … length−1; every later slot is PAD (1968), never 0
        (token 0 is the real move a1b1)."""
    @property
    def lengths(self) -> npt.NDArray[np.int16]:
        """int16 [N] plies played, 0 ≤ length ≤ T."""
    @property
    def termination(self) -> npt.NDArray[np.uint8]:
        """uint8 [N] spec §2.2 codes: 0 checkmate, 1 stalemate, 2 seventy-five-move rule,
        3 fivefold repetition, 4 insufficient material, 5 ply limit (TERMINATION_NAMES)."""
    @property
    def outcome(self) -> npt.NDArray[np.int16]:
        """int16 [N] outcome token per spec §2.3 (1969–1973)."""
    @property
    def seed(self) -> int:
        """The call's base seed."""
    @property
    def max_ply(self) -> int:
        """Width T of the ply axis of ``tokens``."""
    def attention_mask(self) -> npt.NDArray[np.bool_]:
        """bool [N, T]: true on real move slots (``token != PAD``)."""
    def __len__(self) -> int: ...
    def __getitem__(self, key: str) -> Any: ...
    def to_dict(self) -> dict[str, Any]: ...

def random_games(
    n_games: int, max_ply: int = 512, seed: int = 0, mate_boost: float = 0.0, discard_ply_limit: bool = False,
    first_game: int = 0, block: int = 32768,
) -> RandomGames:
    """Games ``first_game … first_game + n_games − 1`` of the seed's stream (spec §3), played
    without the GIL in blocks of ``block`` games with Ctrl-C checked between blocks (the games
    do not depend on ``block``). EngineUsageError for n_games < 0, max_ply outside 1..65535,
    block < 1, mate_boost outside [0, 1]; EngineMemoryError if the tokens cannot be allocated."""

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

class BoardStates:
    """The six spec §5 arrays of a batch (B games, T plies): entry t is the position before
    move t for t < length; later entries hold the fill given per field. Read-only;
    ``states["boards"]`` and ``to_dict()`` give dict-style access."""

    @property
    def boards(self) -> npt.NDArray[np.int8]:
        """int8 [B, T, 8, 8] ``[rank][file]`` with rank 0 = rank 1 (``reshape(B, T, 64)`` is
        indexed by square a1 = 0 … h8 = 63); 0 empty, 1–6 white P N B R Q K, 7–12 black
        p n b r q k. Fill 0."""
    @property
    def side_to_move(self) -> npt.NDArray[np.bool_]:
        """bool [B, T], true = white to move (t even). Fill false."""
    @property
    def castling_rights(self) -> npt.NDArray[np.uint8]:
        """uint8 [B, T], bit0 K, bit1 Q, bit2 k, bit3 q. Fill 0."""
    @property
    def ep_square(self) -> npt.NDArray[np.int8]:
        """int8 [B, T], en-passant target square if an en-passant capture is legal now, else −1
        (a double push with no legal capture gives −1). Fill −1."""
    @property
    def is_check(self) -> npt.NDArray[np.bool_]:
        """bool [B, T], the side to move is in check. Fill false."""
    @property
    def halfmove_clock(self) -> npt.NDArray[np.uint8]:
        """uint8 [B, T], plies since the last pawn move or capture (§2.1), capped at 255.
        Fill 0."""
    def __getitem__(self, key: str) -> Any: ...
    def to_dict(self) -> dict[str, Any]: ...

def board_states(tokens: npt.NDArray[np.int16], lengths: npt.NDArray[np.int16]) -> BoardStates:
    """Spec §5 board states of every game and ply. EngineTypeError for a wrong dtype or rank,
    EngineUsageError for lengths outside 0..T, EngineInputError naming game, ply and token of an
    illegal move, EngineMemoryError if the arrays cannot be allocated."""
def perft(fen: str, depth: int) -> int: ...
# --- pgn / uci (spec engine.md §6) ----------------------------------------------------------------
SKIP_REASONS: list[str]
"""Reasons a game is skipped, in ``counts`` order: illegal_move, unreadable_move, malformed,
variant, fen_start, no_outcome, too_short."""
PARSE_SKIP_REASONS: list[str]
"""The SKIP_REASONS that are faults of the PGN text (all but too_short, a length filter)."""
SKIP_REASON_TEXT: dict[str, str]
"""One-line description of each skip reason, for reports."""
PARSER_VERSION: int
"""Version of the PGN parser's output; bumped whenever the same bytes can give different games,
moves, outcomes or skip reasons (the game cache stores it and rebuilds on a mismatch)."""
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
        termination, time_control, eco, opening ('' when missing); built on first access."""
    def header(self, name: str) -> list[str]:
        """One column of ``headers`` (str [N]) without building the others; KeyError for another name."""
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
    def looks_like_pgn(self) -> bool:
        """Whether the input reads as PGN: no NUL byte in its first 64 KiB, and it is blank or
        some game has a tag pair or a readable move (False for a JSON or binary file)."""
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
    """As parse_pgn_bytes, reading ``path`` (FileNotFoundError naming it if missing). The file
    is read in 256 KiB blocks while the games of the blocks already read are parsed; the
    result is that of ``parse_pgn_bytes`` on the whole file's bytes."""
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

class DiagnosticSets:
    """Random games selected to fill per-bit edge-case quotas (spec §7.3; N ≤ total_games
    games, T = max_ply). Read-only; ``len()`` is N; ``sets["move_ids"]`` and ``to_dict()`` give
    dict-style access."""

    @property
    def move_ids(self) -> npt.NDArray[np.int16]:
        """int16 [N, T] move tokens, PAD (1968) after each game's end."""
    @property
    def game_lengths(self) -> npt.NDArray[np.int16]:
        """int16 [N] plies of each game."""
    @property
    def termination_codes(self) -> npt.NDArray[np.uint8]:
        """uint8 [N] termination codes of spec §2.2."""
    @property
    def per_ply_stats(self) -> npt.NDArray[np.uint64]:
        """uint64 [N, T] edge-case bits per position, as edge_stats_per_ply."""
    @property
    def white(self) -> npt.NDArray[np.uint64]:
        """uint64 [N] OR of the stored per-ply entries with white to move (even t)."""
    @property
    def black(self) -> npt.NDArray[np.uint64]:
        """uint64 [N] OR of the stored per-ply entries with black to move (odd t)."""
    @property
    def quota_assignment_white(self) -> npt.NDArray[np.uint64]:
        """uint64 [N] one-hot bit of the white quota the game was credited to, else 0."""
    @property
    def quota_assignment_black(self) -> npt.NDArray[np.uint64]:
        """uint64 [N] one-hot bit of the black quota the game was credited to, else 0."""
    @property
    def quotas_filled_white(self) -> npt.NDArray[np.int32]:
        """int32 [64] games credited per white quota bit."""
    @property
    def quotas_filled_black(self) -> npt.NDArray[np.int32]:
        """int32 [64] games credited per black quota bit."""
    @property
    def n_simulated(self) -> int:
        """Games simulated in total, accepted or not."""
    def __len__(self) -> int: ...
    def __getitem__(self, key: str) -> Any: ...
    def to_dict(self) -> dict[str, Any]: ...

def generate_diagnostic_sets(
    quotas_white: npt.NDArray[np.int32],
    quotas_black: npt.NDArray[np.int32],
    total_games: int,
    max_ply: int = 256,
    seed: int = 42,
    max_simulated_factor: float = 100.0,
) -> DiagnosticSets:
    """Quota-driven diagnostic sets (spec §7.3). EngineTypeError for quotas that are not int32
    arrays, EngineUsageError for fewer than 64 quotas or a bad max_ply or factor,
    EngineMemoryError if total_games × max_ply outputs cannot be allocated."""

class AccuracyCeiling:
    """Monte-Carlo top-1 accuracy ceiling of uniformly random games (spec §7.5): P sampled
    positions (game-then-ply order) with their estimates and means. Read-only; ``r["ply"]`` and
    ``to_dict()`` give dict-style access."""

    @property
    def n_positions(self) -> int:
        """Number P of positions sampled."""
    @property
    def n_games(self) -> int:
        """Games played."""
    @property
    def n_rollouts(self) -> int:
        """Random playouts per legal move (0 = no rollout estimates)."""
    @property
    def sample_rate(self) -> float:
        """Fraction of positions sampled."""
    @property
    def unconditional_ceiling(self) -> float:
        """Mean of ``unconditional`` (E[1/N_legal]; 0.0843 at max_ply 512, spec §3.6)."""
    @property
    def naive_conditional_ceiling(self) -> float:
        """Mean of ``naive_conditional``."""
    @property
    def conditional_ceiling(self) -> float:
        """Mean of ``conditional``."""
    @property
    def conditional_corrected_ceiling(self) -> float:
        """Mean of ``conditional_corrected``."""
    @property
    def ply(self) -> npt.NDArray[np.uint16]:
        """uint16 [P] ply of each position (0 = start position)."""
    @property
    def game_length(self) -> npt.NDArray[np.uint16]:
        """uint16 [P] length of the position's game."""
    @property
    def n_legal(self) -> npt.NDArray[np.uint16]:
        """uint16 [P] legal moves in the position."""
    @property
    def unconditional(self) -> npt.NDArray[np.float64]:
        """float64 [P] 1/N_legal."""
    @property
    def naive_conditional(self) -> npt.NDArray[np.float64]:
        """float64 [P] 1/(N_legal − moves that end the game at once with another outcome
        class)."""
    @property
    def conditional(self) -> npt.NDArray[np.float64]:
        """float64 [P] rollout estimate (equals ``unconditional`` without rollouts)."""
    @property
    def conditional_corrected(self) -> npt.NDArray[np.float64]:
        """float64 [P] split-half corrected rollout estimate (equals ``unconditional`` without
        rollouts)."""
    @property
    def outcome(self) -> npt.NDArray[np.uint8]:
        """uint8 [P] outcome class of the game: 0 white mated, 1 black mated, 2 stalemate,
        3 75-move, 4 fivefold, 5 insufficient material, 6 ply limit."""
    @property
    def game_idx(self) -> npt.NDArray[np.uint32]:
        """uint32 [P] index of the position's game."""
    def __getitem__(self, key: str) -> Any: ...
    def to_dict(self) -> dict[str, Any]: ...

def accuracy_ceiling(
    n_games: int = 1000, max_ply: int = 512, sample_rate: float = 0.01, seed: int = 77777, n_rollouts: int = 0
) -> AccuracyCeiling:
    """Monte-Carlo accuracy ceiling (spec §7.5). EngineUsageError for max_ply outside 1..65535
    or sample_rate <= 0; EngineMemoryError if the games cannot be allocated."""
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
