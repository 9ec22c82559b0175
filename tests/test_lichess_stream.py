"""Compressed Lichess exports (.pgn.zst, .gz, .bz2) streamed into the game cache, a cache build that
continues after a kill, the parser version stored in the cache, duplicate games across exports
and files that are not PGN (issues 22, 25, 26, 27) — over the shared Lichess games."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zstandard

import pawn.data.lichess as lichess
from pawn.data.cache import COMPLETE_FILE, META_FILE
from pawn.data.lichess import LichessFilters, load_corpus
from pawn.engine.pgn import PARSER_VERSION, NotPgnFileError, parse_pgn
from pawn.errors import DataError

DUMP = "lichess_db_2021-10-01_first1000_kdave-pgn-toys.pgn"
API = "lichess_api_export_2025-06_100games_rust-pgn-reader-legal.pgn"
FIRST100 = "lichess_db_2013-01_first100_reexported_chess.js-benchmark.pgn"
FIRST32 = "lichess_db_2013-01_first32_mliebelt-pgn-parser.pgn"  # the same games as FIRST100's first 32

COMPRESS = {".zst": lambda b: zstandard.ZstdCompressor(level=3).compress(b), ".gz": gzip.compress,
            ".bz2": bz2.compress}


def _folder(shared_data: Path, tmp_path: Path, names: tuple[str, ...], suffix: str = "") -> Path:
    d = tmp_path / f"pgn{suffix or '-plain'}"
    d.mkdir(parents=True)
    for name in names:
        raw = (shared_data / "lichess" / name).read_bytes()
        (d / (name + suffix)).write_bytes(COMPRESS[suffix](raw) if suffix else raw)
    return d


def _same(a, b) -> None:
    np.testing.assert_array_equal(np.array(a.train.tokens_flat), np.array(b.train.tokens_flat))
    np.testing.assert_array_equal(a.train.offsets, b.train.offsets)
    np.testing.assert_array_equal(a.train.outcome, b.train.outcome)
    np.testing.assert_array_equal(a.val.offsets, b.val.offsets)
    sa, sb = a.caches[0].stats, b.caches[0].stats
    assert (sa.read, sa.kept, sa.dropped, sa.n_skipped) == (sb.read, sb.kept, sb.dropped, sb.n_skipped)
    assert [t[1:] for t in sa.skipped] == [t[1:] for t in sb.skipped]  # same game numbers, plies, reasons


@pytest.mark.parametrize("suffix", [".zst", ".gz", ".bz2"])
def test_compressed_exports_give_the_cache_of_the_plain_files(shared_data: Path, tmp_path: Path, suffix: str,
                                                              monkeypatch):
    names = (DUMP, API)
    plain = load_corpus(_folder(shared_data, tmp_path, names), LichessFilters(min_ply=1), cache_dir=tmp_path / "c0")
    packed = _folder(shared_data, tmp_path, names, suffix)
    assert sorted(p.name for p in packed.iterdir()) == sorted(n + suffix for n in names)
    monkeypatch.setattr(lichess, "PGN_CHUNK_BYTES", 40_000)  # many pieces cut inside the compressed stream
    got = load_corpus(packed, LichessFilters(min_ply=1), cache_dir=tmp_path / "c1")
    _same(plain, got)
    one = load_corpus(packed / (DUMP + suffix), LichessFilters(min_ply=1), cache_dir=tmp_path / "c2")
    assert one.caches[0].stats.read == 999 and one.source.slug == DUMP[: -len(".pgn")]


def test_corrupt_compressed_file_is_one_line_naming_it(shared_data: Path, tmp_path: Path):
    d = _folder(shared_data, tmp_path, (API,), ".zst")
    f = d / (API + ".zst")
    raw = bytearray(f.read_bytes())
    raw[len(raw) // 2 : len(raw) // 2 + 64] = bytes(64)
    f.write_bytes(bytes(raw))
    with pytest.raises(DataError, match=f"{f}: cannot decode it as zstd"):
        load_corpus(f, LichessFilters(min_ply=1), cache_dir=tmp_path / "c")


def _rehash(d: Path) -> None:
    manifest = json.loads((d / COMPLETE_FILE).read_text())
    manifest[META_FILE] = hashlib.sha256((d / META_FILE).read_bytes()).hexdigest()
    (d / COMPLETE_FILE).write_text(json.dumps(manifest))


def test_cache_written_by_another_parser_version_is_rebuilt(shared_data: Path, tmp_path: Path):
    """A cache that is sound in every other way (hashes match) but was written by parser version
    1 is rebuilt, with one line saying why; without a version (caches written before it was
    stored) likewise."""
    src = _folder(shared_data, tmp_path, (API,))
    first = load_corpus(src, LichessFilters(min_ply=1), cache_dir=tmp_path / "c")
    d = first.caches[0].path
    meta = json.loads((d / META_FILE).read_text())
    assert meta["parser_version"] == PARSER_VERSION >= 2
    for old in (PARSER_VERSION - 1, None):
        meta["parser_version"] = old
        if old is None:
            del meta["parser_version"]
        (d / META_FILE).write_text(json.dumps(meta))
        _rehash(d)
        warnings: list[str] = []
        again = load_corpus(src, LichessFilters(min_ply=1), cache_dir=tmp_path / "c", warn=warnings.append)
        assert again.caches[0].state == "rebuilt"
        assert len(warnings) == 1 and f"this is version {PARSER_VERSION}" in warnings[0], warnings
        meta = json.loads((d / META_FILE).read_text())
        assert meta["parser_version"] == PARSER_VERSION
    hit = load_corpus(src, LichessFilters(min_ply=1), cache_dir=tmp_path / "c")
    assert hit.caches[0].state == "hit"


_CHILD = r"""
import sys, time
from pathlib import Path
import pawn.data.lichess as lichess
from pawn.data.lichess import LichessFilters, load_corpus
lichess.PGN_CHUNK_BYTES = 20_000
real, n = lichess.parse_pgn, [0]
def slow(*a, **k):
    n[0] += 1
    if n[0] == 25:
        Path(sys.argv[2]).write_text("25 pieces parsed")
        time.sleep(600)
    return real(*a, **k)
