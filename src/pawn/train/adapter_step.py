"""The adapter training step of ``pawn adapt`` (spec ``training-and-adapters.md`` §5): the
per-position loss terms, the :class:`~pawn.train.loop.TrainProgram` loss, the validator, and the
K-step batch chunks. Imported by the run (:mod:`pawn.train.adapt`), the sweep's vmapped
populations, ``pawn bench`` and the benchmark scripts, none of which needs the run itself.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from pawn.metrics import ViewKeys
from pawn.metrics_core import first_argmax
from pawn.train.run import to_host
from pawn.vocab import NUM_ACTIONS, VOCAB_SIZE

BATCH_KEYS = ("input_ids", "targets", "loss_mask", "attn_mask")
"""Per-step batch arrays of every adapter chunk (``legal`` is added when the loss needs it)."""

VAL_FIELDS = ViewKeys("adapt_val")
"""Validation metrics of spec §5 (v1 ``val_loss``, ``val_top1``…), :mod:`pawn.metrics` keys, in record order:
the rows of the ``adapt_val`` view."""



# ============================================================================ loss (spec §5)
def unpack_legal_bits(packed: jax.Array) -> jax.Array:
    """bool [..., 1980] from the bit-packed uint8 [..., 248] legal sets of
    :class:`~pawn.data.lichess_batches.Batch` (little bit order)."""
    return jnp.unpackbits(packed, axis=-1, count=VOCAB_SIZE, bitorder="little").astype(jnp.bool_)


def scored_positions(targets: jax.Array, loss_mask: jax.Array, *, legal_mask: bool) -> jax.Array:
    """bool [B, T]: the positions the adapter loss and its metrics count.

    Under the hard legal mask (``legal_mask=True``), the **move decisions**: supervised positions
    whose target is a move (``loss_mask ∧ target < 1968``), i.e. whose legal set is a real move set.
    The end-of-game slot (target PAD, legal set {PAD}) is left out: under the mask it has one
    candidate, so it is a certain hit with zero loss: one free hit per game (v1 counted it, spec
    §5, so its published adapter top-1 figures hold about 1.5 pp of it on games of ~65 plies).
    A game cut at the ply cap has no end-of-game target either (its last slot's PAD is the cut,
    not an end), so it is not counted. Without the mask (``legal_mask=False``) the PAD target is a real prediction
    ("the game is over") and every ``loss_mask`` position counts, as in pretraining.

    Args:
        targets: int32 [B, T]. loss_mask: bool [B, T].
        legal_mask: the hard-mask regime.
    """
    if not legal_mask:
        return loss_mask
    return loss_mask & (targets < NUM_ACTIONS)


def position_terms(logits: jax.Array, targets: jax.Array, loss_mask: jax.Array, legal: Optional[jax.Array], *,
                   legal_mask: bool, illegal_penalty: float = 0.0) -> dict[str, jax.Array]:
    """Per-position loss terms of spec §5, float32 [B, T] each (zero outside the counted positions:
    :func:`scored_positions` — under the hard mask the move decisions, else ``loss_mask``).

    Args:
        logits: [B, T, V] (any float dtype; cast to float32).
        targets: int32 [B, T]. loss_mask: bool [B, T] (supervised positions).
        legal: bool [B, T, V] legal target sets (row of the end-of-game position = {PAD}; rows
            outside ``loss_mask`` may be all-false), or None when neither the mask, the penalty
            nor the illegal metrics are wanted.
        legal_mask: set illegal logits to −inf before the softmax (the default regime).
        illegal_penalty: λ; adds ``λ · Σ_{v illegal} softmax(z)_v`` to each position's loss
            (only with ``legal_mask=False``).

    Returns:
        ``loss`` (NLL + λ·illegal mass), ``nll``, ``top1``, ``top5`` (target among the 5 highest
        logits), ``illegal_pred`` (argmax illegal) and ``illegal_mass`` (softmax mass on illegal
        tokens); the last two are exactly 0 under the hard mask. Rows outside ``loss_mask`` never
        reach the arithmetic (replaced by 0 with ``where`` first), so all-false legal rows give
        no NaN, in values or gradients.
    """
    loss_mask = scored_positions(targets, loss_mask, legal_mask=legal_mask)
    lm = loss_mask[..., None]
    z = jnp.where(lm, logits.astype(jnp.float32), 0.0)
    if legal_mask:
        if legal is None:
            raise ValueError("the legal-masked loss needs the legal sets")
        z = jnp.where(legal | ~lm, z, -jnp.inf)
    is_t = jax.nn.one_hot(targets, z.shape[-1], dtype=jnp.bool_)
    zt = jnp.where(is_t, z, 0.0).sum(-1)
    lse = jax.nn.logsumexp(z, axis=-1)
    nll = lse - zt
    pred = first_argmax(jax.lax.stop_gradient(z))
    top1 = (pred == targets).astype(jnp.float32)
    top5 = ((jax.lax.stop_gradient(z) > jax.lax.stop_gradient(zt)[..., None]).sum(-1) < 5).astype(jnp.float32)
    zero = jnp.zeros_like(nll)
    if legal is not None and not legal_mask:
        p = jnp.exp(z - lse[..., None])
        mass = jnp.where(legal, 0.0, p).sum(-1)
        pred_legal = jnp.take_along_axis(legal, pred[..., None], axis=-1)[..., 0]
        illegal_pred = (~pred_legal).astype(jnp.float32)
    else:
        mass, illegal_pred = zero, zero
    loss = nll + illegal_penalty * mass if illegal_penalty else nll
    m = loss_mask
    return {k: jnp.where(m, v, 0.0) for k, v in
            (("loss", loss), ("nll", nll), ("top1", top1), ("top5", top5), ("illegal_pred", illegal_pred),
             ("illegal_mass", jax.lax.stop_gradient(mass) if illegal_penalty == 0 else mass))}


def make_adapter_count(*, legal_mask: bool):
    """The :class:`~pawn.train.loop.TrainProgram` ``count_fn`` matching :func:`make_adapter_loss`:
    ``batch -> int32`` scalar, the batch's counted positions (:func:`scored_positions`)."""

    def count_fn(batch):
        return scored_positions(batch["targets"], batch["loss_mask"], legal_mask=legal_mask).sum(dtype=jnp.int32)

    return count_fn


