"""Monthly Lichess game files from the Lichess open database, downloaded and checked.

Lichess publishes every rated standard game of a month as one zstd-compressed PGN file,
``https://database.lichess.org/standard/lichess_db_standard_rated_YYYY-MM.pgn.zst``, and the
SHA-256 sum of each in ``https://database.lichess.org/standard/sha256sums.txt`` (lines
``<64 hex digits>  <file name>``, the output of ``sha256sum``); the games are released under
CC0 (https://database.lichess.org/).

:func:`fetch_months` downloads months to a folder:

- whole (no filter): the bytes go to ``NAME.part`` (a name no PAWN reader takes for PGN), a cut
  connection is resumed with an HTTP ``Range`` request from the byte reached (also by a later run,
  which continues the ``.part`` file), the SHA-256 of the whole file is compared with the published
  sum, and only then is ``.part`` renamed to ``NAME``. A wrong sum deletes the ``.part`` file;
- filtered (``--elo-min``/``--elo-max``/``--max-games``): the download is decoded as it arrives
  (:func:`pawn.data.pgn_stream.pgn_pieces`), parsed by the engine's PGN parser, filtered by
  :class:`pawn.data.lichess.LichessFilters`, and the kept games' PGN text is written, zstd
  compressed, to a staging file renamed into place at the end
  (``lichess_db_standard_rated_YYYY-MM_elo1500-2000_max10000.pgn.zst``). The sum is checked when
  the whole file was read; a run that stops at ``max_games`` does not read the rest, and says so.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import socket
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np

from pawn.data.lichess import PGN_CHUNK_BYTES, LichessFilters, ScanStats, describe_filters
from pawn.data.pgn_stream import pgn_pieces
from pawn.engine import parse_pgn
from pawn.errors import DataError, UsageError
from pawn.fileio import atomic_output

DEFAULT_BASE_URL = "https://database.lichess.org/standard/"
"""The folder of Lichess's monthly standard rated game files and their sums."""
BASE_URL_ENV = "PAWN_LICHESS_URL"
"""Environment variable that replaces :data:`DEFAULT_BASE_URL` (a mirror, or a test server)."""
SUMS_FILE = "sha256sums.txt"
"""The file of published SHA-256 sums in the base folder."""
PART_SUFFIX = ".part"
"""Suffix of a download in progress (resumed by the next run; never read as PGN)."""
READ_BYTES = 1 << 20
"""Bytes asked of the connection per read."""

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
_SUM_LINE = re.compile(r"^([0-9a-fA-F]{64})\s+\*?(\S+)\s*$")


def month_file(month: str) -> str:
    """The Lichess file name of ``month`` (``YYYY-MM``): ``lichess_db_standard_rated_YYYY-MM.pgn.zst``."""
    return f"lichess_db_standard_rated_{month}.pgn.zst"


def parse_months(specs: list[str]) -> list[str]:
    """Months ``YYYY-MM`` from ``specs``, each a month or an inclusive range ``YYYY-MM..YYYY-MM``,
    in the order given, without repeats.

    Raises:
        UsageError: a spec that is neither (naming it), a month outside 01-12, or a range that
            runs backwards.
    """

    def one(text: str) -> tuple[int, int]:
        m = _MONTH.match(text.strip())
        if not m or not 1 <= int(m[2]) <= 12:
            raise UsageError(f"month {text!r}: expected YYYY-MM (e.g. 2013-01) or a range YYYY-MM..YYYY-MM")
        return int(m[1]), int(m[2])

    out: list[str] = []
    for spec in specs:
        a, _, b = spec.partition("..")
        lo, hi = one(a), one(b) if b else one(a)
        if hi < lo:
            raise UsageError(f"month range {spec!r} runs backwards")
        y, mo = lo
        while (y, mo) <= hi:
            name = f"{y:04d}-{mo:02d}"
            if name not in out:
                out.append(name)
            y, mo = (y + 1, 1) if mo == 12 else (y, mo + 1)
    if not out:
        raise UsageError("no month given: e.g. 2013-01, or a range 2013-01..2013-03")
    return out