lichess.parse_pgn = slow
load_corpus(sys.argv[1], LichessFilters(min_ply=1), cache_dir=sys.argv[3])
"""


def test_killed_cache_build_continues_where_it_stopped(shared_data: Path, tmp_path: Path, monkeypatch):
    """A real build process is killed (SIGKILL) after 24 pieces; the next build continues from the
    journal (parsing only the pieces after it) and gives the cache a build without a kill gives."""
    src = _folder(shared_data, tmp_path, (DUMP, API), ".zst")
    marker, cache = tmp_path / "marker", tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(src), str(marker), str(cache)], env=env)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None and time.monotonic() < deadline, "the build process ended early"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    partial = [p for p in cache.iterdir() if p.name.endswith(".partial")]
    assert len(partial) == 1 and (partial[0] / "journal.json").is_file()

    monkeypatch.setattr(lichess, "PGN_CHUNK_BYTES", 20_000)
    calls: list = []
    real = lichess.parse_pgn
    monkeypatch.setattr(lichess, "parse_pgn", lambda *a, **k: calls.append(1) or real(*a, **k))
    warnings: list[str] = []
    resumed = load_corpus(src, LichessFilters(min_ply=1), cache_dir=cache, warn=warnings.append)
    assert resumed.caches[0].state == "resumed" and "continuing the interrupted build" in warnings[0]
    n_resumed = len(calls)
    fresh = load_corpus(src, LichessFilters(min_ply=1), cache_dir=tmp_path / "fresh")
    assert n_resumed == len(calls) - n_resumed - 24  # the 24 journalled pieces were not parsed again
    _same(resumed, fresh)
    assert not [p for p in cache.iterdir() if p.name.endswith(".partial")]


def test_games_in_two_exports_are_counted_once(shared_data: Path, tmp_path: Path):
    """The 32 games of the 2013-01 file are also the first 32 of the 100-game file: kept once, and
    the drop is reported as ``duplicate``."""
    src = _folder(shared_data, tmp_path, (FIRST100, FIRST32))
    c = load_corpus(src, LichessFilters(min_ply=1), cache_dir=tmp_path / "c", val_games=0)
    s = c.caches[0].stats
    assert s.read == 132 and s.dropped.get("duplicate") == 32 and s.kept == 100
    assert "32 a game seen earlier in the source" in s.explain()
    alone = load_corpus(_folder(shared_data, tmp_path / "b", (FIRST100,)), LichessFilters(min_ply=1),
                        cache_dir=tmp_path / "c2", val_games=0)
    np.testing.assert_array_equal(np.array(c.train.tokens_flat), np.array(alone.train.tokens_flat))


@pytest.mark.parametrize("content", [b'{"games": [{"white": "a", "moves": "e4 e5"}]}\n', bytes(range(256)) * 8,
                                     b"PK\x03\x04\x14\x00\x00\x00\x08\x00 e4 e5"])
def test_a_file_that_is_not_pgn_says_so(tmp_path: Path, content: bytes):
    from typer.testing import CliRunner

    from pawn.cli import app

    f = tmp_path / "games.pgn"
    f.write_bytes(content)
    with pytest.raises(NotPgnFileError, match=f"{f}: not a PGN file"):
        parse_pgn(f)
    r = CliRunner().invoke(app, ["data", "info", str(f), "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 1 and f"error: {f}: not a PGN file" in r.output and "Traceback" not in r.output


def test_data_info_cache_dir(shared_data: Path, tmp_path: Path):
    from typer.testing import CliRunner

    from pawn.cli import app

    src = _folder(shared_data, tmp_path, (API,), ".gz")
    r = CliRunner().invoke(app, ["data", "info", str(src), "--cache-dir", str(tmp_path / "mine"), "--min-ply", "1"])
    assert r.exit_code == 0, r.output
    assert [p.name for p in (tmp_path / "mine").iterdir()][0].startswith("pgn.gz_train_")


def test_reason_lists_come_from_the_engine():
    """Every skip reason of the Rust enum has its report text, and the parser's reasons are the
    engine's list (it was a hand-typed copy of 6 of the 7)."""
    from pawn import _engine
    from pawn.engine.pgn import PARSE_SKIP_REASONS, SKIP_REASON_TEXT, SKIP_REASONS

    assert SKIP_REASONS == tuple(_engine.SKIP_REASONS) and len(SKIP_REASONS) == 7
    assert set(SKIP_REASONS) <= set(lichess.DROP_REASONS) and set(SKIP_REASON_TEXT) == set(SKIP_REASONS)
    assert lichess.PARSER_REASONS == PARSE_SKIP_REASONS == tuple(r for r in SKIP_REASONS if r != "too_short")
    assert lichess.DROP_REASONS["no_outcome"] == SKIP_REASON_TEXT["no_outcome"]


