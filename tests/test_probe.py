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


class TokenTable:
    """Backbone stand-in with known hidden states: layer l (0 = embed) at a position holding token
    x is ``(l + 1) · table[x]`` for a fixed random table [vocab, d]."""

    config = TOY

    def __init__(self, seed: int = 0):
        self.table = np.random.default_rng(seed).standard_normal((1980, TOY.d_model)).astype(np.float32)

    def hidden(self, tokens: np.ndarray, layer: int) -> np.ndarray:
        return (layer + 1) * self.table[tokens].astype(np.float64)

    def __call__(self, tokens, attn_mask, dtype=None, return_hidden=False):
        import jax.numpy as jnp

        h = jnp.asarray(self.table)[tokens]
        return None, h[None] * jnp.arange(1, TOY.n_layers + 2, dtype=jnp.float32)[:, None, None, None]


def test_probe_metrics_match_a_numpy_hand_computation():
    """With 0 epochs the probes keep their initial weights, so every validation figure can be
    recomputed by hand: R² pooled over outputs around the per-output val means, v1 MAE (Σ over
    outputs / positions), the MSE loss, and thresholded / argmax accuracies."""
    from pawn.engine import probe_targets, random_games
    from pawn.evaluate.probes import init_probe_params

    names = ("material_count", "legal_move_count", "halfmove_clock", "side_to_move", "piece_type")
    cfg = ProbeConfig(n_train_games=4, n_val_games=6, max_ply=20, seed=3, n_epochs=0, game_batch=4, inner_batch=32, probes=names)
    model = TokenTable()
    res = run_probes(model, cfg)
    g = random_games(6, 20, 4)  # validation corpus: seed + 1
    tg = probe_targets(g.tokens, g.lengths)
    b, t = np.nonzero(tg["valid"])
    n = b.size
    params = init_probe_params(names, TOY.n_layers + 1, TOY.d_model, 3 + 7)
    for li, layer in enumerate(["embed", "layer_0", "layer_1"]):
        h = model.hidden(g.tokens[b, t], li)  # pure moves: position t holds move t
        for k in names:
            w, bias = np.asarray(params[k]["w"][li], np.float64), np.asarray(params[k]["b"][li], np.float64)
            pred = h @ w + bias
            rec = res["probes"][k][layer]
            assert rec["n_val"] == n
            if k == "side_to_move":
                y = tg[k][b, t].astype(np.float64)
                assert rec["accuracy"] == pytest.approx(np.mean((pred[:, 0] > 0) == (y > 0.5)), abs=1e-9)
                continue
            if k == "piece_type":
                y = tg[k][b, t]
                assert rec["accuracy"] == pytest.approx(np.mean(pred.reshape(n, 64, 13).argmax(-1) == y), abs=1e-9)
                continue
            y = tg[k][b, t].reshape(n, -1).astype(np.float64)
            err = pred - y
            r2 = 1 - (err ** 2).sum() / (((y - y.mean(0)) ** 2).sum() + 1e-8)
            assert rec["accuracy"] == pytest.approx(r2, rel=1e-4, abs=1e-5)
            assert rec["best_accuracy"] == rec["accuracy"]
            assert rec["mae"] == pytest.approx(np.abs(err).sum() / n, rel=1e-5)
            assert rec["loss"] == pytest.approx((err ** 2).mean(1).mean(), rel=1e-5)
    # The pooled R² differs from a mean of per-output R² here, so the check above discriminates.
    y = tg["material_count"][b, t].reshape(n, -1).astype(np.float64)
    pred = model.hidden(g.tokens[b, t], 0) @ np.asarray(params["material_count"]["w"][0], np.float64)
    per_output = np.mean([1 - ((pred[:, j] - y[:, j]) ** 2).sum() / (((y[:, j] - y[:, j].mean()) ** 2).sum() + 1e-8)
                          for j in range(10) if y[:, j].std() > 0])
    assert abs(per_output - res["probes"]["material_count"]["embed"]["accuracy"]) > 1e-3


