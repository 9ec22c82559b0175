"""``pawn report``: the embedded data of the page (every expected trace, for pretraining and adapter
runs, written now and by an older PAWN), the sweep and games pages, one-line errors, and the page
in a real headless browser (Debian's chromium driven by Playwright).

The fixture runs are made once per session by the real commands, as small as they go: a tiny
supernet (4 steps), two adapter runs on its smallest variant, a 2-trial adapter sweep and two
``pawn play`` games between its variants. Set ``PAWN_REPORT_SCREENS=DIR`` to also copy the
browser screenshots there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from _report_page import browser_page, embedded, rendered_text
from pawn.cli import app
from pawn.report.games import unpack_boards
from pawn.runs import discover_runs, open_run

REPO = Path(__file__).resolve().parents[1]
V1_RUNS = REPO / "tests" / "data" / "runs_v1"
plotly = pytest.importorskip("plotly", reason="the report extra: pip install 'pawn[report]'")


def _invoke(args: list[str]) -> str:
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, (args, r.output, r.exception)
    return r.output


def _fig(run: dict, fid: str) -> dict:
    figs = {f["id"]: f for f in run["figures"]}
    assert fid in figs, (fid, list(figs))
    return figs[fid]


def _names(fig: dict) -> list[str]:
    return [t["name"] for t in fig["data"]]


@pytest.fixture(scope="session")
def report_root(tmp_path_factory, shared_data) -> Path:
    root = tmp_path_factory.mktemp("report") / "runs"
    lichess = shared_data / "lichess"
    _invoke(["pretrain", "--supernet", "tiny", "--total-steps", 4, "--batch-size", 4, "--seq-len", 32, "--val-games", 8,
             "--steps-per-chunk", 2, "--val-every", 2, "--checkpoint-every", 4, "--out", root / "tiny"])
    small = root / "tiny" / "variants" / "small"
    small_adapt = ["--data", lichess, "--epochs", 1, "--steps-per-epoch", 4, "--batch-size", 4, "--seq-len", 32,
                   "--val-games", 8]
    _invoke(["adapt", small, "--strategy", "lora", *small_adapt, "--out", root / "lora"])
    _invoke(["adapt", small, "--strategy", "bottleneck", *small_adapt, "--out", root / "bottleneck"])
    base = root.parent / "sweep-base.toml"
    base.write_text("epochs = 1\nsteps_per_epoch = 2\nbatch_size = 4\nseq_len = 32\nval_games = 8\n")
    _invoke(["sweep", "--run-type", "adapter", "--strategy", "lora", "--checkpoint", small, "--data", lichess,
             "--trials", 2, "--base-config", base, "--out", root / "sweep"])
    _invoke(["play", small, "--vs", root / "tiny" / "variants" / "base", "--games", 2, "--temperatures", "1.0",
             "--max-ply", 30, "--pgn-out", root / "games.pgn"])
    shutil.copytree(V1_RUNS, root / "v1")
    return root


@pytest.fixture(scope="session")
def report_html(report_root: Path) -> Path:
    out = report_root.parent / "report.html"
    text = _invoke(["report", report_root, "-o", out])
    assert text.splitlines()[-1].startswith(f"wrote {out}")  # after the progress lines
    return out


# ----------------------------------------------------------------------------- fast: older runs
def test_report_of_runs_written_before_schema_2_has_every_trace(tmp_path):
    out = tmp_path / "r.html"
    _invoke(["report", V1_RUNS, "-o", out])
    d = embedded(out)
    runs = {r["label"]: r for r in d["runs"]}
    assert set(runs) == {"tiny", "adapt-lora"}
    tiny, lora = runs["tiny"], runs["adapt-lora"]
    assert _names(_fig(tiny, "loss")) == [f"{s} {v}" for s in ("train", "val") for v in ("small", "base", "large")]
    assert {"legal rate large", "late legal large", "completion large", "forfeit ply large"} <= set(
        _names(_fig(tiny, "game-integrity-validation")))
    # the adapter run's loss has its validation line (curves.png lacked it)
    assert _names(_fig(lora, "loss")) == ["train", "val"]
    run = open_run(V1_RUNS / "adapt-lora")
    val = [t for t in _fig(lora, "loss")["data"] if t["name"] == "val"][0]
    assert val["x"] == [r.step for r in run.val] and val["y"] == [r.values["loss"] for r in run.val]
    hm = _fig(lora, "adapter-weight-norms")["data"][0]
    assert hm["type"] == "heatmap" and hm["y"][0] == "layer 0" and "wq.A" in hm["x"]
    last = [r for r in run.val if r.fields.get("weights")][-1].fields["weights"]
    assert hm["z"][0][hm["x"].index("wq.A")] == pytest.approx(last["layer0.wq.A"])
    # the eval report kept in the run directory reaches the page
    assert [Path(e["path"]).name for e in tiny["evals"]] == ["eval.json"]
    # that report scored the small variant (d64_L2_F256); the row shows the monitored large one, so
    # small's ratio stays out of it (tests/test_suite.py checks that large's own report feeds it)
    assert [m["name"] for m in json.loads((V1_RUNS / "tiny" / "eval.json").read_text())["models"]] == ["d64_L2_F256"]
    assert tiny["summary"]["top1_over_ceiling"] is None and tiny["summary"]["top1_over_ceiling_from"] is None
    assert tiny["summary"]["kind"] == "pretrain" and lora["summary"]["kind"] == "adapt"


def test_an_eval_card_leads_with_the_excess_over_the_uniform_player_and_its_interval(tiny_backbone, tmp_path):
    """``pawn eval --json`` then ``pawn report`` of that file: the card's legal-masked block has the
    model's legal-masked loss, its excess over a player uniform over the legal moves with the 95 %
    interval over games the eval wrote, and that player's own row (E[ln N_legal] on the same move
    decisions, top-1 E[1/N_legal]); a report written before the excess existed has no such block."""
    js, out = tmp_path / "eval.json", tmp_path / "r.html"
    _invoke(["eval", tiny_backbone, "--games", 8, "--max-ply", 32, "--json", js])
    _invoke(["report", js, V1_RUNS / "tiny" / "eval.json", "-o", out])
    evals = {Path(e["path"]).parent.name: e for e in embedded(out)["evals"]}
    assert evals["tiny"].get("legal_masked") == []  # an older file: no excess, no block
    (block,) = evals[tmp_path.name]["legal_masked"]
    rg = json.loads(js.read_text())["models"][0]["random_games"]
    model, uniform = block["rows"]
    assert (model["games"], uniform["player"]) == ("random games", "uniform over the legal moves")
    assert model["loss"] == rg["legal_masked/loss_all_moves"] and model["top1"] == rg["legal_masked/top1_all_moves"]
    e, lo, hi = (rg[f"legal_masked/excess_nats_{k}"] for k in ("all_moves", "lo", "hi"))
    assert lo < e < hi and e == pytest.approx(model["loss"] - uniform["loss"], abs=1e-12)
    assert model["excess"] == f"{e:+.4f} [{lo:+.4f}, {hi:+.4f}]"
    assert uniform["loss"] == rg["legal_masked/uniform_loss_all_moves"] and uniform["top1"] == rg["ceiling/moves_only"]
    assert model["n_games"] == 8 and model["n_positions"] == rg["counts/n_move_positions"] == uniform["n_positions"]
    # the page draws it: the card's first table, the model's row and the uniform player's
    text = rendered_text(out, "evals")
    card = text[text.index(f"{block['name']}: legal-masked (every move decision)"):]
    assert f" | random games | {block['name']} | 8 | {model['n_positions']:,} | {model['loss']:.4f} | {model['excess']} | " in card
    assert f" | random games | uniform over the legal moves | 8 | {uniform['n_positions']:,} | {uniform['loss']:.4f} | +0 (the reference) | " in card


def test_report_labels_runs_whose_figures_count_different_positions(tmp_path):
    """An adapter run written before record schema 3 counted each game's end-of-game slot (a
    certain hit under the legal mask) in its loss and top-1; the same run's records in the current
    schema count move decisions only. The reader keeps each record's meaning, and the page says
    which positions each run counts and that the two are not comparable."""
    from pawn.report.data import summary
    from pawn.runs import POSITIONS, SCHEMA_VERSION

    root = tmp_path / "runs"
    shutil.copytree(V1_RUNS / "adapt-lora", root / "old")
    shutil.copytree(V1_RUNS / "adapt-lora", root / "new")
    recs = open_run(root / "old").all_records()
    # rewritten, a record keeps its schema (its meaning); stamped with the current one, the "new" run
    assert {r.to_json()["schema"] for r in recs} == {2}
    (root / "new" / "metrics.jsonl").write_text("".join(json.dumps({**r.to_json(), "schema": SCHEMA_VERSION}) + "\n"
                                                        for r in recs))
    old, new = open_run(root / "old"), open_run(root / "new")
    assert old.val[-1].schema == 1 and new.val[-1].schema == SCHEMA_VERSION
    assert (old.positions, new.positions) == ("with_end_of_game", "move_decisions")
    assert summary(old)["positions_label"] == POSITIONS["with_end_of_game"]
    assert summary(old)["compute"] is None and summary(old)["movable_params"] is None  # not recorded then
    # a run resumed by a newer PAWN: old and new val records in one file
    mixed = root / "mixed"
    shutil.copytree(root / "old", mixed)
    with open(mixed / "metrics.jsonl", "a") as f:
        f.write(json.dumps({**recs[-1].to_json(), "type": "val", "step": 10_000, "schema": SCHEMA_VERSION}) + "\n")
    assert open_run(mixed).positions == "mixed"
    out = tmp_path / "r.html"
    _invoke(["report", root, "-o", out])
    d = embedded(out)
    assert {r["label"]: r["summary"]["positions"] for r in d["runs"]} == {
        "old": "with_end_of_game", "new": "move_decisions", "mixed": "mixed"}
    assert "positions-note" in out.read_text("utf-8")  # the page's note when the runs shown differ


def test_planned_lr_follows_the_config_schedule():
    from pawn.report.data import planned_lr
    from pawn.schedules import build_schedule

    run = open_run(V1_RUNS / "tiny")
    plan = planned_lr(run)
    c = run.config
    warm = c["warmup_steps"] if c.get("warmup_steps") is not None else int(c["warmup_frac"] * run.total_steps)
    sched = build_schedule(c["lr_schedule"], c["lr"], run.total_steps, warm, min_ratio=c["min_lr_ratio"])
    assert plan["step"][0] == 1 and plan["step"][-1] == run.total_steps
    assert plan["y"] == pytest.approx([sched.value(s - 1) for s in plan["step"]])
    # the run's own records report the same lr at the same step
    for r in run.train:
        assert r.values["lr"] == pytest.approx(sched.value(r.step - 1), rel=1e-5)


def test_pareto_front_keeps_only_non_dominated_trials():
    from pawn.report.sweep import pareto

    pts = [(0, 100, 3.0), (1, 200, 2.0), (2, 150, 3.5), (3, 300, 2.0), (4, 50, 4.0), (5, 100, 3.0)]
    assert pareto(pts) == [4, 0, 5, 1]  # 2 is dominated by 0, 3 by 1; 0 and 5 tie (neither dominates)


def test_nothing_to_report_is_one_line(tmp_path):
    r = CliRunner().invoke(app, ["report", str(tmp_path), "-o", str(tmp_path / "r.html")])
    assert r.exit_code == 1 and r.output.startswith("error: nothing to report under") and r.output.count("\n") == 1
    r = CliRunner().invoke(app, ["report", str(tmp_path / "nope"), "-o", str(tmp_path / "r.html")])
    assert r.exit_code == 1 and "no such file or directory" in r.output
    assert not (tmp_path / "r.html").exists()


def test_missing_plotly_names_the_extra(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "plotly.offline", None)  # what an install without the extra raises
    r = CliRunner().invoke(app, ["report", str(V1_RUNS), "-o", str(tmp_path / "r.html")])
    assert r.exit_code == 1 and "pip install 'pawn[report]'" in r.output and r.output.count("\n") == 1


def test_the_report_says_what_it_reads_while_it_builds(tmp_path):
    """It was silent for 47 s on six runs: stderr gets a line per run read, then one before the
    page is built, and stdout the one line naming the file."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "pawn.cli", "report", str(V1_RUNS), "-o", str(tmp_path / "r.html")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    err = r.stderr.splitlines()
    reading = [ln for ln in err if ln.startswith("pawn report: reading run ")]
    assert [ln.split(": ")[1] for ln in reading] == ["reading run 1/2", "reading run 2/2"], err
    assert {ln.split(": ")[2].split(" (")[0] for ln in reading} == {str(V1_RUNS / "adapt-lora"), str(V1_RUNS / "tiny")}
    assert err[-1] == "pawn report: building the page" and r.stdout.startswith(f"wrote {tmp_path / 'r.html'} (")


