"""PAWNModel (spec model-and-checkpoints.md §2–3): shapes, parameter counts, masking, RoPE,
KV-cache parity and supernet slicing."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pawn.config import (
    SUPERNET,
    TINY_SUPERNET,
    TINY_VARIANTS,
    TOY,
    VARIANTS,
    ModelConfig,
    param_count,
    validate_nested,
)
from pawn.model import PAWNModel, apply_rope, rope_constants, rope_tables, sliced
from pawn.vocab import PAD_TOKEN


@pytest.fixture(scope="module")
def toy():
    return PAWNModel(TOY, jax.random.key(0))


def random_tokens(B, T, seed=0):
    return jnp.asarray(np.random.default_rng(seed).integers(0, 1968, (B, T)), jnp.int32)


@pytest.mark.parametrize(
    "cfg,expected",
    [
        (TOY, 267_392),
        (VARIANTS["small"], 8_936_960),
        (VARIANTS["base"], 34_651_136),
        (VARIANTS["large"], 66_909_440),
        (TINY_VARIANTS["small"], 267_392),
        (TINY_VARIANTS["base"], 1_059_328),
        (TINY_SUPERNET, 2_769_024),
        (ModelConfig(d_model=640, n_layers=10, n_heads=8, d_ff=2560), 66_909_440),  # converted v1 large
    ],
)
def test_parameter_counts_match_spec_table(cfg, expected):
    assert param_count(cfg) == expected


def test_built_model_has_the_formula_count(toy):
    assert toy.num_params() == param_count(TOY)
    tiny = PAWNModel(TINY_SUPERNET, jax.random.key(1))
    assert tiny.num_params() == 2_769_024


def test_init_follows_spec(toy):
    assert float(jnp.abs(toy.pad_embed).max()) == 0.0
    assert bool((toy.attn_norm == 1).all() and (toy.final_norm == 1).all())
    assert abs(float(toy.lm_head.std()) - 0.02) < 0.002


def test_config_validation_rejects_bad_shapes():
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(d_model=100, n_layers=1, n_heads=3, d_ff=10)
    with pytest.raises(ValueError, match="even"):
        ModelConfig(d_model=12, n_layers=1, n_heads=4, d_ff=10)  # head_dim 3
    with pytest.raises(ValueError):
        ModelConfig(d_model=64, n_layers=2, n_heads=4, d_ff=256, dropout=0.1)


def test_logits_shape_and_dtype(toy):
    logits = toy(random_tokens(3, 17))
    assert logits.shape == (3, 17, 1980) and logits.dtype == jnp.float32


def test_sequence_longer_than_context_is_an_error(toy):
    with pytest.raises(ValueError, match="max_seq_len"):
        toy(jnp.zeros((1, 513), jnp.int32))


def test_causal_future_tokens_do_not_change_past_logits(toy):
    a = random_tokens(1, 12, seed=1)
    b = a.at[0, 8].set(5)
    la, lb = toy(a), toy(b)
    np.testing.assert_array_equal(np.asarray(la[0, :8]), np.asarray(lb[0, :8]))
    assert float(jnp.abs(la[0, 8] - lb[0, 8]).max()) > 1e-4


def test_padding_masks_keys_only_and_fully_masked_rows_are_finite(toy):
    t = random_tokens(2, 10, seed=2)
    t = t.at[0, 6:].set(PAD_TOKEN)
    mask = t != PAD_TOKEN
    base = toy(t, mask)
    # Changing what sits in masked key slots must not move any real position's logits.
    t2 = t.at[0, 7].set(33)
    mask2 = mask.at[0, 7].set(False)
    np.testing.assert_allclose(np.asarray(toy(t2, mask2)[0, :6]), np.asarray(base[0, :6]), atol=1e-6)
    # A leading PAD row has no real key at position 0: its output must be finite, not NaN.
    t3 = t.at[1, 0].set(PAD_TOKEN)
    out = toy(t3)
    assert bool(jnp.isfinite(out).all())


def test_embedding_overrides_pad_and_outcome_rows(toy):
    e = toy.embed(jnp.array([[PAD_TOKEN, 1969, 1979, 1967, 2000]], jnp.int32))[0]
    np.testing.assert_array_equal(np.asarray(e[0]), np.asarray(toy.pad_embed))
    np.testing.assert_array_equal(np.asarray(e[1]), np.asarray(toy.outcome_embed[0]))
    np.testing.assert_array_equal(np.asarray(e[2]), np.asarray(toy.outcome_embed[10]))
    np.testing.assert_array_equal(np.asarray(e[4]), np.asarray(toy.outcome_embed[10]))  # clamped
    expect = toy.src_embed[55] + toy.dst_embed[62] + toy.promo_embed[4]  # h7g8n
    np.testing.assert_allclose(np.asarray(e[3]), np.asarray(expect), atol=1e-7)


def test_rope_rotates_adjacent_pairs():
    cos, sin = rope_tables(jnp.arange(3), 4, 10000.0)
    x = jnp.array([1.0, 0.0, 1.0, 0.0]).reshape(1, 1, 1, 4).repeat(3, axis=1)
    out = np.asarray(apply_rope(x, cos, sin))[0, :, 0]
    # pair 0 rotates by θ = p, pair 1 by θ = p / 100 (base^(2/4) = 100)
    np.testing.assert_allclose(out[2], [np.cos(2), np.sin(2), np.cos(0.02), np.sin(0.02)], atol=1e-6)


@pytest.mark.parametrize("T, hd", [(37, 16), (128, 64), (512, 32)])
def test_rope_constants_are_the_compiled_tables_bitwise(T, hd):
    cos, sin = rope_constants(T, hd, 10000.0)
    ref = jax.jit(lambda: rope_tables(jnp.arange(T), hd, 10000.0))()
    assert isinstance(cos, np.ndarray) and cos.dtype == np.float32 and cos.shape == (T, hd // 2)
    np.testing.assert_array_equal(cos, np.asarray(ref[0]))
    np.testing.assert_array_equal(sin, np.asarray(ref[1]))
    x = jax.random.normal(jax.random.key(1), (2, T, 3, hd))
    inline = jax.jit(lambda x: apply_rope(x, *rope_tables(jnp.arange(T), hd, 10000.0)))(x)
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda x: apply_rope(x, cos, sin))(x)), np.asarray(inline))


def test_forward_and_gradient_programs_compute_no_rope_trigonometry(toy):
    # XLA:CPU fused the tables' cos/sin into every q/k consumer, recomputing them per element
    # (47 ms of a 425 ms joint step): the model's program holds them as constants instead.
    t = random_tokens(2, 9)
    from jax.extend.core import subjaxprs

    prims = lambda jaxpr: {e.primitive.name for e in jaxpr.eqns} | {  # noqa: E731
        p for sub in subjaxprs(jaxpr) for p in prims(sub)}
    fwd = jax.make_jaxpr(lambda m: m(t))(toy).jaxpr
    grad = jax.make_jaxpr(jax.grad(lambda m: m(t).sum()))(toy).jaxpr
    for jaxpr in (fwd, grad):
        assert "dot_general" in prims(jaxpr) and not prims(jaxpr) & {"cos", "sin"}


def test_the_model_runs_under_disable_jit(toy):
    # rope_constants compiles its tables ahead of time, which jax.disable_jit() refuses: there it
    # computes them op by op, as everything else is computed there.
    t = random_tokens(1, 6)
    with jax.disable_jit():
        eager = np.asarray(toy(t))
    np.testing.assert_allclose(eager, np.asarray(jax.jit(lambda m, t: m(t))(toy, t)), atol=2e-5)


def test_hidden_states_have_embedding_plus_every_layer(toy):
    t = random_tokens(2, 9)
    logits, hidden = toy(t, return_hidden=True)
    assert hidden.shape == (TOY.n_layers + 1, 2, 9, TOY.d_model)
    np.testing.assert_array_equal(np.asarray(hidden[0]), np.asarray(toy.embed(t)))
    np.testing.assert_array_equal(np.asarray(logits), np.asarray(toy(t)))


@pytest.mark.parametrize("prefix", [1, 5])
def test_kv_cache_decode_equals_full_forward(toy, prefix):
    t = random_tokens(2, 14, seed=3).at[:, 0].set(1970)
    full = np.asarray(toy(t))
    logits, cache = toy.prefill(t[:, :prefix])
    np.testing.assert_allclose(np.asarray(logits), full[:, :prefix], atol=1e-5)
    assert len(cache.k) == len(cache.v) == TOY.n_layers and cache.length == TOY.max_seq_len
    assert cache.k[0].shape == (2, TOY.n_heads, TOY.max_seq_len, TOY.head_dim)
    step = eqx.filter_jit(lambda m, tok, pos, c: m.decode(tok, pos, c))
    worst = 0.0
    for pos in range(prefix, 14):
        lg, cache = step(toy, t[:, pos], jnp.int32(pos), cache)
        worst = max(worst, float(np.abs(np.asarray(lg) - full[:, pos]).max()))
    assert worst <= 1e-5, worst


def test_cache_sized_to_generation_length_decodes_in_place_like_a_full_prefill(toy):
    """A cache of exactly the sequence length, donated to the jitted step: logits match the full
    forward at every position, and the K/V written step by step equal a prefill of the whole
    sequence slot for slot (a wrong slot, layer or layout would not)."""
    B, T, prefix = 3, 12, 4
    t = random_tokens(B, T, seed=5).at[:, 0].set(1975)
    full = np.asarray(toy(t))
    logits, cache = toy.prefill(t[:, :prefix], cache_len=T)
    assert cache.length == T and cache.stacked()[0].shape == (TOY.n_layers, B, TOY.n_heads, T, TOY.head_dim)
    k0, _ = cache.stacked()
    assert float(jnp.abs(k0[:, :, :, prefix:]).max()) == 0.0 and float(jnp.abs(k0[:, :, :, :prefix]).max()) > 0.0
    step = jax.jit(lambda m, c, tok, pos: m.decode(tok, pos, c), donate_argnums=(1,))
    for pos in range(prefix, T):
        lg, cache = step(toy, cache, t[:, pos], jnp.int32(pos))
        np.testing.assert_allclose(np.asarray(lg), full[:, pos], rtol=1e-5, atol=1e-5)
    _, ref = toy.prefill(t, cache_len=T)
    for got, want in zip(cache.stacked(), ref.stacked()):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_prefill_rejects_a_cache_shorter_than_the_prompt_or_longer_than_the_context(toy):
    t = random_tokens(1, 6)
    with pytest.raises(ValueError, match="cache_len 5"):
        toy.prefill(t, cache_len=5)
    with pytest.raises(ValueError, match="cache_len 513"):
        toy.prefill(t, cache_len=TOY.max_seq_len + 1)


def test_bfloat16_compute_returns_float32_logits_close_to_fp32(toy):
    t = random_tokens(2, 16)
    lo = toy(t, dtype="bfloat16")
    assert lo.dtype == jnp.float32
    assert float(jnp.abs(lo - toy(t, dtype="float32")).max()) < 0.05


def _supernet_holding(variant_params: dict, sup_cfg: ModelConfig, seed: int) -> dict:
    """A supernet parameter set, built by hand in NumPy, whose leading sub-block of every tensor
    (spec model-and-checkpoints.md §3.5: prefix slices on every axis) is the variant's tensor and
    whose every other entry is unrelated noise of a larger scale."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, a in PAWNModel(sup_cfg, jax.random.key(0)).params().items():
        full = rng.normal(0.0, 0.5, a.shape).astype(np.float32)
        v = np.asarray(variant_params[k])
        assert v.ndim == full.ndim and all(n <= m for n, m in zip(v.shape, full.shape)), k
        full[tuple(slice(0, n) for n in v.shape)] = v
        out[k] = full
    return out


