"""Held-out evaluation of adapters (issue 26, "a methodology trap"): ``pawn adapt`` records which
games it trained, validated and tested on (``split.json``: source fingerprint + rule + game ids);
``pawn eval --split val|test`` re-derives and scores exactly those games, refusing when the source
changed; ``pawn eval --pgn`` counts the adapter's training games among the games it scores and
counts every Lichess game once. All on the shared Lichess games, through the CLI.

The tests that need a trained adapter share one ``pawn adapt`` run (about 20 s on the shared CPU,
most of it the XLA compile), so they are marked slow; the split rule, the record and its refusal
of a changed source, the duplicate count and the flag checks run by default."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

ELO = ("--elo-min", "1200", "--elo-max", "2200")
VAL, TEST = 64, 48
KDAVE = "lichess_db_2021-10-01_first1000_kdave-pgn-toys.pgn"


def _games(text: str) -> list[str]:
    """The games of a PGN text, each from its ``[Event`` line."""
    starts = [m.start() for m in re.finditer(r"^\[Event ", text, re.M)]
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def _site_ids(text: str) -> list[int]:
    """The Lichess ids of the games' Site tags, as :func:`pawn.data.lichess.lichess_ids` encodes them
    (8 ASCII bytes, little-endian), found by a regex of this test's own."""
    return [int.from_bytes(m.encode(), "little") for m in re.findall(r'^\[Site "https://lichess\.org/(\w{8})\w*"\]', text, re.M)]


@pytest.fixture(scope="module")
def adapted(tiny_backbone, shared_data, tmp_path_factory):
    """One film adapter trained on (a copy of) the shared Lichess folder with a validation and a test split;
    ``(run dir, cache dir, output, data folder)``. The copy is what the refusal test touches."""
    from pawn.cli import app

    root = tmp_path_factory.mktemp("evalsplit")
    out, cache, data = root / "run", root / "cache", root / "lichess"
    shutil.copytree(shared_data / "lichess", data)
    r = CliRunner().invoke(app, ["adapt", str(tiny_backbone), "--strategy", "film", "--data", str(data), *ELO,
                                 "--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "8", "--seq-len", "48",
                                 "--val-games", str(VAL), "--test-games", str(TEST), "--cache-dir", str(cache), "--out", str(out),
                                 "--data-seed", "3"])
    assert r.exit_code == 0, r.output
    return out, cache, r.output, data


@pytest.mark.slow
def test_adapt_records_the_source_fingerprint_rule_and_disjoint_game_ids(adapted, shared_data):
    from pawn.data.split import fingerprint_digest
    from pawn.runs import open_run

    out, _, output, _ = adapted
    rec = open_run(out).split
    # 7,321 games read; 32 repeated ids, 16 FEN starts, 19 without a result, 315 outside the band, 58 short
    assert rec.counts == {"train": 6881 - VAL - TEST, "val": VAL, "test": TEST, "duplicates_dropped": 32}
    assert rec.rule["ranges"] == {"train": [0, 6769], "test": [6769, 6817], "val": [6817, 6881]}
    assert (rec.rule["val_from"], rec.rule["test_from"]) == ("tail", "tail")
    files = sorted(p.name for p in (shared_data / "lichess").glob("*.pgn"))
    assert [row[0] for row in rec.files["train"]] == files
    assert [row[1] for row in rec.files["train"]] == [(shared_data / "lichess" / f).stat().st_size for f in files]
    assert rec.fingerprint == fingerprint_digest(rec.files)
    ids = rec.ids
    assert {k: v.size for k, v in ids.items()} == {"train": 6769, "val": VAL, "test": TEST}  # every kept game has an id
    assert not np.intersect1d(ids["train"], ids["val"]).size and not np.intersect1d(ids["train"], ids["test"]).size
    assert not np.intersect1d(ids["val"], ids["test"]).size
    # the validation and test games are the last 112 kept games of the last file that keeps any (kdave's)
    kdave = (shared_data / "lichess" / KDAVE).read_text()
    assert set(ids["val"].tolist()) | set(ids["test"].tolist()) <= set(_site_ids(kdave))
    # the config record carries the same summary (no file list), readable through pawn.runs
    cfg = open_run(out).config_record.fields
    assert cfg["split"]["counts"] == rec.counts and "files" not in cfg["split"]["source"]
    assert cfg["n_test_games"] == TEST
    assert "6,769 training, 64 validation, 48 test games" in output and "--split test" in output
    assert "val top-1 (legal-masked, every move)" in output


@pytest.mark.slow
def test_eval_split_val_scores_exactly_the_runs_validation_games(adapted, tmp_path):
    from pawn.cli import app
    from pawn.runs import open_run

    out, _, _, _ = adapted
    js = tmp_path / "e.json"
    r = CliRunner().invoke(app, ["eval", str(out / "best"), "--split", "val", "--pgn-only", "--json", str(js)],
                           env={"COLUMNS": "300"})  # the headers name their positions: unwrapped
    assert r.exit_code == 0, r.output
    assert "random games" not in r.output  # --pgn-only: no random-game table
    h = json.loads(js.read_text())["models"][0]
    assert "random_games" not in h
    h = h["held_out"]
    assert h["split"] == "val" and h["n_games"] == VAL
    # the same games, sequence length and mask as the run's own validation: the legal-masked top-1
    # over every move decision is the run's val top-1 of the best checkpoint
    best = min(open_run(out).val, key=lambda v: v.values["loss"])
    assert h["top1_legal_masked_all_moves"] == pytest.approx(best.values["top1"], abs=1e-9)
    # and the legal-masked loss over every move decision is its val loss (the table's plain loss is the
    # unmasked one at move positions: 7.61 against a val loss of 3.20 for the README's adapter)
    assert h["loss_legal_masked_all_moves"] == pytest.approx(best.values["loss"], rel=1e-5)
    assert h["loss"] > h["loss_legal_masked_all_moves"]
    assert "Loss (unmasked)" in r.output and "Loss legal-masked" in r.output
    assert h["n_positions"] == best.values["positions"]  # both count the move decisions (no end-of-game slot)
    assert "Top-1 legal-masked (moves at position ≥ 10)" in r.output and "Top-1 legal-masked (every move)" in r.output
    r = CliRunner().invoke(app, ["eval", str(out / "best"), "--split", "test", "--pgn-only", "--json", str(js)])
    assert r.exit_code == 0, r.output
    assert json.loads(js.read_text())["models"][0]["held_out"]["n_games"] == TEST


@pytest.mark.slow
def test_eval_pgn_on_the_training_source_counts_its_training_games(adapted, shared_data, tmp_path):
    """The last 300 games of kdave's file hold the run's 112 validation and test games and some
    training games; eval scores every kept game of them in one band and says how many it trained on."""
    from pawn.cli import app
    from pawn.engine import parse_pgn
    from pawn.runs import open_run

    out, _, _, _ = adapted
    tail = "".join(_games((shared_data / "lichess" / KDAVE).read_text())[-300:])
    pgn = tmp_path / "tail300.pgn"
    pgn.write_text(tail)
    ids = open_run(out).split.ids
    site = np.array(_site_ids(tail), np.uint64)
    g = parse_pgn(str(pgn), max_ply=48, min_ply=10)
    both = (g.white_elo >= 1200) & (g.white_elo < 2200) & (g.black_elo >= 1200) & (g.black_elo < 2200)
    want_train = int(np.isin(site, ids["train"]).sum())
    assert int(np.isin(site, ids["val"]).sum()) == VAL and int(np.isin(site, ids["test"]).sum()) == TEST
    assert want_train + VAL + TEST == int(both.sum())  # every kept in-band game is in exactly one part
    js = tmp_path / "e.json"
    r = CliRunner().invoke(app, ["eval", str(out / "best"), "--pgn", str(pgn), "--pgn-only", "--elo-edges", "0,4000",
                                 "--json", str(js)])
    assert r.exit_code == 0, r.output
    li = json.loads(js.read_text())["models"][0]["lichess"]
    assert li["n_evaluated"] == len(g) and li["n_duplicates"] == 0
    assert li["overlap"] == {"train": want_train, "val": VAL, "test": TEST}
    line = next(ln for ln in r.output.splitlines() if ln.startswith("warning:"))
    assert f"{want_train:,} of the {len(g):,} evaluated games were training games" in line and "--split val" in line


def test_eval_pgn_counts_a_game_repeated_in_two_exports_once(tiny_backbone, shared_data, tmp_path):
    """The 32 games of mliebelt's file are the first 32 of chess.js's re-export (README of shared/data)."""
    from pawn.cli import app
    from pawn.engine import parse_pgn

    d = tmp_path / "two-exports"
    d.mkdir()
    for name in ("lichess_db_2013-01_first100_reexported_chess.js-benchmark.pgn", "lichess_db_2013-01_first32_mliebelt-pgn-parser.pgn"):
        shutil.copy(shared_data / "lichess" / name, d / name)
    kept = sum(len(parse_pgn(str(f), max_ply=48, min_ply=10)) for f in sorted(d.iterdir()))
    js = tmp_path / "e.json"
    r = CliRunner().invoke(app, ["eval", str(tiny_backbone), "--pgn", str(d), "--pgn-only", "--elo-edges", "0,4000",
                                 "--max-ply", "48", "--json", str(js)])
    assert r.exit_code == 0, r.output
    rec = json.loads(js.read_text())["models"][0]
    assert "random_games" not in rec and "random games" not in r.output  # --pgn-only
    li = rec["lichess"]
    assert li["overlap"] is None  # a plain model has no training split to check against
    assert "Top-1 (every move)" in r.output and "Top-1 legal-masked (moves at position ≥ 10)" in r.output
    assert li["n_duplicates"] == 32 and li["n_evaluated"] == kept - 32
    assert "dropped 32 repeated games of --pgn" in r.output
    assert sum(b["n_games"] for b in li["bands"].values()) == kept - 32


@pytest.mark.slow
def test_eval_split_refuses_in_one_line_when_the_source_changed(adapted, shared_data):
    from pawn.cli import app

    out, _, _, data = adapted
    f = data / KDAVE
    st = os.stat(f)
    try:
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        r = CliRunner().invoke(app, ["eval", str(out / "best"), "--split", "val", "--pgn-only"])
    finally:
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert r.exit_code != 0 and "Traceback" not in r.output
    err = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "the source changed" in err[0] and f"{KDAVE}: its modification time changed" in err[0]


@pytest.mark.parametrize("argv, message", [
    (["--pgn-only"], "--pgn-only skips the random-game pass: it needs --pgn FILE or --split val|test"),
    (["--split", "val", "--pgn", "x.pgn"], "give --pgn FILE or --split val|test, not both"),
])
def test_eval_split_flag_combinations_are_refused_before_any_model_loads(argv, message, tmp_path):
    from pawn.cli import app

    r = CliRunner().invoke(app, ["eval", str(tmp_path / "no-such-checkpoint"), *argv])
    assert r.exit_code == 2 and message in r.output, r.output


@pytest.mark.slow
def test_eval_split_of_a_plain_model_or_a_run_without_test_games_is_refused(adapted, tiny_backbone, tmp_path):
    from pawn.cli import app

    r = CliRunner().invoke(app, ["eval", str(tiny_backbone), "--split", "val", "--pgn-only"])
    assert r.exit_code != 0 and "--split needs an adapter checkpoint of a pawn adapt run" in r.output
    out, _, _, _ = adapted
    run = tmp_path / "run"
    shutil.copytree(out, run, symlinks=True)
    rec = json.loads((run / "split.json").read_text())
    rec["counts"]["test"] = 0
    (run / "split.json").write_text(json.dumps(rec))
    r = CliRunner().invoke(app, ["eval", str(run / "best"), "--split", "test", "--pgn-only"])
    assert r.exit_code != 0 and "carved no test games (train it with --test-games N)" in r.output, r.output
    (run / "split.json").unlink()
    r = CliRunner().invoke(app, ["eval", str(run / "best"), "--split", "val", "--pgn-only"])
    assert r.exit_code != 0 and "records no split" in r.output, r.output


def test_test_split_is_carved_before_the_validation_tail_and_leaves_it_unchanged(shared_data, tmp_path):
    from pawn.data.lichess import LichessFilters, load_corpus

    f = LichessFilters(1200, 2200)
    plain = load_corpus(shared_data / "lichess", f, val_games=VAL, cache_dir=tmp_path)
    c = load_corpus(shared_data / "lichess", f, val_games=VAL, test_games=TEST, cache_dir=tmp_path)
    # 7,321 read − 32 repeated − 16 FEN starts − 19 without a result − 315 outside the band − 58 short = 6,881
    assert (len(plain.train), len(plain.val)) == (6881 - VAL, VAL)
    assert (len(c.train), len(c.val), len(c.test)) == (6881 - VAL - TEST, VAL, TEST)
    assert c.ranges == {"val": [6817, 6881], "test": [6769, 6817], "train": [0, 6769]}
    assert np.array_equal(c.val.ids, plain.val.ids) and np.array_equal(c.test.ids, plain.train.ids[-TEST:])
    assert c.caches[0].stats.dropped["duplicate"] == 32
    big = load_corpus(shared_data / "lichess", f, val_games=VAL, test_games=10**6, cache_dir=tmp_path)
    assert len(big.test) == 6881 // 5  # min(test_games, n // 5), as for validation


def test_split_record_round_trips_and_refuses_a_changed_source(shared_data, tmp_path):
    from pawn.data import split
    from pawn.data.lichess import LichessFilters, load_corpus
    from pawn.errors import DataError

    src = tmp_path / "games"
    src.mkdir()
    for p in (shared_data / "lichess").glob("lichess_db_2013-01_*.pgn"):
        shutil.copy(p, src / p.name)
    c = load_corpus(src, LichessFilters(), val_games=15, test_games=10, cache_dir=tmp_path / "cache")
    rec = split.record_of(c, str(src), val_games=15, test_games=10, path=tmp_path / "run" / split.SPLIT_FILE)
    split.write(rec)
    back = split.read(rec.path)
    # 132 games read: the 32 of mliebelt's file repeat chess.js's first 32, one game is under 10 plies
    assert c.caches[0].stats.dropped == {"duplicate": 32, "too_short": 1}
    assert back.counts == {"train": 99 - 15 - 10, "val": 15, "test": 10, "duplicates_dropped": 32}
    assert {k: v.size for k, v in back.ids.items()} == {"train": 74, "val": 15, "test": 10}
    assert back.rule["ranges"] == {"val": [84, 99], "test": [74, 84], "train": [0, 74]}
    assert np.array_equal(split.rederive(back, "test", cache_dir=tmp_path / "cache").ids, c.test.ids)
    assert split.overlap(back, c.val.ids[:7]) == {"train": 0, "val": 7, "test": 0}
    f = src / "lichess_db_2013-01_first32_mliebelt-pgn-parser.pgn"
    f.write_text(f.read_text() + "\n")
    with pytest.raises(DataError, match="first32_mliebelt-pgn-parser.pgn: its size changed"):
        split.rederive(back, "val", cache_dir=tmp_path / "cache")
    f.unlink()
    with pytest.raises(DataError, match="first32_mliebelt-pgn-parser.pgn is gone"):
        split.check_source(back)


def test_helps_say_how_to_read_a_legal_masked_adapter_and_name_the_split_flags():
    from pawn.cli import app

    env = {"COLUMNS": "400", "TERM": "dumb"}
    adapt = " ".join(CliRunner().invoke(app, ["adapt", "--help"], env=env).output.split())
    ev = " ".join(CliRunner().invoke(app, ["eval", "--help"], env=env).output.split())
    assert "An adapter trained under the legal mask (the default) only learned to rank legal moves: decode it under the mask too" in adapt
    assert "--test-games" in adapt and "pawn eval OUT/best --split val|test" in adapt
    assert "An adapter trained under the legal mask (pawn adapt's default) must be read under it" in ev
    assert "--split" in ev and "--pgn-only" in ev and "average of both players' Elo" in ev


@pytest.mark.slow
def test_eval_split_sets_the_adapter_beside_the_backbone_alone_and_the_uniform_player(adapted, tmp_path):
    """The held-out block's reference rows: the backbone alone on the same games is the run's step-0
    validation (the adapter starts as the identity), the uniform-over-legal player's loss is
    E[ln N_legal] over the same move decisions, and each excess is loss − that, inside its interval."""
    from pawn.cli import app
    from pawn.runs import open_run

    out, _, _, _ = adapted
    js = tmp_path / "e.json"
    r = CliRunner().invoke(app, ["eval", str(out / "best"), "--split", "val", "--pgn-only", "--json", str(js)],
                           env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    h = json.loads(js.read_text())["models"][0]["held_out"]
    step0 = open_run(out).val[0]
    assert step0.step == 0
    b = h["backbone"]
    assert b["loss_legal_masked_all_moves"] == pytest.approx(step0.values["loss"], rel=1e-5)
    assert b["top1_legal_masked_all_moves"] == pytest.approx(step0.values["top1"], abs=1e-9)
    pg = h["per_game"]
    assert len(pg["n_moves"]) == VAL and sum(pg["n_moves"]) == h["n_positions"]
    assert h["uniform_loss_all_moves"] == pytest.approx(sum(pg["ln_n_legal"]) / sum(pg["n_moves"]), rel=1e-12)
    assert h["loss_legal_masked_all_moves"] == pytest.approx(sum(pg["legal_nll"]) / sum(pg["n_moves"]), rel=1e-9)
    for f in (h, b):
        assert f["excess_nats_all_moves"] == pytest.approx(f["loss_legal_masked_all_moves"] - h["uniform_loss_all_moves"], abs=1e-9)
        assert f["excess_nats_lo"] <= f["excess_nats_all_moves"] <= f["excess_nats_hi"]
    d = h["vs_backbone"]["loss_legal_masked_all_moves"]
    assert d["estimate"] == pytest.approx(h["loss_legal_masked_all_moves"] - b["loss_legal_masked_all_moves"], abs=1e-9)
    assert d["lo"] <= d["estimate"] <= d["hi"] and d["method"] == "bootstrap over games"
    for row in ("adapter ", "backbone alone", "uniform over legal moves", "adapter − backbone"):
        assert any(ln.startswith(f"│ {row}") for ln in r.output.splitlines()), row


@pytest.mark.slow
def test_the_report_of_an_adapter_run_shows_its_held_out_excess_beside_the_backbone_and_the_uniform_player(adapted, tmp_path):
    """``pawn eval RUN/best --split test --json RUN/eval_test.json`` then ``pawn report RUN``: the run's
    eval card leads with the adapter, its backbone alone and the uniform-over-legal player on the test
    games (loss, excess with its interval over games, top-1: what the eval wrote) and the paired
    adapter − backbone differences; the page does not carry the per-game sums."""
    pytest.importorskip("plotly", reason="the report extra: pip install 'pawn[report]'")
    from _report_page import embedded, rendered_text
    from pawn.cli import app

    out = tmp_path / "run"
    shutil.copytree(adapted[0], out, symlinks=True)
    js, page = out / "eval_test.json", tmp_path / "r.html"
    r = CliRunner().invoke(app, ["eval", str(out / "best"), "--split", "test", "--pgn-only", "--json", str(js)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["report", str(out), "-o", str(page)])
    assert r.exit_code == 0, r.output
    (entry,) = [e for e in embedded(page)["runs"][0]["evals"] if Path(e["path"]).name == "eval_test.json"]
    assert "per_game" not in json.dumps(entry["report"])
    h = json.loads(js.read_text())["models"][0]["held_out"]
    assert len(h["per_game"]["n_moves"]) == TEST  # the file keeps them
    (block,) = entry["legal_masked"]
    rows = {row["player"]: row for row in block["rows"]}
    assert list(rows) == ["adapter", "backbone alone", "uniform over the legal moves", "adapter − backbone"]
    assert {row["games"] for row in rows.values()} == {"test games"}
    for who, f in (("adapter", h), ("backbone alone", h["backbone"])):
        row = rows[who]
        assert (row["loss"], row["top1"]) == (f["loss_legal_masked_all_moves"], f["top1_legal_masked_all_moves"])
        assert row["excess"] == f"{f['excess_nats_all_moves']:+.4f} [{f['excess_nats_lo']:+.4f}, {f['excess_nats_hi']:+.4f}]"
        assert row["n_games"] == TEST and row["n_positions"] == h["n_positions"]
    assert rows["uniform over the legal moves"]["loss"] == h["uniform_loss_all_moves"]
    d, t = h["vs_backbone"]["loss_legal_masked_all_moves"], h["vs_backbone"]["top1_legal_masked_all_moves"]
    assert rows["adapter − backbone"]["loss"] == f"{d['estimate']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}]"
    assert rows["adapter − backbone"]["top1"] == f"{100 * t['estimate']:+.2f} [{100 * t['lo']:+.2f}, {100 * t['hi']:+.2f}] pp"
    text = rendered_text(page, "evals")  # the page draws the four rows in that order
    at = [text.index(f" | test games | {who} | ") for who in rows]
    assert at == sorted(at) and f" | {rows['backbone alone']['excess']} | " in text


@pytest.mark.slow
def test_eval_pgn_on_an_adapter_shows_its_backbone_alone_as_pawn_eval_scores_the_backbone(adapted, tiny_backbone, shared_data, tmp_path):
    """Round trip: the backbone-alone figures beside an adapter's Elo band are what ``pawn eval`` of the
    backbone itself writes for the same file and band (the same games, the same positions)."""
    from pawn.cli import app

    out, _, _, _ = adapted
    pgn = shared_data / "lichess" / "lichess_db_2013-01_first32_mliebelt-pgn-parser.pgn"
    ja, jb = tmp_path / "a.json", tmp_path / "b.json"
    common = ["--pgn", str(pgn), "--elo-edges", "0,3000", "--pgn-only", "--max-ply", "47"]
    r = CliRunner().invoke(app, ["eval", str(out / "best"), *common, "--json", str(ja)], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert "Backbone alone: excess over uniform" in r.output
    rb = CliRunner().invoke(app, ["eval", str(tiny_backbone), *common, "--json", str(jb)])
    assert rb.exit_code == 0, rb.output
    band_a = json.loads(ja.read_text())["models"][0]["lichess"]["bands"]["elo_0_3000"]
    band_b = json.loads(jb.read_text())["models"][0]["lichess"]["bands"]["elo_0_3000"]
    assert band_a["n_games"] == band_b["n_games"] == 32
    for k in ("loss_legal_masked_all_moves", "excess_nats_all_moves", "excess_nats_lo", "excess_nats_hi", "uniform_loss_all_moves"):
        assert band_a["backbone"][k] == pytest.approx(band_b[k], rel=1e-5), k
    assert band_a["uniform_loss_all_moves"] == band_b["uniform_loss_all_moves"]
    # pawn report of the adapter's file: the band's rows lead its card, the backbone alone beside the adapter
    if importlib.util.find_spec("plotly") is not None:
        from _report_page import embedded

        r = CliRunner().invoke(app, ["report", str(ja), "-o", str(tmp_path / "r.html")])
        assert r.exit_code == 0, r.output
        (block,) = embedded(tmp_path / "r.html")["evals"][0]["legal_masked"]
        rows = {row["player"]: row for row in block["rows"]}
        assert {row["games"] for row in block["rows"]} == {"Lichess elo_0_3000"}
        assert set(rows) == {block["name"], "backbone alone", "uniform over the legal moves"}
        bb = band_a["backbone"]
        assert rows["backbone alone"]["excess"] == f"{bb['excess_nats_all_moves']:+.4f} [{bb['excess_nats_lo']:+.4f}, {bb['excess_nats_hi']:+.4f}]"
        assert rows["uniform over the legal moves"]["loss"] == band_a["uniform_loss_all_moves"]


@pytest.mark.slow
def test_the_model_card_of_an_adapter_run_gives_its_held_out_excess_beside_the_backbone_and_the_uniform_player(adapted, tmp_path):
    """The card a pushed run carries (:func:`pawn.hub.push.run_card`) reads the run's newest
    ``pawn eval --json``: for an adapter's test split, the adapter, its backbone alone and the uniform
    player with loss, excess and its interval over games, and top-1, as the eval wrote them, then the
    paired adapter − backbone differences."""
    from pawn.cli import app
    from pawn.hub.push import run_card

    out = tmp_path / "run"
    shutil.copytree(adapted[0], out, symlinks=True)
    js = out / "eval_test.json"
    r = CliRunner().invoke(app, ["eval", str(out / "best"), "--split", "test", "--pgn-only", "--json", str(js)])
    assert r.exit_code == 0, r.output
    h = json.loads(js.read_text())["models"][0]["held_out"]
    card = run_card(out, "someone/film", "main")((out / "best").resolve(), 2, (out / "metrics.jsonl").read_bytes())
    lines = card.splitlines()
    b = h["backbone"]

    def row(who, f):
        return (f"| {who} | {f['loss_legal_masked_all_moves']:.4f} | {f['excess_nats_all_moves']:+.4f} "
                f"[{f['excess_nats_lo']:+.4f}, {f['excess_nats_hi']:+.4f}] | {100 * f['top1_legal_masked_all_moves']:.2f} % |")

    (adapter,) = [ln for ln in lines if ln.startswith("| ") and "(adapter) |" in ln]
    assert adapter.endswith(row("", h)[3:]) and row("backbone alone", b) in lines
    assert f"| uniform over the legal moves | {h['uniform_loss_all_moves']:.4f} | +0 (the reference) | {100 * h['uniform_top1_all_moves']:.2f} % |" in lines
    assert lines.index(adapter) < lines.index(row("backbone alone", b))
    assert f"Held-out test games ({TEST} games, {h['n_positions']} move decisions;" in card
    d = h["vs_backbone"]["loss_legal_masked_all_moves"]
    assert f"Adapter − backbone on the same games: loss {d['estimate']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}] nats" in card
    assert "(the report holds no random-game results)" not in card
