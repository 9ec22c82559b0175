"""The training batch stream.

Batch ``s`` of a run is, by definition, games ``[s·B, (s+1)·B)`` of the run's game stream: the
engine's random games for the run seed (``random_games(B, max_ply, seed, first_game=s·B)``) or
the same rows of an on-disk corpus. Any step's batch can therefore be regenerated, and resuming at
step s needs no RNG state. With several JAX processes, process p of P reads the contiguous
sub-range ``[s·B + p·B/P, s·B + (p+1)·B/P)``.

A background thread builds chunks of K batches ahead of the device (the Rust engine releases the
GIL while it plays); the time the training loop spends waiting for data is measured.
"""

from __future__ import annotations

from pawn.errors import DataError
import json
import queue
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Protocol

import numpy as np

from pawn.data.layout import Layout
from pawn.engine import random_games


class GameSource(Protocol):
    """Where games come from: ``games(first_game, n)`` → (tokens int16 [n, P], lengths [n],
    outcome [n]) for games ``first_game … first_game + n − 1`` of the stream."""

    def games(self, first_game: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


@dataclass(frozen=True)
class EngineSource:
    """Fresh random games from the engine: game i of the stream depends only on (seed, i)."""

    seed: int
    max_ply: int
    mate_boost: float = 0.0

    def games(self, first_game: int, n: int):
        """Games ``first_game … first_game + n − 1`` of the seed's stream: tokens int16 [n, max_ply]
        (PAD-filled), lengths int16 [n], outcome int16 [n]."""
        g = random_games(n, self.max_ply, self.seed, mate_boost=self.mate_boost, first_game=first_game)
        return g.tokens, g.lengths, g.outcome


class CorpusError(DataError):
    """An on-disk corpus that does not fit the run; the message names the directory and field."""


CORPUS_META = "corpus.json"


def build_corpus(
    directory: Path,
    n_games: int,
    max_ply: int,
    seed: int,
    *,
    mate_boost: float = 0.0,
    block: int = 65536,
    progress: Optional[Callable[[int], None]] = None,
) -> Path:
    """Write games ``0 … n_games−1`` of the engine stream for ``seed`` to ``directory``:
    ``tokens.npy`` int16 [N, max_ply] (PAD-filled), ``lengths.npy`` int16 [N], ``outcome.npy``
    int16 [N] and ``corpus.json`` (seed, max_ply, mate_boost, n_games). Built in a sibling
    ``.tmp`` directory and renamed into place, so a crash never leaves a half corpus.
    ``progress(games_done)`` is called after each block."""
    directory = Path(directory)
    tmp = directory.with_name(directory.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        tok = np.lib.format.open_memmap(tmp / "tokens.npy", mode="w+", dtype=np.int16, shape=(n_games, max_ply))
        lens = np.zeros(n_games, np.int16)
        outc = np.zeros(n_games, np.int16)
        src = EngineSource(seed, max_ply, mate_boost)
        for start in range(0, n_games, block):
            n = min(block, n_games - start)
            t, l, o = src.games(start, n)
            tok[start:start + n], lens[start:start + n], outc[start:start + n] = t, l, o
            if progress:
                progress(start + n)
        tok.flush()
        del tok
        np.save(tmp / "lengths.npy", lens)
        np.save(tmp / "outcome.npy", outc)
        meta = {"format_version": 1, "seed": seed, "max_ply": max_ply, "mate_boost": mate_boost, "n_games": n_games}
        (tmp / CORPUS_META).write_text(json.dumps(meta, indent=2))
        if directory.exists():
            shutil.rmtree(directory)
        tmp.rename(directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


class CorpusSource:
    """Games read from a corpus written by :func:`build_corpus` (memory-mapped)."""

    def __init__(self, directory: Path, *, seed: int, max_ply: int, mate_boost: float, n_games: int):
        """Open and check a corpus.

        Raises:
            CorpusError: missing/unreadable ``corpus.json`` or a seed, max_ply, mate_boost or
                size that does not match the run.
        """
        directory = Path(directory)
        try:
            meta = json.loads((directory / CORPUS_META).read_text())
        except (OSError, ValueError) as e:
            raise CorpusError(f"{directory}: not a PAWN corpus ({e.__class__.__name__}: {e})") from None
        for key, want in (("seed", seed), ("max_ply", max_ply), ("mate_boost", mate_boost)):
            if meta.get(key) != want:
                raise CorpusError(f"{directory}: corpus {key} = {meta.get(key)!r} but the run needs {want!r}")
        if meta.get("n_games", 0) < n_games:
            raise CorpusError(f"{directory}: corpus holds {meta.get('n_games')} games, the run needs {n_games}")
        self.directory = directory
        self.tokens = np.load(directory / "tokens.npy", mmap_mode="r")
        self.lengths = np.load(directory / "lengths.npy")
        self.outcome = np.load(directory / "outcome.npy")

    def games(self, first_game: int, n: int):
        """Rows ``first_game … first_game + n − 1`` of the corpus (same arrays as
        :meth:`EngineSource.games`); fewer rows when the corpus ends first."""
        sl = slice(first_game, first_game + n)
        return np.asarray(self.tokens[sl]), self.lengths[sl], self.outcome[sl]


def make_batch(source: GameSource, step: int, batch_size: int, seq_len: int, prepend_outcome: bool,
               process_index: int = 0, process_count: int = 1) -> dict[str, np.ndarray]:
    """This process's part of batch ``step``: games ``[step·B + p·B/P, step·B + (p+1)·B/P)``
    packed by :meth:`pawn.data.layout.Layout.pack` (arrays [B/P, T])."""
    local = batch_size // process_count
    first = step * batch_size + process_index * local
    tokens, lengths, outcome = source.games(first, local)
    return Layout.of(prepend_outcome).pack(tokens, lengths, outcome, seq_len)


class ChunkStream:
    """Chunks of K consecutive batches, built ahead of the device by a background thread.

    Iterating yields ``(first_step, chunk)`` where ``chunk`` maps each packed field to an array
    [K, B_local, T]. ``wait_s`` accumulates the seconds the consumer spent blocked on data.
    """

    def __init__(self, source: GameSource, *, start_step: int, end_step: int, k: int, batch_size: int,
                 seq_len: int, prepend_outcome: bool, prefetch: int = 2, process_index: int = 0,
                 process_count: int = 1):
        self._args = (source, batch_size, seq_len, prepend_outcome, process_index, process_count)
        self._steps = list(range(start_step, end_step, k))
        self._k = k
        self._q: queue.Queue = queue.Queue(maxsize=max(1, prefetch))
        self._stop = threading.Event()
        self.wait_s = 0.0
        self._thread = threading.Thread(target=self._produce, name="pawn-data", daemon=True)
        self._thread.start()

    def _produce(self) -> None:
        source, B, T, prefix, p, P = self._args
        try:
            for s0 in self._steps:
                batches = [make_batch(source, s, B, T, prefix, p, P) for s in range(s0, s0 + self._k)]
                chunk = {key: np.stack([b[key] for b in batches]) for key in batches[0]}
                while not self._stop.is_set():
                    try:
                        self._q.put((s0, chunk), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
            self._q.put(None)
        except BaseException as e:  # surface data errors in the training thread
            self._q.put(e)

    def __iter__(self) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        while True:
            t0 = time.perf_counter()
            item = self._q.get()
            self.wait_s += time.perf_counter() - t0
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        """Stop the producer thread (idempotent)."""
        self._stop.set()
        try:
            while True:
                self._q.get_nowait()
        except queue.Empty:
            pass
        self._thread.join(timeout=10)