@pytest.mark.parametrize("name", ["small", "base", "large"])
def test_sliced_variant_equals_the_model_built_at_the_variant_shape(name):
    """The variant's own weights (random, norms and pad embedding included) are planted in a
    supernet by hand; slicing must give back exactly the model built at the variant's shape.
    A wrong slice (suffix, transposed block, wrong layers) or a norm over the supernet width reads
    the noise and fails."""
    v = TINY_VARIANTS[name]
    rng = np.random.default_rng(1)
    own = {k: (rng.normal(0.0, 0.1, a.shape) + (1.0 if "norm" in k else 0.0)).astype(np.float32)
           for k, a in PAWNModel(v, jax.random.key(0)).params().items()}
    sup = PAWNModel(TINY_SUPERNET, params=_supernet_holding(own, TINY_SUPERNET, 2))
    direct = PAWNModel(v, params=own)
    t = random_tokens(3, 11).at[1, 8:].set(PAD_TOKEN).at[2, 0].set(1969 + 2)  # padding and an outcome token
    got = np.asarray(sliced(sup, v)(t))
    np.testing.assert_array_equal(got, np.asarray(direct(t)))
    if name == "large":
        np.testing.assert_array_equal(got, np.asarray(sup(t)))
    else:
        assert np.abs(np.asarray(sup(t)) - got).max() > 1e-2  # the noise matters to the full supernet