def parse_sums(text: str) -> dict[str, str]:
    """File name → lower-case SHA-256 hex from a ``sha256sum`` listing (``HEX  NAME`` or
    ``HEX *NAME`` per line; other lines are ignored)."""
    sums = {}
    for line in text.splitlines():
        m = _SUM_LINE.match(line.strip())
        if m:
            sums[m[2]] = m[1].lower()
    return sums


def base_url(url: Optional[str] = None) -> str:
    """``url``, else ``$PAWN_LICHESS_URL``, else :data:`DEFAULT_BASE_URL`, ending in ``/``."""
    url = url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
    return url if url.endswith("/") else url + "/"


_NET_ERRORS = (urllib.error.URLError, http.client.HTTPException, ConnectionError, socket.timeout, TimeoutError)


def _why(e: BaseException) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        return str(e.reason)
    if isinstance(e, http.client.IncompleteRead):
        return "the connection closed early"
    return str(e) or type(e).__name__


def fetch_sums(url: str, timeout_s: float = 60.0) -> dict[str, str]:
    """The published sums at ``url + sha256sums.txt`` (:func:`parse_sums`).

    Raises:
        DataError: the list cannot be fetched (offline, HTTP error; one line naming the URL) or
            holds no sum line.
    """
    where = url + SUMS_FILE
    try:
        with urllib.request.urlopen(where, timeout=timeout_s) as r:
            text = r.read().decode("utf-8", "replace")
    except _NET_ERRORS as e:
        raise DataError(f"{where}: cannot fetch the published SHA-256 sums ({_why(e)}); offline? nothing was downloaded") from None
    sums = parse_sums(text)
    if not sums:
        raise DataError(f"{where}: no 'SHA256  FILE' line in it; nothing was downloaded")
    return sums


class DownloadCut(DataError):
    """A download stopped before its end after every retry; the message names the file, the byte
    reached and the total."""


