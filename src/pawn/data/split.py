"""Which games an adapter run trained, validated and tested on: the run's ``split.json``.

A run records the source it read (its resolved path or Hub id, and a fingerprint of its files:
name, size and mtime of each, the same identity the game cache checks), the filters, and the
rule that cut the filtered games into train / validation / test (:func:`pawn.data.lichess.load_corpus`:
validation is the tail ``min(val_games, n // 5)`` of the filtered games in source order, or the
source's ``validation`` split; test the ``min(test_games, n // 5)`` games just before it, or the
source's ``test`` split). Nothing in the rule is random, so the same source and settings give the
same games again: :func:`rederive` rebuilds a part from the record, refusing when the source changed.

For PGN sources the Lichess game id of every game of each part is kept beside the record
(``split_ids.safetensors``: uint64 ``train``, ``val``, ``test``, sorted; 0 = a game without an
id is left out), so an evaluation can count how many of its games the adapter trained on
(:func:`overlap`) without reading the training source again.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from pawn.errors import DataError

SPLIT_FILE = "split.json"
"""The split record in an adapter run directory."""
SPLIT_IDS_FILE = "split_ids.safetensors"
"""The sorted Lichess game ids of each part (PGN sources only)."""
FORMAT_VERSION = 1
PARTS = ("train", "val", "test")


def fingerprint_digest(files: dict[str, list]) -> str:
    """SHA-256 hex of ``json.dumps(files, sort_keys=True)``: ``{split: [[name, size, mtime_ns], …]}``
    (:meth:`pawn.data.lichess.Source.fingerprint` of each split read)."""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def ids_digest(ids: Optional[np.ndarray]) -> Optional[str]:
    """SHA-256 hex of sorted uint64 ids (little-endian bytes), or None without ids."""
    if ids is None:
        return None
    return hashlib.sha256(np.sort(np.asarray(ids, "<u8")).tobytes()).hexdigest()


@dataclass(frozen=True)
class SplitRecord:
    """One run's ``split.json``.

    Attributes:
        path: the file read (or to write).
        data: ``--data`` as given. kind, repo_or_path: the resolved source (``pgn``/``parquet``/``hub``).
        source_split: the training split's name in the source.
        files: ``{split: [[name, size, mtime_ns], …]}`` of every source split read.
        fingerprint: :func:`fingerprint_digest` of ``files``.
        filters: ``elo_min``, ``elo_max`` (both players, ``[min, max)``), ``min_ply``, ``max_games``.
        rule: ``val_games``, ``test_games`` (the bounds asked for), ``val_from``, ``test_from``
            (:class:`pawn.data.lichess.LichessCorpus`) and ``ranges`` ({part: [start, stop)}).
        counts: games per part, and the ``duplicate`` games the scan dropped.
        ids_sha256: {part: :func:`ids_digest`} (None for sources without ids).
        ids: {part: sorted uint64 ids}, loaded from :data:`SPLIT_IDS_FILE` when present.
    """

    path: Path
    data: str
    kind: str
    repo_or_path: str
    source_split: str
    files: dict
    fingerprint: str
    filters: dict
    rule: dict
    counts: dict
    ids_sha256: dict
    ids: Optional[dict] = None

    def to_json(self) -> dict[str, Any]:
        """The ``split.json`` document (JSON-ready; the game ids go in their own file, named here)."""
        return {"format_version": FORMAT_VERSION, "data": self.data,
                "source": {"kind": self.kind, "repo_or_path": self.repo_or_path, "split": self.source_split,
                           "files": self.files, "fingerprint_sha256": self.fingerprint},
                "filters": self.filters, "rule": self.rule, "counts": self.counts, "ids_sha256": self.ids_sha256,
                "ids_file": SPLIT_IDS_FILE if self.ids is not None else None}

    def summary(self) -> dict[str, Any]:
        """The record without the file list (for the run's ``config`` record)."""
        d = self.to_json()
        d["source"] = {k: v for k, v in d["source"].items() if k != "files"}
        return d

    def n(self, part: str) -> int:
        """Games in ``part`` (``"train"``, ``"val"`` or ``"test"``); 0 for a part the run does not have."""
        return int(self.counts.get(part, 0))


def record_of(corpus, data: str, *, val_games: int, test_games: int, path: Path) -> SplitRecord:
    """The :class:`SplitRecord` of a :class:`pawn.data.lichess.LichessCorpus` (nothing written)."""
    src = corpus.source
    splits = [corpus.split] + [s for s, used in (("validation", corpus.val_from == "validation split"),
                                                  ("test", corpus.test_from == "test split")) if used]
    files = {s: src.fingerprint(s) for s in splits}
    parts = {"train": corpus.train, "val": corpus.val, "test": corpus.test}
    has_ids = all(g is None or g.ids is not None for g in parts.values())
    ids = {p: np.unique(g.ids[g.ids != 0]).astype(np.uint64) if g is not None else np.zeros(0, np.uint64)
           for p, g in parts.items()} if has_ids else None
    f = corpus.filters
    dup = sum(int(c.stats.dropped.get("duplicate", 0)) for c in corpus.caches)
    return SplitRecord(
        path, str(data), src.kind, src.repo_or_path, corpus.split, files, fingerprint_digest(files),
        {"elo_min": f.elo_min, "elo_max": f.elo_max, "min_ply": f.min_ply, "max_games": f.max_games},
        {"val_games": int(val_games), "test_games": int(test_games), "val_from": corpus.val_from,
         "test_from": corpus.test_from, "ranges": {k: list(v) for k, v in corpus.ranges.items()}},
        {"train": len(corpus.train), "val": len(corpus.val), "test": 0 if corpus.test is None else len(corpus.test),
         "duplicates_dropped": dup},
        {p: (ids_digest(ids[p]) if ids is not None else None) for p in PARTS}, ids)


def write(rec: SplitRecord) -> None:
    """Write ``rec`` (``split.json``, and the ids beside it) atomically: each file is written to a
    temporary name and renamed into place, the ids first."""
    from pawn.fileio import atomic_output, save_safetensors, write_json

    if rec.ids is not None:
        with atomic_output(rec.path.parent / SPLIT_IDS_FILE) as tmp:
            save_safetensors({p: np.asarray(v, np.uint64) for p, v in rec.ids.items()}, tmp)
    write_json(rec.path, rec.to_json(), what="split record")


def read(path: str | os.PathLike, *, with_ids: bool = True) -> SplitRecord:
    """Read a ``split.json`` (and, with ``with_ids``, its ids file).

    Raises:
        DataError: missing, unreadable or malformed (naming the file and field).
    """
    p = Path(path)
    try:
        d = json.loads(p.read_text("utf-8"))
    except OSError as e:
        raise DataError(f"{p}: cannot read the split record ({e.strerror or e})") from None
    except ValueError as e:
        raise DataError(f"{p}: not JSON ({e})") from None
    try:
        if d.get("format_version") != FORMAT_VERSION:
            raise DataError(f"{p}: format_version {d.get('format_version')!r}, expected {FORMAT_VERSION}")
        src = d["source"]
        ids = None
        if with_ids and d.get("ids_file"):
            from safetensors.numpy import load_file

            try:
                ids = dict(load_file(str(p.parent / d["ids_file"])))
            except Exception as e:  # a missing or damaged ids file: one line
                raise DataError(f"{p.parent / d['ids_file']}: cannot read the game ids ({type(e).__name__})") from None
        return SplitRecord(p, str(d["data"]), str(src["kind"]), str(src["repo_or_path"]), str(src["split"]),
                           dict(src["files"]), str(src["fingerprint_sha256"]), dict(d["filters"]), dict(d["rule"]),
                           dict(d["counts"]), dict(d.get("ids_sha256") or {}), ids)
    except (KeyError, TypeError, AttributeError) as e:
        raise DataError(f"{p}: malformed split record (field {e})") from None


def check_source(rec: SplitRecord):
    """The recorded source, opened again, when its files are still the ones the run read.

    Returns:
        :class:`pawn.data.lichess.Source`.

    Raises:
        DataError: the source is gone, or its fingerprint differs (a file added, removed, resized
            or modified since the run): one line naming the first difference.
    """
    from pawn.data.lichess import open_source

    try:
        src = open_source(rec.repo_or_path)
    except DataError as e:
        raise DataError(f"the run's training source cannot be opened again ({e})") from None
    now = {s: src.fingerprint(s) if s in src.splits else [] for s in rec.files}
    if fingerprint_digest(now) != rec.fingerprint:
        diff = _first_difference(rec.files, now)
        raise DataError(f"{rec.repo_or_path}: the source changed since the run recorded it in {rec.path} ({diff}); "
                        "its held-out games cannot be re-derived")
    return src


def _first_difference(old: dict, new: dict) -> str:
    for split in sorted(set(old) | set(new)):
        a = {r[0]: r[1:] for r in old.get(split, [])}
        b = {r[0]: r[1:] for r in new.get(split, [])}
        for name in sorted(set(a) | set(b)):
            if name not in b:
                return f"{name} is gone"
            if name not in a:
                return f"{name} is new"
            if a[name] != b[name]:
                what = "size" if a[name][:1] != b[name][:1] else "modification time"
                return f"{name}: its {what} changed"
    return "its file list differs"


def rederive(rec: SplitRecord, part: str, *, cache_dir=None, warn=None):
    """The games of ``part`` (``train``, ``val`` or ``test``) the run used, rebuilt from the
    recorded source, filters and rule (the game cache is reused when present).

    Returns:
        :class:`pawn.data.cache.CsrGames`.

    Raises:
        DataError: the source changed (:func:`check_source`), or the games re-derived are not
            the recorded ones (count or id digest); UsageError: an unknown part, or a part the run
            did not carve (``test`` without ``--test-games``).
    """
    from pawn.data.lichess import LichessFilters, load_corpus
    from pawn.errors import UsageError

    if part not in PARTS:
        raise UsageError(f"split {part!r}: choose from {', '.join(PARTS)}")
    if rec.n(part) == 0:
        hint = " (train it with --test-games N)" if part == "test" else ""
        raise UsageError(f"the run of {rec.path.parent} carved no {part} games{hint}")
    src = check_source(rec)
    f = rec.filters
    corpus = load_corpus(src, LichessFilters(f.get("elo_min"), f.get("elo_max"), int(f.get("min_ply", 10)), f.get("max_games")),
                         split=rec.source_split, val_games=int(rec.rule["val_games"]),
                         test_games=int(rec.rule.get("test_games", 0)), cache_dir=cache_dir, warn=warn)
    games = {"train": corpus.train, "val": corpus.val, "test": corpus.test}[part]
    want = rec.ids_sha256.get(part)
    got = ids_digest(None if games.ids is None else games.ids[games.ids != 0])
    if len(games) != rec.n(part) or (want is not None and got != want):
        raise DataError(f"{rec.path}: re-deriving the {part} games gave {len(games):,} games"
                        f"{'' if len(games) != rec.n(part) else ' with other game ids'}, the run recorded {rec.n(part):,}")
    return games


def overlap(rec: SplitRecord, ids: np.ndarray) -> dict[str, int]:
    """How many of ``ids`` (uint64 [k], Lichess game ids; 0 = none, never counted) are games of
    each part of the run: ``{"train": n, "val": n, "test": n}``.

    Raises:
        DataError: the record keeps no ids (a non-PGN source).
    """
    if rec.ids is None:
        raise DataError(f"{rec.path}: the run's source ({rec.kind}) records no game ids")
    ids = np.asarray(ids, np.uint64)
    ids = ids[ids != 0]
    return {p: int(np.isin(ids, rec.ids.get(p, np.zeros(0, np.uint64))).sum()) for p in PARTS}


__all__ = ["SPLIT_FILE", "SPLIT_IDS_FILE", "SplitRecord", "record_of", "write", "read", "check_source", "rederive",
           "overlap", "fingerprint_digest", "ids_digest"]
