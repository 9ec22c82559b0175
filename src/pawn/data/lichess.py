"""Lichess games → a filtered, cached training corpus (spec ``training-and-adapters.md`` §6).

Sources (:func:`open_source`):

- a PGN file or a folder of PGN files (``.pgn``, or compressed ``.pgn.zst`` as Lichess publishes
  its database, ``.pgn.gz``, ``.pgn.bz2``), read in name order as a stream of pieces
  (:mod:`pawn.data.pgn_stream`; bounded memory) by the engine's parser,
  :func:`pawn.engine.parse_pgn` (both Lichess dialects). A game whose Lichess id (in its ``Site``
  tag) was seen earlier in the source is dropped as ``duplicate`` (two overlapping exports);
- a parquet file or folder in the ``pawn-lichess-full`` schema (pyarrow; columns ``tokens``,
  ``game_length``, ``outcome_token`` are required, ``white_elo``/``black_elo`` when filtering by Elo).
  A folder with ``{split}-*.parquet`` files (directly or under ``data/``) has splits;
- a Hub dataset id (``owner/name``): the shards ``data/{split}-*.parquet`` are downloaded and read
  one at a time, each deleted after reading, so neither memory nor disk holds the whole dataset.

Filters (:class:`LichessFilters`): both players' Elo in ``[elo_min, elo_max)``, then
``game_length ≥ min_ply`` (default 10, not applied when ``min_ply ≤ 1``), then at most ``max_games``
games in scan order. :func:`load_corpus` builds (or verifies and reuses) the CSR cache of
:mod:`pawn.data.cache` and splits train/validation: the source's ``validation`` split when it has
one (its first ``min(val_games, n)`` filtered games), else the tail ``min(val_games, n // 5)`` games.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator, Optional, Protocol

import numpy as np

from pawn.data.cache import (JOURNAL_FILE, CacheCorrupt, CacheWriter, CsrGames, cache_key, cache_root, open_cache,
                             remove_cache)
from pawn.data.pgn_stream import is_pgn_name, pgn_files_in, pgn_pieces, pgn_stem
from pawn.engine import PgnGames, parse_pgn
from pawn.engine.pgn import PARSE_SKIP_REASONS, PARSER_VERSION, SKIP_REASON_TEXT, check_pgn
from pawn.errors import DataError, UsageError
from pawn.vocab import NUM_ACTIONS, OUTCOME_TOKEN_BASE, VOCAB_SIZE

REQUIRED_COLUMNS: tuple[str, ...] = ("tokens", "game_length", "outcome_token")
"""Parquet columns training needs (spec §6)."""
ELO_COLUMNS: tuple[str, ...] = ("white_elo", "black_elo")
"""Parquet columns needed when an Elo bound is set."""
DEFAULT_VAL_GAMES = 50_000
"""Validation games (spec §6 default)."""
PGN_CHUNK_BYTES = 64 << 20
"""PGN files larger than this are parsed in chunks cut at game boundaries (bounded memory)."""

PROGRESS_MIN_BYTES = 256 << 20
"""Sources at least this large (bytes on disk) show a progress bar (stderr) while the cache builds."""

DROP_REASONS: dict[str, str] = {
    "elo": "an Elo outside the band (or missing)",
    "duplicate": "a game seen earlier in the source (the same Lichess game id in its Site tag)",
    **SKIP_REASON_TEXT,
}
"""Why games are dropped, by the reason names used in :attr:`ScanStats.dropped`: the filters'
``elo``, the scan's ``duplicate`` and the parser's skip reasons (their text comes from the engine)."""

PARSER_REASONS: tuple[str, ...] = PARSE_SKIP_REASONS
"""Drop reasons of the PGN parser (a game it skips), as opposed to the filters' ``elo`` and ``too_short``
(the engine's list: every skip reason but ``too_short``)."""

_LICHESS_ID = re.compile(r"lichess\.org/([A-Za-z0-9]{8})(?:[A-Za-z0-9]{4})?/?(?:$|[?#])")


def lichess_ids(sites: list[str]) -> np.ndarray:
    """uint64 [n]: the Lichess game id in each ``Site`` value (``https://lichess.org/j1dkb5dw``)
    as its 8 ASCII bytes read as a little-endian integer (distinct ids give distinct values), or
    0 where the site is not a Lichess game URL."""
    out = np.zeros(len(sites), np.uint64)
    for i, s in enumerate(sites):
        m = _LICHESS_ID.search(s) if s else None
        if m:
            out[i] = int.from_bytes(m.group(1).encode("ascii"), "little")
    return out


class SeenIds:
    """The game ids a scan has seen, as sorted uint64 runs merged as they grow (8 bytes per
    distinct game; membership by binary search)."""

    def __init__(self, ids: Optional[np.ndarray] = None):
        self._runs: list[np.ndarray] = []
        self.new: list[np.ndarray] = []
        if ids is not None and ids.size:
            self._runs.append(np.unique(np.asarray(ids, np.uint64)))

    def first_seen(self, ids: np.ndarray) -> np.ndarray:
        """bool [n]: True where ``ids[i]`` is 0 (no id) or seen for the first time (earlier in
        ``ids`` counts as seen); the new ids are remembered (and kept in :attr:`new`)."""
        ids = np.asarray(ids, np.uint64)
        fresh = ids == 0
        has = np.nonzero(~fresh)[0]
        if has.size == 0:
            return fresh
        sub = ids[has]
        _, first = np.unique(sub, return_index=True)
        ok = np.zeros(sub.size, bool)
        ok[first] = True
        for run in self._runs:
            pos = np.minimum(np.searchsorted(run, sub), run.size - 1)
            ok &= run[pos] != sub
        fresh[has[ok]] = True
        added = np.sort(sub[ok])
        if added.size:
            self._runs.append(added)
            self.new.append(added)
            while len(self._runs) > 1 and self._runs[-2].size <= 2 * self._runs[-1].size:
                last = self._runs.pop()
                self._runs[-1] = np.union1d(self._runs[-1], last)
        return fresh

    def drain(self) -> np.ndarray:
        """The ids added since the last drain (uint64), for persisting."""
        out = np.concatenate(self.new) if self.new else np.zeros(0, np.uint64)
        self.new = []
        return out


SKIPPED_SHOWN = 5
"""Skipped games named (file, game number, ply, reason) in reports; the rest are counted."""


def skipped_lines(skipped: list[tuple[str, int, int, str]], total: int) -> list[str]:
    """One line per skipped game, ``FILE: game 3, ply 2: illegal_move`` (reasons: :data:`DROP_REASONS`; game
    numbers 1-based in the file, plies counted from 0, as the parser reports them), for the first
    :data:`SKIPPED_SHOWN` of ``skipped`` (file, game, ply, reason), then ``… and N more`` when
    ``total`` games were skipped in all. Empty when none was."""
    shown = list(skipped)[:SKIPPED_SHOWN]
    lines = [f"{f}: game {g}, ply {p}: {r}" for f, g, p, r in shown]
    if total > len(shown):
        lines.append(f"… and {total - len(shown):,} more")
    return lines


class ShardFetcher(Protocol):
    """Access to a Hub dataset's files (injectable, so tests need no network)."""

    def list_files(self, repo_id: str) -> list[str]:
        """Every file path in the dataset repo."""
        ...

    def fetch(self, repo_id: str, filename: str) -> Path:
        """Download one file and return its local path."""
        ...

    def release(self, path: Path) -> None:
        """The caller has finished reading ``path`` (the fetcher may delete it)."""
        ...


class HubFetcher:
    """:class:`ShardFetcher` over ``huggingface_hub``: each shard is downloaded into a private
    temporary folder and deleted on :meth:`release`."""

    def __init__(self) -> None:
        self._tmp: Optional[Path] = None

    def list_files(self, repo_id: str) -> list[str]:
        from huggingface_hub import HfApi

        try:
            return list(HfApi().list_repo_files(repo_id, repo_type="dataset"))
        except Exception as e:  # huggingface_hub raises many HTTP/offline error types
            raise DataError(f"Hub dataset {repo_id}: cannot list files ({type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else ''})") from None

    def fetch(self, repo_id: str, filename: str) -> Path:
        from huggingface_hub import hf_hub_download

        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="pawn-hub-shard-"))
        try:
            return Path(hf_hub_download(repo_id, filename, repo_type="dataset", local_dir=self._tmp))
        except Exception as e:
            raise DataError(f"Hub dataset {repo_id}: cannot download {filename} ({type(e).__name__})") from None

    def release(self, path: Path) -> None:
        Path(path).unlink(missing_ok=True)


