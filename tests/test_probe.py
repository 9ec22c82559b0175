"""Linear probes (spec eval-probe-generate-sweep-bench.md §2): the board/hidden pairing against
python-chess, the per-layer record, and ``pawn probe``."""

from __future__ import annotations

import json

import chess
import jax
import numpy as np
import pytest
from typer.testing import CliRunner

from pawn.checkpoint import save_checkpoint
from pawn.cli import app
from pawn.config import TOY
from pawn.evaluate.probes import PROBES, ProbeConfig, _Corpus, run_probes
from pawn.model import PAWNModel
from pawn.vocab import token_to_uci

SMALL = dict(n_train_games=16, n_val_games=8, max_ply=24, n_epochs=1, game_batch=8, inner_batch=64)


@pytest.mark.parametrize("prepend_outcome", [False, True])
def test_probe_sample_pairs_board_before_move_t_with_the_position_holding_move_t(prepend_outcome):
    c = _Corpus(6, 30, 3, prepend_outcome, tuple(PROBES))
    games = np.arange(6)
    ids, _, flat = c.batch(games)
    ys = {k: a[c.rows_of(games)] for k, a in c.rows.items()}
    for i in range(0, flat.size, 7):
        b, p = divmod(int(flat[i]), c.seq_len)
        t = p - c.offset
        board = chess.Board()
        for k in range(t):
            board.push_uci(token_to_uci(int(ids[b, k + c.offset])))
        assert ids[b, p] < 1968  # the input at the paired position is move t itself
        assert board.piece_at(chess.parse_square(token_to_uci(int(ids[b, p]))[:2])) is not None
        assert bool(ys["side_to_move"][i]) == (board.turn == chess.WHITE)
        assert bool(ys["is_check"][i]) == board.is_check()
        assert int(ys["legal_move_count"][i]) == board.legal_moves.count()
        for sq in range(64):
            piece = board.piece_at(sq)
            code = 0 if piece is None else piece.piece_type + (0 if piece.color == chess.WHITE else 6)
            assert ys["piece_type"][i][sq] == code


def test_probe_results_have_a_record_per_layer_and_a_best_layer():
    m = PAWNModel(TOY, jax.random.PRNGKey(0))
    res = run_probes(m, ProbeConfig(**SMALL))
    assert set(res["probes"]) == set(PROBES)
    for k, recs in res["probes"].items():
        assert list(recs) == ["embed", "layer_0", "layer_1"]
        for r in recs.values():
            assert r["n_train"] > 0 and r["n_val"] > 0
            assert ("mae" in r) == (PROBES[k][1] == "mse")
            if PROBES[k][1] != "mse":
                assert 0.0 <= r["accuracy"] <= 1.0 and 0.0 <= r["best_accuracy"] <= 1.0
        assert res["best"][k]["best_accuracy"] == max(r["best_accuracy"] for r in recs.values())


def test_side_to_move_probe_learns_a_hidden_state_that_encodes_it():
    """A backbone whose residual stream holds (−1)^position: side to move is linearly readable."""

    class Parity:
        config = TOY

        def __call__(self, tokens, attn_mask, dtype=None, return_hidden=False):
            import jax.numpy as jnp

            B, T = tokens.shape
            sign = jnp.where(jnp.arange(T) % 2 == 0, 1.0, -1.0)
            h = jnp.broadcast_to(sign[None, None, :, None], (TOY.n_layers + 1, B, T, TOY.d_model)) * 3.0
            return None, h

    res = run_probes(Parity(), ProbeConfig(**{**SMALL, "n_epochs": 4}, probes=("side_to_move",)))
    assert res["best"]["side_to_move"]["best_accuracy"] == 1.0


def test_probe_command_writes_the_per_layer_table(tmp_path):
    ck = save_checkpoint(tmp_path / "toy", PAWNModel(TOY, jax.random.PRNGKey(1)).params(), TOY)
    out = tmp_path / "probes.json"
    res = CliRunner().invoke(app, ["probe", str(ck), "--games", "8", "--val-games", "4", "--max-ply", "16", "--epochs", "1",
                                   "--probe", "is_check", "--probe", "material_count", "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    (m,) = data["models"]
    assert set(m["probes"]) == {"is_check", "material_count"} and "mae" in m["best"]["material_count"]
    assert m["settings"]["n_epochs"] == 1


def test_probe_plot_without_matplotlib_is_a_clear_error(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_mpl(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    res = CliRunner().invoke(app, ["probe", str(tmp_path), "--plot", str(tmp_path / "p.png")])
    assert res.exit_code == 1 and "matplotlib" in res.output