# ----------------------------------------------------------------------------- slow: fresh runs
@pytest.mark.slow
def test_fresh_runs_embed_every_trace_for_both_run_kinds(report_root, report_html):
    d = embedded(report_html)
    runs = {r["label"]: r for r in d["runs"]}
    assert {"tiny", "lora", "bottleneck", "v1/tiny", "v1/adapt-lora"} <= set(runs)
    assert sum(1 for lab in runs if lab.startswith("sweep/")) == 2
    tiny = runs["tiny"]
    variants = ("small", "base", "large")
    assert _names(_fig(tiny, "loss")) == [f"{s} {v}" for s in ("train", "val") for v in variants]
    assert _names(_fig(tiny, "top-1-accuracy")) == [f"{s} {v}" for s in ("train", "val") for v in variants]
    assert _names(_fig(tiny, "learning-rate")) == ["lr as run", "lr as planned"]
    for fid in ("game-integrity-validation", "gradient-norm", "throughput-compile-chunks-left-out", "memory"):
        _fig(tiny, fid)
    rec = open_run(report_root / "tiny")
    val_large = [t for t in _fig(tiny, "loss")["data"] if t["name"] == "val large"][0]
    assert val_large["y"] == [r.variants["large"]["loss"] for r in rec.val] and val_large["x"] == [2, 4]
    # tokens/s leaves out the chunk that compiled
    tps = [t for t in _fig(tiny, "throughput-compile-chunks-left-out")["data"] if t["name"] == "tokens/s"][0]
    assert tps["x"] == [r.step for r in rec.train if not r.fields.get("includes_compile")] and 2 not in tps["x"]
    for name in ("lora", "bottleneck"):
        ad = runs[name]
        assert ad["summary"]["kind"] == "adapt" and ad["summary"]["strategy"] == name
        assert _names(_fig(ad, "loss")) == ["train", "val"]
        hm = _fig(ad, "adapter-weight-norms")
        steps = hm["data"][0]["meta"]["steps"]
        assert len(steps) >= 2 and len(hm["layout"]["sliders"][0]["steps"]) == len(steps)
        assert ad["series"]["val/loss"]["y"] == [r.values["loss"] for r in open_run(report_root / name).val]
        assert ad["checkpoints"] and ad["checkpoints"][-1]["verified"]
    # compare series carry tokens = step × tokens per step
    s = tiny["series"]["train/loss"]
    assert s["tokens"] == [st * 4 * 32 for st in s["step"]]
    # the sweep page: both trials, each linked to its run in the report
    (study,) = d["studies"]
    assert study["name"] == "lora" and [t["number"] for t in study["trials"]] == [0, 1]
    ids = {r["id"]: r for r in d["runs"]}
    for t in study["trials"]:
        assert t["state"] == "COMPLETE" and Path(ids[t["run_id"]]["summary"]["path"]) == Path(t["run_dir"])
        assert t["trainable_params"] == open_run(t["run_dir"]).trainable_params
    assert study["pareto"] and {f["id"] for f in study["figures"]} == {"objective-history", "pareto"}
    # each run wrote its own report.html at its validations (the hook), with its last validation in it
    for name in ("tiny", "lora"):
        own = embedded(report_root / name / "report.html")
        (r,) = own["runs"]
        assert r["series"]["val/loss"]["step"] == [x.step for x in open_run(report_root / name).val]
    # games: both played games, a board per position
    assert len(d["games"]) == 2
    for g in d["games"]:
        boards = unpack_boards(g)  # as the page's script unpacks them
        assert "boards" not in g and len(boards) == len(g["sans"]) + 1 and boards[0].startswith("<svg")