def make_adapter_loss(*, legal_mask: bool, illegal_penalty: float, dtype: Optional[str]):
    """The :class:`~pawn.train.loop.TrainProgram` ``loss_fn`` of spec §5: ``(model, batch) ->
    (loss, {"top1": …})``, the mean over the batch's counted positions (:func:`scored_positions`:
    the move decisions under the hard mask, every supervised position without it; fp32 logits;
    ``batch`` holds ``input_ids``, ``targets``, ``loss_mask``, ``attn_mask`` [B, T] and, when
    the loss needs it, ``legal`` uint8 [B, T, 248]). Pair it with :func:`make_adapter_count`."""
    count_fn = make_adapter_count(legal_mask=legal_mask)

    def loss_fn(model, batch):
        logits = model(batch["input_ids"], batch["attn_mask"], dtype=dtype, prefix_mask=True)
        legal = unpack_legal_bits(batch["legal"]) if "legal" in batch else None
        t = position_terms(logits, batch["targets"], batch["loss_mask"], legal, legal_mask=legal_mask,
                           illegal_penalty=illegal_penalty)
        n = jnp.maximum(count_fn(batch), 1).astype(jnp.float32)
        return t["loss"].sum() / n, {"top1": t["top1"].sum() / n}

    return loss_fn


def make_validator(*, legal_mask: bool, illegal_penalty: float, dtype: Optional[str]):
    """``validate(model, batches) -> {loss, top1, top5, illegal_pred_rate, illegal_prob_mass,
    positions}`` (:mod:`pawn.metrics` keys; v1's ``val_loss``…): position-weighted over the counted
    positions of ``batches`` (:func:`scored_positions`: every move decision under the hard mask —
    not v1's convention, which also counted each game's certain end-of-game slot — and every
    supervised position without it; ``positions`` is their number), an iterable of dicts as the
    loss takes, with ``legal`` (e.g. :class:`~pawn.data.lichess_batches.ValidationBatches`), one
    jitted forward per batch (spec §5 "Validation metrics"; the same masking and penalty as
    training)."""
    count_fn = make_adapter_count(legal_mask=legal_mask)

    @eqx.filter_jit
    def sums(model, batch):
        logits = model(batch["input_ids"], batch["attn_mask"], dtype=dtype, prefix_mask=True)
        t = position_terms(logits, batch["targets"], batch["loss_mask"], unpack_legal_bits(batch["legal"]),
                           legal_mask=legal_mask, illegal_penalty=illegal_penalty)
        out = {k: v.sum() for k, v in t.items()}
        out["n"] = count_fn(batch)
        return out

    def validate(model, batches) -> dict:
        tot: dict[str, float] = {}

        def add(out):
            for k, v in to_host(out).items():
                tot[k] = tot.get(k, 0.0) + float(v)

        pending = None
        for b in batches:  # batch i is dispatched before i − 1 is read back, so building batch
            out = sums(model, b)  # i + 1 (its legal sets) overlaps the device work of batch i
            if pending is not None:
                add(pending)
            pending = out
        if pending is not None:
            add(pending)
        n = max(tot.get("n", 0.0), 1.0)
        return {"loss": tot["loss"] / n, "top1": tot["top1"] / n, "top5": tot["top5"] / n,
                "illegal_pred_rate": tot["illegal_pred"] / n, "illegal_prob_mass": tot["illegal_mass"] / n,
                "positions": int(tot.get("n", 0))}

    return validate


