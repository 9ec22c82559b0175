"""Teacher-forced move accuracy, legality and game completion (spec
``eval-probe-generate-sweep-bench.md`` §1.2–§1.5, §5): the metric core shared by the trainer's
validation and ``pawn eval`` (it sits below both; :mod:`pawn.evaluate.accuracy` re-exports it).

Two conventions are computed in one pass and kept apart by name:

* **published** (v1 validation, the numbers in the model cards): loss, top-1 and top-5 over every
  ``loss_mask`` position — including the terminal slot whose target is PAD — with argmax/top-k
  over the full 1,980-token vocabulary, averaged as the unweighted mean of per-batch means
  (batch = ``batch_size`` games; a batch without positions contributes 0). Legal rates, game
  completion and the illegal probability mass follow §1.2–§1.4.
* **moves-only** (v2 ``evaluate_accuracy``): positions with ``loss_mask`` and a move target
  (terminal slot excluded), argmax/top-k over the 1,968 actions, position-weighted.
* **legal-masked** (``pawn adapt``'s hard mask; the MAIA-style accuracy of §1.6): argmax/top-k over
  the legal moves only, position-weighted over **move decisions** — the moves-only positions, i.e.
  supervised positions whose legal set is a real move set. The end-of-game slot (legal set {PAD},
  a certain hit under the mask; v1 counted it) is not counted, nor the last slot of a game cut at
  the ply cap (it has no end-of-game target).

Every ratio to the ceiling divides figures over the same positions, except the published
``top1_over_ceiling`` (the model cards' ratio: its top-1 counts the end-of-game slots and not ply
0, its ceiling counts ply 0 and no end-of-game slot).

The accuracy ceiling E[1/N_legal] (§5) is computed on the same games. The model runs one batch
at a time through a single jitted step that returns per-position scalars only, so memory is
bounded by one batch of logits.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from pawn.data.layout import Layout
from pawn.engine import accuracy_ceiling_of
from pawn.metrics import MIN_EVAL_PLY  # the one home: the tables' labels name it
from pawn.stats import bootstrap_ratio
from pawn.vocab import NUM_ACTIONS, PAD_TOKEN, action_table

PHASES: tuple[tuple[str, int, Optional[int]], ...] = (("opening", 0, 20), ("midgame", 20, 60), ("endgame", 60, None))
"""Moves-only phase buckets by **sequence position** p (spec §1.5): [0, 20), [20, 60), [60, ∞)."""

PERPLEXITY_LOSS_CAP = 20.0
"""``perplexity = exp(min(loss, 20))`` (spec §1.2)."""

_SRC, _DST, _ = (a.astype(np.int64) for a in action_table())


# --------------------------------------------------------------------------- device step
def first_argmax(x: jax.Array, axis: int = -1) -> jax.Array:
    """Index of the first maximum along ``axis``: the same values as ``jnp.argmax`` (ties go to the
    lowest index, a NaN counts as the maximum, all ``-inf`` gives 0), computed as one max-reduce
    and one min-reduce over ``where(x == max, index, n)`` instead of XLA's variadic (value, index)
    reduce, which XLA:CPU runs several times slower: on [2048, 1980] fp32 logits
    ``benchmarks/xla_profile.py`` puts it among the adapter step's largest non-matmul ops.

    Args:
        x: array of any real dtype and shape [..., n, ...] (n = ``x.shape[axis]`` ≥ 1).
        axis: the axis to reduce.

    Returns:
        int32 array of ``x``'s shape without ``axis``.

    Raises:
        ValueError: ``axis`` has size 0 (as ``jnp.argmax``).
    """
    axis = axis % x.ndim
    m = jnp.max(x, axis=axis, keepdims=True)
    hit = x == m
    if jnp.issubdtype(x.dtype, jnp.floating):
        hit = hit | (jnp.isnan(x) & jnp.isnan(m))  # jnp.argmax: the first NaN wins
    index = jax.lax.broadcasted_iota(jnp.int32, x.shape, axis)
    return jnp.min(jnp.where(hit, index, x.shape[axis]), axis=axis)


@eqx.filter_jit
def _score_batch(model, input_ids, attn_mask, targets, packed_legal, dtype):
    """Per-position scores of one batch, on device. Returns a dict of [B, T] arrays:
    ``nll`` (full-vocab CE at the target), ``argmax`` / ``in_top5`` (full vocab),
    ``act_argmax`` / ``act_in_top5`` (the 1,968 actions only), ``legal_mass`` (softmax mass on
    the tokens set in ``packed_legal``, uint8 [B, T, ceil(V/8)] big-endian bit order) and
    ``legal_hit`` / ``legal_in_top5`` (the target is the argmax / in the top 5 of the logits
    restricted to the legal set: the MAIA-style adapter metric of spec eval §1.6) and
    ``legal_nll`` (CE at the target of the softmax over the legal set: ``pawn adapt``'s hard
    legal-masked loss, spec training §5; 0 where the row has no legal token)."""
    logits = model(input_ids, attn_mask, dtype=dtype).astype(jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    tgt = targets[..., None]
    nll = -jnp.take_along_axis(logp, tgt, axis=-1)[..., 0]
    top5 = jax.lax.top_k(logits, 5)[1]
    act_top5 = jax.lax.top_k(logits[..., :NUM_ACTIONS], 5)[1]
    legal = jnp.unpackbits(packed_legal, axis=-1)[..., : logits.shape[-1]].astype(bool)
    legal_mass = jnp.sum(jnp.where(legal, jnp.exp(logp), 0.0), axis=-1)
    masked = jnp.where(legal, logits, -jnp.inf)
    legal_top5 = jax.lax.top_k(masked, 5)[1]
    any_legal = jnp.any(legal, axis=-1)
    legal_lse = jax.nn.logsumexp(jnp.where(any_legal[..., None], masked, 0.0), axis=-1)
    legal_nll = jnp.where(any_legal, legal_lse - jnp.take_along_axis(logits, tgt, axis=-1)[..., 0], 0.0)
    return {
        "nll": nll,
        "argmax": first_argmax(logits),
        "in_top5": jnp.any(top5 == tgt, axis=-1),
        "act_argmax": first_argmax(logits[..., :NUM_ACTIONS]),
        "act_in_top5": jnp.any(act_top5 == tgt, axis=-1),
        "legal_mass": legal_mass,
        "legal_hit": first_argmax(masked) == targets,
        "legal_in_top5": jnp.any(legal_top5 == tgt, axis=-1),
        "legal_nll": legal_nll,
    }


# --------------------------------------------------------------------------- host helpers
def grid_legal(grid: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """v1 legality of predicted tokens: the (src, dst) grid bit (promotion piece not checked).

    Args:
        grid: uint64 [B, T, 64] aligned grids; tokens: int [B, T] predictions.

    Returns:
        bool [B, T]: token is a move (< 1968) and some legal move goes src → dst.
    """
    is_move = tokens < NUM_ACTIONS
    t = np.where(is_move, tokens, 0)
    words = np.take_along_axis(grid, _SRC[t][..., None], axis=-1)[..., 0]
    bits = (words >> _DST[t].astype(np.uint64)) & np.uint64(1)
    return is_move & (bits == 1)


def lower_median(values: np.ndarray) -> int:
    """Median as the lower middle value for an even count (spec §1.2); 0 for no values."""
    if values.size == 0:
        return 0
    s = np.sort(values)
    return int(s[(s.size - 1) // 2])


# --------------------------------------------------------------------------- report
@dataclass
class AccuracyReport:
    """Every figure of one evaluation (spec §1.2–§1.5, §5). Rates are fractions in [0, 1].

    Published (v1) convention — ``published/*`` in :meth:`to_dict`:
        loss, top1, top5: mean of per-batch means over all ``loss_mask`` positions (terminal PAD
            target included; full-vocab argmax/top-5). perplexity = exp(min(loss, 20)).
        legal_rate, late_legal_rate: mean of per-batch rates of argmax legality (grid bit) over
            positions with a move target; the late rate only at positions ≥ ``late_ply``.
        completion_rate: fraction of games with no illegal argmax (dense token mask) at any
            move-target position; avg_plies_completed: mean first-forfeit position (forfeiting
            games) or length (others); avg_pct_completion: mean of first-forfeit position /
            length, 1 for complete games; min/median/max_forfeit_ply over forfeiting games (0 if
            none; lower median); n_forfeits.
        illegal_pred_rate, illegal_prob_mass: position-weighted over ``loss_mask`` positions
            (PAD legal at the terminal slot) — spec §1.4.
        top1_over_ceiling (property): published top-1 / ``ceiling``, the ratio of the model cards
            (§5). Not over the same positions: the top-1 counts each game's end-of-game slot and
            not ply 0, the ceiling counts ply 0 and no end-of-game slot.

    Moves-only (v2) convention — ``moves_only/*``: positions with a move target; top1/top5 with
    argmax over the 1,968 actions; ``top1_full_vocab``/``top5_full_vocab`` over the full
    vocabulary (the Lichess convention of §4.1); loss (full
    vocab CE); legal_rate (grid bit of the full-vocab argmax); phases by sequence position.

    Legal-masked (MAIA-style adapter accuracy, spec eval §1.6) — ``legal_masked/*``: top1/top5
    of the logits restricted to the legal moves (−inf elsewhere), position-weighted over the
    **move decisions** (the moves-only positions: a move target, so a real legal move set; the
    end-of-game slot, {PAD} and a certain hit under the mask, is not counted) at sequence position
    ≥ :data:`MIN_EVAL_PLY` (10); ``legal_masked/top1_all_moves`` and ``loss_all_moves`` the same
    top-1 and the legal-masked cross-entropy over every move decision (the positions of ``pawn
    adapt``'s validation under its legal mask, so the two agree on the same games and sequence
    length); ``legal_masked/top1_over_ceiling`` = top1 / ``ceiling/legal_masked``.

    Ceiling — ``ceiling/*``: ``e_inv_n_legal`` E[1/N_legal] over every ply < length of the same
    games (§5); ``moves_only`` the same over exactly the plies the moves-only positions (= every
    move decision) predict; ``legal_masked`` over exactly the positions of ``legal_masked/top1``.
    On uniformly random games no model's top-1 over a set of positions can beat the ceiling over
    those positions (every legal move is equally likely), so ``moves_only/top1_over_ceiling`` and
    ``legal_masked/top1_over_ceiling`` are ≤ 1 up to sampling error there.

    The figure that ranks models on random games — ``legal_masked/*`` over every move decision:
    ``uniform_loss_all_moves`` E[ln N_legal], the legal-masked loss of the player that knows only the
    rules (uniform over the legal moves; on uniformly random games it is also the best achievable
    expected loss, since the next move *is* uniform over the legal set: Gibbs' inequality), and
    ``excess_nats_all_moves`` = ``loss_all_moves`` − E[ln N_legal] over the same positions (≤ 0 is
    better than that player; > 0 means confidently wrong), with ``excess_nats_lo``/``_hi`` its 95 %
    interval from a bootstrap over games (:func:`pawn.stats.bootstrap_ratio`; games, not positions,
    are the independent unit). The top-1 cannot rank models here: every legal move is equally likely,
    so any model's expected legal-masked top-1 equals the ceiling E[1/N_legal].

    ``per_game`` (not in :meth:`to_dict`): float64 arrays [n_games] of each game's move decisions
    (``n_moves``), summed legal-masked loss (``legal_nll``), summed ln N_legal (``ln_n_legal``) and
    legal-masked top-1 hits (``legal_hits``), for paired comparisons on the same games.
    """

    n_games: int
    n_positions: int
    n_move_positions: int
    n_batches: int
    loss: float
    top1: float
    top5: float
    perplexity: float
    legal_rate: float
    late_legal_rate: float
    late_ply: int
    n_late_positions: int
    completion_rate: float
    avg_plies_completed: float
    avg_pct_completion: float
    n_forfeits: int
    min_forfeit_ply: int
    median_forfeit_ply: int
    max_forfeit_ply: int
    illegal_pred_rate: float
    illegal_prob_mass: float
    moves_only_loss: float
    moves_only_top1: float
    moves_only_top5: float
    moves_only_top1_full_vocab: float
    moves_only_top5_full_vocab: float
    moves_only_legal_rate: float
    legal_masked_top1: float
    legal_masked_top5: float
    n_legal_masked_positions: int
    phases: dict[str, dict[str, float]]
    ceiling: float
    ceiling_moves_only: float
    n_ceiling_positions: int
    settings: dict[str, Any] = field(default_factory=dict)
    legal_masked_top1_all_moves: float = 0.0
    legal_masked_loss_all_moves: float = 0.0
    ceiling_legal_masked: float = 0.0
    uniform_loss_all_moves: float = float("nan")
    excess_nats_all_moves: float = float("nan")
    excess_nats_lo: float = float("nan")
    excess_nats_hi: float = float("nan")
    per_game: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def top1_over_ceiling(self) -> float:
        """Published top-1 / ceiling: the ratio of the model cards (published convention), over
        different positions (see the class docstring)."""
        return self.top1 / self.ceiling if self.ceiling > 0 else float("nan")

    @property
    def moves_only_top1_over_ceiling(self) -> float:
        """Moves-only top-1 / ceiling over the same plies (every move decision)."""
        return self.moves_only_top1 / self.ceiling_moves_only if self.ceiling_moves_only > 0 else float("nan")

    @property
    def legal_masked_top1_over_ceiling(self) -> float:
        """Legal-masked top-1 / ceiling over the same positions (move decisions at position ≥ 10)."""
        return self.legal_masked_top1 / self.ceiling_legal_masked if self.ceiling_legal_masked > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-ready dict with ``published/``, ``moves_only/`` and ``ceiling/`` prefixes,
        ``counts/`` for sizes and ``settings`` (the exact evaluation settings)."""
        d = {k: v for k, v in asdict(self).items() if k != "per_game"}
        pub = ("loss", "top1", "top5", "perplexity", "legal_rate", "late_legal_rate", "completion_rate",
               "avg_plies_completed", "avg_pct_completion", "n_forfeits", "min_forfeit_ply", "median_forfeit_ply",
               "max_forfeit_ply", "illegal_pred_rate", "illegal_prob_mass", "late_ply")
        out: dict[str, Any] = {f"published/{k}": d[k] for k in pub}
        out["published/top1_over_ceiling"] = self.top1_over_ceiling
        for k in ("loss", "top1", "top5", "top1_full_vocab", "top5_full_vocab", "legal_rate"):
            out[f"moves_only/{k}"] = d[f"moves_only_{k}"]
        out["moves_only/top1_over_ceiling"] = self.moves_only_top1_over_ceiling
        out["legal_masked/top1"] = self.legal_masked_top1
        out["legal_masked/top5"] = self.legal_masked_top5
        out["legal_masked/top1_all_moves"] = self.legal_masked_top1_all_moves
        out["legal_masked/loss_all_moves"] = self.legal_masked_loss_all_moves
        out["legal_masked/top1_over_ceiling"] = self.legal_masked_top1_over_ceiling
        out["legal_masked/uniform_loss_all_moves"] = self.uniform_loss_all_moves
        out["legal_masked/excess_nats_all_moves"] = self.excess_nats_all_moves
        out["legal_masked/excess_nats_lo"] = self.excess_nats_lo
        out["legal_masked/excess_nats_hi"] = self.excess_nats_hi
        for name, ph in self.phases.items():
            for k, v in ph.items():
                out[f"moves_only/phase/{name}/{k}"] = v
        out["ceiling/e_inv_n_legal"] = self.ceiling
        out["ceiling/moves_only"] = self.ceiling_moves_only
        out["ceiling/legal_masked"] = self.ceiling_legal_masked
        for k in ("n_games", "n_positions", "n_move_positions", "n_batches", "n_late_positions", "n_ceiling_positions",
                  "n_legal_masked_positions"):
            out[f"counts/{k}"] = d[k]
        out["settings"] = dict(self.settings)
        return out


class _Totals:
    """Host-side accumulators of one evaluation: :meth:`add` folds in one scored batch,
    :meth:`report` turns the sums into an :class:`AccuracyReport`.

    Args:
        seq_len: T. late_ply: first sequence position of the late legal rate. layout: the
            sequence layout (aligns per-ply ceilings to positions).
    """

    def __init__(self, seq_len: int, late_ply: int, layout: Layout) -> None:
        self.seq_len, self.late_ply, self.layout = seq_len, late_ply, layout
        self.pos = np.arange(seq_len)[None, :]
        self.batch_loss: list[float] = []
        self.batch_top1: list[float] = []
        self.batch_top5: list[float] = []
        self.batch_legal: list[float] = []
        self.batch_late: list[float] = []
        self.s: dict[str, float] = dict.fromkeys(
            ("n_pos", "n_move", "n_late", "illegal_pred", "illegal_mass", "mo_nll", "mo_top1", "mo_top5",
             "mo_top1_full", "mo_top5_full", "mo_legal", "ceil_sum", "ceil_n", "ceil_mo_sum", "ceil_mo_n",
             "lm_n", "lm_top1", "lm_top5", "lm_all_top1", "lm_all_nll", "ceil_lm_sum"), 0.0)
        self.phase = {name: [0, 0] for name, _, _ in PHASES}
        self.first_forfeit: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []
        self.games: dict[str, list[np.ndarray]] = {k: [] for k in ("n_moves", "legal_nll", "ln_n_legal", "legal_hits")}

    def add(self, tok, lens, packed: dict, legal: np.ndarray, grid: np.ndarray, sc: dict) -> None:
        """Fold in one batch of :func:`_score_stream` (its ``(tok, lens, packed, legal, grid,
        scores)``): the published per-batch means, the position sums, the phases, the first
        forfeit of each game and the ceiling."""
        lm, tgt = packed["loss_mask"], packed["targets"]
        move = lm & (tgt < NUM_ACTIONS)
        argmax = sc["argmax"]
        g_legal = grid_legal(grid, argmax)
        tok_legal = np.take_along_axis(legal, argmax[..., None].astype(np.int64), axis=-1)[..., 0]
        self._add_published(lm, move, argmax == tgt, g_legal, sc)
        act_hit = self._add_positions(lm, move, tgt, argmax == tgt, g_legal, tok_legal, sc)
        for name, lo, hi in PHASES:
            sel = move & (self.pos >= lo) & (self.pos < (hi if hi is not None else self.seq_len))
            self.phase[name][0] += int((act_hit & sel).sum())
            self.phase[name][1] += int(sel.sum())
        # Compound legality (§1.3): first move-target position whose argmax is not a legal token.
        illegal = move & ~tok_legal
        self.first_forfeit.append(np.where(illegal.any(axis=1), np.argmax(illegal, axis=1), -1))
        self.lengths.append(lens.astype(np.int64))
        self._add_ceiling(tok, lens, move)

    def _add_published(self, lm, move, hit, g_legal, sc: dict) -> None:
        """The published convention's per-batch means (§1.2): loss, top-1/5, legal and late legal rates."""
        late = move & (self.pos >= self.late_ply)
        n_lm = int(lm.sum())
        self.batch_loss.append(float(sc["nll"][lm].mean()) if n_lm else 0.0)
        self.batch_top1.append(float(hit[lm].mean()) if n_lm else 0.0)
        self.batch_top5.append(float(sc["in_top5"][lm].mean()) if n_lm else 0.0)
        self.batch_legal.append(float(g_legal[move].mean()) if move.any() else 0.0)
        self.batch_late.append(float(g_legal[late].mean()) if late.any() else 0.0)
        self.s["n_late"] += int(late.sum())

    def _add_positions(self, lm, move, tgt, hit, g_legal, tok_legal, sc: dict) -> np.ndarray:
        """The position-weighted sums: counts, illegal prediction and mass, moves-only loss and
        accuracies, legal-masked (MAIA-style) accuracies. Returns the moves-only hits (actions
        argmax = target at move positions), bool [B, T]."""
        s = self.s
        s["n_pos"] += int(lm.sum())
        s["n_move"] += int(move.sum())
        s["illegal_pred"] += int((lm & ~tok_legal).sum())
        s["illegal_mass"] += float((1.0 - sc["legal_mass"])[lm].astype(np.float64).sum())
        s["mo_nll"] += float(sc["nll"][move].astype(np.float64).sum())
        act_hit = (sc["act_argmax"] == tgt) & move
        s["mo_top1"] += int(act_hit.sum())
        s["mo_top5"] += int((sc["act_in_top5"] & move).sum())
        s["mo_top1_full"] += int((hit & move).sum())
        s["mo_top5_full"] += int((sc["in_top5"] & move).sum())
        s["mo_legal"] += int((g_legal & move).sum())
        s["lm_all_top1"] += int((sc["legal_hit"] & move).sum())
        s["lm_all_nll"] += float(sc["legal_nll"][move].astype(np.float64).sum())
        maia = move & (self.pos >= MIN_EVAL_PLY)
        s["lm_n"] += int(maia.sum())
        s["lm_top1"] += int((sc["legal_hit"] & maia).sum())
        s["lm_top5"] += int((sc["legal_in_top5"] & maia).sum())
        g = self.games
        g["n_moves"].append(move.sum(axis=1).astype(np.float64))
        g["legal_nll"].append(np.where(move, sc["legal_nll"], 0.0).astype(np.float64).sum(axis=1))
        g["legal_hits"].append((sc["legal_hit"] & move).sum(axis=1).astype(np.float64))
        return act_hit

    def _add_ceiling(self, tok, lens, move) -> None:
        """Ceiling (§5): 1/N_legal over every ply < length, over the plies moves-only scores (every
        move decision), and over the positions of the legal-masked top-1 (those from :data:`MIN_EVAL_PLY`)."""
        s = self.s
        inv = accuracy_ceiling_of(tok, lens)
        s["ceil_sum"] += float(inv.sum())
        s["ceil_n"] += int(lens.astype(np.int64).sum())
        inv_pos = self.layout.align_plies(inv, lens)
        s["ceil_mo_sum"] += float(inv_pos[move].sum())
        s["ceil_mo_n"] += int(move.sum())
        s["ceil_lm_sum"] += float(inv_pos[move & (self.pos >= MIN_EVAL_PLY)].sum())
        # the uniform-over-legal player's loss at a move decision is ln N_legal = −ln(1/N_legal)
        ln_n = np.where(move, -np.log(np.where(move, inv_pos, 1.0).astype(np.float64)), 0.0)
        self.games["ln_n_legal"].append(ln_n.sum(axis=1))

    def _completion(self, n: int) -> dict[str, Any]:
        """The game-completion fields of :class:`AccuracyReport` (§1.3) from the first forfeits."""
        first = np.concatenate(self.first_forfeit) if self.first_forfeit else np.zeros(0, np.int64)
        lens_all = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
        forfeited = first >= 0
        ff = first[forfeited]
        plies_completed = np.where(forfeited, first, lens_all)
        with np.errstate(divide="ignore", invalid="ignore"):
            pct = np.where(forfeited, first / np.maximum(lens_all, 1), 1.0)
        return dict(
            completion_rate=float(1.0 - forfeited.mean()) if n else 0.0,
            avg_plies_completed=float(plies_completed.mean()) if n else 0.0,
            avg_pct_completion=float(pct.mean()) if n else 0.0,
            n_forfeits=int(forfeited.sum()),
            min_forfeit_ply=int(ff.min()) if ff.size else 0,
            median_forfeit_ply=lower_median(ff),
            max_forfeit_ply=int(ff.max()) if ff.size else 0,
        )

    def _uniform(self) -> dict[str, Any]:
        """The uniform-over-legal reference and the excess with its bootstrap interval over games,
        and the per-game sums (fields of :class:`AccuracyReport`)."""
        per_game = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in self.games.items()}
        n_moves = per_game["n_moves"]
        if not n_moves.sum() > 0:
            return {"per_game": per_game}
        uniform = float(per_game["ln_n_legal"].sum() / n_moves.sum())
        iv = bootstrap_ratio(per_game["legal_nll"] - per_game["ln_n_legal"], n_moves)
        return {"uniform_loss_all_moves": uniform, "excess_nats_all_moves": iv.estimate, "excess_nats_lo": iv.lo,
                "excess_nats_hi": iv.hi, "per_game": per_game}

    def report(self, n: int, settings: dict[str, Any]) -> AccuracyReport:
        """The :class:`AccuracyReport` of the ``n`` games added (``settings`` recorded as given)."""
        s = self.s
        loss = _mean(self.batch_loss)
        return AccuracyReport(
            **self._uniform(),
            n_games=int(n),
            n_positions=int(s["n_pos"]),
            n_move_positions=int(s["n_move"]),
            n_batches=len(self.batch_loss),
            loss=loss,
            top1=_mean(self.batch_top1),
            top5=_mean(self.batch_top5),
            perplexity=math.exp(min(loss, PERPLEXITY_LOSS_CAP)),
            legal_rate=_mean(self.batch_legal),
            late_legal_rate=_mean(self.batch_late),
            late_ply=self.late_ply,
            n_late_positions=int(s["n_late"]),
            **self._completion(n),
            illegal_pred_rate=_ratio(s["illegal_pred"], s["n_pos"]),
            illegal_prob_mass=_ratio(s["illegal_mass"], s["n_pos"]),
            moves_only_loss=_ratio(s["mo_nll"], s["n_move"]),
            moves_only_top1=_ratio(s["mo_top1"], s["n_move"]),
            moves_only_top5=_ratio(s["mo_top5"], s["n_move"]),
            moves_only_top1_full_vocab=_ratio(s["mo_top1_full"], s["n_move"]),
            moves_only_top5_full_vocab=_ratio(s["mo_top5_full"], s["n_move"]),
            moves_only_legal_rate=_ratio(s["mo_legal"], s["n_move"]),
            legal_masked_top1=_ratio(s["lm_top1"], s["lm_n"]),
            legal_masked_top5=_ratio(s["lm_top5"], s["lm_n"]),
            n_legal_masked_positions=int(s["lm_n"]),
            legal_masked_top1_all_moves=_ratio(s["lm_all_top1"], s["n_move"]),
            legal_masked_loss_all_moves=_ratio(s["lm_all_nll"], s["n_move"]),
            ceiling_legal_masked=_ratio(s["ceil_lm_sum"], s["lm_n"]),
            phases={k: {"correct": c, "total": t, "accuracy": _ratio(c, t)} for k, (c, t) in self.phase.items()},
            ceiling=_ratio(s["ceil_sum"], s["ceil_n"]),
            ceiling_moves_only=_ratio(s["ceil_mo_sum"], s["ceil_mo_n"]),
            n_ceiling_positions=int(s["ceil_n"]),
            settings=settings,
        )


def _mean(x: list[float]) -> float:
    return float(np.mean(x)) if x else 0.0


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def _score_stream(model, tokens, lengths, outcome, seq_len, batch_size, layout: Layout, dtype) -> Iterator[tuple]:
    """Yield, per batch of real games, the packed batch, aligned legality and device scores
    (NumPy). The last batch is padded with empty rows so one compiled step serves all."""
    n = tokens.shape[0]
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        tok, lens = layout.fit(tokens[start:stop], lengths[start:stop], seq_len)
        packed = layout.pack(tok, lens, outcome[start:stop], seq_len)
        legal, grid = layout.legal_at_positions(tok, lens)
        pad_rows = batch_size - (stop - start)

        def padded(a, fill):
            if pad_rows == 0:
                return a
            return np.concatenate([a, np.full((pad_rows,) + a.shape[1:], fill, a.dtype)], axis=0)

        scores = _score_batch(
            model,
            jnp.asarray(padded(packed["input_ids"], PAD_TOKEN)),
            jnp.asarray(padded(packed["attn_mask"], False)),
            jnp.asarray(padded(packed["targets"], PAD_TOKEN)),
            jnp.asarray(padded(np.packbits(legal, axis=-1), 0)),
            dtype,
        )
        scores = {k: np.asarray(v)[: stop - start] for k, v in scores.items()}
        yield tok, lens, packed, legal, grid, scores


def evaluate_games(
    model: Callable,
    tokens: np.ndarray,
    lengths: np.ndarray,
    outcome: np.ndarray,
    *,
    seq_len: int,
    batch_size: int = 256,
    prepend_outcome: bool = False,
    dtype: Optional[str] = None,
    late_ply: Optional[int] = None,
    progress: Optional[Callable[[float, float, str], None]] = None,
) -> AccuracyReport:
    """Teacher-forced evaluation of ``model`` on games, in both conventions (module docstring).

    Args:
        model: a :class:`pawn.model.PAWNModel` or any object with
            ``model(tokens int32 [B, T], attn_mask bool [B, T], dtype=...) -> logits [B, T, 1980]``
            (a non-PyTree object must be hashable: it is a static argument of the jitted step).
        tokens: int16 [N, P] move tokens (PAD after each length), e.g. from
            :func:`pawn.engine.random_games` or :func:`pawn.engine.parse_pgn`.
        lengths: int [N] plies per game; games are cut to ``seq_len − offset`` plies.
        outcome: int [N] outcome tokens (used only with ``prepend_outcome``).
        seq_len: T, the packed sequence length (≤ the model's ``max_seq_len``).
        batch_size: games per model call; also the batch of the published per-batch means.
        prepend_outcome: outcome-prefixed layout instead of pure moves.
        dtype: compute dtype passed to the model (``None`` = model default).
        late_ply: first sequence position of the late legal rate; default ``seq_len // 2``
            (256 for the published 512-token setting).
        progress: optional callback ``(games done, games in all, message)`` after each batch.

    Returns:
        :class:`AccuracyReport`.

    Raises:
        ValueError: mismatched array sizes, ``batch_size < 1``, ``seq_len`` too small, or an
            illegal move in the games (named by the engine).
    """
    tokens = np.asarray(tokens)
    lengths = np.asarray(lengths)
    outcome = np.asarray(outcome)
    n = tokens.shape[0]
    if tokens.ndim != 2 or lengths.shape != (n,) or outcome.shape != (n,):
        raise ValueError(f"need tokens [N, P], lengths [N], outcome [N]; got {tokens.shape}, {lengths.shape}, {outcome.shape}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
    layout = Layout.of(prepend_outcome)
    late_ply = seq_len // 2 if late_ply is None else int(late_ply)
    tot = _Totals(seq_len, late_ply, layout)
    for batch in _score_stream(model, tokens, lengths, outcome, seq_len, batch_size, layout, dtype):
        tot.add(*batch)
        if progress is not None:
            done = sum(x.size for x in tot.lengths)
            progress(done, n, f"{done:,}/{n:,} games")
    return tot.report(n, {"seq_len": seq_len, "batch_size": batch_size, "prepend_outcome": prepend_outcome,
                          "dtype": None if dtype is None else str(dtype), "late_ply": late_ply})


# --------------------------------------------------------------------------- per-ply top moves (the report's Games page)
@eqx.filter_jit
def _top_moves_batch(model, input_ids, attn_mask, targets, packed_legal, k, dtype):
    """Per-position top-k of one batch under the legal mask (the logits restricted to the tokens
    set in ``packed_legal``, softmax over that set), the target's masked probability and rank,
    the unmasked argmax, the unmasked softmax mass outside the legal set and P(PAD)."""
    logits = model(input_ids, attn_mask, dtype=dtype).astype(jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    legal = jnp.unpackbits(packed_legal, axis=-1)[..., : logits.shape[-1]].astype(bool)
    masked = jnp.where(legal, logits, -jnp.inf)
    mlogp = jax.nn.log_softmax(jnp.where(legal.any(-1, keepdims=True), masked, 0.0), axis=-1)
    mlogp = jnp.where(legal, mlogp, -jnp.inf)
    top_lp, top_i = jax.lax.top_k(mlogp, k)
    tgt_lp = jnp.take_along_axis(mlogp, targets[..., None], axis=-1)[..., 0]
    argmax = first_argmax(logits)
    return {
        "top_i": top_i.astype(jnp.int32), "top_p": jnp.exp(top_lp), "played_p": jnp.exp(tgt_lp),
        "played_rank": 1 + jnp.sum(legal & (mlogp > tgt_lp[..., None]), axis=-1),
        "argmax": argmax, "argmax_legal": jnp.take_along_axis(legal, argmax[..., None], axis=-1)[..., 0],
        "p_illegal": 1.0 - jnp.sum(jnp.where(legal, jnp.exp(logp), 0.0), axis=-1),
        "p_end": jnp.exp(logp[..., PAD_TOKEN]),
    }


def ply_predictions(
    model: Callable,
    tokens: np.ndarray,
    lengths: np.ndarray,
    *,
    seq_len: int,
    k: int = 5,
    prepend_outcome: bool = False,
    outcome: Optional[np.ndarray] = None,
    batch_size: int = 8,
    dtype: Optional[str] = None,
) -> list[dict[str, Any]]:
    """The model's top-k moves at every position of each game, teacher-forced (the model sees the
    game's real history, as ``pawn eval`` does), for stepping through games on a board.

    Board ``i`` (the position after the game's first ``i`` moves, ``0 ≤ i ≤ L``) is predicted by
    sequence position ``i + offset − 1`` (spec eval §0): in the pure-moves layout board 0 has no
    prediction (the first move is never a target), and boards past the ``seq_len − offset`` plies
    the sequence holds have none either (the context the model was trained at; no sliding window).

    Legal sets, as the eval's legal mask (spec eval §1.6): at board ``i < L`` the legal moves of that
    position (no PAD); at the final board {PAD} when the game is over by the rules (checkmate,
    stalemate, the draw rules; the engine's termination), else — a game that stopped by
    resignation, time, a ply cap or a forfeit, where the eval's convention of {PAD} would say
    nothing — the position's legal moves and PAD (a decision of PAWN's, not the spec's).

    Args:
        model: ``model(tokens int32 [B, T], attn_mask bool [B, T], dtype=...) -> logits [B, T, 1980]``.
        tokens: int16 [N, P] legal move tokens from the standard start, PAD after each length.
        lengths: int [N] plies per game.
        seq_len: T, the packed sequence length (≤ the model's context; the trained one).
        k: moves kept per position (≥ 1).
        prepend_outcome: the outcome-prefix layout; ``outcome`` int [N] are the tokens written at
            position 0 (default PLY_LIMIT for every game: the dummy outcome of spec eval §4.1).
        batch_size: games per model call (the last batch is padded: one compiled shape).
        dtype: compute dtype passed to the model.

    Returns:
        one dict per game: ``first_ply``/``last_ply`` (the boards with a prediction),
        ``first_illegal_ply`` (the first board ``i < L`` whose unmasked argmax is not a legal move —
        the teacher-forced forfeit of spec eval §1.3 — or None) and ``plies``: ``L + 1`` entries,
        None or ``{"top": [(token, probability), …] (k, most likely first; probabilities of the
        softmax over the legal set, so they sum to ≤ 1), "played": (token, probability, rank) of
        the game's next move (None at the final board), "argmax": the unmasked argmax token,
        "argmax_legal": bool, "p_illegal": unmasked softmax mass outside the legal set,
        "p_end": unmasked P(PAD)}``.

    Raises:
        ValueError: mismatched shapes, ``k`` < 1, ``seq_len`` too small, or an illegal move (named
            by the engine).
    """
    from pawn.engine import GameState, legal_move_masks
    from pawn.vocab import PLY_LIMIT, VOCAB_SIZE

    tokens = np.asarray(tokens)
    lengths = np.asarray(lengths).astype(np.int64)
    n = tokens.shape[0]
    if tokens.ndim != 2 or lengths.shape != (n,):
        raise ValueError(f"need tokens [N, P] and lengths [N]; got {tokens.shape}, {lengths.shape}")
    if k < 1:
        raise ValueError(f"k must be ≥ 1, got {k}")
    layout = Layout.of(prepend_outcome)
    layout.check_seq_len(seq_len)
    outcome = np.full(n, PLY_LIMIT, np.int32) if outcome is None else np.asarray(outcome, np.int32)
    k = int(min(k, VOCAB_SIZE))
    out: list[dict[str, Any]] = []
    off = layout.offset
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        B = stop - start
        lens = lengths[start:stop]
        width = int(lens.max(initial=0)) + 1  # one row past the end: the final board
        tok = np.full((B, width), PAD_TOKEN, np.int16)
        w = min(width, tokens.shape[1])
        tok[:, :w] = tokens[start:stop, :w]
        tok[np.arange(width)[None, :] >= lens[:, None]] = PAD_TOKEN
        masks = legal_move_masks(tok, lens.astype(np.int16), VOCAB_SIZE)  # [B, width, V]; row L = {PAD}
        for b in range(B):
            g = GameState(32767)
            for t in tok[b, :lens[b]]:
                g.make_move(int(t))
            if g.check_termination() < 0:  # stopped, not over by the rules: its legal moves, and PAD
                masks[b, lens[b], np.asarray(g.legal_move_tokens(), np.int64)] = True
        packed = layout.pack(tok, lens, outcome[start:stop], seq_len)
        ids = np.full((batch_size, seq_len), PAD_TOKEN, np.int32)
        ids[:B] = packed["input_ids"]
        legal = np.zeros((batch_size, seq_len, VOCAB_SIZE), bool)
        tgt = np.full((batch_size, seq_len), PAD_TOKEN, np.int32)
        for b in range(B):
            for i in range(max(0, 1 - off), min(int(lens[b]), seq_len - off) + 1):  # boards with a position
                p = i + off - 1
                legal[b, p] = masks[b, i]
                if i < lens[b]:
                    tgt[b, p] = tok[b, i]
        sc = _top_moves_batch(model, jnp.asarray(ids), jnp.asarray(ids != PAD_TOKEN), jnp.asarray(tgt),
                              jnp.asarray(np.packbits(legal, axis=-1)), k, dtype)
        sc = {key: np.asarray(v) for key, v in sc.items()}
        for b in range(B):
            L = int(lens[b])
            first, last = max(0, 1 - off), min(L, seq_len - off)
            plies: list[Optional[dict[str, Any]]] = [None] * (L + 1)
            first_illegal = None
            for i in range(first, last + 1):
                p = i + off - 1
                n_legal = int(masks[b, i].sum())
                top = [(int(t), float(q)) for t, q in zip(sc["top_i"][b, p], sc["top_p"][b, p])][:max(1, min(k, n_legal))]
                ok = bool(sc["argmax_legal"][b, p])
                plies[i] = {"top": top,
                            "played": (int(tok[b, i]), float(sc["played_p"][b, p]), int(sc["played_rank"][b, p])) if i < L else None,
                            "argmax": int(sc["argmax"][b, p]), "argmax_legal": ok,
                            "p_illegal": float(sc["p_illegal"][b, p]), "p_end": float(sc["p_end"][b, p])}
                if not ok and i < L and first_illegal is None:
                    first_illegal = i
            out.append({"first_ply": first, "last_ply": last, "first_illegal_ply": first_illegal, "plies": plies})
    return out