def test_cached_and_streamed_hidden_states_give_the_same_probes():
    cfg = dict(n_train_games=20, n_val_games=9, max_ply=16, seed=5, n_epochs=2, game_batch=8, inner_batch=32,
               probes=("is_check", "material_count", "game_phase"))
    cached = run_probes(TokenTable(1), ProbeConfig(**cfg))
    streamed = run_probes(TokenTable(1), ProbeConfig(**cfg, feature_cache_gb=0.0))
    assert cached["settings"]["features_cached"] == {"train": True, "val": True}
    assert streamed["settings"]["features_cached"] == {"train": False, "val": False}
    for k, recs in cached["probes"].items():
        for layer, r in recs.items():
            for f, v in r.items():
                assert streamed["probes"][k][layer][f] == pytest.approx(v, rel=1e-6, abs=1e-7), (k, layer, f)


def test_validation_games_default_to_a_quarter_of_the_training_games():
    assert ProbeConfig(n_train_games=64).val_games == 16
    assert ProbeConfig().val_games == 1024
    assert ProbeConfig(n_train_games=2).val_games == 1
    assert ProbeConfig(n_train_games=64, n_val_games=5).val_games == 5


def test_probe_flags_env_and_config_file_and_trained_context_default(tmp_path, monkeypatch):
    ck = save_checkpoint(tmp_path / "toy", PAWNModel(TOY, jax.random.PRNGKey(1)).params(), TOY,
                         run_config={"seq_len": 20, "prepend_outcome": False})
    out = tmp_path / "p.json"
    base = ["probe", str(ck), "--games", "8", "--epochs", "0", "--probe", "is_check", "--json", str(out)]

    def settings(args, env=None):
        res = CliRunner().invoke(app, base + args, env=env or {})
        assert res.exit_code == 0, res.output
        return res.output, json.loads(out.read_text())["models"][0]["settings"]

    text, s = settings([])
    assert s["max_ply"] == 20 and "trained context 20" in s["max_ply_source"] and "max_ply 20" in text
    assert "100% elapsed" in text and "ETA" in text  # not a terminal: plain progress lines
    assert s["weight_decay"] == 1e-4 and s["n_val_games"] == 2
    cfg = tmp_path / "probe.toml"
    cfg.write_text("max_ply = 12\nweight_decay = 0.5\nval_games = 3\n")
    _, s = settings(["--config", str(cfg)])
    assert (s["max_ply"], s["weight_decay"], s["n_val_games"]) == (12, 0.5, 3)
    _, s = settings(["--config", str(cfg)], env={"PAWN_PROBE_WEIGHT_DECAY": "0.01"})
    assert s["weight_decay"] == 0.01 and s["max_ply"] == 12  # environment beats the file
    _, s = settings(["--config", str(cfg), "--weight-decay", "0.02", "--max-ply", "10"], env={"PAWN_PROBE_WEIGHT_DECAY": "0.01"})
    assert s["weight_decay"] == 0.02 and s["max_ply"] == 10  # the command line beats both
    cfg.write_text("weight_decy = 0.5\n")
    res = CliRunner().invoke(app, base + ["--config", str(cfg)])
    assert res.exit_code == 2 and "weight_decy" in res.output and len(res.output.strip().splitlines()) == 1


