"""Board states of replayed games and the linear-probe targets derived from them (spec
``engine.md`` §5).

Entry ``t`` of every array is the position **before** move ``t`` (entry 0 = start position) for
``0 <= t < length``. A probe pairs board entry t with the hidden state at sequence position
``t + offset`` (offset 0 in pure-moves mode, 1 with an outcome prefix): the position whose input
token is move t.

Inputs are ``tokens`` int16 [B, T] and ``lengths`` int16 [B], as for :mod:`pawn.engine.masks`;
``TypeError`` for a wrong dtype or rank, ``ValueError`` for mismatched sizes, lengths outside
0…T or an illegal token (naming game, ply and token). The replay runs in Rust with the GIL
released.
"""

from __future__ import annotations

import numpy as np

from pawn import _engine
from pawn._engine import BoardStates
from pawn.engine.masks import legal_move_grid

PIECE_CODES: tuple[str, ...] = (".", "P", "N", "B", "R", "Q", "K", "p", "n", "b", "r", "q", "k")
"""Board/``piece_type`` classes 0–12: empty, white P N B R Q K, black p n b r q k."""
CASTLING_ORDER: tuple[str, ...] = ("K", "Q", "k", "q")
"""Castling bits 0–3: white short, white long, black short, black long."""
MATERIAL_ORDER: tuple[str, ...] = ("WP", "WN", "WB", "WR", "WQ", "BP", "BN", "BB", "BR", "BQ")
"""The ten ``material_count`` entries (kings excluded)."""
GAME_PHASES: tuple[str, ...] = ("opening", "middlegame", "endgame")
"""``game_phase`` classes 0–2."""
NO_EP_SQUARE = 64
"""``ep_square`` probe class meaning "no legal en-passant capture"."""


def board_states(tokens: np.ndarray, lengths: np.ndarray) -> BoardStates:
    """Spec §5 ``extract_board_states``: replay each game and record every position before a move.

    Args:
        tokens: int16 [B, T] move tokens.
        lengths: int16 [B] game lengths, each in 0…T.

    Returns:
        ``BoardStates``, the engine's record (declared with shapes, dtypes and fills in
        ``pawn/_engine.pyi``): ``boards`` int8 [B, T, 8, 8] (``[rank][file]``, rank 0 = rank 1,
        so ``boards.reshape(B, T, 64)`` is indexed by square a1 = 0 … h8 = 63; codes
        :data:`PIECE_CODES`), ``side_to_move`` bool [B, T], ``castling_rights`` uint8 [B, T]
        (bits :data:`CASTLING_ORDER`), ``ep_square`` int8 [B, T] (−1 = none), ``is_check`` bool
        [B, T], ``halfmove_clock`` uint8 [B, T].

    Raises:
        TypeError, ValueError: see the module docstring.
    """
    return _engine.board_states(tokens, lengths)


def _popcount64(words: np.ndarray) -> np.ndarray:
    """Set bits per uint64 element, as int64."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(words).astype(np.int64)
    as_bytes = words.view(np.uint8).reshape(*words.shape, 8)
    table = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)
    return table[as_bytes].sum(axis=-1)


def derived_legal_move_count(grid: np.ndarray, promo: np.ndarray) -> np.ndarray:
    """Spec §4 derived count: popcount of the grid plus, for each promotion pair whose grid bit is
    set, (number of legal promotion pieces − 1).

    Args:
        grid: uint64 [..., 64] and promo: bool [..., 44, 4] from
            :func:`pawn.engine.masks.legal_move_grid`.

    Returns:
        int16 [...], the number of legal moves (castling counts once, each promotion piece once).
    """
    count = _popcount64(grid).sum(axis=-1)
    pieces = promo.sum(axis=-1).astype(np.int64)  # [..., 44]
    count += np.where(pieces > 0, pieces - 1, 0).sum(axis=-1)
    return count.astype(np.int16)


def probe_targets(tokens: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """Linear-probe targets of spec §5, one value (or vector) per game and ply t.

    Classes of each target (all [B, T, …]):

    * ``piece_type`` int8 [B, T, 64]: 13 classes per square (a1 = 0 … h8 = 63),
      :data:`PIECE_CODES` — 0 empty, 1–6 white P N B R Q K, 7–12 black.
    * ``side_to_move`` bool [B, T]: true = white to move.
    * ``is_check`` bool [B, T]: the side to move is in check.
    * ``castling_rights`` bool [B, T, 4]: rights in order K Q k q (:data:`CASTLING_ORDER`).
    * ``ep_square`` int8 [B, T]: 65 classes, the en-passant target square 0–63 when an
      en-passant capture is legal, 64 (:data:`NO_EP_SQUARE`) otherwise.
    * ``material_count`` int8 [B, T, 10]: piece counts WP WN WB WR WQ BP BN BB BR BQ
      (:data:`MATERIAL_ORDER`, kings excluded).
    * ``legal_move_count`` int16 [B, T]: number of legal moves, by the §4 derived count from the
      legal-move grid (:func:`derived_legal_move_count`).
    * ``halfmove_clock`` uint8 [B, T]: engine halfmove clock, capped at 255.
    * ``game_phase`` int8 [B, T]: 0 opening if t ≤ 20 and ≥ 28 squares are occupied; else 2
      endgame if ≤ 6 pieces other than pawns and kings remain; else 1 middlegame
      (:data:`GAME_PHASES`).
    * ``valid`` bool [B, T]: t < length. Every other target is zero/false where ``valid`` is
      false, except ``ep_square`` (64 = none); mask with ``valid`` before fitting a probe.

    Args:
        tokens: int16 [B, T] move tokens.
        lengths: int16 [B] game lengths, each in 0…T.

    Returns:
        dict mapping the names above to NumPy arrays.

    Raises:
        TypeError, ValueError: see the module docstring.
    """
    states = board_states(tokens, lengths)
    grid, promo = legal_move_grid(tokens, lengths)
    n_games, max_ply = states.side_to_move.shape
    valid = np.arange(max_ply)[None, :] < np.asarray(lengths, dtype=np.int64)[:, None]

    piece_type = states.boards.reshape(n_games, max_ply, 64)
    castling = (states.castling_rights[..., None] >> np.arange(4, dtype=np.uint8)) & 1
    ep = np.where(states.ep_square < 0, NO_EP_SQUARE, states.ep_square).astype(np.int8)
    codes = (1, 2, 3, 4, 5, 7, 8, 9, 10, 11)  # MATERIAL_ORDER as board codes
    material = np.stack([(piece_type == c).sum(axis=-1, dtype=np.int8) for c in codes], axis=-1)

    occupied = (piece_type != 0).sum(axis=-1)
    minor_major = material[..., [1, 2, 3, 4, 6, 7, 8, 9]].sum(axis=-1)
    ply = np.arange(max_ply)[None, :]
    phase = np.where((ply <= 20) & (occupied >= 28), 0, np.where(minor_major <= 6, 2, 1))
    phase = np.where(valid, phase, 0).astype(np.int8)

    return {
        "piece_type": piece_type,
        "side_to_move": states.side_to_move,
        "is_check": states.is_check,
        "castling_rights": castling.astype(bool),
        "ep_square": ep,
        "material_count": material,
        "legal_move_count": derived_legal_move_count(grid, promo),
        "halfmove_clock": states.halfmove_clock,
        "game_phase": phase,
        "valid": valid,
    }
