"""The sequence layout: how games become model sequences (spec ``engine.md`` §3.4, §4 alignment
notes; ``training-and-adapters.md`` §1.2). The one place that knows the outcome-prefix offset.

Two layouts exist:

* ``pure_moves`` (published models): ``input_ids = [m1 … mL, PAD …]``, max_ply = seq_len.
* ``outcome_prefix``: ``input_ids = [outcome, m1 … mL, PAD …]``, max_ply = seq_len − 1.

In both, ``targets[p] = input_ids[p + 1]`` with PAD in the last slot, so the final supervised
target is PAD (end of game). Checkpoints record the layout as ``run_config["prepend_outcome"]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, Optional

import numpy as np

from pawn.engine import legal_move_grid, legal_move_masks
from pawn.vocab import PAD_TOKEN, VOCAB_SIZE

LayoutName = Literal["pure_moves", "outcome_prefix"]


@dataclass(frozen=True)
class Layout:
    """A sequence layout (module docstring): pure moves, or the outcome token first.

    Attributes:
        prepend_outcome: True for the outcome-prefix layout (the name checkpoints, settings and
            the CLI flag ``--prepend-outcome`` use).
    """

    prepend_outcome: bool = False

    # ------------------------------------------------------------------ construction
    @classmethod
    def of(cls, prepend_outcome: Optional[bool]) -> "Layout":
        """The layout for a ``prepend_outcome`` flag (None = pure moves, the published one)."""
        return cls(bool(prepend_outcome))

    @classmethod
    def named(cls, name: str) -> "Layout":
        """The layout called ``"pure_moves"`` or ``"outcome_prefix"``.

        Raises:
            ValueError: any other name.
        """
        if name not in ("pure_moves", "outcome_prefix"):
            raise ValueError(f"layout must be 'pure_moves' or 'outcome_prefix', got {name!r}")
        return cls(name == "outcome_prefix")

    @classmethod
    def recorded(cls, run_config: Optional[Mapping[str, Any]]) -> Optional["Layout"]:
        """The layout a checkpoint's run config records (``prepend_outcome``), or None when it
        records none (published v1 models, converted checkpoints)."""
        value = run_config.get("prepend_outcome") if run_config else None
        return None if value is None else cls(bool(value))

    @classmethod
    def resolve(cls, flag: Optional[bool], recorded: Optional["Layout"]) -> "Layout":
        """The layout a command uses: the explicit flag, else the checkpoint's recorded layout,
        else pure moves."""
        if flag is not None:
            return cls(bool(flag))
        return recorded if recorded is not None else cls(False)

    # ------------------------------------------------------------------ geometry
    @property
    def name(self) -> LayoutName:
        """``"outcome_prefix"`` or ``"pure_moves"``."""
        return "outcome_prefix" if self.prepend_outcome else "pure_moves"

    @property
    def offset(self) -> int:
        """Sequence position of the first move: 1 with the outcome prefix, else 0."""
        return 1 if self.prepend_outcome else 0

    def seq_len(self, max_ply: int) -> int:
        """Tokens needed for games of up to ``max_ply`` plies: ``max_ply + offset``."""
        return int(max_ply) + self.offset

    def max_ply(self, seq_len: int) -> int:
        """Plies that fit in ``seq_len`` tokens: ``seq_len − offset``."""
        return int(seq_len) - self.offset

    def position_of_ply(self, ply):
        """Sequence position holding move ``ply`` (0-based): ``ply + offset``. The position whose
        *target* is move ``ply`` is one less. Works on ints and integer arrays."""
        return ply + self.offset

    def check_seq_len(self, seq_len: int) -> None:
        """Raises ValueError unless ``seq_len`` holds at least one move (≥ 1, ≥ 2 with the prefix)."""
        if seq_len < 1 + self.offset:
            raise ValueError(f"seq_len must be ≥ {1 + self.offset}, got {seq_len}")

    # ------------------------------------------------------------------ packing
    def fit(self, tokens: np.ndarray, lengths: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """Games cut (or PAD-extended) to the ``max_ply(seq_len)`` plies a sequence holds.

        Args:
            tokens: int [B, P] move tokens; slots ≥ length are ignored.
            lengths: int [B] plies per game.
            seq_len: T, the sequence length.

        Returns:
            ``(tokens int16 [B, W], lengths int16 [B])`` with W = ``max_ply(seq_len)``, lengths
            clipped to W and every slot at or after a length PAD.
        """
        width = self.max_ply(seq_len)
        tokens = np.asarray(tokens)
        n, p = tokens.shape
        out = np.full((n, width), PAD_TOKEN, np.int16)
        w = min(p, width)
        out[:, :w] = tokens[:, :w]
        lens = np.minimum(np.asarray(lengths).astype(np.int64), width)
        out[np.arange(width)[None, :] >= lens[:, None]] = PAD_TOKEN
        return np.ascontiguousarray(out), lens.astype(np.int16)

    def pack(self, tokens: np.ndarray, lengths: np.ndarray, outcome: np.ndarray, seq_len: int) -> dict[str, np.ndarray]:
        """Next-token-prediction sequences of games (spec ``engine.md`` §3.4).

        Pure moves: ``input_ids = [m1 … mL, PAD …]``; ``targets[t] = input_ids[t+1]`` with PAD
        in the last slot, so position L−1 predicts PAD ("game over") and the first move is never
        a target; ``loss_mask`` is positions ``0 … L−1``. Outcome prefix: ``input_ids =
        [outcome, m1 … mL, PAD …]`` (at most seq_len − 1 moves), ``loss_mask`` covers ``0 … L``.
        In both, ``loss_mask`` is AND-ed with ``attn_mask``, so a zero-length game supervises
        nothing (the v1 bug made it predict PAD from PAD at position 0).

        Args:
            tokens: int16/int32 [N, P] move tokens; slots ≥ length are ignored (PAD-filled here).
            lengths: int [N] plies per game (clipped to the available moves).
            outcome: int [N] outcome tokens (used only with the outcome prefix).
            seq_len: T, the output sequence length.

        Returns:
            dict of ``input_ids`` int32 [N, T], ``targets`` int32 [N, T], ``attn_mask`` bool
            [N, T] (``input_ids != PAD``), ``loss_mask`` bool [N, T].

        Raises:
            ValueError: mismatched batch sizes, a negative length, or seq_len < 1 (< 2 with the
                outcome prefix).
        """
        tokens = np.asarray(tokens)
        lengths = np.asarray(lengths).astype(np.int64)
        n = tokens.shape[0]
        if lengths.shape != (n,):
            raise ValueError(f"lengths has shape {lengths.shape}, expected ({n},)")
        if (lengths < 0).any():
            raise ValueError(f"negative game length at game {int(np.argmax(lengths < 0))}")
        self.check_seq_len(seq_len)
        offset = self.offset
        width = int(min(self.max_ply(seq_len), tokens.shape[1]))
        n_moves = np.minimum(lengths, width)
        ids = np.full((n, seq_len + 1), PAD_TOKEN, np.int32)  # one spare column for the shift
        cols = np.arange(width)
        moves = np.where(cols[None, :] < n_moves[:, None], tokens[:, :width], PAD_TOKEN)
        ids[:, offset:offset + width] = moves
        if self.prepend_outcome:
            ids[:, 0] = np.asarray(outcome, np.int32)
        input_ids = ids[:, :seq_len]
        targets = ids[:, 1:seq_len + 1]
        attn_mask = input_ids != PAD_TOKEN
        pos = np.arange(seq_len)[None, :]
        loss_mask = (pos < self.position_of_ply(n_moves)[:, None]) & attn_mask
        return {
            "input_ids": np.ascontiguousarray(input_ids),
            "targets": np.ascontiguousarray(targets),
            "attn_mask": attn_mask,
            "loss_mask": loss_mask,
        }

    # ------------------------------------------------------------------ ply → position alignment
    def align_plies(self, per_ply: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Re-index a per-ply array by the sequence position whose target that ply's move is.

        Position p predicts ``targets[p]``, the move at ply ``p + 1 − offset``: pure moves shift
        the plies down by one (ply 0 is never a target), the outcome prefix keeps them and has
        one more position. Rows from the end-of-game position (L − 1, resp. L) on are zero.

        Args:
            per_ply: [B, W, ...] indexed by ply (e.g. legal grids uint64 [B, W, 64]).
            lengths: int [B] game lengths, each in 0…W.

        Returns:
            [B, W + offset, ...] of the same dtype, i.e. ``seq_len(W)`` positions.

        Raises:
            ValueError: ``per_ply`` has fewer than 2 axes, or lengths do not match B or lie
                outside 0…W.
        """
        per_ply = np.asarray(per_ply)
        lengths = np.asarray(lengths)
        if per_ply.ndim < 2:
            raise ValueError(f"per-ply array must be [B, W, ...], got shape {per_ply.shape}")
        n_games, width = per_ply.shape[:2]
        if lengths.shape != (n_games,):
            raise ValueError(f"lengths must have shape ({n_games},), got {lengths.shape}")
        if lengths.size and (lengths.min() < 0 or lengths.max() > width):
            raise ValueError(f"lengths must lie in 0..{width}, got range {lengths.min()}..{lengths.max()}")
        n_pos = self.seq_len(width)
        out = np.zeros((n_games, n_pos) + per_ply.shape[2:], per_ply.dtype)
        first = 1 - self.offset  # ply predicted at position 0
        out[:, : n_pos - 1] = per_ply[:, first: first + n_pos - 1]
        end = self.end_position(lengths)
        out[np.arange(n_pos)[None, :] >= end[:, None]] = 0
        return out

    def end_position(self, lengths: np.ndarray) -> np.ndarray:
        """int64 [B]: the position whose target is end-of-game (PAD), ``position_of_ply(L) − 1``
        (−1 for an empty pure-moves game, which supervises nothing)."""
        return self.position_of_ply(np.asarray(lengths).astype(np.int64)) - 1

    def align_masks(self, mask: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Legal-move masks re-indexed by sequence position (spec ``engine.md`` §4 alignment).

        Row p marks the targets legal at position p, so ``logits`` can be masked row by row:
        the ply masks shifted by :meth:`align_plies`, and at the end-of-game position only PAD.
        Rows at unsupervised positions are all false. PAD is set here, so it does not matter
        whether ``mask`` already carries the PAD entry of :func:`pawn.engine.legal_move_masks`.

        Args:
            mask: bool [B, W, V] ply masks from :func:`pawn.engine.legal_move_masks`, V ≥ 1969.
            lengths: int [B] game lengths, each in 0…W.

        Returns:
            bool [B, W + offset, V].

        Raises:
            ValueError: ``mask`` is not 3-D with V ≥ 1969, or lengths do not match B or lie
                outside 0…W.
        """
        mask = np.asarray(mask, dtype=bool)
        if mask.ndim != 3 or mask.shape[2] <= PAD_TOKEN:
            raise ValueError(f"mask must be bool [B, T, V] with V > {PAD_TOKEN}, got shape {mask.shape}")
        out = self.align_plies(mask, lengths)
        end = self.end_position(lengths)
        has_end = (end >= 0) & (end < out.shape[1])
        out[np.nonzero(has_end)[0], end[has_end], PAD_TOKEN] = True
        return out

    def legal_at_positions(self, tokens: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Legal sets of games indexed by sequence position (spec eval §1.2, engine §4).

        Args:
            tokens: int16 [B, W] moves (e.g. from :meth:`fit`), W = ``max_ply(seq_len)``.
            lengths: int16 [B], each ≤ W.

        Returns:
            ``(legal bool [B, seq_len, 1980], grid uint64 [B, seq_len, 64])`` with seq_len =
            ``seq_len(W)``: row p is the legal set of the target of position p; the end-of-game
            row holds only PAD and an empty grid.

        Raises:
            ValueError: an illegal move (named by the engine) or mismatched shapes.
        """
        plies = legal_move_masks(tokens, lengths, VOCAB_SIZE)
        grid, _ = legal_move_grid(tokens, lengths)
        return self.align_masks(plies, lengths), self.align_plies(grid, lengths)


PURE_MOVES = Layout(False)
"""The published layout."""
OUTCOME_PREFIX = Layout(True)
"""The outcome token first."""
