"""What a run really spent (issue 43, item 3): the optimizer steps and gradient batches of the
RoSA family's warm-up and mask scoring on top of the main steps, and the trainable parameters the
loss can never move (``pad_embed``, ``outcome_embed``, and under the legal mask the non-move
tokens' logit weights), recorded and printed so runs compare at equal compute from their records."""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np
import pytest
from typer.testing import CliRunner

from pawn.adapters import build_adapted
from pawn.adapters.io import load_backbone
from pawn.cli import app
from pawn.vocab import NUM_ACTIONS

PGN = "lichess/lichess_db_2013-01_first100_reexported_chess.js-benchmark.pgn"


def _batch(shared_data, seq_len=64, n=16):
    from pawn.data.cache import CsrGames
    from pawn.data.layout import Layout
    from pawn.data.lichess_batches import GameBatches
    from pawn.engine import parse_pgn
    from pawn.train.adapter_step import BATCH_KEYS, batch_dict

    g = parse_pgn(str(shared_data / PGN), min_ply=2)
    lens = g.lengths[:n].astype(np.int64)
    flat = np.concatenate([g.tokens[i, :lens[i]] for i in range(n)]).astype(np.int16)
    games = CsrGames(flat, np.concatenate([[0], np.cumsum(lens)]), g.outcome[:n].astype(np.int16), {})
    b = GameBatches(games, Layout.of(False), seq_len, n, shuffle=False, drop_last=False, legal_mask=True).batch_at(0)
    return batch_dict(b, (*BATCH_KEYS, "legal"))


def _grads(model, batch, legal_mask: bool):
    from pawn.train.adapter_step import make_adapter_loss

    loss_fn = make_adapter_loss(legal_mask=legal_mask, illegal_penalty=0.0, dtype=None)
    train, frozen = eqx.partition(model, model.trainable_filter())
    return eqx.filter_grad(lambda t: loss_fn(eqx.combine(t, frozen), batch)[0])(train)


@pytest.mark.parametrize("legal_mask", [True, False])
def test_unreached_parameters_get_no_gradient_and_are_counted(tiny_backbone, shared_data, legal_mask):
    """Full fine-tuning of the tiny backbone (``unfreeze`` of both layers, head and embeddings) and
    ``specialized_clm``: on real games the gradient of ``pad_embed``, ``outcome_embed`` and (under
    the legal mask only) the ``lm_head`` columns of PAD and the outcome tokens is exactly zero, and
    those are the parameters :meth:`num_unreached_params` takes out of the trainable count."""
    bb, _, _ = load_backbone(tiny_backbone)
    batch = _batch(shared_data)
    d = bb.config.d_model
    ft = build_adapted("unfreeze", {"top_n": 2, "include_lm_head": True, "include_embeddings": True}, bb, jax.random.key(0))
    g = _grads(ft, batch, legal_mask).adapter
    assert not np.any(np.asarray(g.embeddings["pad_embed"])) and not np.any(np.asarray(g.embeddings["outcome_embed"]))
    head_rest = np.asarray(g.head["lm_head"])[:, NUM_ACTIONS:]  # PAD and the 11 outcome tokens
    assert np.any(np.asarray(g.embeddings["src_embed"])) and np.any(np.asarray(g.head["lm_head"])[:, :NUM_ACTIONS])
    if legal_mask:
        assert not np.any(head_rest)
    else:
        assert np.any(head_rest[:, 0])  # unmasked, the end-of-game PAD target is a real prediction
    want = 12 * d + (12 * d if legal_mask else 0)  # (pad + 11 outcome rows) · d, + 12 lm_head columns · d
    assert ft.num_unreached_params(legal_mask) == want
    assert ft.num_trainable_params() == ft.adapter.num_params()
    scratch = build_adapted("specialized_clm", {"d_model": 32, "n_layers": 1, "n_heads": 1, "d_ff": 64}, bb, jax.random.key(1))
    gs = _grads(scratch, batch, legal_mask).backbone
    assert not np.any(np.asarray(gs.pad_embed)) and not np.any(np.asarray(gs.outcome_embed))
    assert bool(np.any(np.asarray(gs.lm_head)[:, NUM_ACTIONS:])) != legal_mask
    assert scratch.num_unreached_params(legal_mask) == want
    film = build_adapted("film", {"use_output_film": True}, bb, jax.random.key(2))
    gf = _grads(film, batch, legal_mask).adapter
    assert bool(np.any(np.asarray(gf.out_gamma)[NUM_ACTIONS:]) or np.any(np.asarray(gf.out_beta)[NUM_ACTIONS:])) != legal_mask
    assert film.num_unreached_params(legal_mask) == (24 if legal_mask else 0)
    lora = build_adapted("lora", {"rank": 2}, bb, jax.random.key(3))
    assert lora.num_unreached_params(legal_mask) == 0


def _adapt(backbone, shared_data, out, *extra: str):
    r = CliRunner().invoke(app, ["adapt", str(backbone), "--data", str(shared_data / PGN), "--epochs", "1",
                                 "--steps-per-epoch", "4", "--steps-per-chunk", "2", "--batch-size", "8", "--seq-len", "64",
                                 "--val-games", "8", "--data-seed", "3", "--cache-dir", str(out.parent / "cache"),
                                 "--out", str(out), *extra])
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.slow  # a RoSA warm-up, mask and main phase through the CLI
def test_rosa_records_its_warmup_and_mask_batches_on_top_of_the_main_steps(tiny_backbone, shared_data, tmp_path):
    """``--steps`` counts the main phase only: a RoSA run also takes ``rosa_warmup_steps`` optimizer
    steps and ``mask_samples`` gradient batches. Its end record and its last lines say so; a plain
    adapter's optimizer steps are its steps."""
    from pawn.runs import open_run

    out = _adapt(tiny_backbone, shared_data, tmp_path / "rosa", "--strategy", "rosa", "--density", "0.05",
                 "--rosa-warmup-steps", "6", "--mask-samples", "3")
    c = open_run(tmp_path / "rosa").compute
    assert c is not None
    assert (c["main_steps"], c["warmup_steps"], c["mask_scoring_batches"]) == (4, 6, 3)
    assert c["optimizer_steps"] == 10 and c["gradient_batches"] == 13
    assert c["movable_params"] == c["trainable_params"] == open_run(tmp_path / "rosa").trainable_params
    assert "spent 10 optimizer steps (4 main + 6 RoSA warm-up) and 3 mask-scoring batches: 13 gradient batches" in out
    assert f"{c['trainable_params']:,} trainable parameters, each reached by the loss (its gradient can be nonzero)" in out
    from pawn.report.data import summary

    assert summary(open_run(tmp_path / "rosa"))["compute"]["optimizer_steps"] == 10  # the report's runs table
    out = _adapt(tiny_backbone, shared_data, tmp_path / "unf", "--strategy", "unfreeze", "--include-embeddings",
                 "--include-lm-head")
    run = open_run(tmp_path / "unf")
    c = run.compute
    assert c["optimizer_steps"] == c["gradient_batches"] == c["main_steps"] == 4 and c["warmup_steps"] == 0
    assert c["trainable_params"] - c["movable_params"] == 24 * 32 == c["trainable_params"] - run.movable_params
    assert (f"{c['trainable_params']:,} trainable parameters, {c['movable_params']:,} reached by the loss (the gradient "
            f"of the other {24 * 32:,}, such as the PAD and outcome embeddings, is always zero: they never move)") in out
    assert "spent 4 optimizer steps;" in out