@pytest.mark.slow
def test_page_in_a_headless_browser(report_html, tmp_path):
    d = embedded(report_html)
    shots = tmp_path / "screens"
    shots.mkdir()
    with browser_page() as (page, errors):
        page.goto(report_html.as_uri())
        page.wait_for_selector("#page-runs table")
        rows = page.locator("#page-runs tbody tr")
        assert rows.count() == len(d["runs"])
        # the v1 adapter run counts end-of-game slots, the new ones move decisions: the page says so
        assert page.locator("#positions-note").count() == 1
        page.screenshot(path=str(shots / "runs.png"), full_page=True)

        # Run page: one plot per figure of the run opened
        tiny = next(r for r in d["runs"] if r["label"] == "tiny")
        page.locator("#page-runs a", has_text=re.compile(r"^tiny$")).click()
        page.wait_for_selector("#run-plots .js-plotly-plot")
        assert page.locator("#run-plots .js-plotly-plot").count() == len(tiny["figures"])
        page.screenshot(path=str(shots / "run-pretrain.png"), full_page=True)
        lora = next(r for r in d["runs"] if r["label"] == "lora")
        page.select_option("#run-select", lora["id"])
        page.wait_for_selector("#run-plots [data-fig=adapter-weight-norms]")
        assert page.locator("#run-plots .js-plotly-plot").count() == len(lora["figures"])
        page.screenshot(path=str(shots / "run-adapter.png"), full_page=True)

        # Compare: every run ticked at first (≤ 6? here 7: none); ticking adds one trace each
        page.click("nav button[data-page=runs]")
        ticked = page.locator("#page-runs input.cmp:checked").count()
        n_traces = "document.getElementById('cmp-plot') ? document.getElementById('cmp-plot').data.length : 0"
        page.click("nav button[data-page=compare]")
        before = page.evaluate(n_traces)
        assert before == ticked
        for label in ("lora", "bottleneck"):
            page.click("nav button[data-page=runs]")
            page.locator("#page-runs tr", has=page.locator("a", has_text=re.compile(f"^{label}$"))).locator("input.cmp").check()
            page.click("nav button[data-page=compare]")
            page.wait_for_selector("#cmp-plot")
            assert page.evaluate(n_traces) == before + 1
            before += 1
        page.select_option("#cmp-metric", "val/loss")
        traces = page.evaluate("document.getElementById('cmp-plot').data.map(t => [t.name, t.y])")
        assert [t[1] for t in traces if t[0] == "lora"] == [lora["series"]["val/loss"]["y"]]
        page.select_option("#cmp-x", "tokens")
        assert page.evaluate("document.getElementById('cmp-plot').data[0].x") == lora["series"]["val/loss"]["tokens"]
        diff_rows = page.locator("#page-compare h2 + .tablewrap tbody tr td:first-child").all_inner_texts()
        from pawn.adapters.registry import STRATEGIES

        # each adapter run uses its strategy's own default lr (lora 1e-2, bottleneck 3e-2): a difference the table shows
        assert "strategy" in diff_rows and ("lr" in diff_rows) == (STRATEGIES["lora"].lr != STRATEGIES["bottleneck"].lr)
        page.screenshot(path=str(shots / "compare.png"), full_page=True)
        # TensorBoard's debiased EMA
        assert page.evaluate("window.pawnEma([1, 2, 3], 0.5)") == pytest.approx([1.0, 5 / 3, 17 / 7])

        # Sweep: the trials, each opening its run
        page.click("nav button[data-page=sweep]")
        page.wait_for_selector(".sweep-study tbody tr")
        assert page.locator(".sweep-study tbody tr").count() == 2
        assert page.locator(".sweep-study .js-plotly-plot").count() == 2
        page.screenshot(path=str(shots / "sweep.png"), full_page=True)
        page.locator(".sweep-study a.trial-run").first.click()
        assert page.locator("#page-run.active").count() == 1

        # Games: a board, stepping through plies
        page.click("nav button[data-page=games]")
        page.wait_for_selector("#board svg")
        assert page.inner_text("#ply-info").startswith("ply 0 /")
        page.click(".btns button:nth-child(3)")
        page.click(".btns button:nth-child(3)")
        assert page.inner_text("#ply-info").startswith("ply 2 /")
        page.screenshot(path=str(shots / "games.png"), full_page=True)
        page.click("nav button[data-page=evals]")
        assert page.locator("#page-evals .eval-report").count() >= 1
        page.screenshot(path=str(shots / "evals.png"), full_page=True)
    assert errors == []
    keep = os.environ.get("PAWN_REPORT_SCREENS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for f in shots.glob("*.png"):
            shutil.copy(f, Path(keep) / f.name)


def test_runs_write_their_own_report_at_each_validation(tmp_path):
    from pawn.report.hook import ReportHook, report_sinks  # passed explicitly (as pawn pretrain/adapt/sweep do)
    from pawn.train import hooks as H

    run_dir = tmp_path / "adapt-lora"
    shutil.copytree(V1_RUNS / "adapt-lora", run_dir)
    hooks = H.open_run_hooks(run_dir, config={}, sinks=report_sinks(), log=lambda m: None)
    assert [type(h) for h in hooks.hooks if isinstance(h, ReportHook)] == [ReportHook]
    hooks.on_record("train", {"step": 1})
    assert not (run_dir / "report.html").exists()  # written at validations, not every chunk
    hooks.on_record("val", {"step": 1})
    d = embedded(run_dir / "report.html")
    assert [r["label"] for r in d["runs"]] == ["adapt-lora"] and _names(_fig(d["runs"][0], "loss")) == ["train", "val"]
    assert hooks.hooks  # the hook did not fail (a failing hook is dropped)
    hooks.close()


def test_report_cards_get_only_the_reports_own_fields(tmp_path):
    """An eval or bench report's card (and the data the page embeds) holds the fields pawn eval /
    pawn bench write, not every key of the JSON file; a JSON file that is no report is left out."""
    root = tmp_path / "runs"
    shutil.copytree(V1_RUNS, root)
    ev = json.loads((root / "tiny" / "eval.json").read_text())
    ev["api_token"] = "hunter2-top"
    ev["models"][0]["access"] = {"token": "hunter2-model"}
    (root / "tiny" / "eval.json").write_text(json.dumps(ev))
    (root / "tiny" / "eval-notes.json").write_text(json.dumps({"note": "hunter2-notes"}))
    bench = {"header": {"device": "cpu"}, "settings": {"only": "memory"}, "sections": ["memory"], "completed_sections": ["memory"],
             "memory": {"peak_mib": 12.5}, "wall_s": 3.0, "ssh_key": "hunter2-bench"}
    (root / "bench.json").write_text(json.dumps(bench))
    out = tmp_path / "report.html"
    _invoke(["report", root, "-o", out])
    assert "hunter2" not in out.read_text("utf-8")
    d = embedded(out)
    (b,) = d["evals"]
    assert b["kind"] == "bench" and b["report"] == {k: v for k, v in bench.items() if k != "ssh_key"}
    tiny = next(r for r in d["runs"] if r["label"] == "tiny")
    (kept,) = tiny["evals"]
    assert Path(kept["path"]).name == "eval.json" and set(kept["report"]) == {"checkpoint", "settings", "models"}
    model = ev["models"][0]
    assert kept["report"]["models"] == [{k: model[k] for k in ("name", "prepend_outcome", "random_games", "eval_wall_s")}]
