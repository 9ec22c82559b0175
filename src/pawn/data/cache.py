"""The CSR game cache of the Lichess data path (spec ``training-and-adapters.md`` §6 "Cache").

A cache directory holds one filtered game set:

- ``tokens_flat.bin``: raw little-endian int16, every game's move tokens concatenated in scan
  order; memory-mapped on load, never read whole into memory.
- ``index.safetensors``: ``offsets`` int64 [n_games + 1] and ``outcome_tokens`` int16 [n_games];
  game i is ``tokens_flat[offsets[i]:offsets[i+1]]``. PGN caches also hold ``game_ids`` uint64
  [n_games] (the Lichess id of each game's ``Site`` tag, 0 where it has none; see
  :func:`pawn.data.lichess.lichess_ids`), so a run can record which games it trained on.
- ``meta.json``: ``format_version`` (1), ``repo_or_path``, ``split``, ``elo_min``, ``elo_max``,
  ``min_ply``, ``n_games``, ``total_tokens``, ``created_at_unix``; PAWN adds ``max_games`` (the
  cap the cache was read with), ``source_files`` (name, size and mtime of local source files, so
  an edited source invalidates the cache) and ``stats`` (games read and dropped per reason, Elo
  and ply ranges).
  ``parser_version`` (:data:`pawn.engine.pgn.PARSER_VERSION` of the parser that read a PGN source;
  a cache from another version is rebuilt, so a dialect fix reaches every existing cache).
- ``.complete``: JSON ``{file name: SHA-256 hex}`` of the three files above, written last inside the
  ``{key}.partial`` directory that is then renamed into place.

A build is resumable: games are appended to ``{key}.partial`` and, after each piece of the source,
a journal (``journal.json``, written atomically) records how much of each file is valid and where
the scan stands. A build that was killed leaves the partial directory; the next build with the
same key, source and parser truncates the files to the journal and continues from there. One
build at a time holds the partial directory's lock (``flock``); another waits for it.

Every :func:`open_cache` verifies the hashes and that the array lengths agree with ``meta.json``;
:func:`cache_key` is the spec's key.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
from safetensors.numpy import load_file

from pawn.errors import DataError
from pawn.fileio import save_safetensors

FORMAT_VERSION = 1
TOKENS_FILE = "tokens_flat.bin"
INDEX_FILE = "index.safetensors"
META_FILE = "meta.json"
COMPLETE_FILE = ".complete"
JOURNAL_FILE = "journal.json"
LENGTHS_PART = "lengths.part"
OUTCOME_PART = "outcome.part"
SEEN_PART = "seen.part"
IDS_PART = "ids.part"
PARTIAL_SUFFIX = ".partial"
CACHE_DIR_NAME = "pawn-lichess-cache"


class CacheCorrupt(DataError):
    """A cache directory that fails verification; the message names the directory and the check."""


def cache_root(cache_dir: Optional[os.PathLike | str] = None) -> Path:
    """The cache root (spec §6): ``cache_dir`` if given, else ``$PAWN_DATA_CACHE``, else
    ``$HF_HOME/pawn-lichess-cache``, else ``~/.cache/huggingface/pawn-lichess-cache``."""
    if cache_dir is not None:
        return Path(cache_dir)
    if os.environ.get("PAWN_DATA_CACHE"):
        return Path(os.environ["PAWN_DATA_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / CACHE_DIR_NAME
    return Path.home() / ".cache" / "huggingface" / CACHE_DIR_NAME


def cache_key(repo_or_path: str, slug: str, split: str, elo_min: Optional[int], elo_max: Optional[int],
              min_ply: int, max_games: Optional[int] = None) -> str:
    """The spec §6 key ``{slug}_{split}_e{elo_min|any}-{elo_max|any}_p{min_ply}_{digest}``.

    ``digest`` is the 12-hex-char (6-byte) BLAKE2b of ``json.dumps`` (sorted keys, default
    separators) of ``{repo_or_path, split, elo_min, elo_max, min_ply}``. A ``max_games`` cap (a PAWN
    addition) adds ``max_games`` to the digested dict and ``_g{max_games}`` to the key, so uncapped
    keys are exactly the spec's.
    """
    fields: dict[str, Any] = {"repo_or_path": repo_or_path, "split": split, "elo_min": elo_min,
                              "elo_max": elo_max, "min_ply": min_ply}
    if max_games is not None:
        fields["max_games"] = max_games
    digest = hashlib.blake2b(json.dumps(fields, sort_keys=True).encode(), digest_size=6).hexdigest()
    lo = "any" if elo_min is None else str(elo_min)
    hi = "any" if elo_max is None else str(elo_max)
    cap = "" if max_games is None else f"_g{max_games}"
    return f"{slug}_{split}_e{lo}-{hi}_p{min_ply}{cap}_{digest}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class CsrGames:
    """Games in CSR form: ``tokens_flat`` int16 [total_tokens] (a read-only memmap for a cache),
    ``offsets`` int64 [n + 1], ``outcome`` int16 [n]. Game i is
    ``tokens_flat[offsets[i]:offsets[i+1]]``. ``meta`` is the cache's ``meta.json`` (or {}).
    ``ids``: uint64 [n] Lichess game ids (0 = none) for a PGN cache, else None."""

    tokens_flat: np.ndarray
    offsets: np.ndarray
    outcome: np.ndarray
    meta: dict
    ids: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return int(self.outcome.shape[0])

    @property
    def lengths(self) -> np.ndarray:
        """int64 [n]: plies of each game."""
        return np.diff(self.offsets)

    def slice(self, start: int, stop: int) -> "CsrGames":
        """Games ``start … stop − 1`` as a view (no copy of the tokens)."""
        return CsrGames(self.tokens_flat, self.offsets[start:stop + 1], self.outcome[start:stop], self.meta,
                        None if self.ids is None else self.ids[start:stop])

    def gather(self, indices: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Games ``indices`` cut to ``width`` plies.

        Returns:
            ``(tokens int16 [k, width]`` PAD-filled after each length, ``lengths int16 [k]`` (≤ width),
            ``outcome int16 [k])``. An index of −1 gives an empty game (length 0, outcome PAD).
        """
        from pawn.vocab import PAD_TOKEN

        idx = np.asarray(indices, np.int64)
        real = idx >= 0
        safe = np.where(real, idx, 0)
        start = self.offsets[safe]
        lens = np.where(real, np.minimum(self.offsets[safe + 1] - start, width), 0)
        out = np.full((idx.shape[0], width), PAD_TOKEN, np.int16)
        cols = np.arange(width)
        take = cols[None, :] < lens[:, None]
        rows, cs = np.nonzero(take)
        out[rows, cs] = self.tokens_flat[start[rows] + cs]
        outcome = np.where(real, self.outcome[safe], PAD_TOKEN).astype(np.int16)
        return out, lens.astype(np.int16), outcome


