"""``pawn bench`` (spec eval-probe-generate-sweep-bench.md §7): the FLOP convention against
hand-computed counts, the timing statistics, the peak table lookup, and one ``--quick`` smoke
run whose JSON structure (never its speed) is checked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pawn.bench import (SECTIONS, common_window_rate, flops_per_token, lookup_gpu_peak, parse_only,
                        per_repetition_rates, rates, step_flops_per_token, time_call, timing_stats)
from pawn.cli import app
from pawn.config import TINY_VARIANTS, TOY


def test_flops_per_token_of_toy_is_six_n_plus_attention_by_hand():
    # toy: d 64, L 2, F 256, V 1980, 11 outcome rows.
    # N = 145·64 + 2·(4·64² + 3·64·256 + 2·64) + 64 + 1980·64 = 9,280 + 131,328 + 64 + 126,720 = 267,392
    # 6N = 1,604,352; attention 12·L·T·d at T = 32: 12·2·32·64 = 49,152
    assert flops_per_token(TOY, 32) == 1_604_352 + 49_152


def test_supernet_step_flops_are_the_sum_over_tiny_variants_by_hand():
    # T = 128.
    # small d64 L2 F256: N 267,392 → 6N 1,604,352; attention 12·2·128·64 = 196,608   → 1,800,960
    # base d128 L3 F512: N = 18,560 + 3·262,400 + 128 + 253,440 = 1,059,328
    #                    → 6N 6,355,968; attention 12·3·128·128 = 589,824           → 6,945,792
    # large d192 L4 F768: N = 27,840 + 4·590,208 + 192 + 380,160 = 2,769,024
    #                    → 6N 16,614,144; attention 12·4·128·192 = 1,179,648        → 17,793,792
    variants = [(TINY_VARIANTS[k], 1.0) for k in ("small", "base", "large")]
    assert flops_per_token(TINY_VARIANTS["base"], 128) == 6_945_792
    assert flops_per_token(TINY_VARIANTS["large"], 128) == 17_793_792
    assert step_flops_per_token(variants, 128) == 1_800_960 + 6_945_792 + 17_793_792


def test_timing_stats_give_median_min_max_and_count():
    assert timing_stats([3.0, 1.0, 2.0]) == {"median_s": 2.0, "min_s": 1.0, "max_s": 3.0, "n": 3}
    assert timing_stats([4.0, 1.0, 3.0, 2.0])["median_s"] == 2.5
    with pytest.raises(ValueError, match="at least one sample"):
        timing_stats([])


def test_rates_divide_work_by_median_and_take_min_from_the_slowest_run():
    r = rates({"median_s": 2.0, "min_s": 1.0, "max_s": 4.0}, 8.0, "tokens_per_s")
    assert r == {"tokens_per_s": 4.0, "tokens_per_s_min": 2.0, "tokens_per_s_max": 8.0}


def test_plies_per_s_pairs_each_repetitions_plies_with_its_own_time():
    # Three repetitions of random games: 100 plies in 1 s, 400 in 2 s, 400 in 4 s → 100, 200, 100 plies/s.
    # The last repetition's plies over the median time would say 400 / 2 = 200.
    r = per_repetition_rates([1.0, 2.0, 4.0], [100, 400, 400], "plies_per_s")
    assert r == {"plies_per_s": 100.0, "plies_per_s_min": 100.0, "plies_per_s_max": 200.0,
                 "plies_per_s_total": 900 / 7}
    with pytest.raises(ValueError, match="one work figure per timed repetition"):
        per_repetition_rates([1.0, 2.0], [100], "plies_per_s")


def test_concurrency_aggregate_divides_all_work_by_one_common_window():
    # Two processes of 100 tokens each: 0–10 s and 2–12 s. Common window 12 s → 200 / 12 tokens/s;
    # summing the per-process rates (10 + 10) would claim 20.
    r = common_window_rate([(0.0, 10.0, 100.0), (2.0, 12.0, 100.0)])
    assert r["window_s"] == 12.0 and r["work"] == 200.0
    assert r["rate"] == pytest.approx(200 / 12)
    # A straggler stretches the window: 100 tokens in 0–1 s and 100 in 0–9 s → 200 / 9, not 100 + 11.1.
    assert common_window_rate([(0.0, 1.0, 100.0), (0.0, 9.0, 100.0)])["rate"] == pytest.approx(200 / 9)
    with pytest.raises(ValueError, match="ends"):
        common_window_rate([(5.0, 4.0, 1.0)])
    with pytest.raises(ValueError, match="at least one span"):
        common_window_rate([])


def test_time_call_runs_warmup_then_timed_repeats_and_reports_the_first_call_apart():
    calls = []
    st = time_call(lambda: calls.append(1) or 0, repeats=4, warmup=2)
    assert len(calls) == 6 and st["n"] == 4
    assert st["min_s"] <= st["median_s"] <= st["max_s"]
    assert st["first_call_s"] is not None and st["compile_s"] >= 0.0


@pytest.mark.parametrize("kind, name", [
    ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H200", "H200"),
    ("NVIDIA GH200 480GB", "GH200"), ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA B200", "B200"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA A10G", "A10G"),
])
def test_gpu_peak_lookup_picks_the_most_specific_published_row(kind, name):
    assert lookup_gpu_peak(kind)[0] == name


def test_gpu_peak_lookup_of_an_unknown_device_is_none():
    assert lookup_gpu_peak("cpu") is None


@pytest.mark.parametrize("kind, name, bf16", [
    ("TPU v4", "TPU v4", 275.0), ("TPU v5 lite", "TPU v5 lite", 197.0), ("TPU v5", "TPU v5", 459.0),
    ("TPU v6 lite", "TPU v6 lite", 918.0),
])
def test_tpu_peaks_are_keyed_by_the_exact_device_kind_jax_reports(kind, name, bf16):
    from pawn.bench import lookup_tpu_peak, published_peak

    assert lookup_tpu_peak(kind) == (name, bf16)
    flops, source = published_peak("tpu", kind, "bfloat16")
    assert flops == bf16 * 1e12 and name in source and "cloud.google.com/tpu" in source
    assert published_peak("tpu", kind, "float32") is None  # no fp32 figure is published: measured instead


def test_a_tpu_not_in_the_table_has_no_published_peak():
    from pawn.bench import lookup_tpu_peak, published_peak

    assert lookup_tpu_peak("TPU v4 lite") is None  # v4i: not a v4, though its name contains it
    assert published_peak("tpu", "TPU v4 lite", "bfloat16") is None
    assert published_peak("gpu", "NVIDIA H200", "bfloat16")[0] == 989.4e12


def test_only_accepts_repeats_and_comma_lists_in_run_order():
    assert parse_only(None) == list(SECTIONS)
    assert parse_only(["decode,step", "engine"]) == ["engine", "step", "decode"]
    with pytest.raises(ValueError, match="unknown section"):
        parse_only(["step,warp"])


def test_bench_cli_rejects_unknown_sections_and_two_models():
    r = CliRunner().invoke(app, ["bench", "--only", "warp"])
    assert r.exit_code == 2 and "unknown section" in r.output
    r = CliRunner().invoke(app, ["bench", "--variant", "toy", "--supernet", "tiny"])
    assert r.exit_code == 2 and "not both" in r.output


@pytest.mark.slow
def test_bench_quick_writes_every_section_to_json(tmp_path):
    out = tmp_path / "bench.json"
    r = CliRunner().invoke(app, ["bench", "--quick", "--json", str(out)])
    assert r.exit_code == 0, r.output
    rep = json.loads(out.read_text())
    assert rep["sections"] == list(SECTIONS)
    for k in ("device", "backend", "jax_version", "cpu_model", "cpus_available", "rayon_threads"):
        assert k in rep["header"]
    timing = {"median_s", "min_s", "max_s", "n"}

    eng = rep["engine"]
    assert [t["threads"] for t in eng["threads"]][0] == 1
    for t in eng["threads"]:
        rg = t["random_games"]
        assert timing | {"games_per_s", "plies_per_s", "plies_per_s_total"} <= set(rg)
        assert len(rg["plies"]) == rg["n"] and rg["plies_per_s_min"] <= rg["plies_per_s"] <= rg["plies_per_s_max"]
        assert timing | {"games_per_s"} <= set(t["parse_pgn"])
        assert timing | {"positions_per_s"} <= set(t["legal_masks"])
    assert "games_per_s" in eng["python_chess"]

    step = rep["step"]
    assert set(step["forms"]) == {"eager", "jit_step", "scan_chunk"}
    for f in step["forms"].values():
        assert timing | {"tokens_per_s", "tokens_per_s_min", "tokens_per_s_max", "steps_per_s", "first_call_s", "compile_s"} <= set(f)
    assert step["tokens_per_step"] == step["batch_size"] * step["seq_len"]

    mfu = rep["mfu"]
    assert mfu["formula"].startswith("FLOPs/token = 6·N + 12·L·T·d")
    assert mfu["flops_per_token"] == flops_per_token(TOY, step["seq_len"])
    assert {"flops_per_s", "source"} <= set(mfu["peak"]) and "measured in this run" in mfu["peak"]["source"]
    assert isinstance(mfu["mfu"], float)

    data = rep["data"]
    for src in ("engine", "corpus"):
        assert timing | {"games_per_s", "tokens_per_s"} <= set(data["batch_build"][src])
        assert {"wall_s", "wait_s", "wait_frac", "tokens_per_s"} <= set(data["training"][src])

    conc = rep["concurrency"]
    assert conc["start_method"] == "spawn"
    assert [row["processes"] for row in conc["rows"]] == [1, 2]
    for row in conc["rows"]:
        assert "error" not in row, row
        assert len(row["per_process_tokens_per_s"]) == row["processes"]
        assert {"aggregate_tokens_per_s", "window_s", "speedup_vs_1"} <= set(row)
        tokens = conc["tokens_per_chunk"] * row["chunks_per_process"] * row["processes"]
        assert row["aggregate_tokens_per_s"] == pytest.approx(tokens / row["window_s"])
        # the common window is at least every process's own span, so no process beats the aggregate's share
        assert row["aggregate_tokens_per_s"] <= sum(row["per_process_tokens_per_s"]) * (1 + 1e-9)

    ev = rep["eval"]
    assert timing | {"positions_per_s", "games_per_s", "first_call_s"} <= set(ev)
    assert ev["games"] == 8 and 0 < ev["positions"] <= ev["games"] * ev["seq_len"]
    assert ev["positions_per_s"] == pytest.approx(ev["positions"] / ev["median_s"])

    dec = rep["decode"]
    short, long_ = dec["workloads"]
    assert (short["games"], short["seq_len"], long_["games"], long_["seq_len"]) == (2, 16, 4, 24)
    assert set(short["forms"]) == {"kv_cache", "recompute"} and set(long_["forms"]) == {"kv_cache"}
    for w in (short, long_):
        for f in w["forms"].values():
            assert timing | {"tokens_per_s", "tokens"} <= set(f)
        st = w["step"]
        assert timing <= set(st["kv_cache"]) and timing <= set(st["recompute"]) and st["kv_cache"]["n"] >= 10
        assert st["step_speedup"] == pytest.approx(st["recompute"]["median_s"] / st["kv_cache"]["median_s"])
    assert short["kv_speedup"] == pytest.approx(short["forms"]["kv_cache"]["tokens_per_s"] / short["forms"]["recompute"]["tokens_per_s"])


def test_bench_engine_parses_given_pgn_files(tmp_path, lichess_pgns):
    small = [f for f in lichess_pgns if "first32" in f.name]
    out = tmp_path / "engine.json"
    r = CliRunner().invoke(app, ["bench", "--quick", "--only", "engine", "--pgn", str(small[0]), "--json", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())["engine"]["threads"]
    assert all(row["parse_pgn"]["source"] == "files" and row["parse_pgn"]["games"] == 32 for row in rows)
    r = CliRunner().invoke(app, ["bench", "--quick", "--only", "engine", "--pgn", str(tmp_path / "nope.pgn")])
    assert r.exit_code == 2 and "no such file" in r.output
    r = CliRunner().invoke(app, ["bench", "--quick", "--only", "engine", "--pgn", str(tmp_path)])
    assert r.exit_code == 2 and "no PGN file (.pgn, .pgn.zst, .pgn.gz, .pgn.bz2) in directory" in r.output
    # the repository's sample, .pgn.zst as Lichess publishes: decompressed, not parsed as bytes (0 games)
    sample = Path(__file__).resolve().parents[1] / "examples" / "lichess"
    r = CliRunner().invoke(app, ["bench", "--quick", "--only", "engine", "--pgn", str(sample), "--json", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())["engine"]["threads"]
    assert all(row["parse_pgn"]["games"] == 7321 for row in rows), rows


# ------------------------------------------------------------------ the bench/ package (issue 12)
def test_bench_settings_precedence_flag_env_file_quick_default(tmp_path, monkeypatch):
    from pawn.bench import BenchSettings

    cfg = tmp_path / "bench.toml"
    cfg.write_text("batch_size = 8\nrepeats = 7\nseq_len = 64\n")
    monkeypatch.setenv("PAWN_BENCH_REPEATS", "3")
    s = BenchSettings.load(cfg, quick=True, seq_len=48)
    # flag 48 > file 64 > quick 32; env 3 > file 7 > quick 2; file 8 > quick 4; quick's engine_games 200 > default 4000
    assert (s.seq_len, s.repeats, s.batch_size, s.engine_games) == (48, 3, 8, 200)
    assert (s.variant, s.supernet) == ("toy", None)
    # a model given with --quick replaces the preset's toy variant; --variant alone replaces the tiny supernet
    assert (BenchSettings(quick=True, supernet="large").variant, BenchSettings(variant="base").supernet) == (None, None)
    monkeypatch.delenv("PAWN_BENCH_REPEATS")
    d = BenchSettings.defaults()
    assert (d.supernet, d.batch_size, d.seq_len, d.repeats) == ("tiny", 16, 128, 5)


def test_only_and_json_are_settings_from_flags_env_and_config_file(tmp_path, monkeypatch):
    import pawn.cli.bench as cli_bench

    seen = []
    monkeypatch.setattr(cli_bench, "bench_cmd", lambda s, *a: seen.append(s))
    out = tmp_path / "b.json"
    # the CLI spelling: --only repeatable and comma lists (kept in run order), --json FILE
    r = CliRunner().invoke(app, ["bench", "--only", "decode,step", "--only", "engine", "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert seen[-1].only == ("engine", "step", "decode") and seen[-1].json_out == out
    # PAWN_BENCH_ONLY / PAWN_BENCH_JSON_OUT (comma list), and the config file (a list or a comma string)
    monkeypatch.setenv("PAWN_BENCH_ONLY", "mfu, memory")
    monkeypatch.setenv("PAWN_BENCH_JSON_OUT", str(out))
    assert CliRunner().invoke(app, ["bench"]).exit_code == 0
    assert seen[-1].only == ("memory", "mfu") and seen[-1].json_out == out
    assert CliRunner().invoke(app, ["bench", "--only", "data"]).exit_code == 0
    assert seen[-1].only == ("data",)  # the flag wins over the environment
    monkeypatch.delenv("PAWN_BENCH_ONLY")
    monkeypatch.delenv("PAWN_BENCH_JSON_OUT")
    for text in ('{"only": ["eval", "step"], "json_out": "r.json"}', '{"only": "eval,step"}'):
        cfg = tmp_path / "bench.json"
        cfg.write_text(text)
        assert CliRunner().invoke(app, ["bench", "--config", str(cfg)]).exit_code == 0
        assert seen[-1].only == ("step", "eval")
    assert seen[-2].json_out == Path("r.json") and seen[-1].json_out is None
    assert CliRunner().invoke(app, ["bench"]).exit_code == 0
    assert seen[-1].only is None and parse_only(seen[-1].only) == list(SECTIONS)  # unset: every section
    monkeypatch.setenv("PAWN_BENCH_ONLY", "step,warp")
    r = CliRunner().invoke(app, ["bench"])
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "PAWN_BENCH_ONLY" in errors[0] and "unknown section(s) warp" in errors[0], r.output


def test_bench_settings_range_and_cross_field_errors_name_the_field():
    from pydantic import ValidationError

    from pawn.bench import BenchSettings

    for bad, field in [({"batch_size": 0}, "batch_size"), ({"decode_len": 1}, "decode_len"), ({"seq_len": 10_000}, "seq_len"),
                       ({"remat": "some"}, "remat"), ({"variant": "huge"}, "variant"), ({"engine_gamez": 3}, "engine_gamez")]:
        with pytest.raises(ValidationError, match=field):
            BenchSettings(**bad)
    with pytest.raises(ValidationError, match="not a multiple of accumulation_steps"):
        BenchSettings(batch_size=6, accumulation_steps=4)
    assert BenchSettings(dtype="bf16").compute_dtype() == "bfloat16"


def test_bench_cli_reads_env_and_reports_bad_values_in_one_line(monkeypatch):
    monkeypatch.setenv("PAWN_BENCH_BATCH_SIZE", "0")
    r = CliRunner().invoke(app, ["bench", "--only", "engine"])
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "PAWN_BENCH_BATCH_SIZE: " in errors[0] and "greater than or equal to 1" in errors[0], r.output


def test_bench_optimizer_is_read_from_the_pretrain_defaults(monkeypatch):
    import pawn.train.loop as loop
    from pawn.bench import pretrain_optimizer
    from pawn.settings import PretrainConfig

    seen = {}
    monkeypatch.setattr(loop, "make_optimizer", lambda schedule, **kw: seen.update(kw, lr=schedule(0)) or "opt")
    monkeypatch.setattr(PretrainConfig.model_fields["beta2"], "default", 0.999)  # a changed default is followed
    assert pretrain_optimizer()[0] == "opt"
    assert seen == {"b1": 0.9, "b2": 0.999, "weight_decay": 0.01, "max_grad_norm": 1.0, "lr": pytest.approx(3e-4)}


def test_engine_child_is_a_module_that_prints_one_json_line():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "pawn.bench.engine_child", "6", "20", "2", "2", "[]"],
                          capture_output=True, text=True, env={**__import__("os").environ, "RAYON_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["random_games"]["games"] == 6 and len(r["random_games"]["plies"]) == 2
    assert all(6 <= p <= 6 * 20 for p in r["random_games"]["plies"])
    assert r["parse_pgn"]["games"] == 6 and r["parse_pgn"]["source"] == "random games as PGN"
    assert len(r["legal_masks"]["samples_s"]) == 2 and 2 <= r["legal_masks"]["positions"] <= 2 * 20


def test_records_serialise_to_the_documented_json_keys():
    from pawn.bench.concurrency import ConcurrencyRow
    from pawn.bench.evaluation import EvalResult
    from pawn.bench.records import Measurement, to_json

    m = Measurement.of({"median_s": 2.0, "min_s": 1.0, "max_s": 4.0, "n": 3}, games=8).per(8, "games_per_s")
    assert m.to_dict() == {"median_s": 2.0, "min_s": 1.0, "max_s": 4.0, "n": 3, "games_per_s": 4.0, "games_per_s_min": 2.0,
                           "games_per_s_max": 8.0, "games": 8}
    timed = Measurement.of(time_call(lambda: 0, repeats=2, warmup=1))
    assert {"first_call_s", "compile_s"} <= set(timed.to_dict())
    ev = to_json(EvalResult("variant toy", "d64_L2_F256", 8, 32, 4, 200, m))
    assert ev["positions"] == 200 and ev["games_per_s"] == 4.0 and "timing" not in ev  # flattened
    assert to_json(ConcurrencyRow(2, error="OOM")) == {"processes": 2, "error": "OOM"}  # None fields left out


def test_one_printer_writes_every_cell_through_the_metric_table():
    import io

    from rich.console import Console

    from pawn.bench.decode import DecodeResult, DecodeStep, DecodeWorkload
    from pawn.bench.records import Measurement
    from pawn.bench.report import COLUMNS, VIEWS, render

    def meas(med, lo, hi, **work):
        return Measurement.of({"median_s": med, "min_s": lo, "max_s": hi, "n": 2, "first_call_s": 1.5, "compile_s": 1.0}, **work)

    kv, rc = meas(0.001, 0.0005, 0.002), meas(0.004, 0.003, 0.005)
    gen = meas(2.0, 1.0, 4.0, tokens=1000).per(1000, "tokens_per_s")
    w = DecodeWorkload(2, 16, DecodeStep(kv, rc, 4.0), {"kv_cache": gen})
    view = VIEWS["decode"](DecodeResult("variant toy", "d64_L2_F256", [w]))
    assert all(isinstance(c, str) and c in COLUMNS for c in view.columns)
    buf = io.StringIO()
    Console(file=buf, width=250).print(render(view))
    text = buf.getvalue()
    assert "1.00 (0.50–2.00)" in text and "4.00×" in text  # KV step ms (min–max); step speed-up
    assert "2,000.00 (1,000.00–4,000.00)" in text and "500" in text and "250–1,000" in text and "1.50" in text


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_step_section_runs_all_three_forms_of_the_current_train_step():
    """Not slow: the step section (eager, jitted step, scan chunk) on a toy model at tiny sizes.
    It broke unnoticed (TypeError traceback) when TrainProgram._step gained its ``frozen`` argument,
    because only the slow ``--quick`` smoke run covered it."""
    from pawn.bench import BenchSettings
    from pawn.bench.step import bench_step

    s = BenchSettings(quick=True, variant="toy", batch_size=2, seq_len=16, steps_per_chunk=2, repeats=1, warmup=0)
    r = bench_step(s)
    assert set(r.forms) == {"eager", "jit_step", "scan_chunk"}
    assert (r.batch_size, r.seq_len, r.steps_per_chunk, r.tokens_per_step) == (2, 16, 2, 32)
    for m in r.forms.values():
        assert m.n >= 1 and 0 < m.min_s <= m.median_s <= m.max_s
        assert m.rates["tokens_per_s"] > 0


def test_adapt_data_defaults_to_the_lichess_folder_from_the_working_directory(tmp_path, shared_data, monkeypatch):
    # It looked beside the installed package: after `pip install .` the adapt and population sections
    # silently timed engine random games. Now ../shared/data/lichess from the working directory, else
    # a plain line and a table title that say random games were timed.
    from pawn.bench.adapt import RANDOM_GAMES

    monkeypatch.delenv("PAWN_SHARED_DIR", raising=False)
    one = tmp_path / "shared" / "data" / "lichess"
    one.mkdir(parents=True)
    small = min((shared_data / "lichess").glob("*.pgn"), key=lambda p: p.stat().st_size)  # 10 games
    (one / small.name).symlink_to(small)
    args = ["bench", "--quick", "--only", "adapt", "--repeats", "1", "--warmup", "1", "--steps-per-chunk", "1",
            "--data-chunks", "1", "--batch-size", "2", "--adapt-strategies", "lora"]
    for cwd, data, games, said in ((tmp_path / "checkout", "../shared/data/lichess", 10, False),
                                   (tmp_path / "checkout" / "deeper", RANDOM_GAMES, 64, True)):
        cwd.mkdir()
        monkeypatch.chdir(cwd)
        r = CliRunner().invoke(app, [*args, "--json", str(cwd / "b.json")])
        assert r.exit_code == 0, r.output
        rec = json.loads((cwd / "b.json").read_text())["adapt"]
        assert (rec["data"], rec["train_games"]) == (data, games)
        assert ("adapt: timing engine random games (no --adapt-data given" in r.output) == said
        assert ("games of engine random" in r.output) == said


def test_adapt_data_in_a_fresh_clone_is_the_repositorys_lichess_sample(tmp_path, monkeypatch):
    """A copy of the checkout as a fresh clone has it, with no shared folder beside it and no
    PAWN_SHARED_DIR: run from its root, the adapt section times the repository's examples/lichess
    (7,321 games), not engine random games (it looked only for ../shared/data/lichess)."""
    from conftest import copy_of_the_checkout

    clone = copy_of_the_checkout(tmp_path / "clone")
    monkeypatch.delenv("PAWN_SHARED_DIR", raising=False)
    monkeypatch.chdir(clone)
    assert not (tmp_path / "shared").exists()
    r = CliRunner().invoke(app, ["bench", "--quick", "--only", "adapt", "--repeats", "1", "--warmup", "1",
                                 "--steps-per-chunk", "1", "--data-chunks", "1", "--batch-size", "2",
                                 "--adapt-strategies", "lora", "--json", str(tmp_path / "b.json")])
    assert r.exit_code == 0, r.output
    rec = json.loads((tmp_path / "b.json").read_text())["adapt"]
    # every sample game but those shorter than the section's 10 plies
    assert rec["data"] == "examples/lichess" and 7000 < rec["train_games"] <= 7321, rec
    assert "engine random" not in r.output and "games of lichess" in r.output


def test_estimates_rescale_to_this_runs_pace_as_sections_finish():
    # The estimate printed before a run ("roughly 0:23:26") was never revised: that run took 62 min.
    from pawn.bench import finished_line, rescaled_estimates

    est = {"step": 100.0, "data": 50.0, "population": 600.0}
    assert rescaled_estimates(est, {}) == (est, 1.0)
    # step ran 300 s against 100 estimated, data 150 against 50: pace (300 + 150) / 150 = 3
    rest, pace = rescaled_estimates(est, {"step": 300.0, "data": 150.0})
    assert pace == 3.0 and rest == {"population": 1800.0}
    assert finished_line("data", 150.0, est, {"step": 300.0, "data": 150.0}) == (
        "pawn bench: data took 0:02:30 (estimated 0:00:50); the other 1 section roughly 0:30:00 at this run's pace "
        "(3.00× the estimates so far)")
    assert finished_line("population", 1.0, est, {"step": 1.0, "data": 1.0, "population": 1.0}).endswith("(estimated 0:10:00)")


def test_bench_cli_prints_each_sections_time_the_revised_rest_and_sub_status(tmp_path):
    r = CliRunner().invoke(app, ["bench", "--quick", "--only", "engine,data", "--repeats", "1", "--data-chunks", "1"])
    assert r.exit_code == 0, r.output
    assert re.search(r"^pawn bench: engine took \d+:\d\d:\d\d \(estimated \d+:\d\d:\d\d\); the other 1 section roughly "
                     r"\d+:\d\d:\d\d at this run's pace \([\d.]+× the estimates so far\)$", r.output, re.M), r.output
    assert re.search(r"^pawn bench: data took .*\(estimated [^)]*\)$", r.output, re.M), r.output
    # the sub-status lines of a section (one line each when the output is not a terminal)
    for part in ("compiling the train step shared by step, mfu, data", "building a corpus of", "training fed from the corpus"):
        assert re.search(rf"^pawn bench: data: {part}.* \(\d+:\d\d:\d\d into the section\)$", r.output, re.M), (part, r.output)
