"""Masked cross-entropy and the supernet joint loss (spec training-and-adapters.md §1.3)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pawn.config import TINY_SUPERNET, TINY_VARIANTS
from pawn.model import PAWNModel, sliced
from pawn.train.losses import joint_loss, masked_cross_entropy


def test_masked_cross_entropy_matches_hand_computation():
    logits = jnp.array([[[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]]])
    targets = jnp.array([[2, 1]])
    mask = jnp.array([[True, False]])
    loss, n = masked_cross_entropy(logits, targets, mask)
    expected = np.log(np.exp(0) + np.exp(1) + np.exp(2)) - 2.0
    assert int(n) == 1 and abs(float(loss) - expected) < 1e-6
    both, n2 = masked_cross_entropy(logits, targets, jnp.array([[True, True]]))
    second = np.log(np.exp(3) + 2) - 0.0
    assert int(n2) == 2 and abs(float(both) - (expected + second) / 2) < 1e-6


def test_all_false_mask_gives_zero_not_nan():
    loss, n = masked_cross_entropy(jnp.zeros((1, 2, 5)), jnp.zeros((1, 2), jnp.int32), jnp.zeros((1, 2), bool))
    assert float(loss) == 0.0 and int(n) == 0


def test_joint_loss_is_the_weighted_sum_of_variant_losses():
    sup = PAWNModel(TINY_SUPERNET, jax.random.key(0))
    rng = np.random.default_rng(0)
    toks = jnp.asarray(rng.integers(0, 1968, (2, 10)), jnp.int32)
    batch = {"input_ids": toks, "attn_mask": jnp.ones((2, 10), bool), "targets": jnp.roll(toks, -1, 1),
             "loss_mask": jnp.ones((2, 10), bool)}
    variants = [(TINY_VARIANTS["small"], 0.5), (TINY_VARIANTS["large"], 2.0)]
    total, (per, n) = joint_loss(sup, batch, variants)
    small = masked_cross_entropy(sliced(sup, TINY_VARIANTS["small"])(toks), batch["targets"], batch["loss_mask"])[0]
    large = masked_cross_entropy(sup(toks), batch["targets"], batch["loss_mask"])[0]
    assert abs(float(total) - (0.5 * float(small) + 2.0 * float(large))) < 1e-5
    assert set(per) == {"d64_L2_F256", "d192_L4_F768"} and int(n) == 20
