"""``pawn bench`` section ``population`` (issue 15): P trials as one vmapped program against P
sequential trials, for pretraining and adapter trials, steady-state chunk and end to end."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pawn.bench import SECTIONS, BenchSettings, estimate_seconds, parse_only
from pawn.bench.population import MEMBERS, PopulationRow, member_settings
from pawn.cli import app
from pawn.sweep.population import ARRAY_FIELDS, check_population


def test_row_derives_trial_step_seconds_trials_per_hour_and_ratio_by_hand():
    r = PopulationRow.of("pretrain", "step", population_s=2.0, sequential_s=5.0, trial_steps=40, steps_per_trial=20)
    assert r.s_per_trial_step == {"population": 0.05, "sequential": 0.125}
    # 3600 s / (0.05 s × 20 steps) = 3600 trials/hour; 3600 / (0.125 × 20) = 1440
    assert r.trials_per_hour == pytest.approx({"population": 3600.0, "sequential": 1440.0})
    assert r.ratio == pytest.approx(2.5) == pytest.approx(r.trials_per_hour["population"] / r.trials_per_hour["sequential"])


def test_members_differ_only_in_array_fields_and_really_differ():
    ms = [member_settings(i, 20) for i in range(6)]
    assert all(set(m) <= ARRAY_FIELDS for m in ms)
    assert len({tuple(sorted(m.items())) for m in ms}) == 6
    assert ms[4]["lr"] == 2 * MEMBERS[0]["lr"] and ms[1]["warmup_steps"] == 2 and ms[2]["warmup_steps"] == 0
    check_population([{"variant": "toy", "batch_size": 4, **m} for m in ms])  # raises on any other difference


def test_population_settings_flags_env_quick_and_section_selection(monkeypatch):
    assert SECTIONS[-1] == "population" and parse_only(["population"]) == ["population"]
    s = BenchSettings.load(quick=True)
    assert (s.population_size, s.population_steps, s.population_strategy, s.population_end_to_end) == (2, 4, "lora", True)
    d = BenchSettings.load()
    assert (d.population_size, d.population_steps) == (4, 20)
    monkeypatch.setenv("PAWN_BENCH_POPULATION_SIZE", "3")
    assert BenchSettings.load(population_strategy="bottleneck").population_size == 3
    with pytest.raises(ValueError, match="population_steps must be even"):
        BenchSettings.load(population_steps=5)
    # more members and steps are more work in the printed estimate
    assert estimate_seconds(BenchSettings.load(population_size=8), ["population"])["population"] > \
        estimate_seconds(BenchSettings.load(population_size=3), ["population"])["population"]
    r = CliRunner().invoke(app, ["bench", "--only", "population", "--population-steps", "3"])
    assert r.exit_code == 2 and "--population-steps" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("end_to_end", [False, True])
@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_population_section_runs_both_run_types_and_writes_its_json(tmp_path, shared_data, monkeypatch, end_to_end):
    monkeypatch.setenv("PAWN_SHARED_DIR", str(shared_data.parent))
    out = tmp_path / "bench.json"
    e2e = "--population-end-to-end" if end_to_end else "--no-population-end-to-end"
    r = CliRunner().invoke(app, ["bench", "--only", "population", "--quick", "--repeats", "1", "--steps-per-chunk", "1",
                                 "--population-steps", "2", "--population-val-games", "4", e2e, "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert "population of 2 (one vmapped program)" in r.output and "adapter (lora)" in r.output  # the table
    # sub-progress inside the section (it ran ≈ 37 min behind one spinner at the default settings)
    parts = ["pretraining steady-state chunk: first calls (compiling)", "pretraining steady-state chunk: round 1/1",
             "adapter: reading the games of lichess into a cache", "adapter steady-state chunk: round 1/1"]
    if end_to_end:
        parts += ["pretraining end to end: a population of 2 trials of 2 steps", "pretraining end to end: sequential trial 2/2 of 2 steps",
                  "adapter end to end: a population of 2 trials of 2 steps", "adapter end to end: sequential trial 2/2 of 2 steps"]
    for part in parts:
        assert f"pawn bench: population: {part} (" in r.output, (part, r.output[-3000:])
    rep = json.loads(out.read_text())
    assert rep["sections"] == rep["completed_sections"] == ["population"]
    p = rep["population"]
    assert (p["population_size"], p["steps_per_trial"], p["strategy"]) == (2, 2, "lora")
    assert p["train_games"] > 1000  # the shared Lichess games, not the engine fallback
    rows = [("pretrain", "step"), ("pretrain", "end_to_end"), ("adapt", "step"), ("adapt", "end_to_end")]
    assert [(x["run_type"], x["row"]) for x in p["rows"]] == [x for x in rows if end_to_end or x[1] == "step"]
    for x in p["rows"]:
        P, steps = 2, 2
        assert x["trial_steps"] == (P * 1 if x["row"] == "step" else P * steps)
        assert x["ratio"] == pytest.approx(x["sequential_s"] / x["population_s"])
        for side in ("population", "sequential"):
            assert x["s_per_trial_step"][side] == pytest.approx(x[f"{side}_s"] / x["trial_steps"])
            assert x["trials_per_hour"][side] == pytest.approx(3600 / (x["s_per_trial_step"][side] * steps))
        if x["row"] == "step":
            assert x["population"]["median_s"] == x["population_s"] and x["sequential"]["median_s"] == x["sequential_s"]
            assert set(x["first_chunk_s"]) == {"population", "sequential"} and min(x["first_chunk_s"].values()) > 0
        else:
            assert "first_chunk_s" not in x