class ResumableBody:
    """The bytes of ``url`` from byte ``start`` on, as a readable stream (``read(n)``, ``tell()``)
    that reconnects with an HTTP ``Range: bytes=N-`` request (RFC 9110 §14) when the connection
    breaks, up to ``retries`` times in a row, and feeds every byte to ``sha`` (a hashlib object).

    A server that answers a range request with the whole file (200) has the bytes before the
    position read and dropped. ``total`` (bytes) is known after the first response.

    Raises (from ``read``):
        DownloadCut: the connection broke more than ``retries`` times in a row without progress.
        DataError: an HTTP error (404: no such file) or a server that reports another size.
    """

    def __init__(self, url: str, name: str, *, start: int = 0, sha=None, retries: int = 5, timeout_s: float = 60.0,
                 backoff_s: float = 1.0, on_bytes: Optional[Callable[[int], None]] = None):
        self.url, self.name, self.pos = url, name, int(start)
        self.sha, self.retries, self.timeout_s, self.backoff_s = sha, retries, timeout_s, backoff_s
        self.on_bytes = on_bytes
        self.total: Optional[int] = None
        self.reconnects = 0
        self._resp = None
        self._done = False

    def _open(self) -> None:
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-"} if self.pos else {})
        try:
            resp = urllib.request.urlopen(req, timeout=self.timeout_s)
        except urllib.error.HTTPError as e:
            if e.code == 416 and self.pos:  # nothing after pos: the file has exactly pos bytes (or fewer)
                m = re.search(r"/(\d+)", e.headers.get("Content-Range", "") or "")
                if m and int(m[1]) == self.pos:
                    self.total, self._done = self.pos, True
                    return
                raise DataError(f"{self.url}: the server has no bytes after byte {self.pos:,} "
                                f"(its size: {m[1] if m else 'unknown'}); delete {self.name}{PART_SUFFIX} and run again") from None
            if e.code == 404:
                raise DataError(f"{self.url}: not found (HTTP 404)") from None
            raise
        skip = 0
        if resp.status == 206:
            m = re.match(r"bytes (\d+)-\d+/(\d+|\*)", resp.headers.get("Content-Range", ""))
            if not m or int(m[1]) != self.pos:
                resp.close()
                raise DataError(f"{self.url}: asked for bytes from {self.pos:,}, the server sent "
                                f"{resp.headers.get('Content-Range') or 'no Content-Range'}")
            total = int(m[2]) if m[2] != "*" else None
        else:
            skip = self.pos  # the whole file again: drop what we have
            n = resp.headers.get("Content-Length")
            total = int(n) if n and n.isdigit() else None
        if self.total is not None and total is not None and total != self.total:
            resp.close()
            raise DataError(f"{self.url}: the file changed size during the download ({self.total:,} → {total:,} bytes); "
                            f"delete {self.name}{PART_SUFFIX} and run again")
        self.total = total if total is not None else self.total
        while skip:
            got = resp.read(min(skip, READ_BYTES))
            if not got:
                raise http.client.IncompleteRead(b"")
            skip -= len(got)
        self._resp = resp

    def _connect(self) -> None:
        """Open (or reopen) the connection, retrying network errors with exponential backoff."""
        for attempt in range(self.retries + 1):
            try:
                self._open()
                return
            except _NET_ERRORS as e:
                if isinstance(e, urllib.error.HTTPError) and e.code < 500:
                    raise DataError(f"{self.url}: {_why(e)}") from None
                if attempt == self.retries:
                    raise self._cut(e) from None
                time.sleep(self.backoff_s * 2 ** attempt)

    def _cut(self, e: BaseException) -> DownloadCut:
        of = f" of {self.total:,}" if self.total is not None else ""
        return DownloadCut(f"{self.url}: the download stopped at byte {self.pos:,}{of} ({_why(e)}) after "
                           f"{self.retries} retries; run the same command again to continue from there")

    def read(self, n: int = READ_BYTES) -> bytes:
        failures = 0
        while not self._done:
            if self._resp is None:
                self._connect()
                if self._done:
                    break
            try:
                data = self._resp.read(n)
            except (*_NET_ERRORS, OSError) as e:
                data, err = b"", e
            else:
                err = None
                if data or self.total is None or self.pos >= self.total:
                    if not data:
                        self._done = True
                        break
                    self.pos += len(data)
                    if self.sha is not None:
                        self.sha.update(data)
                    if self.on_bytes is not None:
                        self.on_bytes(len(data))
                    return data
            # the connection closed before the end: reconnect from pos
            self._close_resp()
            failures += 1
            self.reconnects += 1
            if failures > self.retries:
                raise self._cut(err or http.client.IncompleteRead(b""))
            time.sleep(self.backoff_s * 2 ** (failures - 1))
        return b""

    def tell(self) -> int:
        return self.pos

    def _close_resp(self) -> None:
        if self._resp is not None:
            try:
                self._resp.close()
            except OSError:
                pass
            self._resp = None

    def close(self) -> None:
        self._close_resp()


