"""``pawn eval --suite`` (eval + linear probes + outcome diagnostics in one JSON) and the report's
Suite section and per-ply top moves on the Games page.

Fast tests check :func:`pawn.metrics_core.ply_predictions` against a direct forward pass of a
random-init model, in both layouts. The slow ones make a real tiny run (``pawn pretrain``), run
the suite on one of its variants, play two games, write ``pawn report RUN games.pgn
--checkpoint best`` and read what the writers really wrote, then open the page in Debian's
chromium through Playwright. Screenshots are saved in the test's temp dir and copied to
``$PAWN_REPORT_SCREENS`` (when set).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from _report_page import browser_page, embedded
from pawn.cli import app
from pawn.report.games import unpack_boards

plotly = pytest.importorskip("plotly", reason="the report extra: pip install 'pawn[report]'")

SPEC_PROBES = ("piece_type", "side_to_move", "is_check", "castling_rights", "ep_square", "material_count",
               "legal_move_count", "halfmove_clock", "game_phase")
"""The nine probes of spec eval §2.1, in its order."""
SPEC_REGRESSION = {"material_count", "legal_move_count", "halfmove_clock"}
SPEC_EDGE = ("in_check", "double_check", "pin_restricts", "ep_available", "castle_legal_k", "castle_legal_q",
             "castle_blocked_check", "promotion_available", "checkmate", "stalemate")
"""The edge-case categories of spec eval §3.5."""


def _invoke(args: list) -> str:
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, (args, r.output, r.exception)
    return r.output


# ----------------------------------------------------------------------------- fast: the per-ply predictions
def _game_logits(model, moves: list[int], prepend_outcome: bool, seq_len: int) -> np.ndarray:
    """One plain forward pass of a game (float64 [seq_len, V])."""
    import jax.numpy as jnp

    from pawn.vocab import PAD_TOKEN, PLY_LIMIT

    seq = ([PLY_LIMIT] if prepend_outcome else []) + list(moves[:seq_len - int(prepend_outcome)])
    ids = np.full((1, seq_len), PAD_TOKEN, np.int32)
    ids[0, :len(seq)] = seq
    return np.asarray(model(jnp.asarray(ids), jnp.asarray(ids != PAD_TOKEN)), np.float64)[0]


def _direct(logits: np.ndarray, moves: list[int], ply: int, prepend_outcome: bool):
    """Legal-masked softmax at board ``ply`` from the game's logits and the engine's legal moves."""
    from pawn.engine import GameState
    from pawn.vocab import PAD_TOKEN

    row = logits[ply + int(prepend_outcome) - 1]
    g = GameState(32767)
    for t in moves[:ply]:
        assert g.make_move(int(t))
    legal = list(g.legal_move_tokens())
    if ply == len(moves):
        legal = [PAD_TOKEN] if g.check_termination() >= 0 else legal + [PAD_TOKEN]
    z = row[legal] - row[legal].max()
    p = np.exp(z) / np.exp(z).sum()
    order = np.argsort(-p, kind="stable")
    full = np.exp(row - row.max())
    full /= full.sum()
    return [legal[i] for i in order], p[order], dict(zip(legal, p)), int(np.argmax(row)), full, legal


@pytest.mark.parametrize("prepend_outcome", [False, True])
def test_top_moves_match_a_direct_forward_pass_at_each_board(tiny_backbone, prepend_outcome):
    from pawn.engine import random_games
    from pawn.evaluate.loading import load_models
    from pawn.metrics_core import ply_predictions

    (lm,) = load_models(tiny_backbone)
    g = random_games(4, 60, 7)
    seq_len = 40
    preds = ply_predictions(lm.model, g.tokens, g.lengths, seq_len=seq_len, k=5, prepend_outcome=prepend_outcome)
    off = int(prepend_outcome)
    for gi, pr in enumerate(preds):
        L = int(g.lengths[gi])
        moves = [int(t) for t in g.tokens[gi, :L]]
        assert len(pr["plies"]) == L + 1
        # pure moves never predict the first move; nothing past the sequence the model sees
        assert pr["first_ply"] == 1 - off and pr["last_ply"] == min(L, seq_len - off)
        assert (pr["plies"][0] is None) == (not prepend_outcome)
        assert all(x is None for x in pr["plies"][pr["last_ply"] + 1:])
        first_illegal = None
        logits = _game_logits(lm.model, moves, prepend_outcome, seq_len)
        for i in range(pr["first_ply"], pr["last_ply"] + 1):
            x = pr["plies"][i]
            order, probs, by_token, argmax, full, legal = _direct(logits, moves, i, prepend_outcome)
            n = min(5, len(order))
            assert [t for t, _ in x["top"]] == order[:n], (gi, i)
            assert [p for _, p in x["top"]] == pytest.approx(list(probs[:n]), abs=1e-5)
            assert sum(p for _, p in x["top"]) <= 1 + 1e-6
            assert x["argmax"] == argmax and x["argmax_legal"] == (argmax in legal)
            assert x["p_illegal"] == pytest.approx(1 - full[legal].sum(), abs=1e-5)
            if i < L:
                tok, p, rank = x["played"]
                assert tok == moves[i] and p == pytest.approx(by_token[moves[i]], abs=1e-5)
                assert rank == 1 + sum(q > by_token[moves[i]] + 1e-9 for q in by_token.values())
                if first_illegal is None and argmax not in legal:
                    first_illegal = i
            else:
                assert x["played"] is None
        assert pr["first_illegal_ply"] == first_illegal


def test_final_board_is_game_over_after_mate_and_open_after_a_stop(tiny_backbone):
    """At the final board the legal set is {PAD} when the game is over by the rules, else the
    position's legal moves and PAD (a game cut by a ply cap, resignation or forfeit)."""
    from pawn.engine import GameState, random_games
    from pawn.evaluate.loading import load_models
    from pawn.metrics_core import ply_predictions
    from pawn.vocab import PAD_TOKEN

    (lm,) = load_models(tiny_backbone)
    g = random_games(400, 120, 3)
    mate = next(i for i in range(400) if g.termination[i] == 0 and g.lengths[i] <= 100)
    L = int(g.lengths[mate])
    cut = 9
    tokens = np.stack([g.tokens[mate], g.tokens[mate]])
    preds = ply_predictions(lm.model, tokens, np.array([L, cut]), seq_len=128, k=200)
    assert preds[0]["plies"][L]["top"] == [(PAD_TOKEN, pytest.approx(1.0))]
    st = GameState(32767)
    for t in g.tokens[mate, :cut]:
        st.make_move(int(t))
    top = preds[1]["plies"][cut]["top"]
    assert {t for t, _ in top} == set(st.legal_move_tokens()) | {PAD_TOKEN}
    assert sum(p for _, p in top) == pytest.approx(1.0, abs=1e-5)