class CacheWriter:
    """Writes one cache into ``{root}/{key}.partial`` (resumable, see the module docstring);
    :meth:`finish` writes the index, meta and the ``.complete`` manifest (last), then renames the
    directory to ``{root}/{key}``.

    Args:
        root, key: where the cache goes.
        identity: what the partial data depends on (source files, filters, parser version); a
            journal with another identity is discarded and the build starts over.

    After construction, ``done`` is True when another process finished the cache while this one
    waited for the lock (nothing to write), and ``resumed`` is the scan state the last
    :meth:`checkpoint` recorded (None for a fresh build). Use as a context manager: on any error
    (a full disk, Ctrl-C, SIGTERM) the partial directory is kept, to be continued by the next
    build, once a :meth:`checkpoint` has written its journal (before that it is removed: there is
    nothing to continue); :meth:`discard` removes it (the source itself is bad: nothing of it is kept).
    """

    def __init__(self, root: Path, key: str, identity: Optional[dict] = None):
        self.final = Path(root) / key
        self.tmp = Path(root) / f"{key}{PARTIAL_SUFFIX}"
        self.identity = json.loads(json.dumps(identity or {}))
        self.done = False
        self.resumed: Optional[dict] = None
        self._fd = self._lock()
        if (self.final / COMPLETE_FILE).is_file():
            self.done = True
            return
        journal = self._read_journal()
        sizes = {TOKENS_FILE: 0, LENGTHS_PART: 0, OUTCOME_PART: 0, SEEN_PART: 0, IDS_PART: 0}
        if journal is not None and journal.get("identity") == self.identity:
            sizes = {name: int(journal["sizes"].get(name, 0)) for name in sizes}
            self.resumed = journal.get("state")
        else:
            for child in self.tmp.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        self._files = {}
        for name, size in sizes.items():
            f = open(self.tmp / name, "ab")
            f.truncate(size)
            f.seek(size)
            self._files[name] = f
        self._n = sizes[OUTCOME_PART] // 2
        self._total = sizes[TOKENS_FILE] // 2

    def _lock(self) -> int:
        """Create (or reuse) the partial directory and hold its lock; waits while another build holds it."""
        while True:
            self.tmp.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.tmp, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.stat(self.tmp).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same or (self.final / COMPLETE_FILE).is_file():
                return fd
            os.close(fd)  # the holder renamed or removed it: lock the new one

    def _read_journal(self) -> Optional[dict]:
        try:
            return json.loads((self.tmp / JOURNAL_FILE).read_text())
        except (OSError, ValueError):
            return None

    def __enter__(self) -> "CacheWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        for f in getattr(self, "_files", {}).values():
            try:
                f.close()
            except OSError:  # its buffer could not be written (a full disk): the journal's sizes still hold
                pass
        if exc_type is not None and not self.done and not (self.tmp / JOURNAL_FILE).is_file():
            shutil.rmtree(self.tmp, ignore_errors=True)  # no journal yet: nothing a new build could continue
        self._release()

    def discard(self) -> None:
        """Remove the partial directory (everything this build and the ones it continues wrote),
        e.g. when the source turned out to be unreadable; the lock is released."""
        for f in getattr(self, "_files", {}).values():
            try:
                f.close()
            except OSError:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)
        self._release()

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def n_games(self) -> int:
        return self._n

    def add(self, tokens: np.ndarray, lengths: np.ndarray, outcome: np.ndarray) -> None:
        """Append games: ``tokens`` int [k, P] (first ``lengths[i]`` entries used), ``lengths`` int
        [k], ``outcome`` int [k]."""
        lengths = np.asarray(lengths, np.int64)
        if lengths.size == 0:
            return
        cols = np.arange(tokens.shape[1])
        flat = np.asarray(tokens)[cols[None, :] < lengths[:, None]].astype("<i2")
        self.add_flat(flat, lengths, outcome)

    def add_flat(self, flat: np.ndarray, lengths: np.ndarray, outcome: np.ndarray,
                 ids: Optional[np.ndarray] = None) -> None:
        """Append games already concatenated: ``flat`` int16 [sum(lengths)]; ``ids`` uint64 [k]
        their game ids (give them for every call of a build or for none: the index keeps
        ``game_ids`` only when every game has one).

        Raises:
            ValueError: ``ids`` of another length than ``lengths``.
        """
        lengths = np.asarray(lengths, np.int64)
        if ids is not None:
            ids = np.asarray(ids, "<u8")
            if ids.shape != lengths.shape:
                raise ValueError(f"{ids.shape[0]} game ids for {lengths.shape[0]} games")
            self._files[IDS_PART].write(np.ascontiguousarray(ids).tobytes())
        self._files[TOKENS_FILE].write(np.ascontiguousarray(flat, "<i2").tobytes())
        self._files[LENGTHS_PART].write(np.ascontiguousarray(lengths, "<i8").tobytes())
        self._files[OUTCOME_PART].write(np.ascontiguousarray(outcome, "<i2").tobytes())
        self._total += int(lengths.sum())
        self._n += int(lengths.size)

    def add_seen(self, ids: np.ndarray) -> None:
        """Append uint64 ids (the game ids a scan has seen; restored with :meth:`seen_ids`)."""
        self._files[SEEN_PART].write(np.ascontiguousarray(ids, "<u8").tobytes())

    def seen_ids(self) -> np.ndarray:
        """uint64 [k]: every id given to :meth:`add_seen`, also by the build this one continues."""
        self._files[SEEN_PART].flush()
        return np.fromfile(self.tmp / SEEN_PART, dtype="<u8")

    def checkpoint(self, state: dict) -> None:
        """Make everything added so far durable and record ``state`` (JSON) as where to continue."""
        sizes = {}
        for name, f in self._files.items():
            f.flush()
            os.fsync(f.fileno())
            sizes[name] = f.tell()
        tmp = self.tmp / f"{JOURNAL_FILE}.tmp"
        with open(tmp, "w") as f:
            json.dump({"identity": self.identity, "sizes": sizes, "state": state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.tmp / JOURNAL_FILE)

    def finish(self, meta: dict) -> Path:
        """Write ``index.safetensors``, ``meta.json`` (``meta`` plus the counts and format fields),
        then ``.complete``, and rename into place. Returns the final directory."""
        for f in self._files.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()
        lengths = np.fromfile(self.tmp / LENGTHS_PART, dtype="<i8")
        offsets = np.zeros(lengths.size + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        outcome = np.fromfile(self.tmp / OUTCOME_PART, dtype="<i2").astype(np.int16)
        index = {"offsets": offsets, "outcome_tokens": outcome}
        ids = np.fromfile(self.tmp / IDS_PART, dtype="<u8")
        if ids.size and ids.size == outcome.size:
            index["game_ids"] = ids.astype(np.uint64)
        try:
            save_safetensors(index, self.tmp / INDEX_FILE)
        except OSError:
            raise
        except Exception as e:  # safetensors reports a failed write as SafetensorError "... (os error 28)"
            raise _os_error(e, self.tmp / INDEX_FILE) from None
        meta = {"format_version": FORMAT_VERSION, **meta, "n_games": int(outcome.shape[0]),
                "total_tokens": int(self._total), "created_at_unix": time.time()}
        with open(self.tmp / META_FILE, "w") as f:
            f.write(json.dumps(meta, indent=2, sort_keys=True))
            f.flush()
            os.fsync(f.fileno())
        manifest = {name: _sha256(self.tmp / name) for name in (TOKENS_FILE, INDEX_FILE, META_FILE)}
        with open(self.tmp / COMPLETE_FILE, "w") as f:
            json.dump(manifest, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        # the parts and the journal go only once the manifest is written: a build that fails
        # before (a full disk) is continued from the journal
        for name in (LENGTHS_PART, OUTCOME_PART, SEEN_PART, IDS_PART, JOURNAL_FILE):
            (self.tmp / name).unlink(missing_ok=True)
        if self.final.exists():  # a stale cache the caller did not remove
            remove_cache(self.final)
        os.rename(self.tmp, self.final)
        self.done = True
        self._release()
        return self.final


def _os_error(e: Exception, path: Path) -> Exception:
    """``e`` as an OSError when its message carries an ``os error N`` (safetensors' errors), else ``e``."""
    m = re.search(r"os error (\d+)", str(e))
    if m is None:
        return e
    code = int(m.group(1))
    return OSError(code, os.strerror(code), str(path))


def open_cache(directory: Path) -> CsrGames:
    """Open and verify a cache directory.

    Checks: ``.complete`` exists and lists the three files, each file's SHA-256 matches, ``meta.json``
    has ``format_version`` 1, ``offsets`` has ``n_games + 1`` non-decreasing entries from 0 to
    ``total_tokens``, ``outcome_tokens`` has ``n_games`` entries and ``tokens_flat.bin`` holds
    ``total_tokens`` int16 values.

    Returns:
        :class:`CsrGames` with ``tokens_flat`` a read-only int16 memmap.

    Raises:
        CacheCorrupt: any check fails (the message names the directory and the check).
    """
    d = Path(directory)
    complete = d / COMPLETE_FILE
    if not complete.is_file():
        raise CacheCorrupt(f"cache {d}: no {COMPLETE_FILE} manifest (partial cache)")
    try:
        manifest = json.loads(complete.read_text())
    except (OSError, ValueError) as e:
        raise CacheCorrupt(f"cache {d}: unreadable {COMPLETE_FILE} ({e})") from None
    for name in (TOKENS_FILE, INDEX_FILE, META_FILE):
        if not isinstance(manifest, dict) or name not in manifest:
            raise CacheCorrupt(f"cache {d}: {COMPLETE_FILE} does not list {name}")
        if not (d / name).is_file():
            raise CacheCorrupt(f"cache {d}: {name} is missing")
        if _sha256(d / name) != manifest[name]:
            raise CacheCorrupt(f"cache {d}: SHA-256 of {name} does not match {COMPLETE_FILE}")
    meta = json.loads((d / META_FILE).read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise CacheCorrupt(f"cache {d}: format_version {meta.get('format_version')!r}, expected {FORMAT_VERSION}")
    index = load_file(str(d / INDEX_FILE))
    offsets, outcome = index.get("offsets"), index.get("outcome_tokens")
    n, total = meta.get("n_games"), meta.get("total_tokens")
    if offsets is None or outcome is None or offsets.dtype != np.int64 or outcome.dtype != np.int16:
        raise CacheCorrupt(f"cache {d}: {INDEX_FILE} lacks int64 offsets / int16 outcome_tokens")
    if offsets.shape != (n + 1,) or outcome.shape != (n,):
        raise CacheCorrupt(f"cache {d}: index lengths {offsets.shape[0]}/{outcome.shape[0]} disagree with n_games={n}")
    if offsets[0] != 0 or offsets[-1] != total or (np.diff(offsets) < 0).any():
        raise CacheCorrupt(f"cache {d}: offsets are not non-decreasing from 0 to total_tokens={total}")
    size = (d / TOKENS_FILE).stat().st_size
    if size != 2 * total:
        raise CacheCorrupt(f"cache {d}: {TOKENS_FILE} has {size} bytes, expected {2 * total}")
    ids = index.get("game_ids")
    if ids is not None and (ids.dtype != np.uint64 or ids.shape != (n,)):
        raise CacheCorrupt(f"cache {d}: {INDEX_FILE} game_ids is not uint64 [{n}]")
    flat = (np.memmap(d / TOKENS_FILE, dtype="<i2", mode="r", shape=(total,)) if total
            else np.zeros(0, np.int16))
    return CsrGames(flat, offsets, outcome, meta, ids)


def remove_cache(directory: Path) -> None:
    """Remove a (corrupt or stale) cache directory: renamed aside first, so a reader never sees a
    half-deleted cache under the key."""
    d = Path(directory)
    if not d.exists():
        return
    aside = d.with_name(f"{d.name}.stale-{os.getpid()}")
    os.rename(d, aside)
    shutil.rmtree(aside, ignore_errors=True)
