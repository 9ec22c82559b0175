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


def test_masked_positions_may_hold_inf_and_nan_without_touching_loss_or_gradient():
    """Adapter training feeds −inf for illegal moves; masked positions must not matter at all."""
    rng = np.random.default_rng(1)
    base = rng.normal(size=(2, 3, 6)).astype(np.float32)
    targets = jnp.array([[1, 2, 3], [0, 5, 4]])
    mask = jnp.array([[True, False, True], [False, True, False]])
    poisoned = base.copy()
    poisoned[0, 1, :] = -np.inf  # a masked row of −inf (all-illegal terminal slot)
    poisoned[1, 0, 2] = np.nan
    poisoned[1, 2, :] = np.inf
    clean_loss, n = masked_cross_entropy(jnp.asarray(base), targets, mask)
    loss, n2 = masked_cross_entropy(jnp.asarray(poisoned), targets, mask)
    assert int(n) == int(n2) == 3
    assert np.isfinite(float(loss)) and abs(float(loss) - float(clean_loss)) < 1e-6
    grad = jax.grad(lambda x: masked_cross_entropy(x, targets, mask)[0])(jnp.asarray(poisoned))
    g = np.asarray(grad)
    assert np.isfinite(g).all()
    assert (g[~np.asarray(mask)] == 0).all()  # masked positions get no gradient


def test_minus_inf_logits_of_other_tokens_at_supervised_positions_are_probability_zero():
    logits = jnp.array([[[0.0, -jnp.inf, 1.0, -jnp.inf]]])
    targets = jnp.array([[2]])
    mask = jnp.array([[True]])
    loss, _ = masked_cross_entropy(logits, targets, mask)
    expected = np.log(np.exp(0.0) + np.exp(1.0)) - 1.0  # the −inf tokens drop out of the softmax
    assert abs(float(loss) - expected) < 1e-6
    g = np.asarray(jax.grad(lambda x: masked_cross_entropy(x, targets, mask)[0])(logits))[0, 0]
    p = np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum()
    np.testing.assert_allclose(g, [p[0], 0.0, p[1] - 1.0, 0.0], atol=1e-6)


def test_masked_accuracy_counts_argmax_hits_on_supervised_positions_only():
    from pawn.train.losses import masked_accuracy

    logits = jnp.array([[[0.0, 2.0, 1.0], [5.0, 0.0, 0.0], [0.0, 0.0, 9.0], [1.0, 0.0, 0.0]]])
    targets = jnp.array([[1, 1, 2, 0]])
    mask = jnp.array([[True, True, True, False]])  # hits at 0 and 2; the hit at 3 is unsupervised
    assert abs(float(masked_accuracy(logits, targets, mask)) - 2 / 3) < 1e-7
    assert float(masked_accuracy(logits, targets, jnp.zeros((1, 4), bool))) == 0.0
    sup = PAWNModel(TINY_SUPERNET, jax.random.key(0))
    toks = jnp.asarray(np.random.default_rng(0).integers(0, 1968, (2, 10)), jnp.int32)
    batch = {"input_ids": toks, "attn_mask": jnp.ones((2, 10), bool), "targets": jnp.roll(toks, -1, 1),
             "loss_mask": jnp.ones((2, 10), bool)}
    _, (per, n, acc) = joint_loss(sup, batch, [(TINY_VARIANTS["small"], 1.0)], with_accuracy=True)
    small_logits = np.asarray(sliced(sup, TINY_VARIANTS["small"])(toks))
    assert abs(float(acc["d64_L2_F256"]) - float((small_logits.argmax(-1) == np.asarray(batch["targets"])).mean())) < 1e-7


def test_first_argmax_gives_jnp_argmax_values_on_ties_nan_and_infinities():
    """first_argmax replaces jnp.argmax in the losses and eval scores for speed; its values must be
    jnp.argmax's exactly: first index on ties, the first NaN wins, all -inf gives 0."""
    from pawn.metrics_core import first_argmax

    r = np.random.default_rng(0)
    ties = r.integers(-2, 2, (64, 50)).astype(np.float32)  # many rows with a tied maximum
    nan = r.standard_normal((8, 10)).astype(np.float32)
    nan[1, [3, 7]] = np.nan
    nan[2, 0] = np.nan
    nan[3, :] = np.nan
    inf = r.standard_normal((8, 10)).astype(np.float32)
    inf[0, [4, 6]] = np.inf
    inf[5, :] = -np.inf
    inf[6, :] = -np.inf
    inf[6, 9] = np.nan
    cases = [r.standard_normal((16, 128, 1980)).astype(np.float32), ties, nan, inf,
             r.standard_normal((32, 40)).astype(np.float16), r.integers(-3, 3, (64, 50)).astype(np.int32)]
    for x in cases:
        for axis in range(-1, -x.ndim - 1, -1):
            want = np.asarray(jnp.argmax(jnp.asarray(x), axis=axis))
            got = np.asarray(jax.jit(first_argmax, static_argnums=1)(jnp.asarray(x), axis))
            assert got.dtype == np.int32 and np.array_equal(got, want), (x.dtype, x.shape, axis)
    # the cases hold what they claim: ties the first index breaks, NaN rows, an all -inf row
    assert (ties == ties.max(-1, keepdims=True)).sum(-1).max() > 1
    assert np.asarray(first_argmax(jnp.asarray(nan)))[1] == 3 and np.asarray(first_argmax(jnp.asarray(inf)))[5] == 0
