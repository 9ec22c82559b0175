# Type stubs for the native module pawn._engine (Rust, crates/pawn-engine/src/python/).
# Shapes use B = games, T = plies (max_ply), V = vocabulary width.
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

def token_to_uci(token: int) -> str | None: ...
def uci_to_token(uci: str) -> int | None: ...
def action_table() -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8], npt.NDArray[np.uint8]]: ...
def promo_pairs() -> list[tuple[int, int]]: ...
def export_move_vocabulary() -> dict: ...

# --- games (spec engine.md §3) ------------------------------------------------------------------
def random_games(
    n_games: int, max_ply: int = 512, seed: int = 0, mate_boost: float = 0.0, discard_ply_limit: bool = False
) -> dict[str, npt.NDArray]: ...