def test_suite_kind_and_names_have_one_home():
    from pawn.evaluate import runs
    from pawn.evaluate.diagnostics import EDGE_CATEGORIES, TERMINAL_CATEGORIES
    from pawn.evaluate.probes import PROBES
    from pawn.metrics import EDGE_LABELS, PROBE_LABELS
    from pawn.report.suite import SUITE_KIND

    assert SUITE_KIND == runs.SUITE_KIND
    assert tuple(PROBES) == tuple(PROBE_LABELS) == SPEC_PROBES
    assert tuple(EDGE_LABELS) == SPEC_EDGE and set(EDGE_LABELS) == set(EDGE_CATEGORIES) | set(TERMINAL_CATEGORIES)


def test_suite_refuses_pgn_only_in_one_line(tmp_path):
    r = CliRunner().invoke(app, ["eval", str(tmp_path / "nope"), "--suite", "--pgn-only"])
    assert r.exit_code == 2 and "--suite runs the random-game eval; drop --pgn-only" in r.output, r.output


def test_checkpoint_best_needs_exactly_one_run(tmp_path, lichess_pgns):
    pgn = next(p for p in lichess_pgns if "first32" in p.name)
    r = CliRunner().invoke(app, ["report", str(pgn), "--checkpoint", "best", "-o", str(tmp_path / "r.html")])
    lines = r.output.splitlines()  # progress lines ("pawn report: reading 1 PGN file"), then the one error line
    assert r.exit_code == 1 and lines[-1].startswith("error: --checkpoint best needs exactly one run"), r.output
    assert sum(ln.startswith("error:") for ln in lines) == 1 and not (tmp_path / "r.html").exists()


