"""PGN files as a stream of bytes pieces cut at game boundaries: plain ``.pgn`` and the compressed
exports Lichess publishes (``.pgn.zst``; also ``.gz`` and ``.bz2``), decoded with well-kept
decoders (``zstandard``, the standard library's ``gzip`` and ``bz2``) as a stream, never whole.

Memory is bounded by the piece size (``chunk_bytes`` of decompressed PGN, plus the game that
straddles a cut), whatever the file's size. A piece is read (and decompressed) in a background
thread while the previous one is parsed, so decoding overlaps the Rust parser, which releases
the GIL. Each piece records its decompressed start offset, so a build that stopped can continue
at the next piece (:func:`pgn_pieces` ``start``): a plain file seeks there, a compressed one is
decoded up to it and the bytes dropped (decoding is far faster than parsing).
"""

from __future__ import annotations

import bz2
import gzip
import os
import queue
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Optional

from pawn.errors import DataError

COMPRESSED_SUFFIXES: dict[str, str] = {".zst": "zstd", ".zstd": "zstd", ".gz": "gzip", ".bz2": "bzip2"}
"""Compressed-file suffix → codec."""
PGN_SUFFIXES: tuple[str, ...] = (".pgn",) + tuple(f".pgn{s}" for s in COMPRESSED_SUFFIXES)
"""File names PAWN reads as PGN: ``.pgn``, ``.pgn.zst``, ``.pgn.zstd``, ``.pgn.gz``, ``.pgn.bz2``."""


def is_pgn_name(path: os.PathLike | str) -> bool:
    """Whether the file name ends in one of :data:`PGN_SUFFIXES` (case-insensitive)."""
    return str(path).lower().endswith(PGN_SUFFIXES)


def pgn_files_in(folder: os.PathLike | str) -> list[Path]:
    """The PGN files (any of :data:`PGN_SUFFIXES`) directly in ``folder``, in name order."""
    return sorted(p for p in Path(folder).iterdir() if p.is_file() and is_pgn_name(p.name))


