"""A metric is one row of :mod:`pawn.metrics` plus its computation: the row says which records
may carry it and which views show it, every list of keys (the val records, the pretrain and eval
tables, the card, the Compare menu, the integrity chart) derives from the rows, and a record
writer refuses a number it cannot place instead of letting it vanish from every report."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest

from pawn import metrics as PM
from pawn.metrics import EVAL_TABLE, METRICS, VALIDATION_COLUMNS, Metric
from pawn.runs import open_run, record_line
from pawn.train.metrics import MetricsLogger


def top1_gap(val: dict) -> float:
    """The toy metric's computation: how much of the top-5 mass the top-1 misses (top5 − top1)."""
    return val["top5"] - val["top1"]


GAP = Metric("top1_gap", "Top-5 minus top-1", "top-5 − top-1", "fraction", "min", (), "published/top1_gap", ("val", "eval"),
             views={"pretrain_val": 99, "adapt_val": 99, "card": 99, "compare": 99})


@pytest.fixture
def gap_metric():
    """The toy metric registered for one test (and removed after it)."""
    PM.register(GAP)
    try:
        yield GAP
    finally:
        PM.unregister(GAP.key)


def test_the_seven_key_lists_are_the_rows_views_in_their_places():
    """The lists the code used before the rows held their views (Keep the right value)."""
    from pawn.hub.card import CARD_EVAL_METRICS
    from pawn.report.data import COMPARE_KEYS, INTEGRITY_KEYS
    from pawn.train.adapter_step import VAL_FIELDS
    from pawn.train.pretrain import VAL_METRICS

    assert tuple(VAL_METRICS) == ("loss", "perplexity", "top1", "top5", "legal_rate", "late_legal_rate", "completion_rate",
                                  "avg_plies_completed", "avg_pct_completion", "median_forfeit_ply", "moves_only_top1",
                                  "legal_masked_loss_all_moves", "uniform_legal_loss", "excess_nats", "excess_nats_lo",
                                  "excess_nats_hi")
    assert tuple(VAL_FIELDS) == ("loss", "top1", "top5", "illegal_pred_rate", "illegal_prob_mass")
    assert tuple(CARD_EVAL_METRICS) == ("top1", "top5", "legal_rate", "late_legal_rate", "loss", "moves_only_top1")
    assert tuple(COMPARE_KEYS) == ("loss", "top1", "top5", "top1_over_ceiling", "legal_rate", "late_legal_rate",
                                   "completion_rate", "avg_plies_completed", "median_forfeit_ply", "perplexity", "lr",
                                   "grad_norm", "tokens_per_s", "data_wait_frac", "excess_nats")
    assert tuple(INTEGRITY_KEYS) == ("legal_rate", "late_legal_rate", "completion_rate")
    assert tuple(VALIDATION_COLUMNS) == ("loss", "top1", "top5", "legal_rate", "completion_rate", "excess_nats")
    assert tuple(EVAL_TABLE) == (
        ("loss", "published/loss", "moves_only/loss"), ("perplexity", "published/perplexity", None),
        ("top1", "published/top1", "moves_only/top1"), ("top5", "published/top5", "moves_only/top5"),
        ("top1_over_ceiling", "published/top1_over_ceiling", "moves_only/top1_over_ceiling"),
        ("ceiling", "ceiling/e_inv_n_legal", "ceiling/moves_only"), ("legal_rate", "published/legal_rate", "moves_only/legal_rate"),
        ("late_legal_rate", "published/late_legal_rate", None), ("illegal_pred_rate", "published/illegal_pred_rate", None),
        ("illegal_prob_mass", "published/illegal_prob_mass", None), ("completion_rate", "published/completion_rate", None),
        ("avg_plies_completed", "published/avg_plies_completed", None), ("avg_pct_completion", "published/avg_pct_completion", None),
    )


def test_writing_an_unregistered_metric_into_a_record_raises(tmp_path):
    log = MetricsLogger(tmp_path / "metrics.jsonl")
    try:
        with pytest.raises(ValueError, match="'top1_gap' is not a metric"):
            log.write("val", step=1, loss=2.0, top1_gap=0.1)
        with pytest.raises(ValueError, match="'lr' is not written into val records"):
            log.write("val", step=1, loss=2.0, lr=1e-3)  # a train metric: its row's kinds say so
        with pytest.raises(ValueError, match="variant small: 'top1_gap'"):
            log.write("train", step=1, loss=2.0, variants={"small": {"loss": 2.0, "top1_gap": 0.1}})
        # not metrics: the declared plain fields, namespaced extras, flags and structures
        rec = log.write("train", step=1, loss=2.0, epoch=0, step_start=1, includes_compile=True, weights={"a": 1.0},
                        **{"rosa/phase": 1})
        assert rec["loss"] == 2.0 and rec["epoch"] == 0 and rec["rosa/phase"] == 1
    finally:
        log.close()
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 1  # nothing half-written
    with pytest.raises(ValueError, match="not a metric"):
        record_line("eval", 1, fields={"top1_gap": 0.5})