def test_ctrl_c_during_probe_keeps_the_finished_variants_and_says_so(tmp_path, monkeypatch):
    import pawn.evaluate.probes as probes_mod
    from pawn.config import TINY_SUPERNET

    ck = save_checkpoint(tmp_path / "sup", PAWNModel(TINY_SUPERNET, jax.random.PRNGKey(0)).params(), TINY_SUPERNET,
                         run_config={"supernet": "tiny", "seq_len": 16})
    calls = []

    def fake(model, cfg, progress=None):
        calls.append(cfg)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return {"settings": {"max_ply": cfg.max_ply, "features_cached": {"train": True, "val": True}}, "probes": {}, "best": {}}

    monkeypatch.setattr(probes_mod, "run_probes", fake)
    out = tmp_path / "p.json"
    res = CliRunner().invoke(app, ["probe", str(ck), "--json", str(out)])
    assert res.exit_code == 130
    assert "interrupted; kept the results of tiny/small" in res.output and "tiny/base" in res.output
    data = json.loads(out.read_text())
    assert [m["name"] for m in data["models"]] == ["tiny/small"]
    assert data["interrupted"] == {"finished": ["tiny/small"], "not_run_or_unfinished": ["tiny/base", "tiny/large"]}
    calls[:] = [None]  # the next call (the first variant) is interrupted
    res = CliRunner().invoke(app, ["probe", str(ck)])
    assert res.exit_code == 130 and "nothing was finished; nothing written" in res.output


def _reference_loss(kind, logits, y, w):
    """The per-probe losses as first written (square-major piece_type, optax CE/BCE), the
    reference the fused head and its closed-form gradients must reproduce."""
    import jax.numpy as jnp
    import optax

    n = logits.shape[1]
    if kind == "ce_sq":
        l = optax.softmax_cross_entropy_with_integer_labels(logits.reshape(logits.shape[0], n, 64, 13), y[None].astype(jnp.int32)).mean(-1)
    elif kind == "ce":
        l = optax.softmax_cross_entropy_with_integer_labels(logits, y[None].astype(jnp.int32))
    elif kind == "bce":
        l = optax.sigmoid_binary_cross_entropy(logits, jnp.broadcast_to(y.reshape(n, -1)[None], logits.shape)).mean(-1)
    else:
        l = ((logits - y.reshape(n, -1)[None]) ** 2).mean(-1)
    return (l * w[None]).sum(-1) / jnp.maximum(w.sum(), 1.0)


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_fused_probe_steps_equal_one_adamw_per_probe_with_autodiff():
    """A segment of fused steps (one matmul for all probes, closed-form gradients, class-major
    piece_type, a trailing inactive step) equals per-probe params trained with autodiff of the
    reference losses and one optax AdamW per probe type."""
    import jax.numpy as jnp
    import optax

    from pawn.evaluate.probes import _chunk, _fused_grad, _Head, _segments, _train_segment, init_probe_params

    names = tuple(PROBES)
    c = _Corpus(6, 40, 11, False, names)
    Lp, d, n = 3, 16, c.n_positions
    rng = np.random.default_rng(0)
    feats = jnp.asarray(rng.standard_normal((Lp, n, d)) * 2.0, jnp.float32)
    targets = {k: jnp.asarray(a) for k, a in c.rows.items()}
    idx, w = _chunk(rng.permutation(n)[: 5 * 32 - 7], 32)  # 5 steps, the last one partly padding
    per = init_probe_params(names, Lp, d, 4)
    head = _Head(names)
    opt = optax.adamw(1e-2, weight_decay=1e-4)
    fused = head.fuse(per)

    def ref_grads(params, h, s):
        def loss(q, k):
            out = jnp.einsum("lnd,ldk->lnk", h, q["w"]) + q["b"][:, None, :]
            return _reference_loss(PROBES[k][1], out, targets[k][idx[s]], jnp.asarray(w[s])).sum()

        return {k: jax.grad(loss)(params[k], k) for k in names}

    # The gradients themselves (AdamW below is blind to a gradient's scale).
    g = _fused_grad(head, fused, feats[:, idx[4]], {k: a[idx[4]] for k, a in targets.items()}, jnp.asarray(w[4]))
    want = head.fuse(ref_grads(per, feats[:, idx[4]], 4))
    for part in ("w", "b"):
        np.testing.assert_allclose(np.asarray(g[part]), np.asarray(want[part]), rtol=1e-4, atol=1e-7)
    (i, ww, on), = list(_segments(idx, w, 6))  # 6 slots: the last is inactive
    assert not bool(on[-1])
    fused, _ = _train_segment(head, fused, opt.init(fused), opt, feats, targets, i, ww, on)

    refs = {k: (per[k], opt.init(per[k])) for k in names}
    for s in range(len(idx)):
        grads = ref_grads({k: refs[k][0] for k in names}, feats[:, idx[s]], s)
        for k in names:
            p, o = refs[k]
            u, o = opt.update(grads[k], o, p)
            refs[k] = (optax.apply_updates(p, u), o)
    got = head.fuse({k: refs[k][0] for k in names})
    moved = np.abs(np.asarray(got["w"]) - np.asarray(head.fuse(per)["w"])).max()
    assert moved > 1e-3  # the steps did something
    # Adam's g/√v turns float32 rounding in near-zero gradients into ~1e-5 moves; a wrong gradient,
    # column order or optimizer state moves weights by up to lr·steps = 5e-2.
    np.testing.assert_allclose(np.asarray(fused["w"]), np.asarray(got["w"]), rtol=0, atol=5e-5)
    np.testing.assert_allclose(np.asarray(fused["b"]), np.asarray(got["b"]), rtol=0, atol=5e-5)
    assert np.mean(np.abs(np.asarray(fused["w"]) - np.asarray(got["w"])) > 1e-6) < 0.01


