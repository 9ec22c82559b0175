"""A metric is one row of :mod:`pawn.metrics` plus its computation: the row says which records
may carry it and which views show it, every list of keys (the val records, the pretrain and eval
tables, the card, the Compare menu, the integrity chart) derives from the rows, and a record
writer refuses a number it cannot place instead of letting it vanish from every report.

The records checked here are the ones each task really writes: a toy model per task (pretraining
and an adapter on a tiny backbone) trained for one chunk and validated through the validator the
task uses, its ``metrics.jsonl`` written by the trainer and read back by :func:`pawn.runs.open_run`,
then handed to the report's own readers."""

from __future__ import annotations

import json
import math
import threading
import urllib.request
from pathlib import Path

import pytest

from pawn import metrics as PM
from pawn.hub.card import CARD_EVAL_METRICS
from pawn.metrics import EVAL_TABLE, METRICS, VALIDATION_COLUMNS, VIEWS, Metric, keys_in
from pawn.report.data import COMPARE_KEYS, INTEGRITY_KEYS, run_data
from pawn.runs import open_run, record_line
from pawn.train.adapter_step import VAL_FIELDS
from pawn.train.metrics import MetricsLogger
from pawn.train.pretrain import VAL_METRICS

PGN = "lichess/lichess_db_2013-01_first100_reexported_chess.js-benchmark.pgn"

# A row placed in the pretraining validation, the card and the Compare menu whose figure the
# evaluation already computes (the legal-move rate): nothing else names it, so only code that reads
# the rows carries it into the records, the report, the dashboard and the card.
TOY = Metric("toy_legal_share", "Toy legal share", "toy legal", "fraction", "max", (), "published/legal_rate", ("val", "eval"),
             views={"pretrain_val": 99, "card": 99, "compare": 99})

TASK_VIEW = {"pretrain": VAL_METRICS, "adapt": VAL_FIELDS}
"""The keys each task's val record carries: its view of the rows."""


@pytest.fixture(scope="module")
def toy_runs(tmp_path_factory, tiny_backbone, shared_data) -> dict[str, Path]:
    """``{task: run directory}``: one chunk of each task, trained and validated in this process
    with :data:`TOY` registered (and removed after the module)."""
    from pawn.settings import PretrainConfig
    from pawn.train.adapt import run_adapt
    from pawn.train.adapt_config import AdaptSettings
    from pawn.train.pretrain import run_pretrain

    runs = tmp_path_factory.mktemp("metric-rows") / "runs"
    quiet = dict(log=lambda m: None, progress=False, install_signal_handlers=False)
    PM.register(TOY)
    try:
        run_pretrain(PretrainConfig.load(variant="toy", batch_size=4, seq_len=32, val_games=4, val_every=2, checkpoint_every=2,
                                         total_steps=2, steps_per_chunk=2, lr=1e-3, warmup_steps=1, out=runs / "pretrain"),
                     **quiet)
        run_adapt(AdaptSettings.load(backbone=str(tiny_backbone), strategy="bottleneck", bottleneck_dim=4,
                                     data=str(shared_data / PGN), epochs=1, steps_per_epoch=2, batch_size=4, seq_len=32,
                                     val_games=8, lr=1e-2, cache_dir=str(runs.parent / "cache"), out=str(runs / "adapt")),
                  **quiet)
        yield {"pretrain": runs / "pretrain", "adapt": runs / "adapt"}
    finally:
        PM.unregister(TOY.key)


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.mark.parametrize("task", ["pretrain", "adapt"])
def test_each_task_validates_a_toy_model_into_the_records_the_report_reads(toy_runs, task):
    run = open_run(toy_runs[task])
    vals = run.val
    assert [r.step for r in vals] == ([2] if task == "pretrain" else [0, 2])  # adapt: the bare backbone at step 0
    view = tuple(TASK_VIEW[task])
    for r in vals:
        missing = [k for k in view if not _finite(r.values.get(k))]
        assert not missing, f"{task} val record of step {r.step} lacks {missing}: {r.values}"
        assert 0.0 <= r.values["top1"] <= r.values["top5"] <= 1.0
    last = vals[-1].values
    if task == "pretrain":
        # the figures agree with each other as the evaluation defines them (a renamed or swapped key breaks one)
        assert last["perplexity"] == pytest.approx(math.exp(last["loss"]), rel=1e-6)
        assert last["excess_nats"] == pytest.approx(last["legal_masked_loss_all_moves"] - last["uniform_legal_loss"], abs=1e-9)
        assert last["excess_nats_lo"] <= last["excess_nats"] <= last["excess_nats_hi"]
        assert last[TOY.key] == last["legal_rate"]  # the row registered now, computed by the evaluation
        assert set(VALIDATION_COLUMNS) <= set(last)  # pawn pretrain's validation table reads these
    else:
        assert last["positions"] > 0 and 0.0 <= last["illegal_pred_rate"] <= 1.0
        assert TOY.key not in last  # not a row of the adapter view

    # what the report embeds for the run, read by its own functions from those records
    data = run_data(run, "r", verify_checkpoints=False)
    shown = [k for k in COMPARE_KEYS if k in view]
    assert {"loss", "top1"} <= set(shown)
    for k in shown:
        assert data["series"][f"val/{k}"]["y"] == [r.values[k] for r in vals], k
    summary = data["summary"]
    assert summary["kind"] == task and summary["best_val_loss"] == min(r.values["loss"] for r in vals)
    assert summary["top1"] == last["top1"]
    integrity = {t["meta"]["key"]: t["y"] for f in data["figures"] if f["id"] == "game-integrity-validation" for t in f["data"]}
    if task == "pretrain":
        assert summary["legal_rate"] == last["legal_rate"] and summary["completion_rate"] == last["completion_rate"]
        assert {k: integrity.get(k) for k in INTEGRITY_KEYS} == {k: [r.values[k] for r in vals] for k in INTEGRITY_KEYS}
    else:
        assert integrity == {} and summary["positions"] == "move_decisions"


