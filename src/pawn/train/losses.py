"""Losses for pretraining (spec ``training-and-adapters.md`` §1.3)."""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from pawn.config import ModelConfig
from pawn.model import PAWNModel, sliced


def masked_cross_entropy(
    logits: Float[Array, "B T V"], targets: Int[Array, "B T"], loss_mask: Bool[Array, "B T"]
) -> tuple[Float[Array, ""], Int[Array, ""]]:
    """Mean next-token cross-entropy over supervised positions, in nats.

    log-softmax in fp32 over all V logits (no legal masking in pretraining); the sum over
    ``loss_mask`` positions is divided by ``max(count, 1)``, so an all-false mask gives 0.

    Returns:
        ``(loss float32 scalar, count int32 scalar)``.
    """
    logits = logits.astype(jnp.float32)
    # −log softmax[target] = logsumexp(logits) − logits[target]; the target logit is read with a
    # one-hot product rather than a gather, whose scatter-add backward is slow on XLA:CPU.
    target_logit = (logits * jax.nn.one_hot(targets, logits.shape[-1], dtype=logits.dtype)).sum(-1)
    nll = jax.nn.logsumexp(logits, axis=-1) - target_logit
    m = loss_mask.astype(jnp.float32)
    count = loss_mask.sum(dtype=jnp.int32)
    return (nll * m).sum() / jnp.maximum(count, 1).astype(jnp.float32), count


def joint_loss(
    model: PAWNModel,
    batch: dict[str, Array],
    variants: Sequence[tuple[ModelConfig, float]],
    *,
    dtype: Optional[str] = None,
    remat: bool | str = False,
) -> tuple[Float[Array, ""], tuple[dict[str, Array], Int[Array, ""]]]:
    """Supernet joint loss ``Σ_v w_v · CE_v`` on one batch (spec §1.3).

    Each variant runs its nested slice of ``model`` (the variant equal to ``model.config`` runs
    the unsliced model). ``batch`` holds ``input_ids`` int32 [B, T], ``attn_mask`` bool,
    ``targets`` int32, ``loss_mask`` bool; ``attn_mask`` must be true exactly on a prefix of
    each row (packed games are), which lets GPUs use fused attention. ``remat``: one of
    :data:`pawn.model.REMAT_MODES` (or a bool).

    Returns:
        ``(joint, (per_variant {ModelConfig.name: CE}, n_supervised int32))``.

    Raises:
        ValueError: empty variant list.
    """
    if not variants:
        raise ValueError("joint_loss needs at least one variant")
    total = jnp.float32(0.0)
    per: dict[str, Array] = {}
    count = jnp.int32(0)
    for cfg, weight in variants:
        m = model if cfg == model.config else sliced(model, cfg)
        logits = m(batch["input_ids"], batch["attn_mask"], dtype=dtype, remat=remat, prefix_mask=True)
        ce, count = masked_cross_entropy(logits, batch["targets"], batch["loss_mask"])
        per[cfg.name] = ce
        total = total + weight * ce
    return total, (per, count)