def test_initial_probe_weights_are_the_per_shape_normal_draws_bit_for_bit():
    import jax.numpy as jnp

    from pawn.evaluate.probes import init_probe_params

    names = ("piece_type", "is_check", "ep_square")
    got = init_probe_params(names, 4, 48, 19)
    keys = jax.random.split(jax.random.PRNGKey(19), len(names))
    for k, kk in zip(names, keys):
        want = jax.random.normal(kk, (4, 48, PROBES[k][0])) / np.sqrt(48)
        assert got[k]["w"].dtype == jnp.float32 and np.array_equal(np.asarray(got[k]["w"]), np.asarray(want)), k
        assert np.array_equal(np.asarray(got[k]["b"]), np.zeros((4, PROBES[k][0])))


class BF16Table(TokenTable):
    """TokenTable rounded to bfloat16: hidden states in bfloat16, or the same values in float32."""

    def __init__(self, seed: int = 0, out_bf16: bool = True):
        super().__init__(seed)
        self.out_bf16 = out_bf16

    def __call__(self, tokens, attn_mask, dtype=None, return_hidden=False):
        import jax.numpy as jnp

        h = super().__call__(tokens, attn_mask)[1].astype(jnp.bfloat16)
        return None, h if self.out_bf16 else h.astype(jnp.float32)


def test_bfloat16_hidden_states_are_cached_in_bfloat16_and_give_the_float32_results():
    """A bfloat16 forward's hidden states are stored as computed (half the memory) and upcast for
    the probes, so the numbers equal those of the same values held in float32."""
    import pawn.evaluate.probes as probes_mod

    cfg = dict(n_train_games=12, n_val_games=5, max_ply=16, seed=2, n_epochs=2, game_batch=8, inner_batch=32,
               probes=("piece_type", "material_count", "castling_rights"))
    seen = []
    real = probes_mod._Features.__init__

    def spy(self, *a, **k):
        real(self, *a, **k)
        seen.append(self.feats.dtype)

    probes_mod._Features.__init__ = spy
    try:
        low = run_probes(BF16Table(3, out_bf16=True), ProbeConfig(**cfg))
    finally:
        probes_mod._Features.__init__ = real
    assert seen and all(str(dt) == "bfloat16" for dt in seen)
    full = run_probes(BF16Table(3, out_bf16=False), ProbeConfig(**cfg))
    assert low["probes"] == full["probes"]