def test_every_key_list_reads_the_rows_now():
    """The lists the code reads (the val records, the tables, the card, Compare, the integrity
    chart) follow the rows: a row registered now is in each list of its views, and gone once
    removed; and the places a view is read from can carry what it lists."""
    lists = {"pretrain_val": VAL_METRICS, "adapt_val": VAL_FIELDS, "card": CARD_EVAL_METRICS, "compare": COMPARE_KEYS,
             "integrity": INTEGRITY_KEYS, "validation_table": VALIDATION_COLUMNS}
    row = Metric("toy_everywhere", "Toy", "toy", "fraction", "max", (), "published/top1", ("val", "eval"),
                 views={v: 99 for v in VIEWS})
    PM.register(row)
    try:
        for view, keys in lists.items():
            assert tuple(keys) == keys_in(view) and tuple(keys)[-1] == "toy_everywhere", view
        assert EVAL_TABLE[-1] == ("toy_everywhere", "published/top1", None)
    finally:
        PM.unregister(row.key)
    for view, keys in lists.items():
        assert "toy_everywhere" not in tuple(keys), view
    # the pretrain table and the integrity chart read pretraining val records; the card reads pawn eval --json
    assert set(VALIDATION_COLUMNS) <= set(VAL_METRICS) and set(INTEGRITY_KEYS) <= set(VAL_METRICS)
    assert all(METRICS[k].eval_key for k in CARD_EVAL_METRICS)
    assert all(METRICS[k].kinds for k in COMPARE_KEYS)


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


def test_a_new_metric_row_shows_in_records_report_dashboard_and_card(toy_runs, tmp_path):
    """The toy row (:data:`TOY`, registered for this module) is one row whose figure the evaluation
    computes; nothing else names it, yet the real pretraining run carries it, and the report, the
    dashboard and the model card show it."""
    pytest.importorskip("plotly", reason="the report extra: pip install 'pawn[report]'")
    from _report_page import page_data

    from pawn.config import ModelConfig
    from pawn.hub.card import model_card
    from pawn.report import write_report
    from pawn.report.server import make_server

    run_dir = toy_runs["pretrain"]
    run = open_run(run_dir)
    expected = [r.values["legal_rate"] for r in run.val]
    assert [r.get(TOY.key) for r in run.val] == expected and expected[-1] > 0

    # report: a Compare series of its own, labelled from the row
    out = write_report([run_dir], tmp_path / "report.html")
    data = page_data(Path(out).read_text("utf-8"))
    series = next(r["series"] for r in data["runs"] if r.get("series"))
    assert series[f"val/{TOY.key}"]["y"] == expected and TOY.label in json.dumps(data)

    # dashboard: the live server over loopback shows the same
    server = make_server(run_dir.parent, port=0, log=lambda m: None)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/", timeout=120) as r:
            page = r.read().decode("utf-8")
    finally:
        server.shutdown()
        server.server_close()
    assert f'"val/{TOY.key}"' in json.dumps(page_data(page)) and TOY.label in page

    # card: a validation row from the run's last val record, and a column of the eval table
    report = {"models": [{"name": "toy", "random_games": {"published/top1": 0.25, "published/top5": 0.6,
                                                         "published/legal_rate": 0.35}}],
              "settings": {"games": 8, "seed": 1}}
    card = model_card(ModelConfig(d_model=64, n_layers=2, n_heads=2, d_ff=256), last_val=run.val[-1].to_json(),
                      eval_report=report)
    assert f"| `{TOY.label}` | {TOY.format(expected[-1])} |" in card
    header = next(l for l in card.splitlines() if l.startswith("| model |"))
    row = next(l for l in card.splitlines() if l.startswith("| toy |"))
    assert header.rstrip(" |").endswith(TOY.label) and row.rstrip(" |").endswith(TOY.format(0.35))