# ----------------------------------------------------------------------------- slow: a real run, the suite, the page
SUITE_ARGS = ["--games", 16, "--probe-games", 32, "--probe-epochs", 2, "--diagnostic-games", 4, "--edge-positions", 8]


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("suite")
    run = root / "tiny"
    _invoke(["pretrain", "--supernet", "tiny", "--total-steps", 4, "--batch-size", 4, "--seq-len", 32, "--val-games", 8,
             "--steps-per-chunk", 2, "--val-every", 2, "--checkpoint-every", 4, "--out", run])
    small = run / "variants" / "small"
    large_eval = run / "eval_large.json"  # the monitored variant's own report, older than the small suite
    _invoke(["eval", run / "variants" / "large", "--games", 16, "--json", large_eval])
    out = _invoke(["eval", small, "--suite", *SUITE_ARGS])
    plain = root / "plain.json"
    _invoke(["eval", small, "--games", 16, "--json", plain])
    _invoke(["play", small, "--vs", run / "variants" / "base", "--games", 2, "--temperatures", "1.0", "--max-ply", 24,
             "--pgn-out", root / "games.pgn"])
    html = root / "report.html"
    report_out = _invoke(["report", run, root / "games.pgn", "--checkpoint", "best", "-o", html])
    return {"root": root, "run": run, "small": small, "suite_out": out, "plain": plain, "html": html,
            "report_out": report_out, "suite": run / "eval_suite_small.json", "large_eval": large_eval}


@pytest.mark.slow
def test_suite_writes_one_json_with_eval_probes_and_diagnostics(suite_run):
    assert f"wrote {suite_run['suite']}" in suite_run["suite_out"]
    d = json.loads(suite_run["suite"].read_text())
    assert d["kind"] == "pawn-eval-suite" and d["suite_version"] == 1
    (m,) = d["models"]
    # the eval part is pawn eval's, on the same games
    plain = json.loads(suite_run["plain"].read_text())["models"][0]["random_games"]
    for key in ("published/top1", "published/loss", "moves_only/top1", "ceiling/e_inv_n_legal", "published/completion_rate"):
        assert m["random_games"][key] == plain[key], key
    assert m["random_games"]["counts/n_games"] == 16
    # the nine probes of the spec, every layer, the best layer the max of best_accuracy
    pr = m["probes"]
    assert tuple(pr["probes"]) == SPEC_PROBES and tuple(pr["best"]) == SPEC_PROBES
    assert pr["settings"]["n_games"] == 32 and pr["settings"]["n_val_games"] == 8 and pr["settings"]["n_epochs"] == 2
    for name, layers in pr["probes"].items():
        assert list(layers) == ["embed", "layer_0", "layer_1"]
        top = max(layers, key=lambda k: layers[k]["best_accuracy"])
        assert pr["best"][name]["layer"] == top and pr["best"][name]["best_accuracy"] == layers[top]["best_accuracy"]
        assert ("mae" in layers["embed"]) == (name in SPEC_REGRESSION)
        if name not in SPEC_REGRESSION:
            assert 0.0 <= layers[top]["best_accuracy"] <= 1.0
    # diagnostics: a pure-moves model skips the outcome-conditioned tests, the edge cases ran
    dg = m["diagnostics"]
    assert dg["outcome_prefix_trained"] is False
    assert set(dg["outcome_tests"]) == {"outcome_signal", "prefix_continuation", "poisoned_prefix", "impossible_task", "improbable_task"}
    assert all("outcome prefix" in t["_skipped"] for t in dg["outcome_tests"].values())
    assert tuple(dg["edge_cases"]) == SPEC_EDGE
    for c, r in dg["edge_cases"].items():
        assert r["n_positions"] == 8 and r["terminal"] == (c in ("checkmate", "stalemate"))
        assert 0.0 <= r["mean_legal_rate"] <= 1.0 and 0.0 <= r["mean_pad_prob"] <= 1.0
    assert set(m["wall_s"]) == {"eval", "probes", "diagnostics", "total"}
    assert d["settings"]["suite"] is True and d["settings"]["probe_games"] == 32 and d["settings"]["edge_positions"] == 8
    assert "piece_type" in suite_run["suite_out"] and "Castling legal (K-side)" in suite_run["suite_out"]