class DownloadProgress:
    """Bytes downloaded: a rich bar (size, speed, time left) on stderr in a terminal; elsewhere
    one plain line every ``every_s`` seconds (see :func:`pawn.progress.log_every_s`)."""

    def __init__(self, label: str, total: Optional[int], done: int = 0, *, every_s: Optional[float] = None,
                 stream=None):
        from pawn.progress import is_terminal, log_every_s

        self.label, self.total, self.done = label, total, done
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = log_every_s(every_s)
        self._bar = None
        self._t0 = self._last = time.monotonic()
        self._done0 = done
        if is_terminal(self.stream):
            from rich.console import Console
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                       TransferSpeedColumn)

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                 TimeRemainingColumn(), console=Console(file=self.stream), transient=True)
            self._bar.start()
            self._task = self._bar.add_task(label, total=total, completed=done)

    def set_total(self, total: Optional[int]) -> None:
        self.total = total
        if self._bar is not None:
            self._bar.update(self._task, total=total)

    def advance(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)
            return
        now = time.monotonic()
        if self.every_s > 0 and now - self._last >= self.every_s:
            self._last = now
            rate = (self.done - self._done0) / max(now - self._t0, 1e-9)
            of = f" of {self.total / 1e6:,.1f} MB" if self.total else ""
            print(f"{self.label}: {self.done / 1e6:,.1f} MB{of}, {rate / 1e6:.2f} MB/s", file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


@dataclass
class FetchResult:
    """One month's outcome: ``path`` written (or found), ``bytes_read`` of the Lichess file this
    run, ``sum_checked`` (True: the whole file matched its published SHA-256; False: not all of
    it was read, see ``note``), ``stats`` of the games for a filtered fetch, ``existed`` when the
    file was already there, ``reconnects`` (range requests after a cut)."""

    month: str
    path: Path
    bytes_read: int = 0
    sum_checked: bool = False
    stats: Optional[ScanStats] = None
    existed: bool = False
    reconnects: int = 0
    note: str = ""

    def line(self) -> str:
        """One line for the user."""
        if self.existed:
            return f"{self.path}: already there, skipped"
        parts = [f"{self.path}"]
        if self.stats is not None:
            parts.append(f"{self.stats.kept:,} games kept ({self.stats.explain()})")
        parts.append(f"{self.bytes_read / 1e6:,.1f} MB downloaded"
                     + (f", resumed {self.reconnects}× with range requests" if self.reconnects else ""))
        parts.append("SHA-256 matches the published sum" if self.sum_checked else self.note)
        return ": ".join(parts[:2]) + ("; " if len(parts) > 2 else "") + "; ".join(parts[2:])


def filtered_name(month: str, filters: LichessFilters) -> str:
    """``lichess_db_standard_rated_YYYY-MM_elo1500-2000_max10000.pgn.zst`` (the parts that are set;
    an open Elo bound is left empty: ``elo1500-``)."""
    tags = []
    if filters.filters_elo:
        tags.append(f"elo{filters.elo_min if filters.elo_min is not None else ''}-"
                    f"{filters.elo_max if filters.elo_max is not None else ''}")
    if filters.max_games is not None:
        tags.append(f"max{filters.max_games}")
    return f"lichess_db_standard_rated_{month}_{'_'.join(tags)}.pgn.zst"


_BOUNDARY = re.compile(rb"\n[ \t\r]*\n(?=\[)")


def game_texts(data: bytes) -> list[bytes]:
    """The games of PGN text ``data`` (whole games, as :func:`pgn_pieces` cuts them), each game's
    bytes with surrounding blank lines stripped: a game starts at a tag line after a blank line
    that follows movetext (blank lines after tag lines do not start a game)."""
    starts = [0]
    for m in _BOUNDARY.finditer(data):
        line_start = data.rfind(b"\n", 0, m.start()) + 1
        if data[line_start:line_start + 1] != b"[":
            starts.append(m.end())
    starts.append(len(data))
    return [t for t in (data[a:b].strip(b"\r\n\t ") for a, b in zip(starts, starts[1:])) if t]


def _kept_texts(data: bytes, filters: LichessFilters, stats: ScanStats, left: Optional[int]) -> list[bytes]:
    """The PGN texts in ``data`` that the engine's parser reads and ``filters`` keep (Elo band;
    at most ``left``), counted into ``stats``."""
    texts = game_texts(data)
    g = parse_pgn(data, 512, 0)
    if int(g.counts["read"]) == len(texts):
        rows = np.arange(len(g))
        index = g.game_index - 1
        white, black, lengths = g.white_elo, g.black_elo, g.lengths.astype(np.int64)
        counts = g.counts
    else:  # a game layout the split above reads otherwise: parse each text alone
        rows_l, index_l, w, b, ln = [], [], [], [], []
        counts = {"read": len(texts)}
        for i, t in enumerate(texts):
            gi = parse_pgn(t, 512, 0)
            for k, v in gi.counts.items():
                if k not in ("read",):
                    counts[k] = counts.get(k, 0) + int(v)
            if len(gi):
                rows_l.append(len(rows_l))
                index_l.append(i)
                w.append(int(gi.white_elo[0]))
                b.append(int(gi.black_elo[0]))
                ln.append(int(gi.lengths[0]))
        rows, index = np.asarray(rows_l, np.int64), np.asarray(index_l, np.int64)
        white, black, lengths = np.asarray(w, np.uint16), np.asarray(b, np.uint16), np.asarray(ln, np.int64)
    stats.read += int(counts["read"])
    for reason, n in counts.items():
        if reason not in ("read", "kept"):
            stats.drop(reason, n)
    keep = np.nonzero(filters.keep(white, black, lengths, stats))[0] if rows.size else rows
    if left is not None:
        keep = keep[:left]
    stats.see_kept(white[keep], black[keep], lengths[keep])
    return [texts[int(i)] for i in index[keep]]


def _label(name: str) -> str:
    """``lichess 2024-01`` for a month file's name: the progress bar's label (the whole name left
    the bar too little room in 80 columns)."""
    return "lichess " + name.removeprefix("lichess_db_standard_rated_").removesuffix(".pgn.zst")


def _fetch_whole(url: str, name: str, out_dir: Path, expected: str, *, retries: int, timeout_s: float,
                 backoff_s: float, progress: Callable[..., DownloadProgress]) -> FetchResult:
    final, part = out_dir / name, out_dir / (name + PART_SUFFIX)
    start = part.stat().st_size if part.exists() else 0
    sha = hashlib.sha256()
    if start:
        with open(part, "rb") as f:
            while chunk := f.read(8 << 20):
                sha.update(chunk)
    bar = progress(_label(name), None, start)
    body = ResumableBody(url, name, start=start, sha=sha, retries=retries, timeout_s=timeout_s, backoff_s=backoff_s,
                         on_bytes=bar.advance)
    try:
        with open(part, "ab") as f:
            while True:
                data = body.read(READ_BYTES)
                if body.total is not None and bar.total is None:
                    bar.set_total(body.total)
                if not data:
                    break
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
    finally:
        body.close()
        bar.close()
    got = sha.hexdigest()
    if got != expected:
        part.unlink(missing_ok=True)
        raise DataError(f"{url}: its SHA-256 is {got}, Lichess publishes {expected} for it; the download "
                        f"({body.pos:,} bytes) was deleted, run the same command again to download it anew")
    os.replace(part, final)
    return FetchResult("", final, body.pos - start, True, reconnects=body.reconnects)


def _fetch_filtered(url: str, name: str, out: Path, expected: str, filters: LichessFilters, *, retries: int,
                    timeout_s: float, backoff_s: float, progress: Callable[..., DownloadProgress],
                    chunk_bytes: int = PGN_CHUNK_BYTES) -> FetchResult:
    import zstandard

    sha = hashlib.sha256()
    bar = progress(_label(name), None, 0)
    body = ResumableBody(url, name, sha=sha, retries=retries, timeout_s=timeout_s, backoff_s=backoff_s,
                         on_bytes=bar.advance)
    stats = ScanStats()
    left = filters.max_games
    try:
        with atomic_output(out) as tmp:
            pieces = pgn_pieces(name, chunk_bytes, raw=body)
            try:
                with open(tmp, "wb") as fh, zstandard.ZstdCompressor(level=10).stream_writer(fh, closefd=False) as w:
                    for piece in pieces:
                        if body.total is not None and bar.total is None:
                            bar.set_total(body.total)
                        for text in _kept_texts(piece.data, filters, stats, left):
                            w.write(text + b"\n\n")
                        if left is not None:
                            left = filters.max_games - stats.kept
                            if left <= 0:
                                break
            finally:
                pieces.close()  # stops the reading thread before the body is looked at
            whole = body._done or (body.total is not None and body.pos >= body.total and body.read(1) == b"")
            if whole and sha.hexdigest() != expected:
                raise DataError(f"{url}: its SHA-256 is {sha.hexdigest()}, Lichess publishes {expected} for it; "
                                f"nothing was written, run the same command again")
            if stats.kept == 0:
                raise DataError(f"{url}: no game passes the filters {describe_filters(filters)} ({stats.explain()}); "
                                "nothing was written")
    finally:
        body.close()
        bar.close()
    note = "" if whole else (f"SHA-256 not checked: the {filters.max_games:,} games were found in the first "
                             f"{body.pos:,} bytes" + (f" of {body.total:,}" if body.total else "") + ", the rest was not downloaded")
    return FetchResult("", out, body.pos, whole, stats=stats, reconnects=body.reconnects, note=note)


def fetch_months(months: list[str], out_dir: str | os.PathLike, *, filters: Optional[LichessFilters] = None,
                 url: Optional[str] = None, retries: int = 5, timeout_s: float = 60.0, backoff_s: float = 1.0,
                 progress: Optional[Callable[..., DownloadProgress]] = None,
                 chunk_bytes: int = PGN_CHUNK_BYTES) -> Iterator[FetchResult]:
    """Download (and check, and optionally filter) each month of ``months`` into ``out_dir``; see
    the module docstring. Yields one :class:`FetchResult` per month, in order.

    Args:
        months: ``YYYY-MM`` names (:func:`parse_months`).
        out_dir: the folder (created); a folder that ``--data`` reads as a PGN source afterwards.
        filters: Elo band and ``max_games`` (per month) applied while streaming; None: the whole file.
        url: the base folder URL (:func:`base_url`).
        retries: reconnections in a row (with ``Range``) after a cut before giving up.
        timeout_s: seconds a connection may stay silent.
        backoff_s: seconds before the first retry (doubled each time).
        progress: ``(label, total_bytes, done_bytes) -> DownloadProgress`` (default: :class:`DownloadProgress`).
        chunk_bytes: decompressed PGN bytes parsed at a time when filtering (the reader's piece
            size); ``max_games`` is checked after each piece, so the download stops within one.

    Raises:
        DataError: the sums cannot be fetched (offline), a month is not in them, a download
            stops after every retry (:class:`DownloadCut`; a whole-file download keeps its
            ``.part`` to continue), a wrong SHA-256 (nothing is left under the final name), or
            no game passes the filters.
    """
    root = base_url(url)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    progress = progress or DownloadProgress
    sums = fetch_sums(root, timeout_s)
    for month in months:
        name = month_file(month)
        if name not in sums:
            listed = sorted(m[0] for m in (re.findall(r"rated_(\d{4}-\d{2})\.pgn\.zst$", n) for n in sums) if m)
            span = f" (it lists {listed[0]} to {listed[-1]})" if listed else ""
            raise DataError(f"{name}: not in {root}{SUMS_FILE}{span}; Lichess publishes a month after it ends")
        target = out / (filtered_name(month, filters) if filters is not None else name)
        if target.exists():
            yield FetchResult(month, target, existed=True)
            continue
        kw = dict(retries=retries, timeout_s=timeout_s, backoff_s=backoff_s, progress=progress)
        if filters is None:
            r = _fetch_whole(root + name, name, out, sums[name], **kw)
        else:
            r = _fetch_filtered(root + name, name, target, sums[name], filters, chunk_bytes=chunk_bytes, **kw)
        r.month = month
        yield r