def pgn_stem(path: os.PathLike | str) -> str:
    """The file name without its PGN suffix (``lichess_db_2024-01`` for ``….pgn.zst``)."""
    name = Path(path).name
    for s in sorted(PGN_SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(s):
            return name[: -len(s)]
    return Path(path).stem


def codec_of(path: os.PathLike | str) -> Optional[str]:
    """``"zstd"``, ``"gzip"``, ``"bzip2"`` from the file name, or None for plain text."""
    return COMPRESSED_SUFFIXES.get(Path(path).suffix.lower())


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
"""The first four bytes of a zstd frame (RFC 8878 §3.1.1, little-endian 0xFD2FB528)."""


def _zstd_start(data: bytes) -> bool:
    """``data`` starts like a zstd file: a frame's magic number, or a skippable frame's
    (0x184D2A50–0x184D2A5F little-endian, RFC 8878 §3.1.2)."""
    return data.startswith(ZSTD_MAGIC) or (len(data) >= 4 and data[1:4] == b"\x2a\x4d\x18" and data[0] & 0xF0 == 0x50)


class _ZstdFrames:
    """A zstd file decoded frame by frame (``zstandard``'s ``decompressobj``, one per frame), as a
    readable stream that refuses a file ending inside a frame: ``stream_reader`` hands back the
    decoded start of a cut file (a download stopped half way) as if it were the whole file.

    Args:
        raw: the compressed file, open for reading.
        path: its name, for messages.
        dctx: the decompressor.

    ``read(n)`` returns up to ``n`` decoded bytes (b"" at the end) and raises :class:`DataError`
    naming the file and the byte offsets (counted from 0) of the cut frame when the file ends
    inside one, of the damaged frame when one cannot be decoded, and byte 0 when the file is
    not zstd at all (no magic number there).
    """

    IN_BYTES = 256 << 10
    """Compressed bytes decoded per step (PGN decodes to about 5-10 times as much)."""

    def __init__(self, raw: BinaryIO, path: Path, dctx) -> None:
        self.raw, self.path, self.dctx = raw, path, dctx
        self.frame = None  # the decompressobj of the frame being decoded, None between frames
        self.frame_start = 0  # compressed offset where that frame starts
        self.consumed = 0  # compressed bytes given to the decoder
        self.pending = b""  # compressed bytes after the last finished frame, not decoded yet
        self.out: deque[bytes] = deque()  # decoded bytes not read yet
        self.have = 0  # their length
        self.eof = False

    def _step(self) -> None:
        data, self.pending = self.pending or self.raw.read(self.IN_BYTES), b""
        if not data:
            if self.frame is not None:
                raise DataError(f"{self.path}: ends inside a zstd frame: the frame that starts at byte "
                                f"{self.frame_start:,} is cut off at byte {self.consumed:,}, the end of the file "
                                "(an incomplete download? `zstd -t` tests a file)")
            self.eof = True
            return
        if self.frame is None:
            self.frame, self.frame_start = self.dctx.decompressobj(), self.consumed
        try:
            out = self.frame.decompress(data)
        except Exception as e:  # zstandard.ZstdError: name the frame, not how far the read had got
            if type(e).__name__ != "ZstdError":
                raise
            magic = self.frame_start == 0 and not _zstd_start(data)
            raise DataError(f"{self.path}: cannot decode it as zstd: " + (
                f"it does not start with the zstd magic number ({ZSTD_MAGIC.hex(' ')} at byte 0; it starts with "
                f"{data[:4].hex(' ') or 'nothing'}): not a zstd file, whatever its name" if magic else
                f"the frame that starts at byte {self.frame_start:,} is damaged ({e})")) from None
        if out:
            self.out.append(out)
            self.have += len(out)
        if self.frame.eof:
            self.pending = self.frame.unused_data
            self.frame = None
        self.consumed += len(data) - len(self.pending)

    def read(self, n: int) -> bytes:
        while self.have < n and not self.eof:
            self._step()
        if self.have <= n:  # all of it (the end of the file)
            got, self.out, self.have = b"".join(self.out), deque(), 0
            return got
        taken, size = [], 0
        while size + len(self.out[0]) <= n:
            size += len(self.out[0])
            taken.append(self.out.popleft())
        head = self.out[0]
        taken.append(head[: n - size])
        self.out[0] = head[n - size:]
        self.have -= n
        return b"".join(taken)

    def close(self) -> None:
        self.out, self.have = deque(), 0


class _Opened:
    """A decoded byte stream over a raw file (or ``raw``, an open binary stream of the bytes that
    file would hold, named ``path``); ``raw_pos()`` is the compressed bytes consumed."""

    def __init__(self, path: Path, raw: Optional[BinaryIO] = None):
        self.path = path
        self.raw: BinaryIO = open(path, "rb") if raw is None else raw
        codec = codec_of(path)
        if codec is not None and raw is None and os.fstat(self.raw.fileno()).st_size == 0:
            # a 0-byte file holds no frame, member or stream header: `zstd -t`, `gzip -t` and
            # `bzip2 -t` refuse it, while the decoders here would read it as no games
            self.raw.close()
            raise DataError(f"{path}: empty (0 bytes): not a {codec} file, whatever its name (a download that failed "
                            f"at its start? `{codec} -t` tests a file)")
        if codec is None:
            self.stream: BinaryIO = self.raw
        elif codec == "zstd":
            try:
                import zstandard
            except ImportError:  # declared in pyproject; a broken install still gets one line
                raise DataError(f"{path}: reading .zst needs the 'zstandard' package (pip install zstandard)") from None
            self.stream = _ZstdFrames(self.raw, path, zstandard.ZstdDecompressor())
        elif codec == "gzip":
            self.stream = gzip.GzipFile(fileobj=self.raw, mode="rb")
        else:
            self.stream = bz2.BZ2File(self.raw, mode="rb")
        self.codec = codec

    def raw_pos(self) -> int:
        try:
            return self.raw.tell()
        except (OSError, ValueError):
            return 0

    def read(self, n: int) -> bytes:
        try:
            return self.stream.read(n)
        except DataError:  # a zstd file that ends inside a frame (it names the file and offsets)
            raise
        except (OSError, EOFError, ValueError) as e:  # zstandard.ZstdError derives from Exception
            if self.codec is None:
                raise DataError(f"{self.path}: cannot read it ({e})") from None
            raise DataError(f"{self.path}: cannot decode it as {self.codec} near byte {self.raw_pos():,} ({e})") from None
        except Exception as e:
            if type(e).__name__ == "ZstdError":
                raise DataError(f"{self.path}: cannot decode it as zstd near byte {self.raw_pos():,} ({e})") from None
            raise

    def skip(self, n: int) -> None:
        """Advance the decoded stream by ``n`` bytes (seek for plain files)."""
        if self.codec is None:
            self.raw.seek(n)
            return
        left = n
        while left > 0:
            got = self.read(min(left, 8 << 20))
            if not got:
                raise DataError(f"{self.path}: ends before byte {n:,} where the interrupted cache build stopped")
            left -= len(got)

    def close(self) -> None:
        try:
            if self.stream is not self.raw:
                self.stream.close()
        finally:
            self.raw.close()


@dataclass(frozen=True)
class Piece:
    """``data``: whole games of one file (bytes); ``start``/``end``: their decompressed byte range
    in the file; ``raw_pos``: compressed bytes of the file read so far (for progress)."""

    data: bytes
    start: int
    end: int
    raw_pos: int


def _last_boundary(data: bytes) -> int:
    """Offset just after the last blank line that is followed by a tag line (a game start), or -1."""
    a = data.rfind(b"\n\n[")
    b = data.rfind(b"\n\r\n[")
    if a < 0 and b < 0:
        return -1
    return max(a + 2 if a >= 0 else -1, b + 3 if b >= 0 else -1)


def _pieces_sync(path: Path, chunk_bytes: int, start: int, raw: Optional[BinaryIO] = None) -> Iterator[Piece]:
    f = _Opened(path, raw)
    try:
        if start:
            f.skip(start)
        carry, pos = b"", start
        block = f.read(chunk_bytes)
        while True:
            if not block:
                if carry.strip():
                    yield Piece(carry, pos, pos + len(carry), f.raw_pos())
                return
            data = carry + block if carry else block
            if len(block) < chunk_bytes:
                # a short read is the end unless the decoder has more: the last piece is then
                # parsed whole instead of being cut before its last game
                more = f.read(chunk_bytes)
                if not more:
                    if data.strip():
                        yield Piece(data, pos, pos + len(data), f.raw_pos())
                    return
                data += more
            cut = _last_boundary(data)
            if cut <= 0:
                carry, block = data, f.read(chunk_bytes)
                continue
            carry = data[cut:]
            yield Piece(data[:cut], pos, pos + cut, f.raw_pos())
            pos += cut
            block = f.read(chunk_bytes)
    finally:
        f.close()


def pgn_pieces(path: os.PathLike | str, chunk_bytes: int, start: int = 0, prefetch: int = 1,
               raw: Optional[BinaryIO] = None) -> Iterator[Piece]:
    """The games of one PGN file (plain or compressed, see :data:`PGN_SUFFIXES`) in pieces of about
    ``chunk_bytes`` decompressed bytes, each cut before a tag line that follows a blank line.

    Args:
        path: the file.
        chunk_bytes: bytes read per piece (a piece is longer by the game straddling the cut).
        start: decompressed offset to begin at (a piece boundary recorded by an earlier run).
        prefetch: pieces read ahead in a background thread (0: none).
        raw: read the file's bytes from this binary stream (``read(n)``; a download) instead of
            opening ``path``, which then only names it (its suffix picks the codec). Closed at the end.

    Raises:
        DataError: the file cannot be decoded with its suffix's codec (naming the file), or ends
            before ``start``.
        OSError: the file cannot be opened.
    """
    path = Path(path)
    if prefetch <= 0:
        yield from _pieces_sync(path, chunk_bytes, start, raw)
        return
    q: queue.Queue = queue.Queue(maxsize=prefetch)
    stop = threading.Event()
    done = object()

    def work() -> None:
        try:
            for p in _pieces_sync(path, chunk_bytes, start, raw):
                while not stop.is_set():
                    try:
                        q.put(p, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(done)
        except BaseException as e:  # handed to the consumer, raised there
            q.put(e)

    t = threading.Thread(target=work, name="pawn-pgn-read", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while t.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                t.join(0.05)


def read_pgn_bytes(path: os.PathLike | str) -> bytes:
    """The whole decoded text of one PGN file (plain or compressed) as bytes: for callers that
    parse a file in one piece (``pawn eval --pgn``); the data path streams with :func:`pgn_pieces`.

    Raises:
        DataError: the file cannot be decoded with its suffix's codec (naming the file).
    """
    f = _Opened(Path(path))
    try:
        parts = []
        while chunk := f.read(64 << 20):
            parts.append(chunk)
        return b"".join(parts)
    finally:
        f.close()
