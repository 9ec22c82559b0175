"""Batches of a cached game set for adapter training and validation (spec
``training-and-adapters.md`` §5 "Shuffling and resume", "Loss", "Batching").

Batch ``s`` of a run is a pure function of ``(games, layout, seq_len, batch_size, data_seed, s)``:
epoch ``e = s // steps_per_epoch`` walks the permutation :meth:`GameBatches.permutation` ``(e)``
(seeded with ``(data_seed XOR (e · 0x9E3779B97F4A7C15)) mod 2^64``), batch ``k = s % steps_per_epoch``
takes its entries ``[k·B, (k+1)·B)``. Resuming at global step ``s`` is ``batch_at(s)`` (or
``iter_from(s)``): nothing is fast-forwarded and no RNG state is saved beyond ``data_seed``.
Incomplete final batches are dropped for training; the validation order is fixed (no shuffle)
and its last batch is padded with empty games (``game_index = −1``, nothing supervised).

Legal sets (spec §5): row ``p`` of ``legal`` is the set of tokens legal as the target of position
``p``: the legal moves after ``p + 1 − offset`` plies, and ``{PAD}`` alone at the end-of-game
position (``L − 1`` for pure moves, ``L`` with the outcome prefix), also when ``L`` fills the
sequence. They are computed per batch by the engine (sparse indices, no dense [B, T, V] array) and
returned bit-packed: ``legal`` uint8 [B, T, 248], bit ``v % 8`` of byte ``v // 8`` (little bit
order) = token v. Unpack with :func:`unpack_legal`, or on device with
``jnp.unpackbits(legal, axis=-1, count=1980, bitorder="little")``.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from pawn.data.cache import CsrGames
from pawn.data.layout import Layout
from pawn.engine import legal_move_masks_sparse, validate_games
from pawn.errors import DataError, UsageError
from pawn.vocab import VOCAB_SIZE

GOLDEN = 0x9E3779B97F4A7C15
LEGAL_BYTES = (VOCAB_SIZE + 7) // 8
"""Bytes per position of a bit-packed legal set (248 for the 1,980-token vocabulary)."""


def epoch_seed(data_seed: int, epoch: int) -> int:
    """``(data_seed XOR (epoch · 0x9E3779B97F4A7C15)) mod 2^64`` (spec §5, v1's scheme)."""
    return (int(data_seed) ^ (int(epoch) * GOLDEN)) % (1 << 64)


def unpack_legal(packed: np.ndarray, vocab_size: int = VOCAB_SIZE) -> np.ndarray:
    """bool [..., vocab_size] from bit-packed uint8 [..., ceil(vocab_size / 8)] legal sets."""
    return np.unpackbits(packed, axis=-1, count=vocab_size, bitorder="little").astype(bool)


@dataclass(frozen=True)
class Batch:
    """One batch (B games, T = seq_len positions).

    Attributes:
        input_ids: int32 [B, T] (:meth:`pawn.data.layout.Layout.pack`).
        targets: int32 [B, T]; ``targets[:, t] = input_ids[:, t + 1]``, PAD in the last slot.
        loss_mask: bool [B, T], the supervised positions (``L`` per pure-moves game).
        attn_mask: bool [B, T], ``input_ids != PAD``.
        legal: uint8 [B, T, 248] bit-packed legal target sets (module docstring), or None when the
            batches were made with ``legal_mask=False``.
        game_index: int64 [B], the game of each row in the game set (−1: padding row).
        step: the global step (training) or batch number (validation).
        epoch: the epoch of ``step`` (0 for validation).
    """

    input_ids: np.ndarray
    targets: np.ndarray
    loss_mask: np.ndarray
    attn_mask: np.ndarray
    legal: Optional[np.ndarray]
    game_index: np.ndarray
    step: int
    epoch: int


class GameBatches:
    """Deterministic batches of a game set (module docstring).

    Args:
        games: the game set (e.g. ``load_corpus(...).train``).
        layout: pure moves or outcome prefix (:class:`pawn.data.layout.Layout`).
        seq_len: T; games longer than ``layout.max_ply(seq_len)`` plies are cut at access time.
        batch_size: B.
        data_seed: the permutation seed (training).
        shuffle: permute per epoch (training) or keep the game order (validation).
        drop_last: drop an incomplete final batch (training) or pad it with empty games (validation).
        steps_per_epoch: None for all full batches (``n // B``); a smaller value truncates each
            epoch to that many batches.
        legal_mask: compute the legal sets (``Batch.legal``).

    Raises:
        UsageError: seq_len too short for the layout, batch_size < 1, or steps_per_epoch < 1 or
            above the batches the game set holds.
        DataError: fewer games than one batch (training).
    """

    def __init__(self, games: CsrGames, layout: Layout, seq_len: int, batch_size: int, data_seed: int = 0, *,
                 shuffle: bool = True, drop_last: bool = True, steps_per_epoch: Optional[int] = None,
                 legal_mask: bool = True):
        if seq_len < 1 + layout.offset:
            raise UsageError(f"seq_len must be ≥ {1 + layout.offset} for the {layout.name} layout, got {seq_len}")
        if batch_size < 1:
            raise UsageError(f"batch_size must be ≥ 1, got {batch_size}")
        self.games, self.layout, self.seq_len, self.batch_size = games, layout, int(seq_len), int(batch_size)
        self.data_seed, self.shuffle, self.drop_last, self.legal_mask = int(data_seed), shuffle, drop_last, legal_mask
        n = len(games)
        available = n // batch_size if drop_last else -(-n // batch_size)
        if available == 0 and drop_last:
            raise DataError(f"only {n} games: fewer than one batch of {batch_size}")
        if steps_per_epoch is None:
            steps_per_epoch = available
        elif not 1 <= steps_per_epoch <= available:
            raise UsageError(f"steps_per_epoch must be in 1..{available} (the full batches of {n} games at "
                             f"batch size {batch_size}), got {steps_per_epoch}")
        self.steps_per_epoch = int(steps_per_epoch)
        self._perm: Optional[tuple[int, np.ndarray]] = None

    def __len__(self) -> int:
        """Batches per epoch."""
        return self.steps_per_epoch

    def permutation(self, epoch: int) -> np.ndarray:
        """int64 [n]: the game order of ``epoch``, a pure function of ``(data_seed, epoch)``
        (identity without shuffling)."""
        n = len(self.games)
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        cached = self._perm  # (epoch, permutation), replaced as one object: safe with the prefetch thread
        if cached is None or cached[0] != epoch:
            cached = (epoch, np.random.default_rng(epoch_seed(self.data_seed, epoch)).permutation(n).astype(np.int64))
            self._perm = cached
        return cached[1]

    def indices(self, step: int) -> np.ndarray:
        """int64 [B]: the games of global step ``step`` (−1 for padding rows)."""
        if step < 0:
            raise UsageError(f"step must be ≥ 0, got {step}")
        epoch, k = divmod(int(step), self.steps_per_epoch)
        idx = self.permutation(epoch)[k * self.batch_size:(k + 1) * self.batch_size]
        if idx.shape[0] < self.batch_size:
            idx = np.concatenate([idx, np.full(self.batch_size - idx.shape[0], -1, np.int64)])
        return idx

    def batch_at(self, step: int) -> Batch:
        """The batch of global step ``step`` (see :class:`Batch`).

        Raises:
            DataError: a game of the set is not a legal move sequence (names its index).
        """
        idx = self.indices(step)
        tokens, lengths, outcome = self.games.gather(idx, self.layout.max_ply(self.seq_len))
        packed = self.layout.pack(tokens, lengths, outcome, self.seq_len)
        legal = self._legal(tokens, lengths, idx) if self.legal_mask else None
        return Batch(packed["input_ids"], packed["targets"], packed["loss_mask"], packed["attn_mask"], legal, idx,
                     int(step), int(step) // self.steps_per_epoch)

    def legal_at(self, step: int) -> np.ndarray:
        """uint8 [B, T, 248]: the bit-packed legal sets of batch ``step``, what :meth:`batch_at`
        puts in ``Batch.legal`` with ``legal_mask=True`` (the same bytes), built now by the engine.

        Raises:
            DataError: a game of the batch is not a legal move sequence (names its index).
        """
        idx = self.indices(step)
        tokens, lengths, _ = self.games.gather(idx, self.layout.max_ply(self.seq_len))
        return self._legal(tokens, lengths, idx)

    def _legal(self, tokens: np.ndarray, lengths: np.ndarray, idx: np.ndarray) -> np.ndarray:
        b, w = tokens.shape
        t_len = self.seq_len
        try:
            # seq_len = w + 1 so the {PAD} entry at ply L is written also when L == w.
            flat = legal_move_masks_sparse(tokens, lengths, w + 1, VOCAB_SIZE)
        except ValueError:
            ok, ply = validate_games(tokens, lengths)
            bad = int(np.argmin(ok))
            raise DataError(f"game {int(idx[bad])} of the game set: illegal move at ply {int(ply[bad])}") from None
        g, rem = np.divmod(flat, (w + 1) * VOCAB_SIZE)
        ply, tok = np.divmod(rem, VOCAB_SIZE)
        pos = ply - 1 + self.layout.offset  # position whose target is the move at this ply
        keep = (pos >= 0) & (pos < t_len)
        g, pos, tok = g[keep], pos[keep], tok[keep]
        out = np.zeros(b * t_len * LEGAL_BYTES, np.uint8)
        np.bitwise_or.at(out, (g * t_len + pos) * LEGAL_BYTES + (tok >> 3), (1 << (tok & 7)).astype(np.uint8))
        return out.reshape(b, t_len, LEGAL_BYTES)

    def iter_from(self, step: int = 0, stop: Optional[int] = None, prefetch: int = 2) -> Iterator[Batch]:
        """Batches ``step, step + 1, …`` up to ``stop`` (exclusive; None: forever for training,
        one epoch for validation), built ``prefetch`` ahead on a background thread (0: inline)."""
        if stop is None and not self.shuffle:
            stop = self.steps_per_epoch
        steps = iter(range(step, stop)) if stop is not None else _count(step)
        if prefetch <= 0:
            for s in steps:
                yield self.batch_at(s)
            return
        q: queue.Queue = queue.Queue(maxsize=prefetch)
        done = threading.Event()

        def work() -> None:
            try:
                for s in steps:
                    if done.is_set():
                        return
                    q.put(("ok", self.batch_at(s)))
                q.put(("end", None))
            except BaseException as e:  # handed to the consumer
                q.put(("err", e))

        t = threading.Thread(target=work, daemon=True, name="pawn-lichess-batches")
        t.start()
        try:
            while True:
                kind, item = q.get()
                if kind == "end":
                    return
                if kind == "err":
                    raise item
                yield item
        finally:
            done.set()
            while t.is_alive():
                try:
                    q.get_nowait()
                except queue.Empty:
                    t.join(0.01)


class ValidationBatches:
    """The validation batches of a game set (fixed order, last batch padded with empty games),
    holding only their token arrays; each batch's legal sets are built by the engine when that
    batch is reached in iteration, as training builds them, and dropped after it.

    Host memory for the legal sets is therefore one batch (``B·T·248`` bytes) however many games
    the set holds, instead of 248 bytes per position of the whole set (≈ 3.2 GB for 50,000 games ×
    256 plies). The cost is one engine call per batch per validation pass.

    Args:
        games, layout, seq_len, batch_size: as for :class:`GameBatches`.
        keys: the :class:`Batch` token fields each batch dict holds (e.g. ``input_ids``,
            ``targets``, ``loss_mask``, ``attn_mask``).
        legal: add ``legal`` (uint8 [B, T, 248], :meth:`GameBatches.legal_at`) to each dict.

    Iterating yields ``{key: array} | {"legal": uint8 [B, T, 248]}`` per batch, equal to the
    fields of ``GameBatches(..., shuffle=False, drop_last=False).batch_at(i)``.

    Raises:
        UsageError: as :class:`GameBatches`.
        DataError: (while iterating) a game is not a legal move sequence (names its index).
    """

    def __init__(self, games: CsrGames, layout: Layout, seq_len: int, batch_size: int, keys: tuple[str, ...], *,
                 legal: bool = True):
        self.source = GameBatches(games, layout, seq_len, batch_size, shuffle=False, drop_last=False, legal_mask=False)
        self.keys, self.legal = tuple(k for k in keys if k != "legal"), bool(legal)
        self.tokens: list[dict[str, np.ndarray]] = [{k: getattr(b, k) for k in self.keys}
                                                    for b in self.source.iter_from(0, prefetch=0)]

    def __len__(self) -> int:
        """Number of batches."""
        return len(self.tokens)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for i, b in enumerate(self.tokens):
            yield {**b, "legal": self.source.legal_at(i)} if self.legal else dict(b)

    @property
    def held_bytes(self) -> int:
        """Bytes of the arrays held between passes (the token batches; no legal sets)."""
        return int(sum(a.nbytes for b in self.tokens for a in b.values()))

    @property
    def legal_bytes_per_batch(self) -> int:
        """Bytes of one batch's legal sets, alive only while that batch is evaluated (0 without
        ``legal``)."""
        return self.source.batch_size * self.source.seq_len * LEGAL_BYTES if self.legal else 0


def _count(start: int) -> Iterator[int]:
    s = start
    while True:
        yield s
        s += 1
