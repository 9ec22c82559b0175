"""Token vocabulary of the published PAWN models (spec ``engine.md`` §1), the one place in Python
where token ids live. Values come from the Rust engine, which derives the 1,968 move actions by the
searchless_chess enumeration (§1.3).

Layout: ids 0–1967 are move actions (id 0 is the real move ``a1b1``, never padding), 1968 is PAD,
1969–1979 are the eleven outcome tokens.
"""

from __future__ import annotations

import operator

import numpy as np

from pawn import _engine

NUM_ACTIONS: int = _engine.NUM_ACTIONS
"""Number of move actions, 1968."""
PAD_TOKEN: int = _engine.PAD_TOKEN
"""Padding token, 1968. Fills every slot after the end of a game."""
OUTCOME_TOKEN_BASE: int = _engine.OUTCOME_TOKEN_BASE
"""First outcome token id, 1969."""
N_OUTCOMES: int = _engine.N_OUTCOMES
"""Number of outcome tokens, 11."""
VOCAB_SIZE: int = _engine.VOCAB_SIZE
"""Vocabulary width of the model's embedding and lm_head, 1980."""
MAX_SEQ_LEN: int = _engine.MAX_SEQ_LEN
"""Model context length in tokens, 512."""
OUTCOME_NAMES: tuple[str, ...] = tuple(_engine.OUTCOME_NAMES)
"""Outcome names in id order; ``OUTCOME_NAMES[k]`` is token ``1969 + k`` (spec §1.6)."""

# Named outcome ids (spec §1.6). WHITE_RESIGNS / BLACK_RESIGNS mean the *named* side wins.
WHITE_CHECKMATES, BLACK_CHECKMATES, STALEMATE, DRAW_BY_RULE, PLY_LIMIT = range(1969, 1974)
WHITE_RESIGNS, BLACK_RESIGNS, DRAW_BY_AGREEMENT = range(1974, 1977)
WHITE_WINS_ON_TIME, BLACK_WINS_ON_TIME, DRAW_BY_TIME = range(1977, 1980)
assert OUTCOME_NAMES[WHITE_RESIGNS - OUTCOME_TOKEN_BASE] == "WHITE_RESIGNS"

TERMINATION_NAMES: tuple[str, ...] = tuple(_engine.TERMINATION_NAMES)
"""Termination codes 0–5 of spec §2.2, by index (from the engine)."""
RUNNING: int = _engine.RUNNING
"""Termination code of a game still running (spec §8.2), -1."""
PREMATURE_PAD: int = _engine.PREMATURE_PAD
"""Termination code: the model sampled PAD while the game was still running (spec §3.1), -2."""
FORFEIT: int = _engine.FORFEIT
"""Termination code: the model played an illegal token (spec §3.1, §8.2), -3."""


def termination_outcome(code: int, length: int) -> int | None:
    """Outcome token of a game that ended with termination ``code`` (0–5, spec §2.2) after
    ``length`` plies (spec §2.3: checkmate is ``WHITE_CHECKMATES`` when ``length`` is odd), or
    ``None`` for a sentinel code (``RUNNING``, ``PREMATURE_PAD``, ``FORFEIT``). The mapping is the
    engine's own."""
    return _engine.termination_outcome(int(code), int(length))


def token_to_uci(token: int) -> str | None:
    """UCI string of a move token (``317 -> "e2e4"``); ``None`` for PAD, outcomes and ids out of range.

    Raises:
        TypeError: ``token`` is not an integer (Python or NumPy int); a float such as ``3.7`` is
            not silently truncated to a move.
    """
    t = operator.index(token)
    return _engine.token_to_uci(t) if 0 <= t < NUM_ACTIONS else None


def uci_to_token(uci: str) -> int | None:
    """Token id of a UCI string (``"e1g1" -> 102``; castling is the king moving two squares).

    Only maps strings to ids: legality is not checked. ``None`` if the string is malformed or
    names a pair outside the vocabulary (``"a1a1"``, ``"a1b4"``, ``"a7a8"`` is a non-pawn move).
    """
    return _engine.uci_to_token(uci)


def action_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decomposition of every move action for factored embeddings (spec §1.5).

    Returns:
        ``(src, dst, promo)``, each uint8 [1968] in id order: source and destination square
        indices (a1 = 0 … h8 = 63) and promotion code (0 none, 1 q, 2 r, 3 b, 4 n).
    """
    return _engine.action_table()


def promo_pairs() -> list[tuple[int, int]]:
    """The 44 promotion ``(src, dst)`` pairs of the grid representation, spec §1.7 order."""
    return _engine.promo_pairs()


def export_move_vocabulary() -> _engine.MoveVocabulary:
    """Spec §1.8 export, the engine's ``MoveVocabulary`` record: ``square_names`` (64),
    ``promo_pieces`` (q r b n), ``promo_pairs`` (44 (src, dst)), ``token_to_move`` (int → UCI,
    1,968 entries) and ``move_to_token`` (UCI → int); ``v["move_to_token"]`` and ``to_dict()``
    give dict-style access (``to_dict()`` is the §1.8 JSON layout)."""
    return _engine.export_move_vocabulary()
