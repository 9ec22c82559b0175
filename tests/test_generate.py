"""Autoregressive generation (spec eval-probe-generate-sweep-bench.md §3.1–§3.5) and
``pawn generate``."""

from __future__ import annotations

import io
import json

import chess.pgn
import jax
import jax.numpy as jnp
import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pawn.checkpoint import save_checkpoint
from pawn.cli import app
from pawn.config import TOY
from pawn.engine import uci_to_tokens
from pawn.evaluate.diagnostics import TESTS, edge_case_diagnostics, run_outcome_tests, sub_seed
from pawn.evaluate.generation import FORFEIT, PREMATURE_PAD, analyze, autoregressive_generate
from pawn.model import PAWNModel
from pawn.vocab import PAD_TOKEN, VOCAB_SIZE, WHITE_CHECKMATES


@pytest.fixture(scope="module")
def toy():
    return PAWNModel(TOY, jax.random.PRNGKey(0))


class ConstantModel:
    """Always puts all mass on one token (no KV cache: use ``use_kv_cache=False``)."""

    config = TOY

    def __init__(self, token):
        self.token = token

    def __call__(self, tokens, attn_mask, dtype=None):
        return jnp.broadcast_to(jnp.where(jnp.arange(VOCAB_SIZE) == self.token, 50.0, 0.0), tokens.shape + (VOCAB_SIZE,))


@pytest.mark.parametrize("mask_illegal", [False, True])
@pytest.mark.parametrize("outcome_token", [None, WHITE_CHECKMATES])
def test_kv_cache_and_recompute_generate_identical_games(toy, mask_illegal, outcome_token):
    kw = dict(outcome_token=outcome_token, max_seq_len=24, mask_illegal=mask_illegal, batch_size=4, seed=7)
    a = autoregressive_generate(toy, 6, use_kv_cache=True, **kw)
    b = autoregressive_generate(toy, 6, use_kv_cache=False, **kw)
    np.testing.assert_array_equal(a.sequences, b.sequences)
    np.testing.assert_array_equal(a.term_codes, b.term_codes)
    np.testing.assert_array_equal(a.game_lengths, b.game_lengths)


@pytest.mark.parametrize("top_k", [1, None])  # greedy, sampled
def test_kv_cache_matches_recompute_with_prefix_groups_and_a_cache_of_the_generation_length(toy, monkeypatch, top_k):
    import pawn.evaluate.generation as gen

    lengths = []
    decode = gen._decode

    def spy(model, cache, token, pos):
        lengths.append(cache.length)
        return decode(model, cache, token, pos)

    monkeypatch.setattr(gen, "_decode", spy)
    moves, lens = uci_to_tokens([["e2e4", "e7e5"], ["d2d4"], ["e2e4", "e7e5"], ["g1f3", "d7d5", "c2c4"]], 4)
    kw = dict(outcome_token=WHITE_CHECKMATES, prefix_moves=moves, prefix_lengths=lens, max_seq_len=40,
              top_k=top_k, batch_size=2, seed=11)
    a = autoregressive_generate(toy, 4, use_kv_cache=True, **kw)
    assert lengths and set(lengths) == {40}
    b = autoregressive_generate(toy, 4, use_kv_cache=False, **kw)
    np.testing.assert_array_equal(a.sequences, b.sequences)
    np.testing.assert_array_equal(a.term_codes, b.term_codes)
    np.testing.assert_array_equal(a.game_lengths, b.game_lengths)
    np.testing.assert_array_equal(a.forfeit_ply, b.forfeit_ply)
    for r in range(4):
        np.testing.assert_array_equal(a.sequences[r, 1:1 + lens[r]], moves[r, :lens[r]])
    if top_k == 1:  # greedy: the first sampled token is the argmax of the model's logits
        first = np.asarray(toy(jnp.asarray(a.sequences[:, :1 + lens.max()])))
        for r in range(4):
            assert a.sequences[r, 1 + lens[r]] == first[r, lens[r]].argmax()