def test_validate_nested_rejects_non_nesting_configs():
    validate_nested(VARIANTS["small"], SUPERNET)
    with pytest.raises(ValueError, match="head_dim"):
        validate_nested(TOY, SUPERNET)
    with pytest.raises(ValueError, match="head_dim"):
        validate_nested(ModelConfig(d_model=640, n_layers=10, n_heads=8, d_ff=2560), SUPERNET)
    with pytest.raises(ValueError, match="n_layers"):
        validate_nested(ModelConfig(d_model=64, n_layers=5, n_heads=1, d_ff=256), TINY_SUPERNET)
    with pytest.raises(ValueError):
        sliced(PAWNModel(TOY, jax.random.key(0)), VARIANTS["small"])


def test_params_wrong_shape_is_named():
    m = PAWNModel(TOY, jax.random.key(0))
    p = dict(m.params())
    p["wq"] = p["wq"][:, :, :8]
    with pytest.raises(ValueError, match="wq"):
        PAWNModel(TOY, params=p)


def test_the_parameter_table_is_the_one_tensor_schema():
    """Issue 22: names, shapes, counts, slices and v1 names all come from pawn.config.PARAMS;
    the counts still equal spec §3.3's formula and the slices spec §3.5's table."""
    from pawn.config import PARAMS, TOY, VARIANTS, param_count
    from pawn.model import PARAM_NAMES, param_shapes

    assert PARAM_NAMES == ("src_embed", "dst_embed", "promo_embed", "pad_embed", "outcome_embed", "attn_norm", "wq", "wk",
                           "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down", "final_norm", "lm_head")
    for cfg in (TOY, *VARIANTS.values()):
        d, L, F, V = cfg.d_model, cfg.n_layers, cfg.d_ff, cfg.vocab_size
        assert param_count(cfg) == 145 * d + L * (4 * d * d + 3 * d * F + 2 * d) + d + V * d
    assert param_count(VARIANTS["base"]) == 34_651_136 and param_count(VARIANTS["large"]) == 66_909_440
    assert param_shapes(VARIANTS["base"])["w_down"] == (8, 2048, 512) and param_shapes(VARIANTS["base"])["lm_head"] == (512, 1980)
    small = VARIANTS["small"]
    slices = {p.name: p.nested_slice(small) for p in PARAMS}
    assert slices["lm_head"] == (slice(0, 256), slice(None)) and slices["outcome_embed"] == (slice(None), slice(0, 256))
    assert slices["w_down"] == (slice(0, 8), slice(0, 1024), slice(0, 256))
    v1 = {p.name: (p.v1_name, p.v1_transposed, p.v1_shape(small)) for p in PARAMS}
    assert v1["pad_embed"] == ("embed.pad_embed", False, (256,))
    assert v1["w_gate"] == ("layers.{i}.ffn.w_gate.weight", True, (1024, 256))
    assert v1["lm_head"] == ("lm_head.weight", True, (1980, 256))