def test_eval_pgn_reads_compressed_files_and_folders_and_refuses_non_pgn(shared_data: Path, tmp_path: Path):
    """``pawn eval --pgn``'s reader: a .pgn.zst file and a folder of .gz/.bz2 files give the figures
    of the plain files; a JSON file named .pgn is "not a PGN file"."""
    import jax

    from pawn.config import TOY
    from pawn.evaluate.accuracy import evaluate_pgn
    from pawn.model import PAWNModel

    m = PAWNModel(TOY, jax.random.PRNGKey(1))
    kw = dict(seq_len=64, elo_edges=(0, 1500, 3000), batch_size=16)
    plain = evaluate_pgn(m, str(shared_data / "lichess" / FIRST32), **kw)
    packed = _folder(shared_data, tmp_path, (FIRST32,), ".zst") / (FIRST32 + ".zst")
    got = evaluate_pgn(m, str(packed), **kw)
    assert got["parser"] == plain["parser"] and got["bands"] == plain["bands"]
    folder = tmp_path / "mixed"
    folder.mkdir()
    for name, suffix in ((FIRST32, ".gz"), (API, ".bz2")):
        (folder / (name + suffix)).write_bytes(COMPRESS[suffix]((shared_data / "lichess" / name).read_bytes()))
    both = evaluate_pgn(m, str(folder), **kw)
    assert both["parser"]["read"] == 132
    bad = tmp_path / "report.pgn"
    bad.write_text('{"top1": 0.5}\n')
    with pytest.raises(NotPgnFileError, match=f"{bad}: not a PGN file"):
        evaluate_pgn(m, str(bad), **kw)