def test_masked_generation_never_forfeits_and_plays_legal_games(toy):
    r = autoregressive_generate(toy, 5, max_seq_len=30, mask_illegal=True, seed=1)
    assert (r.forfeit_ply == -1).all() and (r.term_codes != FORFEIT).all() and (r.term_codes != PREMATURE_PAD).all()
    from pawn.engine import validate_games

    ok, _ = validate_games(r.moves, r.game_lengths)
    assert ok.all()


def test_same_seed_same_games_and_prefix_rows_return_in_caller_order(toy):
    moves, lens = uci_to_tokens([["e2e4", "e7e5", "g1f3"], ["d2d4"], ["e2e4", "e7e5", "g1f3"]], 8)
    kw = dict(prefix_moves=moves, prefix_lengths=lens, max_seq_len=16, mask_illegal=True, seed=3)
    a = autoregressive_generate(toy, 3, **kw)
    b = autoregressive_generate(toy, 3, **kw)
    np.testing.assert_array_equal(a.sequences, b.sequences)
    assert a.sequences[1, 0] == moves[1, 0] and (a.sequences[0, :3] == moves[0, :3]).all()
    assert (a.prefix_lengths == [3, 1, 3]).all()


def test_sampling_pad_ends_a_running_game_as_premature_pad():
    moves, lens = uci_to_tokens([["e2e4"], ["e2e4", "e7e5"]], 4)
    r = autoregressive_generate(ConstantModel(PAD_TOKEN), 2, prefix_moves=moves, prefix_lengths=lens,
                                max_seq_len=12, use_kv_cache=False)
    assert (r.term_codes == PREMATURE_PAD).all() and r.game_lengths.tolist() == [1, 2]
    m = analyze(r)
    assert m["premature_padding_rate"] == 1.0 and m["forfeit_rate"] == 0.0 and m["post_terminal_padding_rate"] == 1.0


def test_an_illegal_sample_is_a_forfeit_at_that_ply():
    moves, lens = uci_to_tokens([["e2e4", "e7e5"]], 4)
    r = autoregressive_generate(ConstantModel(0), 1, prefix_moves=moves, prefix_lengths=lens, max_seq_len=12,
                                use_kv_cache=False)  # token 0 = a1b1, blocked by the knight
    assert r.term_codes[0] == FORFEIT and r.forfeit_ply[0] == 2 and r.game_lengths[0] == 2
    assert analyze(r)["forfeit_rate"] == 1.0


def test_generation_rejects_bad_arguments(toy):
    with pytest.raises(ValueError):
        autoregressive_generate(toy, 0)
    with pytest.raises(ValueError):
        autoregressive_generate(toy, 2, temperature=0.0)
    with pytest.raises(ValueError):
        autoregressive_generate(toy, 2, prefix_moves=np.zeros((2, 1)))


def test_outcome_tests_are_skipped_on_a_model_without_outcome_prefix(toy):
    res = run_outcome_tests(toy, outcome_prefix_trained=False)
    assert set(res) == set(TESTS)
    assert all(set(r) == {"_skipped"} and "outcome prefix" in r["_skipped"] for r in res.values())


def test_sub_seed_matches_the_reference_formula():
    import hashlib

    h = int.from_bytes(hashlib.sha256(b"poisoned|A|B").digest()[:4], "little")
    assert sub_seed(43, "poisoned", "A", "B") == (43 ^ h) & 0x7FFFFFFF


def test_edge_case_diagnostics_report_every_category(toy):
    res = edge_case_diagnostics(toy, n_per_category=4, max_ply=40, n_samples=8, batch_size=8)
    assert {"in_check", "double_check", "pin_restricts", "ep_available", "castle_legal_k", "castle_legal_q",
            "castle_blocked_check", "promotion_available", "checkmate", "stalemate"} == set(res)
    assert res["checkmate"]["terminal"] and not res["in_check"]["terminal"]
    for r in res.values():
        assert r["n_positions"] <= 4
        if r["n_positions"]:
            assert 0.0 <= r["mean_legal_rate"] <= 1.0 and 0.0 <= r["mean_pad_prob"] <= 1.0


