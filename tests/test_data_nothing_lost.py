"""Nothing lost on the data path, through the real CLI in a child process (issue 41):

- a ``.pgn.zst`` cut short (a download stopped half way, or missing its last bytes) is refused by
  ``pawn data info`` (the cache build) and ``pawn eval --pgn``, naming the file and the byte
  offset, and nothing is cached from it; complete multi-frame and concatenated files read fully;
- a disk that fills while the game cache is built (while scanning, or at the very end) is one line
  naming the folder and its free space, exit 1, and the partial build is kept: once there is room,
  the next run continues it and gives the cache a build with room all along gives.

The full disk is a small real tmpfs where this process may mount one (root); elsewhere the child
process's writes to one cache file fail with ENOSPC (``tests/_enospc/sitecustomize.py``).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import zstandard

import pawn.data.lichess as lichess
from pawn.data.cache import COMPLETE_FILE, JOURNAL_FILE, CacheWriter, open_cache
from pawn.data.lichess import LichessFilters, load_corpus
from pawn.data.pgn_stream import pgn_pieces, read_pgn_bytes
from pawn.errors import DataError

DUMP = "lichess_db_2021-10-01_first1000_kdave-pgn-toys.pgn"  # 999 games
API = "lichess_api_export_2025-06_100games_rust-pgn-reader-legal.pgn"  # 100 games
ENOSPC_DIR = Path(__file__).parent / "_enospc"


def _pawn(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "JAX_PLATFORMS": "cpu", **(env or {})}
    return subprocess.run([sys.executable, "-m", "pawn.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def _zst(raw: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(raw)


def _frames(raw: bytes, n: int) -> bytes:
    """``raw`` as one zstd stream of ``n`` frames (a frame ended every len/n bytes)."""
    import io

    buf = io.BytesIO()
    w = zstandard.ZstdCompressor(level=3).stream_writer(buf, closefd=False)
    step = -(-len(raw) // n)
    for i in range(0, len(raw), step):
        w.write(raw[i:i + step])
        w.flush(zstandard.FLUSH_FRAME)
    w.close()
    return buf.getvalue()


def _skippable(payload: bytes) -> bytes:
    """A zstd skippable frame (magic 0x184D2A50, little-endian size, payload), as pzstd writes."""
    return (0x184D2A50).to_bytes(4, "little") + len(payload).to_bytes(4, "little") + payload


def _cache_entries(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


# ------------------------------------------------------------------------------------------- cut .zst
@pytest.mark.parametrize("cut", ["half", "last 3 bytes"])
def test_cut_zst_is_refused_by_data_info_and_nothing_is_cached(shared_data: Path, tmp_path: Path, cut: str):
    whole = _zst((shared_data / "lichess" / DUMP).read_bytes())
    size = len(whole) // 2 if cut == "half" else len(whole) - 3
    f = tmp_path / "lichess_db_standard_rated_2021-10.pgn.zst"
    f.write_bytes(whole[:size])
    cache = tmp_path / "cache"
    r = _pawn("data", "info", str(f), "--cache-dir", str(cache), "--min-ply", "1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.strip() == (f"error: {f}: ends inside a zstd frame: the frame that starts at byte 0 is cut off "
                                f"at byte {size:,}, the end of the file (an incomplete download? `zstd -t` tests a "
                                "file)"), r.stderr
    assert _cache_entries(cache) == []  # no cache, complete or partial
    # the same again: still refused (nothing was cached that a second run could pick up)
    r = _pawn("data", "info", str(f), "--cache-dir", str(cache), "--min-ply", "1")
    assert r.returncode == 1 and "ends inside a zstd frame" in r.stderr and _cache_entries(cache) == []


def test_cut_zst_after_journalled_pieces_leaves_no_partial_build(shared_data: Path, tmp_path: Path, monkeypatch):
    """Read in many pieces (each journalled), a cut file still fails at its end and its partial
    build (which holds the games before the cut) is removed; the frame cut is the second one."""
    raw = (shared_data / "lichess" / DUMP).read_bytes()
    two = _zst(raw[: len(raw) // 2]) + _zst(raw[len(raw) // 2:])
    first = len(_zst(raw[: len(raw) // 2]))
    f = tmp_path / "cut.pgn.zst"
    f.write_bytes(two[:-100])
    monkeypatch.setattr(lichess, "PGN_CHUNK_BYTES", 40_000)
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match=f"frame that starts at byte {first:,} is cut off at byte {len(two) - 100:,}"):
        load_corpus(f, LichessFilters(min_ply=1), cache_dir=cache)
    assert _cache_entries(cache) == []
    with pytest.raises(DataError, match="ends inside a zstd frame"):
        list(pgn_pieces(f, 40_000))
    with pytest.raises(DataError, match="ends inside a zstd frame"):
        read_pgn_bytes(f)


def test_eval_pgn_refuses_a_cut_zst(shared_data: Path, tmp_path: Path, tiny_backbone: Path):
    whole = _zst((shared_data / "lichess" / API).read_bytes())
    f = tmp_path / "games.pgn.zst"
    f.write_bytes(whole[:-3])
    r = _pawn("eval", str(tiny_backbone), "--pgn", str(f), "--pgn-only", "--json", str(tmp_path / "e.json"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"error: {f}: ends inside a zstd frame" in r.stderr and f"cut off at byte {len(whole) - 3:,}" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "e.json").exists()


def test_a_plain_pgn_named_zst_is_named_at_byte_0_and_a_damaged_frame_by_its_start(shared_data: Path, tmp_path: Path):
    """A file that is no zstd at all is refused at byte 0, not at the 256 KiB the decoder had read
    when it gave up (the old message); a damaged second frame is named by where it starts."""
    text = (shared_data / "lichess" / DUMP).read_bytes()
    assert len(text) > 300_000  # longer than one decoder step
    f = tmp_path / "games.pgn.zst"
    f.write_bytes(text)
    r = _pawn("data", "info", str(f), "--cache-dir", str(tmp_path / "c"), "--min-ply", "1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"error: {f}: cannot decode it as zstd: it does not start with the zstd magic number (28 b5 2f fd at byte 0; " \
           f"it starts with 5b 45 76 65): not a zstd file" in r.stderr, r.stderr
    assert "262,144" not in r.stderr and "Traceback" not in r.stderr and _cache_entries(tmp_path / "c") == []

    half = len(text) // 2
    one, two = zstandard.ZstdCompressor().compress(text[:half]), bytearray(zstandard.ZstdCompressor().compress(text[half:]))
    two[len(two) // 2: len(two) // 2 + 64] = bytes(64)
    g = tmp_path / "two.pgn.zst"
    g.write_bytes(one + bytes(two))
    r = _pawn("data", "info", str(g), "--cache-dir", str(tmp_path / "c"), "--min-ply", "1")
    assert r.returncode == 1 and f"error: {g}: cannot decode it as zstd: the frame that starts at byte {len(one):,} is damaged" \
        in r.stderr, r.stderr


@pytest.mark.parametrize("suffix", [".gz", ".bz2"])
def test_cut_gz_and_bz2_are_refused_too(shared_data: Path, tmp_path: Path, suffix: str):
    import bz2
    import gzip

    whole = (gzip.compress if suffix == ".gz" else bz2.compress)((shared_data / "lichess" / DUMP).read_bytes())
    f = tmp_path / f"games.pgn{suffix}"
    f.write_bytes(whole[: len(whole) // 2])
    r = _pawn("data", "info", str(f), "--cache-dir", str(tmp_path / "c"), "--min-ply", "1")
    assert r.returncode == 1 and f"error: {f}: cannot decode it as" in r.stderr, r.stderr
    assert _cache_entries(tmp_path / "c") == []


def test_multi_frame_and_concatenated_zst_read_fully(shared_data: Path, tmp_path: Path):
    """A file of 7 frames, and two files concatenated (``cat a.zst b.zst``) with a skippable frame
    between, give every game and the same cache as the plain files."""
    a, b = ((shared_data / "lichess" / n).read_bytes() for n in (DUMP, API))
    plain = tmp_path / "plain.pgn"
    plain.write_bytes(a + b"\n" + b)
    many = tmp_path / "frames.pgn.zst"
    many.write_bytes(_frames(plain.read_bytes(), 7))
    cat = tmp_path / "cat.pgn.zst"
    cat.write_bytes(_zst(a + b"\n") + _skippable(b"pawn") + _zst(b))
    assert read_pgn_bytes(many) == read_pgn_bytes(cat) == plain.read_bytes()
    want = load_corpus(plain, LichessFilters(min_ply=1), cache_dir=tmp_path / "c0")
    assert want.caches[0].stats.read == 1099
    for f in (many, cat):
        r = _pawn("data", "info", str(f), "--cache-dir", str(tmp_path / "c1"), "--min-ply", "1")
        assert r.returncode == 0, r.stderr
        got = load_corpus(f, LichessFilters(min_ply=1), cache_dir=tmp_path / "c1")
        assert got.caches[0].state == "hit" and got.caches[0].stats.read == 1099
        np.testing.assert_array_equal(np.asarray(got.train.tokens_flat), np.asarray(want.train.tokens_flat))
        np.testing.assert_array_equal(got.train.offsets, want.train.offsets)


# ------------------------------------------------------------------------------------------- game numbers
def test_a_comment_only_forfeit_game_is_one_game(shared_data: Path, tmp_path: Path):
    """A forfeit without a move (its movetext a comment, a blank line, then ``0-1``) before the
    999 games of the dump: 1,000 games read (the forfeit kept, with 0 plies), and the dump's
    first skipped game (its game 43) is game 44, not 45 after a phantom game of the bare ``0-1``."""
    raw = (shared_data / "lichess" / DUMP).read_text()
    tags = raw[: raw.index("\n\n") + 2].replace("NRafdioG", "Forfeit0").replace('[Result "1-0"]', '[Result "0-1"]')
    f = tmp_path / "with_forfeit.pgn"
    f.write_text(tags + "{ White forfeits on time }\n\n0-1\n\n" + raw)
    r = _pawn("data", "info", str(f), "--cache-dir", str(tmp_path / "c"), "--min-ply", "1", env={"COLUMNS": "400"})
    assert r.returncode == 0, r.stderr
    assert "games read / kept │ 1,000 / 983" in " ".join(r.stdout.split()), r.stdout
    assert f"{f}: game 44, ply 1: no_outcome" in r.stdout, r.stdout
    alone = _pawn("data", "info", str(shared_data / "lichess" / DUMP), "--cache-dir", str(tmp_path / "c"), "--min-ply",
                  "1", env={"COLUMNS": "400"})
    assert f"{DUMP}: game 43, ply 1: no_outcome" in alone.stdout and "999 / 982" in alone.stdout


# ------------------------------------------------------------------------------------------- full disk
def _can_mount() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("mount") is not None


@contextmanager
def _tmpfs(d: Path, size: int):
    d.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], check=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def _fill(d: Path, leave: int) -> Path:
    """Write a filler file in ``d`` so that about ``leave`` bytes stay free."""
    filler = d / "filler"
    free = shutil.disk_usage(d).free
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def _lichess_folder(shared_data: Path, tmp_path: Path) -> Path:
    """The shared Lichess files (7 files, 7,321 games) as .pgn.zst: a build of several journalled pieces."""
    d = tmp_path / "lichess"
    d.mkdir()
    for f in sorted((shared_data / "lichess").glob("*.pgn")):
        (d / (f.name + ".zst")).write_bytes(_zst(f.read_bytes()))
    return d


def _full_disk_line(stderr: str, cache: Path, why: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0].startswith(f"error: game cache {cache}: cannot write it ({why}; ") and " bytes free there)" in lines[0]


def _assert_same_cache(a: Path, b: Path) -> None:
    ga, gb = open_cache(a), open_cache(b)
    np.testing.assert_array_equal(np.asarray(ga.tokens_flat), np.asarray(gb.tokens_flat))
    np.testing.assert_array_equal(ga.offsets, gb.offsets)
    np.testing.assert_array_equal(ga.outcome, gb.outcome)
    np.testing.assert_array_equal(ga.ids, gb.ids)
    assert ga.meta["stats"] == gb.meta["stats"]


def _build(src: Path, cache: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return _pawn("data", "info", str(src), "--cache-dir", str(cache), "--min-ply", "1", env=env)


def test_disk_full_while_scanning_keeps_the_partial_build(shared_data: Path, tmp_path: Path):
    src = _lichess_folder(shared_data, tmp_path)
    ref = tmp_path / "ref"
    assert _build(src, ref).returncode == 0
    (key,) = [p.name for p in ref.iterdir()]
    tokens = (ref / key / "tokens_flat.bin").stat().st_size
    if _can_mount():
        disk = _tmpfs(tmp_path / "disk", 4 << 20)
    else:
        disk = _no_mount(tmp_path / "disk")
    with disk as d:
        cache = d / "cache"
        if _can_mount():
            filler, env, why = _fill(d, tokens // 2), None, "No space left on device"
        else:
            filler, env, why = None, {"PAWN_TEST_ENOSPC": f"tokens_flat.bin@{tokens // 2}"}, os.strerror(errno.ENOSPC)
        r = _build(src, cache, _with_enospc(env))
        assert r.returncode == 1, r.stdout + r.stderr
        _full_disk_line(r.stderr, cache, why)
        partial = cache / f"{key}.partial"
        assert f"the partial build {partial} is kept: make room and run again to continue it" in r.stderr
        journal = json.loads((partial / JOURNAL_FILE).read_text())
        read_before = journal["state"]["stats"]["read"]
        assert 0 < read_before < 7321  # it stopped part way, with games journalled
        if filler is not None:
            filler.unlink()  # room made
        r = _build(src, cache)
        assert r.returncode == 0, r.stderr
        assert f"continuing the interrupted build at game {read_before:,}" in r.stderr
        _assert_same_cache(cache / key, ref / key)
        assert not partial.exists()


def test_disk_full_at_the_end_keeps_the_scanned_build(shared_data: Path, tmp_path: Path, monkeypatch):
    """The scan fits; writing the index (tmpfs) or meta.json (injected) at the end does not. The
    journal then holds the whole scan, and the next run only writes the end."""
    src = shared_data / "lichess" / DUMP
    ref = tmp_path / "ref"
    assert _build(src, ref).returncode == 0
    (key,) = [p.name for p in ref.iterdir()]
    with (_tmpfs(tmp_path / "disk", 2 << 20) if _can_mount() else _no_mount(tmp_path / "disk")) as d:
        cache = d / "cache"
        if _can_mount():
            # the room a scan takes: a build stopped just before its end, in this tmpfs
            def stop(self, meta):
                raise KeyboardInterrupt

            monkeypatch.setattr(CacheWriter, "finish", stop)
            used0 = shutil.disk_usage(d).used
            with pytest.raises(KeyboardInterrupt):
                load_corpus(src, LichessFilters(min_ply=1), cache_dir=d / "probe")
            scan_bytes = shutil.disk_usage(d).used - used0
            shutil.rmtree(d / "probe")
            monkeypatch.undo()
            index = (ref / key / "index.safetensors").stat().st_size
            assert index > 3 * 4096  # the index cannot fit in what is left
            filler, env, why = _fill(d, scan_bytes + 4096), None, "No space left on device"
        else:
            filler, env, why = None, {"PAWN_TEST_ENOSPC": "meta.json"}, os.strerror(errno.ENOSPC)
        r = _build(src, cache, _with_enospc(env))
        assert r.returncode == 1, r.stdout + r.stderr
        _full_disk_line(r.stderr, cache, why)
        partial = cache / f"{key}.partial"
        assert "is kept: make room and run again to continue it" in r.stderr
        journal = json.loads((partial / JOURNAL_FILE).read_text())
        assert journal["state"]["stats"]["read"] == 999  # the whole file was scanned before the disk filled
        assert not (cache / key).exists() and not (partial / COMPLETE_FILE).exists()
        if filler is not None:
            filler.unlink()
        r = _build(src, cache)
        assert r.returncode == 0, r.stderr
        assert "continuing the interrupted build at game 999" in r.stderr
        _assert_same_cache(cache / key, ref / key)


@contextmanager
def _no_mount(d: Path):
    d.mkdir(parents=True, exist_ok=True)
    yield d


def _with_enospc(env: dict | None) -> dict | None:
    if env is None:
        return None
    return {**env, "PYTHONPATH": os.pathsep.join([str(ENOSPC_DIR), *sys.path])}


# ------------------------------------------------------------------------------------ 0-byte archive
@pytest.mark.parametrize("suffix", [".zst", ".gz", ".bz2"])
def test_a_zero_byte_archive_in_a_folder_of_months_is_refused_by_name(shared_data: Path, tmp_path: Path, suffix: str):
    """A month that failed to download at byte 0 is no archive (``zstd -t``/``gzip -t``/``bzip2 -t``
    refuse it): ``pawn data info`` on the folder names it and caches nothing, instead of reading it
    as a month without games."""
    d = tmp_path / "months"
    d.mkdir()
    (d / "lichess_db_standard_rated_2021-09.pgn.zst").write_bytes(_zst((shared_data / "lichess" / DUMP).read_bytes()))
    empty = d / f"lichess_db_standard_rated_2021-10.pgn{suffix}"
    empty.write_bytes(b"")
    cache = tmp_path / "cache"
    r = _pawn("data", "info", str(d), "--cache-dir", str(cache), "--min-ply", "1")
    assert r.returncode == 1, r.stdout + r.stderr
    codec = {".zst": "zstd", ".gz": "gzip", ".bz2": "bzip2"}[suffix]
    assert r.stderr.strip() == (f"error: {empty}: empty (0 bytes): not a {codec} file, whatever its name (a download "
                                f"that failed at its start? `{codec} -t` tests a file)"), r.stderr
    assert _cache_entries(cache) == []
    # the same file read alone (pawn eval --pgn, read_pgn_bytes) is refused the same way
    with pytest.raises(DataError, match=r"empty \(0 bytes\)"):
        read_pgn_bytes(empty)