def test_a_row_with_an_unknown_view_or_record_kind_is_refused():
    with pytest.raises(ValueError, match="unknown view 'cards'"):
        Metric("x", "X", "x", "ratio", views={"cards": 1})
    with pytest.raises(ValueError, match="kinds"):
        Metric("x", "X", "x", "ratio", kinds=("validation",))
    with pytest.raises(ValueError, match="registered twice"):
        PM.register(METRICS["loss"])


def _write_run(run_dir: Path) -> list[dict]:
    """A pretraining-shaped run written by the real logger (and its ``config.json``, which makes
    the folder a run): a config record, then per chunk a
    train and a val record whose values come from the registry's ``pretrain_val`` view."""
    from pawn.train.pretrain import VAL_METRICS

    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"model": "toy"}))
    log = MetricsLogger(run_dir / "metrics.jsonl")
    vals = []
    try:
        log.write("config", run_config={"model": "toy"}, model_config={"d_model": 64, "n_layers": 2, "d_ff": 256})
        for step, (t1, t5) in enumerate(((0.10, 0.30), (0.20, 0.45), (0.25, 0.60)), start=1):
            log.write("train", step=step, loss=3.0 - step / 10, top1=t1, lr=1e-3, grad_norm=1.0, tokens_per_s=1e4)
            val = {"loss": 3.1 - step / 10, "top1": t1, "top5": t5, "legal_rate": 0.9}
            val["top1_gap"] = top1_gap(val)
            vals.append(log.write("val", step=step, **{k: val[k] for k in VAL_METRICS if k in val}))
    finally:
        log.close()
    return vals


def test_a_new_metric_row_shows_in_records_report_dashboard_and_card(gap_metric, tmp_path):
    """The toy metric is one row (``GAP``) plus its computation (:func:`top1_gap`); nothing else
    names it, yet it is in the run record, the report, the dashboard and the model card."""
    pytest.importorskip("plotly", reason="the report extra: pip install 'pawn[report]'")
    from _report_page import page_data

    from pawn.config import ModelConfig
    from pawn.hub.card import model_card
    from pawn.report import write_report
    from pawn.report.server import make_server

    run_dir = tmp_path / "runs" / "toy"
    written = _write_run(run_dir)
    expected = [round(0.30 - 0.10, 12), round(0.45 - 0.20, 12), round(0.60 - 0.25, 12)]

    # records: a metric value of each val record, read back by the one run reader
    run = open_run(run_dir)
    assert [round(r.get("top1_gap"), 12) for r in run.val] == expected
    assert "top1_gap" not in written[-1].get("fields", {})

    # report: a Compare series of its own, labelled from the row
    out = write_report([run_dir], tmp_path / "report.html")
    data = page_data(Path(out).read_text("utf-8"))
    text = json.dumps(data)
    assert '"val/top1_gap"' in text and GAP.label in text

    # dashboard: the live server over loopback shows the same
    server = make_server(tmp_path / "runs", port=0, log=lambda m: None)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/", timeout=120) as r:
            page = r.read().decode("utf-8")
    finally:
        server.shutdown()
        server.server_close()
    assert '"val/top1_gap"' in json.dumps(page_data(page)) and GAP.label in page

    # card: a validation row from the run's last val record, and a column of the eval table
    report = {"models": [{"name": "toy", "random_games": {"published/top1": 0.25, "published/top5": 0.6,
                                                         "published/top1_gap": 0.35}}],
              "settings": {"games": 8, "seed": 1}}
    card = model_card(ModelConfig(d_model=64, n_layers=2, n_heads=2, d_ff=256), last_val=run.val[-1].to_json(), eval_report=report)
    assert f"| `{GAP.label}` | {GAP.format(0.35)} |" in card
    header = next(l for l in card.splitlines() if l.startswith("| model |"))
    row = next(l for l in card.splitlines() if l.startswith("| toy |"))
    assert header.rstrip(" |").endswith(GAP.label) and row.rstrip(" |").endswith(GAP.format(0.35))