def test_random_games_command_writes_parquet_and_pgn(tmp_path):
    out, pgn = tmp_path / "g.parquet", tmp_path / "g.pgn"
    res = CliRunner().invoke(app, ["generate", "--random", "--games", "5", "--max-ply", "40", "--seed", "2",
                                   "--out", str(out), "--pgn-out", str(pgn)])
    assert res.exit_code == 0, res.output
    t = pq.read_table(out).to_pydict()
    assert {"tokens", "uci", "san", "length", "termination", "outcome"} <= set(t)
    assert all(len(u) == n for u, n in zip(t["uci"], t["length"]))
    text = pgn.read_text()
    games = [chess.pgn.read_game(io.StringIO(text))]
    assert [m.uci() for m in games[0].mainline_moves()] == t["uci"][0]


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_generate_command_with_diagnostics_skips_outcome_tests_for_pure_moves_model(tmp_path):
    ck = save_checkpoint(tmp_path / "toy", PAWNModel(TOY, jax.random.PRNGKey(4)).params(), TOY)
    js = tmp_path / "gen.json"
    res = CliRunner().invoke(app, ["generate", "--checkpoint", str(ck), "--games", "3", "--max-ply", "12",
                                   "--temperature", "1.0", "--diagnostics", "--edge-positions", "2",
                                   "--out", str(tmp_path / "g.parquet"), "--json", str(js)])
    assert res.exit_code == 0, res.output
    (m,) = json.loads(js.read_text())["models"]
    assert all("_skipped" in r for r in m["outcome_tests"].values())
    assert "forfeit_rate" in m["generation"] and "checkmate" in m["edge_cases"]
    assert pq.read_table(tmp_path / "g.parquet").num_rows == 3


@pytest.mark.parametrize("args", [[], ["--random", "--checkpoint", "some/ckpt"]])
def test_generate_needs_exactly_one_source_and_says_so_as_bad_usage(args, tmp_path):
    """Neither or both of --checkpoint/--random is a bad command line: exit 2 (was 1), one line,
    nothing written."""
    out = tmp_path / "g.parquet"
    res = CliRunner().invoke(app, ["generate", *args, "--games", "2", "--out", str(out)])
    assert res.exit_code == 2 and "give exactly one of --checkpoint CKPT or --random" in res.output
    assert "Traceback" not in res.output and not out.exists()


def test_ar_completion_is_counted_and_never_prints_minus_zero(capsys):
    """9 forfeits and 1 premature PAD in 10 games: completion is exactly 0, where the old
    1 − 0.9 − 0.1 gave −5.6e-17 and the summary line read "AR completion -0.00%"."""
    from pawn.cli._output import Output
    from pawn.cli.generate import render
    from pawn.evaluate import runs
    from pawn.evaluate.generation import GenerationResult
    from pawn.evaluate.settings import GenerateSettings

    n, T = 10, 4
    codes = np.array([FORFEIT] * 9 + [PREMATURE_PAD], np.int8)
    r = GenerationResult(np.full((n, T), PAD_TOKEN, np.int32), np.full((n, T), PAD_TOKEN, np.int16),
                         np.ones(n, np.int16), codes, np.array([1] * 9 + [-1], np.int16), np.ones(n, np.int16), None)
    m = analyze(r)
    assert (m["forfeit_rate"], m["premature_padding_rate"], m["ar_completion_rate"]) == (0.9, 0.1, 0.0)
    assert 1 - m["forfeit_rate"] - m["premature_padding_rate"] < 0  # the float trap the count avoids
    ok = np.array([0] * 3 + [FORFEIT] * 7, np.int8)
    r3 = GenerationResult(r.sequences, r.moves, r.game_lengths, ok, np.array([-1] * 3 + [1] * 7, np.int16), r.prefix_lengths, None)
    assert analyze(r3)["ar_completion_rate"] == 0.3
    render(Output(), runs.ModelGames("toy", {}, m), GenerateSettings(random=True, games=n))
    assert "AR completion 0.00%" in capsys.readouterr().out
