"""`pawn data fetch` against a loopback HTTP server that serves a real Lichess month file (real
games from the shared data, zstd compressed as Lichess publishes them) and its sums list: a cut
connection resumed with a range request, a later run continuing a `.part` file, a wrong sum, no
server at all, and the games filtered while streaming read back by `pawn data info` and the reader."""

from __future__ import annotations

import hashlib
import http.server
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

MONTH = "2021-10"
NAME = f"lichess_db_standard_rated_{MONTH}.pgn.zst"
SOURCE = "lichess/lichess_db_2021-10-01_first1000_kdave-pgn-toys.pgn"


class LichessMirror:
    """A loopback server with Lichess's layout: ``/standard/NAME`` (honouring ``Range: bytes=N-``
    with 206 / 416) and ``/standard/sha256sums.txt``. ``cuts`` holds byte offsets: each response
    of the month file stops (the connection closed) at the next one it passes, once."""

    def __init__(self, data: bytes, sums: str):
        self.data, self.sums, self.cuts, self.requests = data, sums, [], []
        mirror = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                rng = self.headers.get("Range")
                mirror.requests.append((self.path, rng))
                if self.path == "/standard/sha256sums.txt":
                    body = mirror.sums.encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if self.path != f"/standard/{NAME}":
                    self.send_error(404)
                    return
                total = len(mirror.data)
                start = int(re.match(r"bytes=(\d+)-", rng)[1]) if rng else 0
                if start >= total:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{total}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206 if rng else 200)
                if rng:
                    self.send_header("Content-Range", f"bytes {start}-{total - 1}/{total}")
                self.send_header("Content-Length", str(total - start))
                self.end_headers()
                cut = next((c for c in mirror.cuts if c > start), None)
                if cut is not None:
                    mirror.cuts.remove(cut)
                    self.wfile.write(mirror.data[start:cut])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.wfile.write(mirror.data[start:])

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/standard/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def ranges(self) -> list[str]:
        return [r for p, r in self.requests if p.endswith(NAME) and r]