@dataclass(frozen=True)
class LichessFilters:
    """Game filters (spec §6 "Filtering").

    Attributes:
        elo_min: both players' Elo ≥ this (None: no bound).
        elo_max: both players' Elo < this (None: no bound).
        min_ply: games with fewer plies are dropped (default 10; no filter when ≤ 1).
        max_games: keep at most this many games, in scan order (None: all).

    Raises:
        UsageError: elo_min ≥ elo_max, a negative bound or min_ply, or max_games < 1.
    """

    elo_min: Optional[int] = None
    elo_max: Optional[int] = None
    min_ply: int = 10
    max_games: Optional[int] = None

    def __post_init__(self) -> None:
        for name in ("elo_min", "elo_max"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise UsageError(f"{name} must be ≥ 0, got {v}")
        if self.elo_min is not None and self.elo_max is not None and self.elo_min >= self.elo_max:
            raise UsageError(f"elo_min ({self.elo_min}) must be below elo_max ({self.elo_max}): the band is [min, max)")
        if self.min_ply < 0:
            raise UsageError(f"min_ply must be ≥ 0, got {self.min_ply}")
        if self.max_games is not None and self.max_games < 1:
            raise UsageError(f"max_games must be ≥ 1, got {self.max_games}")

    @property
    def filters_elo(self) -> bool:
        return self.elo_min is not None or self.elo_max is not None

    def keep(self, white_elo: np.ndarray, black_elo: np.ndarray, lengths: np.ndarray,
             stats: "ScanStats") -> np.ndarray:
        """bool [k]: games that pass the Elo band and then ``min_ply``; drops are counted in
        ``stats`` (``elo`` first, then ``too_short``). ``max_games`` is applied by the caller."""
        ok = np.ones(lengths.shape[0], bool)
        if self.elo_min is not None:
            ok &= (white_elo >= self.elo_min) & (black_elo >= self.elo_min)
        if self.elo_max is not None:
            ok &= (white_elo < self.elo_max) & (black_elo < self.elo_max)
        stats.drop("elo", int((~ok).sum()))
        if self.min_ply > 1:
            short = ok & (lengths < self.min_ply)
            stats.drop("too_short", int(short.sum()))
            ok &= ~short
        return ok


@dataclass
class ScanStats:
    """What a scan of a source saw: games ``read``, ``kept``, ``dropped`` per reason
    (:data:`DROP_REASONS`), Elo range of kept games (both players, missing Elo not counted), ply range of kept games."""

    read: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    elo_range: Optional[tuple[int, int]] = None
    ply_range: Optional[tuple[int, int]] = None
    skipped: list[tuple[str, int, int, str]] = field(default_factory=list)
    """The first :data:`SKIPPED_SHOWN` games the PGN parser skipped: (file, 1-based game number in
    the file, ply of the bad move counted from 0, reason)."""
    n_skipped: int = 0
    """All games the PGN parser skipped (the filters' drops, ``elo`` and ``too_short``, excluded)."""

    def drop(self, reason: str, n: int) -> None:
        if n:
            self.dropped[reason] = self.dropped.get(reason, 0) + int(n)

    def see_skipped(self, file: str, first_game: int, skipped: list[tuple[int, int, str]]) -> None:
        """Record the parser's ``skipped`` list of one piece of ``file`` whose first game is game
        ``first_game + 1`` of the file (pieces of a large file are parsed separately)."""
        self.n_skipped += len(skipped)
        for game, ply, reason in skipped[: max(0, SKIPPED_SHOWN - len(self.skipped))]:
            self.skipped.append((str(file), first_game + int(game), int(ply), str(reason)))

    def skipped_lines(self) -> list[str]:
        """The skipped games named, see :func:`skipped_lines`."""
        return skipped_lines(self.skipped, self.n_skipped)

    def skipped_summary(self) -> Optional[str]:
        """The games the PGN parser skipped in one line: how many, per reason in words
        (:data:`DROP_REASONS`, most first), and the first one named as :func:`skipped_lines`
        does, e.g. ``35 games skipped by the PGN parser (35 a set-up (FEN) start position);
        the first: FILE: game 51, ply 0: fen_start``. None when it skipped none."""
        if not self.n_skipped:
            return None
        counts = sorted(((n, r) for r, n in self.dropped.items() if r in PARSER_REASONS and n), key=lambda x: (-x[0], x[1]))
        why = ", ".join(f"{n:,} {DROP_REASONS.get(r, r)}" for n, r in counts)
        first = skipped_lines(self.skipped[:1], 1)
        return (f"{self.n_skipped:,} game{'s' if self.n_skipped != 1 else ''} skipped by the PGN parser ({why})"
                + (f"; the first: {first[0]}" if first else ""))

    def see_kept(self, white_elo: Optional[np.ndarray], black_elo: Optional[np.ndarray], lengths: np.ndarray) -> None:
        if lengths.size == 0:
            return
        self.kept += int(lengths.size)
        lo, hi = int(lengths.min()), int(lengths.max())
        self.ply_range = (lo, hi) if self.ply_range is None else (min(lo, self.ply_range[0]), max(hi, self.ply_range[1]))
        if white_elo is not None and black_elo is not None:
            e = np.concatenate([white_elo, black_elo]).astype(np.int64)
            e = e[e > 0]  # 0 = no Elo tag
            if e.size == 0:
                return
            lo, hi = int(e.min()), int(e.max())
            self.elo_range = (lo, hi) if self.elo_range is None else (min(lo, self.elo_range[0]), max(hi, self.elo_range[1]))

    def to_json(self) -> dict:
        return {"read": self.read, "kept": self.kept, "dropped": dict(self.dropped),
                "elo_range": list(self.elo_range) if self.elo_range else None,
                "ply_range": list(self.ply_range) if self.ply_range else None,
                "skipped": [list(t) for t in self.skipped], "n_skipped": self.n_skipped}

    @classmethod
    def from_json(cls, d: dict) -> "ScanStats":
        return cls(d.get("read", 0), d.get("kept", 0), dict(d.get("dropped", {})),
                   tuple(d["elo_range"]) if d.get("elo_range") else None,
                   tuple(d["ply_range"]) if d.get("ply_range") else None,
                   [tuple(t) for t in d.get("skipped", [])], int(d.get("n_skipped", 0)))

    def explain(self) -> str:
        """One line: games read and each drop reason with its count."""
        parts = [f"{n:,} {DROP_REASONS.get(r, r)}" for r, n in sorted(self.dropped.items(), key=lambda kv: -kv[1])]
        return f"read {self.read:,} games; dropped " + ("; ".join(parts) if parts else "none")


@dataclass(frozen=True)
class Source:
    """A resolved game source.

    Attributes:
        kind: ``"pgn"``, ``"parquet"`` or ``"hub"``.
        repo_or_path: the Hub id, or the resolved absolute path (the cache key's ``repo_or_path``).
        slug: the key's slug: the repo id with ``/`` → ``--``, or the file/folder stem.
        splits: split name → file names (local paths, or repo paths for the Hub). PGN sources and
            parquet sources without split-named files have only ``train``.
        fetcher: the Hub file fetcher (``kind == "hub"`` only).
    """

    kind: str
    repo_or_path: str
    slug: str
    splits: dict[str, tuple[str, ...]]
    fetcher: Optional[ShardFetcher] = None

    def files(self, split: str) -> tuple[str, ...]:
        """The files of ``split``. Raises DataError naming the splits the source has."""
        if split not in self.splits:
            raise DataError(f"{self.repo_or_path}: no '{split}' split (has: {', '.join(sorted(self.splits))})")
        return self.splits[split]

    def fingerprint(self, split: str) -> list:
        """[name, size, mtime_ns] of each local file of ``split`` (file names only for the Hub)."""
        if self.kind == "hub":
            return [[f] for f in self.files(split)]
        out = []
        for f in self.files(split):
            st = os.stat(f)
            out.append([Path(f).name, st.st_size, st.st_mtime_ns])
        return out


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_SPLIT_FILE = re.compile(r"^(?P<split>[A-Za-z0-9_]+)-[^/]*\.parquet$")


def _parquet_splits(files: list[Path]) -> dict[str, tuple[str, ...]]:
    splits: dict[str, list[str]] = {}
    for f in files:
        m = _SPLIT_FILE.match(f.name)
        if m is None:
            return {"train": tuple(str(p) for p in sorted(files))}
        splits.setdefault(m["split"], []).append(str(f))
    return {k: tuple(sorted(v)) for k, v in splits.items()}


def open_source(spec: str | os.PathLike, *, fetcher: Optional[ShardFetcher] = None) -> Source:
    """Resolve ``spec``: an existing PGN/parquet file or folder, else a Hub dataset id ``owner/name``.

    Raises:
        DataError: the path exists but holds no ``.pgn``/``.parquet`` files, holds both kinds, has
            an unknown extension; or ``spec`` is neither an existing path nor a Hub id; or the Hub
            dataset has no ``data/*.parquet`` shards.
    """
    p = Path(spec)
    if p.exists():
        p = p.resolve()
        if p.is_dir():
            pgns = pgn_files_in(p)
            pqs = sorted(p.glob("*.parquet")) or sorted((p / "data").glob("*.parquet"))
            if pgns and pqs:
                raise DataError(f"{p}: holds both .pgn and .parquet files; point --data at one kind")
            if pgns:
                return Source("pgn", str(p), p.name, {"train": tuple(str(f) for f in pgns)})
            if pqs:
                return Source("parquet", str(p), p.name, _parquet_splits(pqs))
            raise DataError(f"{p}: no .pgn or .parquet files in this folder (PGN may also be .pgn.zst, .pgn.gz, .pgn.bz2)")
        if is_pgn_name(p.name):
            return Source("pgn", str(p), pgn_stem(p), {"train": (str(p),)})
        if p.suffix.lower() == ".parquet":
            return Source("parquet", str(p), p.stem, {"train": (str(p),)})
        raise DataError(f"{p}: not a .pgn or .parquet file (PGN may also be .pgn.zst, .pgn.gz, .pgn.bz2)")
    spec = str(spec)
    if not _HUB_ID.match(spec):
        raise DataError(f"{spec}: no such file or folder, and not a Hub dataset id (owner/name)")
    fetcher = fetcher or HubFetcher()
    splits: dict[str, list[str]] = {}
    for name in fetcher.list_files(spec):
        if name.startswith("data/"):
            m = _SPLIT_FILE.match(name[len("data/"):])
            if m:
                splits.setdefault(m["split"], []).append(name)
    if not splits:
        raise DataError(f"Hub dataset {spec}: no data/{{split}}-*.parquet shards")
    return Source("hub", spec, spec.replace("/", "--"), {k: tuple(sorted(v)) for k, v in splits.items()}, fetcher)


# ---------------------------------------------------------------------------------------------- scanning
@dataclass
class Chunk:
    """Kept games of one piece of a source, in scan order: ``flat`` int16 [sum(lengths)],
    ``lengths`` int64 [k], ``outcome`` int16 [k]; for PGN sources also ``pgn`` (the parsed games)
    and ``rows`` (their kept row indices in ``pgn``)."""

    flat: np.ndarray
    lengths: np.ndarray
    outcome: np.ndarray
    pgn: Optional[PgnGames] = None
    rows: Optional[np.ndarray] = None
    position: Optional[dict] = None
    """For PGN sources: where the scan stands after this piece (file index, decompressed offset,
    games of the file before it, games left under max_games), to continue an interrupted build."""
    ids: Optional[np.ndarray] = None
    """For PGN sources: uint64 [k] Lichess game ids of the kept games (0 = none, :func:`lichess_ids`)."""


def scan_pgn(files: tuple[str, ...], filters: LichessFilters, stats: ScanStats, *,
             resume: Optional[dict] = None, seen: Optional[SeenIds] = None, every_piece: bool = False,
             progress: Optional[Callable[[int], None]] = None) -> Iterator[Chunk]:
    """Kept games of PGN ``files`` (name order, plain or compressed), filtered; ``stats`` is updated
    as it goes. A game whose Lichess id ``seen`` already holds is dropped as ``duplicate``.

    Args:
        resume: a :attr:`Chunk.position` of an earlier scan: continue after that piece.
        seen: the ids seen so far (a fresh :class:`SeenIds` when None).
        every_piece: also yield pieces that keep no game (so each piece's position is seen).
        progress: called with the compressed bytes read so far over all files.

    Raises:
        DataError: a file is not PGN (naming it) or cannot be decoded.
    """
    seen = seen if seen is not None else SeenIds()
    left = filters.max_games if resume is None else resume["left"]
    sizes = [os.stat(f).st_size for f in files]
    first_file = 0 if resume is None else resume["file"]
    for fi in range(first_file, len(files)):
        f = files[fi]
        start, first_game = (resume["offset"], resume["first_game"]) if resume is not None and fi == first_file else (0, 0)
        for piece in pgn_pieces(f, PGN_CHUNK_BYTES, start=start):
            g = parse_pgn(piece.data, 512, 0)
            if piece.start == 0:
                check_pgn(g, str(f))
            stats.see_skipped(f, first_game, g.skipped)
            first_game += int(g.counts["read"])
            stats.read += int(g.counts["read"])
            for reason, n in g.counts.items():
                if reason not in ("read", "kept"):
                    stats.drop(reason, n)
            lengths = g.lengths.astype(np.int64)
            site_ids = lichess_ids(g.header("site"))
            fresh = np.nonzero(seen.first_seen(site_ids))[0]
            stats.drop("duplicate", lengths.size - fresh.size)
            keep = filters.keep(g.white_elo[fresh], g.black_elo[fresh], lengths[fresh], stats)
            rows = fresh[keep]
            if left is not None:
                rows = rows[:left]
                left -= rows.size
            position = {"file": fi, "offset": piece.end, "first_game": first_game, "left": left}
            if progress is not None:
                progress(sum(sizes[:fi]) + piece.raw_pos)
            if rows.size:
                lens = lengths[rows]
                cols = np.arange(g.tokens.shape[1])
                flat = g.tokens[rows][cols[None, :] < lens[:, None]]
                stats.see_kept(g.white_elo[rows], g.black_elo[rows], lens)
                yield Chunk(flat.astype(np.int16), lens, g.outcome[rows].astype(np.int16), g, rows, position, site_ids[rows])
            elif every_piece:
                yield Chunk(np.zeros(0, np.int16), np.zeros(0, np.int64), np.zeros(0, np.int16), g, rows, position,
                            np.zeros(0, np.uint64))
            if left == 0:
                return


def scan_parquet(path: Path, filters: LichessFilters, stats: ScanStats, left: Optional[int],
                 label: Optional[str] = None, batch_rows: int = 65_536) -> Iterator[Chunk]:
    """Kept games of one parquet file in the ``pawn-lichess-full`` schema, read in row batches.

    Raises:
        DataError: a required column is missing, a ``tokens`` list is null or its length differs
            from ``game_length``, a token is not a move action, or an outcome token is outside
            1969…1979 (each message names the file, and the row where there is one).
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    label = label or str(path)
    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"{label}: not a readable parquet file ({e})") from None
    names = set(pf.schema_arrow.names)
    cols = list(REQUIRED_COLUMNS) + (list(ELO_COLUMNS) if filters.filters_elo else [])
    for c in cols:
        if c not in names:
            raise DataError(f"{label}: missing required column '{c}'")
    cols += [c for c in ELO_COLUMNS if c in names and c not in cols]
    row0 = 0
    for batch in pf.iter_batches(batch_size=batch_rows, columns=cols):
        k = batch.num_rows
        toks = batch.column("tokens")
        if toks.null_count:
            raise DataError(f"{label}: row {row0 + int(np.argmax(toks.is_null().to_numpy(zero_copy_only=False)))}: "
                            "tokens is null")
        list_len = pc.list_value_length(toks).to_numpy(zero_copy_only=False).astype(np.int64)
        game_len = batch.column("game_length").to_numpy(zero_copy_only=False).astype(np.int64)
        bad = np.nonzero(list_len != game_len)[0]
        if bad.size:
            r = int(bad[0])
            raise DataError(f"{label}: row {row0 + r}: tokens has {list_len[r]} entries but game_length is {game_len[r]}")
        outcome = batch.column("outcome_token").to_numpy(zero_copy_only=False).astype(np.int64)
        bad = np.nonzero((outcome < OUTCOME_TOKEN_BASE) | (outcome >= VOCAB_SIZE))[0]
        if bad.size:
            raise DataError(f"{label}: row {row0 + int(bad[0])}: outcome_token {outcome[bad[0]]} is not in "
                            f"{OUTCOME_TOKEN_BASE}..{VOCAB_SIZE - 1}")
        we = be = None
        if "white_elo" in batch.schema.names and "black_elo" in batch.schema.names:
            we = batch.column("white_elo").fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            be = batch.column("black_elo").fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        stats.read += k
        keep = filters.keep(we if we is not None else np.zeros(k), be if be is not None else np.zeros(k), game_len, stats)
        rows = np.nonzero(keep)[0]
        if left is not None:
            rows = rows[:left]
            left -= rows.size
        if rows.size:
            values = toks.flatten().to_numpy(zero_copy_only=False)
            sel = np.zeros(k, bool)
            sel[rows] = True
            flat = values[np.repeat(sel, list_len)].astype(np.int64)
            bad = np.nonzero((flat < 0) | (flat >= NUM_ACTIONS))[0]
            if bad.size:
                row = int(rows[np.searchsorted(np.cumsum(list_len[rows]), bad[0], side="right")])
                raise DataError(f"{label}: row {row0 + row}: token {flat[bad[0]]} is not a move action (0..{NUM_ACTIONS - 1})")
            lens = game_len[rows]
            stats.see_kept(None if we is None else we[rows], None if be is None else be[rows], lens)
            yield Chunk(flat.astype(np.int16), lens, outcome[rows].astype(np.int16))
        row0 += k
        if left == 0:
            return


def scan(source: Source, split: str, filters: LichessFilters, stats: ScanStats) -> Iterator[Chunk]:
    """Kept games of ``split`` of any source, in scan order (files in name order)."""
    files = source.files(split)
    if source.kind == "pgn":
        yield from scan_pgn(files, filters, stats)
        return
    left = filters.max_games
    for f in files:
        if source.kind == "hub":
            local = source.fetcher.fetch(source.repo_or_path, f)
            try:
                for c in scan_parquet(local, filters, stats, left, label=f"{source.repo_or_path}:{f}"):
                    left = None if left is None else left - c.lengths.size
                    yield c
            finally:
                source.fetcher.release(local)
        else:
            for c in scan_parquet(Path(f), filters, stats, left):
                left = None if left is None else left - c.lengths.size
                yield c
        if left == 0:
            return


# ---------------------------------------------------------------------------------------------- cache
@dataclass(frozen=True)
class CacheInfo:
    """One cache a corpus uses: ``key``, ``split``, ``path``, ``state`` (``"hit"``, ``"built"``,
    ``"rebuilt"`` or ``"resumed"``: an interrupted build continued) and the scan ``stats`` recorded in its ``meta.json``."""

    key: str
    split: str
    path: Path
    state: str
    stats: ScanStats


def _warn_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def cached_games(source: Source, split: str, filters: LichessFilters, *, cache_dir=None,
                 warn: Optional[Callable[[str], None]] = None) -> tuple[CsrGames, CacheInfo]:
    """The filtered games of ``split`` from the cache, built first when absent.

    An existing cache is verified (:func:`pawn.data.cache.open_cache`) and checked against the
    source's current files; a corrupt, partial or stale one is removed and rebuilt, with one line
    passed to ``warn`` (default: ``warning: …`` on stderr).

    Raises:
        DataError: no game survives the filters (the message gives games read and the count per
            drop reason), or the source cannot be read.
    """
    warn = warn or _warn_stderr
    key = cache_key(source.repo_or_path, source.slug, split, filters.elo_min, filters.elo_max, filters.min_ply,
                    filters.max_games)
    root = cache_root(cache_dir)
    d = root / key
    state = "built"
    fingerprint = source.fingerprint(split)
    if d.exists():
        try:
            return _open_hit(source, d, key, split, fingerprint)
        except CacheCorrupt as e:
            warn(f"{e}; rebuilding it")
            remove_cache(d)
            state = "rebuilt"
    identity = {"key": key, "source_files": fingerprint, "parser_version": PARSER_VERSION, "game_ids": source.kind == "pgn"}
    try:
        root.mkdir(parents=True, exist_ok=True)
        writer = CacheWriter(root, key, identity)
    except OSError as e:
        raise _cache_write_error(root, e) from None
    with writer as w:
        if w.done:  # another process built it while this one waited
            return _open_hit(source, d, key, split, fingerprint)
        resume = w.resumed
        stats = ScanStats.from_json(resume["stats"]) if resume else ScanStats()
        if resume:
            warn(f"cache {d}: continuing the interrupted build at game {stats.read:,} "
                 f"({w.n_games:,} games kept so far)")
            state = "resumed"
        files = source.files(split)
        total = sum(os.stat(f).st_size for f in files) if source.kind != "hub" else 0
        bar = None
        if source.kind == "pgn" and total >= PROGRESS_MIN_BYTES:
            from pawn.progress import ProgressReporter

            bar = ProgressReporter("pawn data: building the game cache", max(1, total >> 20), unit="MB",
                                   fields={"games": "0", "games/s": "0"}, stream=sys.stderr).start()
        t0, read0 = time.monotonic(), stats.read

        def progress(done: int) -> None:
            if bar is not None:
                rate = (stats.read - read0) / max(1e-9, time.monotonic() - t0)
                bar.update(done >> 20, games=f"{stats.read:,}", **{"games/s": f"{rate:,.0f}"})

        try:
            if source.kind == "pgn":
                seen = SeenIds(w.seen_ids())
                chunks = scan_pgn(files, filters, stats, resume=resume["position"] if resume else None, seen=seen,
                                  every_piece=True, progress=progress)
            else:
                chunks = scan(source, split, filters, stats)
            for c in chunks:
                try:
                    w.add_flat(c.flat, c.lengths, c.outcome, c.ids)
                    if c.position is not None:
                        w.add_seen(seen.drain())
                        w.checkpoint({"position": c.position, "stats": stats.to_json()})
                except OSError as e:
                    raise _cache_write_error(root, e, w.tmp) from None
        except CacheWriteError:
            raise
        except DataError:  # the source cannot be read (a cut or corrupt file): nothing of it is kept
            w.discard()
            raise
        finally:
            if bar is not None:
                bar.stop()
        if stats.kept == 0:
            w.discard()
            raise DataError(f"no games left in {source.repo_or_path} ({split}) after the filters "
                            f"{describe_filters(filters)}: {stats.explain()}")
        try:
            w.finish({"repo_or_path": source.repo_or_path, "split": split, "elo_min": filters.elo_min,
                      "elo_max": filters.elo_max, "min_ply": filters.min_ply, "max_games": filters.max_games,
                      "source_files": fingerprint, "stats": stats.to_json(),
                      "parser_version": PARSER_VERSION if source.kind == "pgn" else None})
        except OSError as e:
            raise _cache_write_error(root, e, w.tmp) from None
    return open_cache(d), CacheInfo(key, split, d, state, stats)


def _open_hit(source: Source, d: Path, key: str, split: str, fingerprint: list) -> tuple[CsrGames, CacheInfo]:
    """Open a finished cache and check it still matches its source and parser (CacheCorrupt if not)."""
    games = open_cache(d)
    if games.meta.get("source_files") != fingerprint:
        raise CacheCorrupt(f"cache {d}: the source files changed since it was built")
    old = games.meta.get("stats", {})
    if source.kind == "pgn" and games.meta.get("parser_version") != PARSER_VERSION:
        raise CacheCorrupt(f"cache {d}: built by PGN parser version {games.meta.get('parser_version', 1)}, "
                           f"this is version {PARSER_VERSION}")
    if source.kind == "pgn" and "n_skipped" not in old and any(old.get("dropped", {}).get(r) for r in PARSER_REASONS):
        raise CacheCorrupt(f"cache {d}: built before skipped games were named")
    if source.kind == "pgn" and games.ids is None:
        raise CacheCorrupt(f"cache {d}: built before the game ids were kept")
    return games, CacheInfo(key, split, d, "hit", ScanStats.from_json(old))


class CacheWriteError(DataError):
    """The game cache cannot be written (no permission, not a folder, a full disk); the message
    names the folder, the system's reason and the free space there, and says whether a partial
    build was kept to be continued."""


def _cache_write_error(root: Path, e: OSError, partial: Optional[Path] = None) -> CacheWriteError:
    """One line for a cache that cannot be written (no permission, not a folder, a full disk):
    the folder, the reason, the bytes free there and, when ``partial`` holds a journal, that the
    partial build is kept so that a new run continues it."""
    try:
        free = f"; {shutil.disk_usage(root).free:,} bytes free there"
    except OSError:
        free = ""
    kept = ""
    if partial is not None and (partial / JOURNAL_FILE).is_file():
        kept = f"; the partial build {partial} is kept: make room and run again to continue it, or"
    else:
        kept = ";"
    return CacheWriteError(f"game cache {root}: cannot write it ({e.strerror or e}{free}){kept} set PAWN_DATA_CACHE "
                           "to a writable folder with free space")


def describe_filters(f: LichessFilters) -> str:
    """e.g. ``elo [1200, 2200), min_ply 10, max_games 5000``."""
    lo = "-inf" if f.elo_min is None else f.elo_min
    hi = "inf" if f.elo_max is None else f.elo_max
    s = f"elo [{lo}, {hi}), min_ply {f.min_ply}"
    return s + (f", max_games {f.max_games}" if f.max_games is not None else "")


@dataclass(frozen=True)
class LichessCorpus:
    """A filtered corpus split into training, validation and test games (views of the caches).

    Attributes:
        train, val, test: :class:`pawn.data.cache.CsrGames` (pairwise disjoint; ``test`` is empty
            unless ``test_games > 0`` was asked for).
        val_from: ``"validation split"`` or ``"tail"`` (the last ``min(val_games, n // 5)`` games).
        caches: the caches used (the train split's first).
        source, filters: what was read and how.
        test_from: ``"test split"``, ``"tail"`` (the ``min(test_games, n // 5)`` games just before
            the validation tail, or the tail of the training split when validation is a split of
            its own) or ``"none"``.
        split: the training split's name in the source (``train``).
        ranges: ``{"train"|"val"|"test": [start, stop)}``, game indices in the cache each part
            was cut from (the training split's cache, or the validation/test split's own).
    """

    train: CsrGames
    val: CsrGames
    val_from: str
    caches: tuple[CacheInfo, ...]
    source: Source
    filters: LichessFilters
    test: Optional[CsrGames] = None
    test_from: str = "none"
    split: str = "train"
    ranges: dict = field(default_factory=dict)


def load_corpus(data: str | os.PathLike | Source, filters: LichessFilters = LichessFilters(), *,
                split: str = "train", val_games: int = DEFAULT_VAL_GAMES, cache_dir=None,
                fetcher: Optional[ShardFetcher] = None,
                warn: Optional[Callable[[str], None]] = None, test_games: int = 0) -> LichessCorpus:
    """Open ``data`` (see :func:`open_source`), filter, cache and split it (spec §6).

    Args:
        data: a PGN/parquet path or folder, a Hub dataset id, or a resolved :class:`Source`.
        filters: Elo band, min_ply, max_games.
        split: the training split (``train`` for PGN and unsplit parquet sources).
        val_games: validation size bound. With a ``validation`` split in the source, its first
            ``min(val_games, n)`` filtered games (its cache is read with ``max_games = val_games``);
            otherwise the tail ``min(val_games, n // 5)`` of the training games.
        test_games: test size bound, carved as validation is: a ``test`` split's first
            ``min(test_games, n)`` games when the source has one, else ``min(test_games, n // 5)``
            games of the training split's cache, the ones just before the validation tail (so
            the validation games do not depend on ``test_games``), or its tail when validation
            is a split of its own. 0: no test games.
        cache_dir: cache root override (else ``$PAWN_DATA_CACHE``, ``$HF_HOME``, ``~/.cache``).
        fetcher: Hub file access (default :class:`HubFetcher`).
        warn: receives one-line warnings (a cache rebuilt).

    Raises:
        DataError: unreadable source, a missing column, no game left after filtering, or no
            training game left after carving the validation tail.
        UsageError: ``val_games < 0`` or ``test_games < 0``.
    """
    if val_games < 0:
        raise UsageError(f"val_games must be ≥ 0, got {val_games}")
    if test_games < 0:
        raise UsageError(f"test_games must be ≥ 0, got {test_games}")
    source = data if isinstance(data, Source) else open_source(data, fetcher=fetcher)
    games, info = cached_games(source, split, filters, cache_dir=cache_dir, warn=warn)
    n = len(games)
    caches = [info]

    def own_split(name: str, want: int) -> CsrGames:
        g, inf = cached_games(source, name, replace(filters, max_games=want), cache_dir=cache_dir, warn=warn)
        caches.append(inf)
        return g.slice(0, min(want, len(g)))

    ranges: dict[str, list[int]] = {}
    hi = n  # the training split's games [0, hi) not yet given to validation or test
    if "validation" in source.splits and split != "validation" and val_games > 0:
        val, val_from = own_split("validation", val_games), "validation split"
        ranges["val"] = [0, len(val)]
    else:
        n_val = min(val_games, n // 5)
        val, val_from, hi = games.slice(n - n_val, n), "tail", n - n_val
        ranges["val"] = [hi, n]
    test, test_from = games.slice(hi, hi), "none"
    if test_games > 0:
        if "test" in source.splits and split != "test":
            test, test_from = own_split("test", test_games), "test split"
            ranges["test"] = [0, len(test)]
        else:
            n_test = min(test_games, n // 5)
            test, test_from = games.slice(hi - n_test, hi), "tail"
            ranges["test"] = [hi - n_test, hi]
            hi -= n_test
    if hi <= 0:
        raise DataError(f"{source.repo_or_path}: no training games left after carving {n - hi} validation/test games "
                        f"from {n}")
    ranges["train"] = [0, hi]
    return LichessCorpus(games.slice(0, hi), val, val_from, tuple(caches), source, filters, test, test_from, split, ranges)