# ============================================================================ data
class BatchChunks:
    """``(first step, {name: [K, B, ...]})`` chunks of :class:`GameBatches` for steps
    ``[start, end)``, built ``prefetch`` batches ahead on a thread (:meth:`GameBatches.iter_from`);
    ``wait_s`` counts the time the trainer waited for them (the data-wait figure)."""

    def __init__(self, batches, *, start: int, end: int, k: int, keys: Sequence[str], prefetch: int = 4):
        if k < 1 or (end - start) % k:
            raise ValueError(f"steps [{start}, {end}) do not split into chunks of {k}")
        self.batches, self.start, self.end, self.k, self.keys, self.prefetch = batches, start, end, k, tuple(keys), prefetch
        self.wait_s = 0.0
        self._it = None

    def __iter__(self):
        self._it = self.batches.iter_from(self.start, self.end, prefetch=self.prefetch) if self.end > self.start else iter(())
        for s0 in range(self.start, self.end, self.k):
            t = time.perf_counter()
            bs = [next(self._it) for _ in range(self.k)]
            chunk = {name: np.stack([getattr(b, name) for b in bs]) for name in self.keys}
            self.wait_s += time.perf_counter() - t
            yield s0, chunk

    def close(self) -> None:
        """Stop the prefetch thread."""
        if self._it is not None and hasattr(self._it, "close"):
            self._it.close()


def batch_dict(b, keys: Sequence[str]) -> dict[str, np.ndarray]:
    """A :class:`~pawn.data.lichess_batches.Batch` as the dict the loss takes."""
    return {k: getattr(b, k) for k in keys}


__all__ = ["BATCH_KEYS", "VAL_FIELDS", "BatchChunks", "batch_dict",
           "make_adapter_count", "make_adapter_loss", "make_validator", "position_terms", "scored_positions",
           "unpack_legal_bits"]
