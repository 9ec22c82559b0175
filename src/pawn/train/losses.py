"""Losses for pretraining (spec ``training-and-adapters.md`` §1.3)."""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from pawn.config import ModelConfig
from pawn.metrics_core import first_argmax
from pawn.model import PAWNModel, sliced


def masked_cross_entropy(
    logits: Float[Array, "B T V"], targets: Int[Array, "B T"], loss_mask: Bool[Array, "B T"]
) -> tuple[Float[Array, ""], Int[Array, ""]]:
    """Mean next-token cross-entropy over supervised positions, in nats (spec §1.3).

    log-softmax in fp32 over all V logits (no legal masking in pretraining); the sum over
    ``loss_mask`` positions is divided by ``max(count, 1)``, so an all-false mask gives 0.

    Positions outside ``loss_mask`` never reach the arithmetic (their logits are replaced by 0
    first), so they may hold anything — −inf for illegal moves under an adapter's legal mask,
    +inf, NaN — and the loss and its gradient stay finite. At a supervised position, −inf logits
    of other tokens are fine (they get probability 0 and gradient 0); the result is +inf only if
    the target's own logit is −inf, and NaN if a supervised logit is NaN or +inf.

    Returns:
        ``(loss float32 scalar, count int32 scalar)``.
    """
    logits = jnp.where(loss_mask[..., None], logits.astype(jnp.float32), 0.0)
    # −log softmax[target] = logsumexp(logits) − logits[target]; the target logit is read with a
    # one-hot select rather than a gather, whose scatter-add backward is slow on XLA:CPU (a select,
    # unlike a product with the one-hot, also keeps −inf logits of other tokens out of the sum).
    is_target = jax.nn.one_hot(targets, logits.shape[-1], dtype=jnp.bool_)
    target_logit = jnp.where(is_target, logits, 0.0).sum(-1)
    nll = jax.nn.logsumexp(logits, axis=-1) - target_logit
    count = loss_mask.sum(dtype=jnp.int32)
    return jnp.where(loss_mask, nll, 0.0).sum() / jnp.maximum(count, 1).astype(jnp.float32), count


def masked_accuracy(
    logits: Float[Array, "B T V"], targets: Int[Array, "B T"], loss_mask: Bool[Array, "B T"]
) -> Float[Array, ""]:
    """Top-1 accuracy over supervised positions: the fraction of ``loss_mask`` positions whose
    argmax logit (first index on ties) equals the target; 0 for an all-false mask. No gradient
    flows through it. Returns a float32 scalar in [0, 1]."""
    hit = (first_argmax(jax.lax.stop_gradient(logits)) == targets) & loss_mask
    return hit.sum(dtype=jnp.float32) / jnp.maximum(loss_mask.sum(dtype=jnp.int32), 1).astype(jnp.float32)


def joint_loss(
    model: PAWNModel,
    batch: dict[str, Array],
    variants: Sequence[tuple[ModelConfig, float]],
    *,
    dtype: Optional[str] = None,
    remat: bool | str = False,
    with_accuracy: bool = False,
):
    """Supernet joint loss ``Σ_v w_v · CE_v`` on one batch (spec §1.3).

    Each variant runs its nested slice of ``model`` (the variant equal to ``model.config`` runs
    the unsliced model). ``batch`` holds ``input_ids`` int32 [B, T], ``attn_mask`` bool,
    ``targets`` int32, ``loss_mask`` bool; ``attn_mask`` must be true exactly on a prefix of
    each row (packed games are), which lets GPUs use fused attention. ``remat``: one of
    :data:`pawn.model.REMAT_MODES` (or a bool).

    Returns:
        ``(joint, (per_variant {ModelConfig.name: CE}, n_supervised int32))``; with
        ``with_accuracy`` the aux gains a third item, ``{ModelConfig.name: top-1 accuracy}``
        (:func:`masked_accuracy`, float32 scalars).

    Raises:
        ValueError: empty variant list.
    """
    if not variants:
        raise ValueError("joint_loss needs at least one variant")
    total = jnp.float32(0.0)
    per: dict[str, Array] = {}
    acc: dict[str, Array] = {}
    count = jnp.int32(0)
    for cfg, weight in variants:
        m = model if cfg == model.config else sliced(model, cfg)
        logits = m(batch["input_ids"], batch["attn_mask"], dtype=dtype, remat=remat, prefix_mask=True)
        ce, count = masked_cross_entropy(logits, batch["targets"], batch["loss_mask"])
        per[cfg.name] = ce
        if with_accuracy:
            acc[cfg.name] = masked_accuracy(logits, batch["targets"], batch["loss_mask"])
        total = total + weight * ce
    return (total, (per, count, acc)) if with_accuracy else (total, (per, count))
