"""Alignment of the edge-case diagnostics (spec eval-probe-generate-sweep-bench.md §3.5) against
python-chess: the model is shown the moves before ply t, is scored at the position that predicts
ply t against the legal moves of ply t, and at a mate or stalemate only PAD is legal."""

from __future__ import annotations

import chess
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pawn.config import TOY
from pawn.evaluate.diagnostics import edge_case_diagnostics
from pawn.vocab import NUM_ACTIONS, PAD_TOKEN, VOCAB_SIZE, token_to_uci, uci_to_token

CHECKS = {
    "in_check": lambda b: b.is_check(),
    "double_check": lambda b: len(b.checkers()) == 2,
    "pin_restricts": lambda b: any(b.is_pinned(b.turn, sq) for sq in chess.SQUARES
                                   if (p := b.piece_at(sq)) is not None and p.color == b.turn and p.piece_type != chess.KING),
    "ep_available": lambda b: any(b.is_en_passant(m) for m in b.legal_moves),
    "castle_legal_k": lambda b: any(b.is_kingside_castling(m) for m in b.legal_moves),
    "castle_legal_q": lambda b: any(b.is_queenside_castling(m) for m in b.legal_moves),
    "castle_blocked_check": lambda b: b.is_check() and b.has_castling_rights(b.turn),
    "promotion_available": lambda b: any(m.promotion for m in b.legal_moves),
    "checkmate": lambda b: b.is_checkmate(),
    "stalemate": lambda b: b.is_stalemate(),
}


class ChessOracleModel:
    """A "perfect" model computed by python-chess on the host: at each position it puts logit 0
    on every legal move of the board after the moves read so far (only PAD once the game is
    over) and −1e9 elsewhere. It records every non-empty prompt it is shown."""

    config = TOY

    def __init__(self, offset: int):
        self.offset = offset
        self.calls: list[list[list[str]]] = []

    def _logits(self, ids: np.ndarray) -> np.ndarray:
        out = np.zeros(ids.shape + (VOCAB_SIZE,), np.float32)
        prompts = []
        for b, row in enumerate(ids):
            moves = [token_to_uci(int(x)) for x in row[self.offset:] if x < NUM_ACTIONS]
            if not moves:
                continue
            assert all(x == PAD_TOKEN for x in row[self.offset + len(moves):]), "the prompt must be a prefix of moves"
            prompts.append(moves)
            board = chess.Board()
            for p in range(self.offset, self.offset + len(moves)):
                board.push_uci(moves[p - self.offset])
                out[b, p] = -1e9
                if board.legal_moves.count() == 0:
                    out[b, p, PAD_TOKEN] = 0.0
                else:
                    out[b, p, [uci_to_token(m.uci()) for m in board.legal_moves]] = 0.0
        self.calls.append(prompts)
        return out

    def __call__(self, tokens, attn_mask, dtype=None):
        shape = jax.ShapeDtypeStruct(tokens.shape + (VOCAB_SIZE,), jnp.float32)
        return jax.pure_callback(lambda t: self._logits(np.asarray(t)), shape, tokens)


@pytest.mark.parametrize("prepend_outcome", [False, True])
def test_edge_case_prompts_legal_sets_and_mates_are_aligned(prepend_outcome):
    model = ChessOracleModel(int(prepend_outcome))
    n = 3
    res = edge_case_diagnostics(model, n_per_category=n, max_ply=200, n_samples=16, batch_size=8,
                                prepend_outcome=prepend_outcome, max_simulated_factor=2000.0)
    filled = [c for c, r in res.items() if r["n_positions"]]
    # The quota generator fills these reliably at 200 plies; the rare ones may stay empty.
    assert {"in_check", "castle_legal_k", "castle_legal_q", "checkmate"} <= set(filled)
    assert len(model.calls) == len(filled)  # one batch per non-empty category, in category order
    for c, prompts in zip(filled, model.calls):
        assert len(prompts) == res[c]["n_positions"]
        for moves in prompts:
            board = chess.Board()
            for m in moves:
                board.push_uci(m)
            # The prompt is the moves before ply t: the category holds in the position at ply t.
            assert CHECKS[c](board), (c, moves)
        r = res[c]
        # Samples drawn from the oracle's softmax are all legal in the scored set (ply t's moves;
        # only PAD after a mate or stalemate): an off-by-one ply or prompt breaks this.
        assert r["mean_legal_rate"] == 1.0, (c, r)
        if r["terminal"]:
            assert r["mean_pad_prob"] == pytest.approx(1.0)
        else:
            assert r["mean_pad_prob"] == 0.0