@pytest.mark.slow
def test_report_embeds_the_suite_section_and_the_top_moves(suite_run):
    d = embedded(suite_run["html"])
    (run,) = d["runs"]
    (ev,) = [e for e in run["evals"] if e.get("kind") == "suite"]
    raw = json.loads(suite_run["suite"].read_text())
    view = ev["suite"]["models"][0]
    rg = raw["models"][0]["random_games"]
    rows = {r["key"]: r for r in view["accuracy"]}
    assert rows["top1"]["published"] == rg["published/top1"] and rows["top1"]["moves_only"] == rg["moves_only/top1"]
    assert rows["ceiling"]["moves_only"] == rg["ceiling/moves_only"] and rows["loss"]["fmt"] == "loss"
    # the block leads with the figure that ranks models on random games: loss, E[ln N_legal], the excess and its interval
    assert [r["key"] for r in view["accuracy"][:3]] == ["legal_masked_loss_all_moves", "uniform_legal_loss", "excess_nats"]
    ex = rows["excess_nats"]["moves_only"]
    assert ex.startswith(f"{rg['legal_masked/excess_nats_all_moves']:+.4f} [{rg['legal_masked/excess_nats_lo']:+.4f}, "), ex
    assert [r["probe"] for r in view["probes"]["rows"]] == list(SPEC_PROBES)
    assert {r["probe"] for r in view["probes"]["rows"] if r["regression"]} == SPEC_REGRESSION
    assert [r["category"] for r in view["diagnostics"]["edge"]] == list(SPEC_EDGE)
    assert {f["id"] for f in view["probe_figures"]} == {"suite-probes-accuracy", "suite-probes-r2"}
    # the runs table shows the supernet's monitored variant (large); the suite scored small, so its
    # ceiling ratio (0.263 in a user's run) must not stand in that row beside large's loss and top-1
    large = json.loads(suite_run["large_eval"].read_text())["models"][-1]["random_games"]
    assert run["summary"]["top1_over_ceiling"] == large["published/top1_over_ceiling"]
    assert run["summary"]["top1_over_ceiling_from"] == "eval"  # large's report, not the small suite
    # top moves of the run's best checkpoint (a supernet: its largest variant) on the played games
    assert d["top_moves"]["model"] == "tiny/large" and d["top_moves"]["source"].endswith("checkpoints/best")
    assert "largest variant tiny/large" in suite_run["report_out"]
    assert len(d["games"]) == 2
    for g in d["games"]:
        P = g["predictions"]
        assert len(P["plies"]) == len(g["sans"]) + 1 and P["plies"][0] is None and P["first_ply"] == 1
        for i, x in enumerate(P["plies"][1:], start=1):
            assert len(x["top"]) == 5 and sum(t[2] for t in x["top"]) <= 1 + 1e-6
            assert [t[2] for t in x["top"]] == sorted((t[2] for t in x["top"]), reverse=True)
            if i < len(g["sans"]):
                assert x["played"][0] == g["sans"][i] and 1 <= x["played"][2]
        assert 'class="arrow"' in unpack_boards(g)[1]  # the model's top move drawn on the board


@pytest.mark.slow
def test_report_suite_and_top_moves_in_a_headless_browser(suite_run, tmp_path):
    d = embedded(suite_run["html"])
    view = next(e for e in d["runs"][0]["evals"] if e.get("kind") == "suite")["suite"]["models"][0]
    shots = tmp_path / "screens"
    shots.mkdir()
    with browser_page() as (page, errors):
        page.goto(suite_run["html"].as_uri() + "#evals")
        page.wait_for_selector(".suite-report .suite-plots .js-plotly-plot")
        card = page.locator(".suite-report")
        assert card.locator("table.suite-accuracy tbody tr").count() == len(view["accuracy"])
        assert card.locator("table.suite-probes tbody tr").count() == 9
        assert card.locator("table.suite-edge tbody tr").count() == 10
        assert card.locator(".suite-plots .js-plotly-plot").count() == 2
        assert "skipped" in card.locator(".suite-diag .note").inner_text()
        card.screenshot(path=str(shots / "suite.png"))

        page.click("nav button[data-page=games]")
        page.wait_for_selector("#board svg")
        assert "never predicted" in page.inner_text("#top-moves")  # ply 0, pure moves
        assert page.locator("#board svg .arrow").count() == 0
        for _ in range(5):
            page.click(".btns button:nth-child(3)")
        g = d["games"][0]
        x = g["predictions"]["plies"][5]
        assert page.locator("#top-table tbody tr").count() == 5
        assert page.locator("#top-table tbody tr td:nth-child(2)").all_inner_texts() == [t[0] for t in x["top"]]
        assert f"played: {g['sans'][5]}" in page.inner_text("#top-moves")
        assert page.locator("#board svg .arrow").count() > 0  # the model's most likely move
        assert page.locator("#illegal-note").count() == (0 if x["argmax_legal"] else 1)
        page.screenshot(path=str(shots / "games-top-moves.png"), full_page=True)
    assert errors == []
    keep = [Path(k) for k in (os.environ.get("PAWN_REPORT_SCREENS"),) if k]
    for k in keep:
        k.mkdir(parents=True, exist_ok=True)
        for f in shots.glob("*.png"):
            shutil.copy(f, k / f.name)
