"""The run record (pawn.runs): runs written before schema 2 load through the migration, the byte
cursor never repeats or drops a record while a writer appends, and the registry is consistent."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pawn.metrics import METRICS, V1_NAMES, eval_values
from pawn.runs import SCHEMA_VERSION, RunError, discover_runs, open_run, read_records, record_line

V1 = Path(__file__).parent / "data" / "runs_v1"


def _raw_lines(path: Path, kind: str) -> list[dict]:
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip() and json.loads(l)["type"] == kind]


def test_a_v1_pretraining_run_reads_as_the_typed_record():
    run = open_run(V1 / "tiny")
    assert run.kind == "pretrain" and run.strategy is None
    assert run.variants == ["small", "base", "large"]
    raw_val = _raw_lines(V1 / "tiny" / "metrics.jsonl", "val")[-1]
    val = run.val[-1]
    assert val.schema == 1 and val.step == raw_val["step"] == 40
    # per-variant values under variant names, the run's values are the largest (monitored) model's
    assert val.get("top1", "small") == raw_val["val/accuracy_d64_L2_F256"]
    assert val.get("late_legal_rate", "base") == raw_val["val/late_legal_move_rate_d128_L3_F512"]
    assert val.values["loss"] == raw_val["val/loss_d192_L4_F768"]
    assert val.values["completion_rate"] == raw_val["val/game_completion_rate_d192_L4_F768"]
    raw_train = _raw_lines(V1 / "tiny" / "metrics.jsonl", "train")[-1]
    tr = run.train[-1]
    assert tr.values["top1"] == raw_train["train/accuracy"] and tr.values["loss"] == raw_train["loss"]
    assert tr.get("loss", "small") == raw_train["loss_d64_L2_F256"]
    assert tr.fields["mem"]["peak_rss_gb"] == raw_train["mem/peak_rss_gb"]
    assert run.best_val_loss == min(r["val/loss_d192_L4_F768"] for r in _raw_lines(V1 / "tiny" / "metrics.jsonl", "val"))
    st = run.status
    assert (st.state, st.reason, st.step, st.total_steps) == ("complete", "completed", 40, 40)
    assert [p.name for p, _ in run.eval_reports()] == ["eval.json"]


def test_a_v1_adapter_run_reads_as_the_same_record_as_pretraining():
    run = open_run(V1 / "adapt-lora")
    assert run.kind == "adapt" and run.strategy == "lora" and run.variants == []
    raw = _raw_lines(V1 / "adapt-lora" / "metrics.jsonl", "val")
    assert [r.step for r in run.val] == [r["step"] for r in raw]
    assert run.val[-1].values["top1"] == raw[-1]["val_top1"] and run.val[-1].values["loss"] == raw[-1]["val_loss"]
    assert run.val[0].fields["weights"]["layer0.wq.B"] == 0.0  # LoRA B starts at zero
    assert run.train[-1].values["top1"] == _raw_lines(V1 / "adapt-lora" / "metrics.jsonl", "train")[-1]["train_top1"]
    assert run.trainable_params == 24576
    assert run.status.state == "complete" and run.status.reason == "step_limit"


def test_schema_2_lines_round_trip_through_the_reader(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "config.json").write_text("{}")
    lines = [record_line("config", fields={"run_config": {"total_steps": 2}, "summary": {"variants": {"a": {}, "b": {}}},
                                           "total_steps": 2}),
             record_line("val", 2, values={"loss": 1.5, "top1": 0.25}, variants={"a": {"loss": 2.0}, "b": {"loss": 1.5}},
                         fields={"mem": {"rss_gb": 1.0}}),
             record_line("end", 2, fields={"reason": "completed"})]
    (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    run = open_run(d)
    v = run.val[0]
    assert v.schema == SCHEMA_VERSION and v.values == {"loss": 1.5, "top1": 0.25}
    assert v.variants == {"a": {"loss": 2.0}, "b": {"loss": 1.5}} and v.fields["mem"] == {"rss_gb": 1.0}
    assert v.to_json() == lines[1]
    assert run.status.state == "complete" and run.variants == ["a", "b"]


def test_record_line_refuses_a_metric_outside_the_registry():
    with pytest.raises(ValueError, match="not a metric"):
        record_line("val", 1, values={"accuracy": 0.5})


def test_a_torn_last_line_is_not_returned_and_the_cursor_waits_before_it(tmp_path):
    p = tmp_path / "metrics.jsonl"
    a = json.dumps(record_line("train", 1, values={"loss": 3.0})) + "\n"
    b = json.dumps(record_line("train", 2, values={"loss": 2.0})) + "\n"
    p.write_text(a + b[:10])
    recs, cur = read_records(p)
    assert [r.step for r in recs] == [1] and cur == len(a)
    p.write_text(a + b)
    recs, cur2 = read_records(p, cur)
    assert [r.step for r in recs] == [2] and cur2 == len(a) + len(b)
    assert read_records(p, cur2) == ([], cur2)


def test_polling_a_file_being_written_never_repeats_or_drops_a_record(tmp_path):
    """A writer thread appends 400 records in small pieces (torn lines on purpose) while the
    reader polls with its cursor; the union of what it read is every record exactly once."""
    p = tmp_path / "metrics.jsonl"
    p.write_text("")
    n = 400

    def write():
        with open(p, "a") as f:
            for i in range(n):
                line = json.dumps(record_line("train", i, values={"loss": float(i)})) + "\n"
                half = len(line) // 2
                f.write(line[:half])
                f.flush()
                f.write(line[half:])
                f.flush()

    t = threading.Thread(target=write)
    t.start()
    seen: list[int] = []
    cursor = 0
    while t.is_alive() or cursor < p.stat().st_size:
        recs, cursor = read_records(p, cursor)
        seen += [r.step for r in recs]
    t.join()
    recs, cursor = read_records(p, cursor)
    seen += [r.step for r in recs]
    assert seen == list(range(n))


def test_discover_runs_finds_nested_runs_and_open_run_names_bad_paths(tmp_path):
    shutil.copytree(V1, tmp_path / "runs")
    (tmp_path / "runs" / "notarun").mkdir()
    found = discover_runs(tmp_path / "runs")
    assert [r.name for r in found] == ["adapt-lora", "tiny"]
    with pytest.raises(RunError, match="notarun: not a PAWN run directory"):
        open_run(tmp_path / "runs" / "notarun")
    with pytest.raises(RunError, match="no such run directory"):
        open_run(tmp_path / "nope")


def test_every_v1_name_maps_to_one_registered_metric():
    assert V1_NAMES["accuracy"] == V1_NAMES["val_top1"] == V1_NAMES["train/accuracy"] == "top1"
    assert V1_NAMES["late_legal_move_rate"] == "late_legal_rate"
    assert all(k in METRICS for k in V1_NAMES.values())


def test_eval_values_read_what_pawn_eval_writes():
    report = json.loads((V1 / "tiny" / "eval.json").read_text())
    rg = report["models"][0]["random_games"]
    vals = eval_values(rg)
    assert vals["top1"] == rg["published/top1"] and vals["legal_rate"] == rg["published/legal_rate"]
    assert vals["late_legal_rate"] == rg["published/late_legal_rate"]


def test_the_run_reader_does_not_import_jax():
    out = subprocess.run([sys.executable, "-c", "import sys, pawn.runs, pawn.metrics; print('jax' in sys.modules)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_model_card_shows_the_numbers_pawn_eval_writes(tiny_backbone, tmp_path):
    """Round trip (the card's table was all "—"): ``pawn eval --json`` as the CLI writes it →
    the card's evaluation table holds the report's top-1, legal rate and loss."""
    from pawn.hub.card import CARD_EVAL_METRICS, card_for_checkpoint, read_eval_report

    out = tmp_path / "eval.json"
    subprocess.run([sys.executable, "-m", "pawn.cli", "eval", str(tiny_backbone), "--games", "8", "--max-ply", "64",
                    "--json", str(out)], check=True, capture_output=True, text=True)
    report = read_eval_report(out)
    rg = report["models"][0]["random_games"]
    card = card_for_checkpoint(tiny_backbone, eval_report=report)
    row = next(l for l in card.splitlines() if l.startswith(f"| {report['models'][0]['name']} |"))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    assert len(cells) == len(CARD_EVAL_METRICS) and "—" not in cells, row
    assert cells[CARD_EVAL_METRICS.index("top1")] == METRICS["top1"].format(rg["published/top1"])
    assert cells[CARD_EVAL_METRICS.index("legal_rate")] == METRICS["legal_rate"].format(rg["published/legal_rate"])
    assert cells[CARD_EVAL_METRICS.index("loss")] == f"{rg['published/loss']:.4f}"


def test_old_legal_masked_adapter_records_keep_their_meaning_and_say_so():
    """Record schema 3 changed what an adapter's legal-masked loss and top-1 count (move decisions,
    no end-of-game slot). A record written before keeps its old meaning on read, when rewritten
    (its schema stays) and on the model card, which says which positions the figures count."""
    from pawn.config import TOY
    from pawn.hub.card import model_card
    from pawn.runs import MOVE_DECISIONS_SCHEMA, POSITIONS, parse_record, positions_of

    assert MOVE_DECISIONS_SCHEMA == SCHEMA_VERSION == 3
    assert positions_of(2, adapter=True) == positions_of(1, adapter=True) == "with_end_of_game"
    assert positions_of(3, adapter=True) == "move_decisions"
    assert positions_of(3, adapter=True, legal_mask=False) == positions_of(3, adapter=False) == "published"
    old = {"type": "val", "schema": 2, "step": 50, "loss": 3.25, "top1": 0.125}
    assert parse_record(old).to_json()["schema"] == 2
    cards = {s: model_card(TOY, run_config={"strategy": "lora", "disable_legal_mask": False}, last_val={**old, "schema": s})
             for s in (2, 3)}
    assert POSITIONS["with_end_of_game"] in cards[2] and POSITIONS["move_decisions"] in cards[3]
    assert POSITIONS["published"] in model_card(TOY, run_config={}, last_val=old)