@pytest.fixture(scope="module")
def month_bytes(shared_data: Path) -> bytes:
    """A real `.pgn.zst` month: 999 games of Lichess's 2021-10 dump, in three zstd frames."""
    import zstandard

    text = (shared_data / SOURCE).read_bytes()
    third = [m.start() for m in re.finditer(rb"\n\n\[Event ", text)]
    a, b = third[len(third) // 3] + 2, third[2 * len(third) // 3] + 2
    c = zstandard.ZstdCompressor(level=3)
    return c.compress(text[:a]) + c.compress(text[a:b]) + c.compress(text[b:])


def _sums(data: bytes) -> str:
    other = "0" * 64 + "  lichess_db_standard_rated_2013-01.pgn.zst\n"
    return other + f"{hashlib.sha256(data).hexdigest()}  {NAME}\n"


def _fetch(url: str, out: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "pawn.cli", "data", "fetch", MONTH, "--out", str(out),
                           "--base-url", url, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_a_cut_connection_is_resumed_with_a_range_request_and_the_file_is_the_published_one(month_bytes, tmp_path):
    with LichessMirror(month_bytes, _sums(month_bytes)) as m:
        m.cuts = [100_000, 250_000]
        r = _fetch(m.url, tmp_path, "--retries", "3", env={"PAWN_LOG_EVERY_S": "0.5"})
    assert r.returncode == 0, r.stderr
    # not a terminal: plain progress lines (the first after the 1 s wait before the first retry)
    assert re.search(rf"^lichess {MONTH}: 0\.\d MB of {len(month_bytes) / 1e6:,.1f} MB, [\d.]+ MB/s$", r.stderr, re.M), r.stderr
    assert m.ranges() == ["bytes=100000-", "bytes=250000-"]
    assert (tmp_path / NAME).read_bytes() == month_bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == [NAME]
    assert "resumed 2× with range requests" in r.stdout and "SHA-256 matches the published sum" in r.stdout


def test_a_download_given_up_leaves_a_part_file_that_the_next_run_continues(month_bytes, tmp_path):
    with LichessMirror(month_bytes, _sums(month_bytes)) as m:
        m.cuts = [123_456]
        first = _fetch(m.url, tmp_path, "--retries", "0")
        assert first.returncode == 1
        lines = first.stderr.strip().splitlines()
        assert len(lines) == 1 and "stopped at byte 123,456 of" in lines[0] and "run the same command again" in lines[0]
        assert not (tmp_path / NAME).exists()  # nothing under the final name
        assert (tmp_path / (NAME + ".part")).read_bytes() == month_bytes[:123_456]
        second = _fetch(m.url, tmp_path)
    assert second.returncode == 0, second.stderr
    assert m.ranges() == ["bytes=123456-"]
    assert (tmp_path / NAME).read_bytes() == month_bytes
    assert not (tmp_path / (NAME + ".part")).exists()
    assert f"{(len(month_bytes) - 123_456) / 1e6:,.1f} MB downloaded" in second.stdout


def test_a_wrong_sum_is_one_line_and_leaves_nothing(month_bytes, tmp_path):
    wrong = _sums(month_bytes[:-1] + b"\x00")
    with LichessMirror(month_bytes, wrong) as m:
        r = _fetch(m.url, tmp_path)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"its SHA-256 is {hashlib.sha256(month_bytes).hexdigest()}" in lines[0]
    assert list(tmp_path.iterdir()) == []
    # the filtered path refuses the same way: no staging file, no output
    with LichessMirror(month_bytes, wrong) as m:
        r = _fetch(m.url, tmp_path, "--elo-min", "1500")
    assert r.returncode == 1 and "SHA-256" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_offline_is_one_line_and_a_month_not_published_names_the_list(month_bytes, tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = _fetch(f"http://127.0.0.1:{port}/standard/", tmp_path / "out")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert "cannot fetch the published SHA-256 sums" in r.stderr and "offline?" in r.stderr
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    with LichessMirror(month_bytes, _sums(month_bytes)) as m:
        r = subprocess.run([sys.executable, "-m", "pawn.cli", "data", "fetch", "2030-01", "--out", str(tmp_path / "o"),
                            "--base-url", m.url], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "lichess_db_standard_rated_2030-01.pgn.zst: not in" in r.stderr
    assert "it lists 2013-01 to 2021-10" in r.stderr


def test_games_filtered_while_streaming_are_the_readers_own_selection(month_bytes, tmp_path):
    from pawn.data.lichess import LichessFilters, ScanStats, lichess_ids, scan_pgn
    from pawn.data.pgn_stream import read_pgn_bytes

    with LichessMirror(month_bytes, _sums(month_bytes)) as m:
        m.cuts = [200_000]  # the decoder goes on across a resumed range
        r = _fetch(m.url, tmp_path / "f", "--elo-min", "1800", "--elo-max", "2400", "--max-games", "150")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "f" / f"lichess_db_standard_rated_{MONTH}_elo1800-2400_max150.pgn.zst"
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]
    assert m.ranges() == ["bytes=200000-"]

    # what the reader keeps from the original with the same filters, game for game
    src = tmp_path / "orig.pgn.zst"
    src.write_bytes(month_bytes)
    want = [c for c in scan_pgn((str(src),), LichessFilters(1800, 2400, 0, 150), ScanStats())]
    got = [c for c in scan_pgn((str(out),), LichessFilters(min_ply=0), ScanStats())]
    ids = lambda chunks: [i for c in chunks for i in lichess_ids(c.pgn.header("site"))[c.rows].tolist()]  # noqa: E731
    assert len(ids(want)) == 150 and ids(got) == ids(want)
    assert read_pgn_bytes(out).count(b"[Event ") == 150

    info = subprocess.run([sys.executable, "-m", "pawn.cli", "data", "info", str(out.parent), "--min-ply", "0",
                           "--val-games", "0", "--cache-dir", str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=120, env={**__import__("os").environ, "COLUMNS": "200"})
    assert info.returncode == 0, info.stderr
    assert re.search(r"games read / kept\s*│\s*150 / 150", info.stdout), info.stdout
    lo, hi = map(int, re.search(r"Elo range \(kept\)\s*│\s*(\d+)–(\d+)", info.stdout).groups())
    assert 1800 <= lo and hi < 2400


def test_max_games_stops_the_download_and_says_the_sum_was_not_checked(month_bytes, tmp_path):
    """With --max-games reached in the first pieces the rest is not downloaded: fewer bytes than the
    file, and the result says the SHA-256 was not checked (it needs the whole file)."""
    from pawn.data.lichess import LichessFilters
    from pawn.data.lichess_fetch import fetch_months
    from pawn.data.pgn_stream import read_pgn_bytes

    with LichessMirror(month_bytes, _sums(month_bytes)) as m:
        [res] = fetch_months([MONTH], tmp_path, filters=LichessFilters(min_ply=0, max_games=40), url=m.url,
                             chunk_bytes=64 << 10, progress=lambda *a: _Quiet())
    assert res.stats.kept == 40 and read_pgn_bytes(res.path).count(b"[Event ") == 40
    assert 0 < res.bytes_read < len(month_bytes) and not res.sum_checked
    assert res.line().endswith(f"SHA-256 not checked: the 40 games were found in the first {res.bytes_read:,} bytes "
                               f"of {len(month_bytes):,}, the rest was not downloaded")


class _Quiet:
    """A progress display that shows nothing."""

    total = None

    def set_total(self, total):
        self.total = total

    def advance(self, n):
        pass

    def close(self):
        pass
