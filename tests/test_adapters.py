"""Adapter strategies (spec training-and-adapters.md §4): identity at init, forward semantics,
parameter arithmetic at the published shapes, trainable partition, weight reports."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from pawn.adapters import STRATEGIES, AdapterConfigError, AdapterError, build_adapted, count_params
from pawn.config import TOY, VARIANTS, param_count
from pawn.errors import PawnError
from pawn.model import PAWNModel

from _adapter_backbone import CFG, bb, tokens  # noqa: F401 (shared fixtures)

BASE, LARGE = VARIANTS["base"], VARIANTS["large"]

ALL = [
    ("lora", {}), ("lora", {"ffn": True, "layers": [0, 2]}), ("film", {"use_output_film": True}),
    ("bottleneck", {"n_hidden": 2}), ("bottleneck", {"layers": [2], "adapt_attn": False}), ("hybrid", {"use_output_film": True}),
    ("sparse", {"density": 0.2}), ("unfreeze", {"top_n": 1, "include_lm_head": True, "include_embeddings": True}),
    # ... and every strategy of the table with its defaults (a new strategy joins the matrix by registering)
    *[(name, {}) for name, row in STRATEGIES.items() if row.uses_backbone],
]


def _perturb(model, key, scale=0.05):
    """Every trainable leaf moved by random noise (so adapters are no longer the identity)."""
    tr, fr = eqx.partition(model, model.trainable_filter())
    leaves, tdef = jax.tree_util.tree_flatten(tr)
    keys = jax.random.split(key, len(leaves))
    leaves = [x + scale * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)]
    return eqx.combine(jax.tree_util.tree_unflatten(tdef, leaves), fr)


@pytest.mark.parametrize("name,settings", ALL)
def test_every_strategy_starts_as_the_backbone(bb, tokens, name, settings):
    m = build_adapted(name, settings, bb, jax.random.PRNGKey(3))
    ref, ref_h = bb(tokens, dtype="float32", return_hidden=True)
    out, h = m(tokens, dtype="float32", return_hidden=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(h), np.asarray(ref_h), rtol=0, atol=1e-6)
    # ... and stops being it once trained (the adapter is really wired in).
    moved = _perturb(m, jax.random.PRNGKey(4))
    assert float(jnp.abs(moved(tokens, dtype="float32") - ref).max()) > 1e-3


@pytest.mark.parametrize("name,settings", [("lora", {"alpha": 8.0}), ("sparse", {"density": 0.3, "layers": [1]}),
                                           ("unfreeze", {"layers": [0, 2], "include_lm_head": True}),
                                           ("lora", {"ffn": True, "targets": ["q", "v"], "rank": 2, "layers": [1, 2]})])
def test_mergeable_adapters_equal_their_merged_weights(bb, tokens, name, settings):
    m = _perturb(build_adapted(name, settings, bb, jax.random.PRNGKey(3)), jax.random.PRNGKey(5))
    merged = PAWNModel(CFG, params=m.merged_params())
    np.testing.assert_allclose(np.asarray(m(tokens, dtype="float32")), np.asarray(merged(tokens, dtype="float32")), atol=2e-5)


def test_lora_scale_is_alpha_over_rank(bb):
    m = _perturb(build_adapted("lora", {"rank": 4, "alpha": 8.0, "targets": ["q"]}, bb, jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    ad = m.adapter
    want = np.asarray(bb.wq) + 2.0 * np.einsum("lir,lro->lio", np.asarray(ad.A["wq"]), np.asarray(ad.B["wq"]))
    np.testing.assert_allclose(m.merged_params()["wq"], want, rtol=1e-6)
    assert ad.A["wq"].shape == (3, 32, 4) and ad.B["wq"].shape == (3, 4, 32)
    # v1 init: Kaiming-uniform with bound 1/sqrt(d_in); B zero.
    assert float(jnp.abs(build_adapted("lora", {}, bb, jax.random.PRNGKey(0)).adapter.A["wq"]).max()) <= 32 ** -0.5


def test_lora_target_subsets_share_init_values(bb):
    full = build_adapted("lora", {}, bb, jax.random.PRNGKey(7)).adapter
    qv = build_adapted("lora", {"targets": ["q", "v"], "layers": [2]}, bb, jax.random.PRNGKey(7)).adapter
    np.testing.assert_array_equal(np.asarray(qv.A["wv"][0]), np.asarray(full.A["wv"][2]))
    assert set(qv.A) == {"wq", "wv"}


def test_layer_subset_leaves_other_layers_untouched(bb, tokens):
    m = _perturb(build_adapted("lora", {"layers": [1]}, bb, jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    _, h = m(tokens, dtype="float32", return_hidden=True)
    _, ref = bb(tokens, dtype="float32", return_hidden=True)
    np.testing.assert_array_equal(np.asarray(h[:2]), np.asarray(ref[:2]))  # embedding and layer 0
    assert float(jnp.abs(h[2] - ref[2]).max()) > 1e-3
    assert m.adapter.A["wq"].shape[0] == 1  # only the selected layer is stored (and trained)


def test_film_is_an_affine_map_after_the_block_and_on_the_logits(bb, tokens):
    m = build_adapted("film", {"layers": [2], "use_output_film": True}, bb, jax.random.PRNGKey(0))
    g, b = jnp.linspace(0.5, 1.5, 32), jnp.linspace(-1, 1, 32)
    go, bo = jnp.linspace(0.9, 1.1, CFG.vocab_size), jnp.linspace(-0.2, 0.2, CFG.vocab_size)
    m = eqx.tree_at(lambda m: (m.adapter.gamma, m.adapter.beta, m.adapter.out_gamma, m.adapter.out_beta), m,
                    (g[None], b[None], go, bo))
    logits, h = m(tokens, dtype="float32", return_hidden=True)
    _, ref = bb(tokens, dtype="float32", return_hidden=True)
    np.testing.assert_allclose(np.asarray(h[-1]), np.asarray(ref[-1] * g + b), rtol=1e-6, atol=1e-6)
    want = bb._head(ref[-1] * g + b) * go + bo
    np.testing.assert_allclose(np.asarray(logits), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_bottleneck_uses_exact_erf_gelu_and_hidden_stages(bb, tokens):
    m = build_adapted("bottleneck", {"layers": [2], "adapt_attn": False, "n_hidden": 1, "bottleneck_dim": 4}, bb, jax.random.PRNGKey(0))
    m = _perturb(m, jax.random.PRNGKey(1), scale=1.0)
    ad = m.adapter
    _, h = m(tokens, dtype="float32", return_hidden=True)
    _, ref = bb(tokens, dtype="float32", return_hidden=True)
    x = ref[-1]
    gelu = lambda z: jax.nn.gelu(z, approximate=False)
    want = x + gelu(gelu(x @ ad.down["ffn"][0]) @ ad.hidden["ffn"][0, 0]) @ ad.up["ffn"][0]
    np.testing.assert_allclose(np.asarray(h[-1]), np.asarray(want), rtol=1e-5, atol=1e-5)
    tanh = lambda z: jax.nn.gelu(z, approximate=True)
    approx = x + tanh(tanh(x @ ad.down["ffn"][0]) @ ad.hidden["ffn"][0, 0]) @ ad.up["ffn"][0]
    assert float(jnp.abs(approx - want).max()) > 1e-4  # the tolerance above tells the two apart


def test_sparse_mask_follows_the_v1_generator_and_only_masked_entries_get_gradient(bb, tokens):
    m = build_adapted("sparse", {"density": 0.1, "targets": ["q", "o"], "layers": [0, 2], "seed": 11}, bb, jax.random.PRNGKey(0))
    rng = np.random.default_rng(11)
    want = {"wq": [], "wo": []}
    for _layer in (0, 2):
        for n in ("wq", "wo"):
            want[n].append(rng.random((32, 32), dtype=np.float32) < 0.1)
    for n in want:
        np.testing.assert_array_equal(np.asarray(m.adapter.mask[n]), np.stack(want[n]))
    assert m.num_trainable_params() == sum(int(np.sum(w)) for w in want.values())
    tr, fr = eqx.partition(m, m.trainable_filter())
    assert {str(x.dtype) for x in jax.tree_util.tree_leaves(tr)} == {"float32"}  # the bool masks are frozen
    g = eqx.filter_grad(lambda t: eqx.combine(t, fr)(tokens, dtype="float32").sum())(tr)
    for n in ("wq", "wo"):
        gd, mk = np.asarray(g.adapter.delta[n]), np.asarray(m.adapter.mask[n])
        assert np.all(gd[~mk] == 0) and np.count_nonzero(gd[mk]) > 0.9 * mk.sum()


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_unfreeze_partition_keeps_frozen_slices_out_of_the_update(bb, tokens):
    m = build_adapted("unfreeze", {"layers": [1]}, bb, jax.random.PRNGKey(0))
    tr, fr = eqx.partition(m, m.trainable_filter())
    names = sorted(jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tr)[0])
    assert all(".adapter.blocks" in n for n in names) and len(names) == 9
    assert m.num_trainable_params() == 4 * 32 * 32 + 3 * 32 * 64 + 2 * 32
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2, weight_decay=0.1))
    state = opt.init(tr)
    g = eqx.filter_grad(lambda t: eqx.combine(t, fr)(tokens, dtype="float32").std())(tr)
    upd, _ = opt.update(g, state, tr)
    new = eqx.combine(eqx.apply_updates(tr, upd), fr)
    view = new.adapter.backbone_view(new.backbone)
    for n in ("wq", "w_down", "attn_norm"):
        np.testing.assert_array_equal(np.asarray(getattr(view, n))[[0, 2]], np.asarray(getattr(bb, n))[[0, 2]])
        assert float(jnp.abs(getattr(view, n)[1] - getattr(bb, n)[1]).max()) > 0
    np.testing.assert_array_equal(np.asarray(view.lm_head), np.asarray(bb.lm_head))


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_decode_with_adapters_equals_the_full_forward(bb):
    m = _perturb(build_adapted("hybrid", {"use_output_film": True, "layers": [0, 1]}, bb, jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    bn = _perturb(build_adapted("bottleneck", {"n_hidden": 1}, bb, jax.random.PRNGKey(0)), jax.random.PRNGKey(2))
    seq = jax.random.randint(jax.random.PRNGKey(3), (2, 9), 0, 1968)
    for model in (m, bn):
        full = model(seq, dtype="float32")
        _, cache = model.prefill(seq[:, :5], dtype="float32", cache_len=9)
        for pos in range(5, 9):
            lg, cache = model.decode(seq[:, pos], jnp.int32(pos), cache)
            np.testing.assert_allclose(np.asarray(lg), np.asarray(full[:, pos]), atol=2e-5)


def test_trainable_filter_selects_only_adapter_weights(bb):
    for name, settings in ALL + [("specialized_clm", {})]:
        m = build_adapted(name, settings, bb, jax.random.PRNGKey(0))
        tr, _ = eqx.partition(m, m.trainable_filter())
        n = sum(x.size for x in jax.tree_util.tree_leaves(tr))
        if name == "sparse":
            assert n == sum(x.size for x in m.adapter.delta.values()) and m.num_trainable_params() < n
        else:
            assert n == m.num_trainable_params(), name
        if name != "specialized_clm":
            assert jax.tree_util.tree_leaves(tr.backbone) == [], name


def test_specialized_clm_is_a_fresh_small_model(bb, tokens):
    m = build_adapted("specialized_clm", {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32}, bb, jax.random.PRNGKey(0))
    assert m.config.d_model == 16 and m.config.max_seq_len == CFG.max_seq_len
    assert m.num_trainable_params() == param_count(m.config)
    assert m(tokens, dtype="float32").shape == (2, 10, CFG.vocab_size)
    assert m.weight_report() == {}


# ---------------------------------------------------------------- parameter arithmetic (spec §4, §7.2)

@pytest.mark.parametrize("name,settings,cfg,expected", [
    ("lora", {"rank": 4}, BASE, 131_072),
    ("lora", {"rank": 16}, BASE, 524_288),
    ("lora", {"rank": 4, "ffn": True}, BASE, 131_072 + 8 * 3 * 4 * (512 + 2048)),
    ("film", {"use_output_film": True}, BASE, 12_152),
    ("film", {"use_output_film": True}, LARGE, 16_760),
    ("film", {}, BASE, 8_192),
    ("bottleneck", {"bottleneck_dim": 8}, BASE, 131_072),
    ("bottleneck", {"bottleneck_dim": 8, "n_hidden": 2}, BASE, 131_072 + 2_048),
    ("bottleneck", {"bottleneck_dim": 32}, BASE, 524_288),
    ("bottleneck", {"bottleneck_dim": 1024, "layers": [4, 5, 6, 7]}, BASE, 8_388_608),
    ("bottleneck", {"bottleneck_dim": 2500, "layers": [6, 7, 8, 9]}, LARGE, 25_600_000),
    ("bottleneck", {"bottleneck_dim": 82}, LARGE, 2 * 10 * 2 * 640 * 82),
    ("hybrid", {"rank": 4, "use_output_film": True}, BASE, 131_072 + 12_152),
    ("unfreeze", {"layers": [7]}, BASE, 4_195_328),
    ("unfreeze", {"top_n": 2, "include_lm_head": True}, BASE, 2 * 4_195_328 + 512 + 512 * 1980),
    ("specialized_clm", {}, BASE, 145 * 84 + 2 * (4 * 84 ** 2 + 3 * 84 * 192 + 2 * 84) + 84 + 1980 * 84),
])
def test_parameter_counts_at_published_shapes(name, settings, cfg, expected):
    assert count_params(name, settings, cfg) == expected


@pytest.mark.parametrize("density,approx", [(0.015, 126_000), (0.01, 84_000)])
def test_sparse_count_is_the_exact_mask_count_near_density_times_numel(density, approx):
    got = count_params("sparse", {"density": density}, BASE)
    rng = np.random.default_rng(42)  # the v1 order: layers, then q, k, v, o within a layer
    want = sum(int((rng.random((512, 512), dtype=np.float32) < density).sum()) for _ in range(8) for _ in range(4))
    assert got == want
    numel = 8 * 4 * 512 * 512
    assert abs(got - density * numel) < 5 * np.sqrt(numel * density)  # ~126K / ~84K
    assert abs(got - approx) < 0.01 * approx


def test_counts_from_shapes_equal_built_adapters(bb):
    from pawn.adapters.strategies.rosa import MODES  # phased: the count is the main phase's, the build is the warm-up's (spec §4.6)

    for name, settings in ALL + [("specialized_clm", {})]:
        if name in MODES:
            continue
        assert count_params(name, settings, CFG) == build_adapted(name, settings, bb, jax.random.PRNGKey(0)).num_trainable_params(), name


# ---------------------------------------------------------------- reports, table, errors

def test_weight_reports_use_the_spec_names(bb):
    rep = build_adapted("lora", {"targets": ["q", "v"], "layers": [2]}, bb, jax.random.PRNGKey(0)).weight_report()
    assert set(rep) == {"layer2.wq.A", "layer2.wq.B", "layer2.wv.A", "layer2.wv.B"} and rep["layer2.wq.B"] == 0.0
    rep = build_adapted("film", {"use_output_film": True}, bb, jax.random.PRNGKey(0)).weight_report()
    assert set(rep) == {f"hidden_{i}/{k}" for i in range(3) for k in ("gamma_dev", "beta_norm")} | {"output/gamma_dev", "output/beta_norm"}
    rep = build_adapted("bottleneck", {"n_hidden": 1, "ffn_layers": [1]}, bb, jax.random.PRNGKey(0)).weight_report()
    assert "adapter/layer0.attn.hidden0" in rep and "adapter/layer1.ffn.up" in rep and "adapter/layer0.ffn.up" not in rep
    rep = build_adapted("hybrid", {"use_output_film": True}, bb, jax.random.PRNGKey(0)).weight_report()
    assert "lora/layer0.wq.B" in rep and "lora/layer0.wq.A" not in rep and "film/output/gamma_dev" in rep
    m = _perturb(build_adapted("sparse", {"density": 0.5}, bb, jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    rep = m.weight_report()
    want = float(np.linalg.norm(np.asarray(m.adapter.delta["wk"][1]) * np.asarray(m.adapter.mask["wk"][1])))
    assert rep["sparse/layer1.wk.delta"] == pytest.approx(want, rel=1e-6)
    rep = build_adapted("unfreeze", {"top_n": 2}, bb, jax.random.PRNGKey(0)).weight_report()
    assert rep == {"unfrozen_layers": [1, 2], "n_trainable": 2 * (4 * 32 * 32 + 3 * 32 * 64 + 2 * 32)}


def test_strategy_table_rows():
    first = ["lora", "film", "bottleneck", "hybrid", "sparse", "unfreeze", "specialized_clm", "rosa", "retro-sparse",
             "retro-bottleneck"]
    assert list(STRATEGIES)[:10] == first  # strategies added as modules (pawn.adapters.strategies) follow
    assert STRATEGIES["lora"].defaults() == {"targets": ["q", "k", "v", "o"], "ffn": False, "layers": None, "rank": 4, "alpha": None,
                                           "init_scale": 1.0}
    assert STRATEGIES["bottleneck"].defaults()["bottleneck_dim"] == 8 and STRATEGIES["sparse"].defaults()["density"] == 0.01
    assert {n for n in first if STRATEGIES[n].mergeable} == {"lora", "sparse", "unfreeze", "specialized_clm", "rosa", "retro-sparse"}


@pytest.mark.parametrize("name,settings,needle", [
    ("nope", {}, "unknown adapter strategy 'nope'"),
    ("lora", {"rank": 0}, "rank"),
    ("lora", {"targets": ["q", "x"]}, "targets"),
    ("lora", {"layers": [3]}, "layer(s) [3] outside 0..2"),
    ("bottleneck", {"adapt_attn": False, "adapt_ffn": False}, "both off"),
    ("unfreeze", {"layers": [0], "top_n": 1}, "not both"),
    ("unfreeze", {"top_n": 4}, "exceeds"),
    ("sparse", {"density": 1.5}, "density"),
    ("film", {"gamma": 1}, "gamma"),
    ("specialized_clm", {"d_model": 30, "n_heads": 2}, "head_dim"),
])
def test_bad_settings_are_one_line_errors(bb, name, settings, needle):
    with pytest.raises(AdapterConfigError) as e:
        build_adapted(name, settings, bb, jax.random.PRNGKey(0))
    assert needle in str(e.value) and "\n" not in str(e.value) and isinstance(e.value, PawnError)


def test_activation_adapters_cannot_be_merged(bb):
    for name in ("film", "bottleneck", "hybrid"):
        with pytest.raises(AdapterError, match="cannot be merged"):
            build_adapted(name, {}, bb, jax.random.PRNGKey(0)).merged_params()


def test_toy_backbone_bf16_adapter_forward_is_finite():
    bb = PAWNModel(TOY, jax.random.PRNGKey(0))
    m = _perturb(build_adapted("hybrid", {}, bb, jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    out = m(jnp.zeros((1, 8), jnp.int32), dtype="bfloat16", remat="attention", prefix_mask=True)
    assert out.dtype == jnp.float32 and bool(jnp.isfinite(out).all())


def test_strategy_table_for_the_cli():
    from pawn.adapters import strategy_table

    rows = {r["name"]: r for r in strategy_table()}
    assert rows["film"]["defaults"] == {"layers": None, "use_output_film": False}
    assert "2·L_sel·d" in rows["film"]["formula"] and rows["unfreeze"]["mergeable"] is True


@pytest.mark.parametrize("name,leaves", [
    ("lora", lambda a: list(a.A.values())),
    ("hybrid", lambda a: list(a.parts[0].A.values())),
    ("bottleneck", lambda a: list(a.down.values()) + list(a.hidden.values())),
    ("retro-bottleneck", lambda a: list(a.lora.A.values()) + list(a.bottleneck.down.values())),
])
def test_init_scale_scales_the_random_factors_and_keeps_the_identity(bb, tokens, name, leaves):
    """``init_scale`` s multiplies the U(±1/√fan_in) bound: with the same seed every random
    factor is exactly s times the v1 (s = 1) one, and the adapter is still the identity."""
    extra = {"n_hidden": 1} if "bottleneck" in name else {}
    ref = build_adapted(name, extra, bb, jax.random.PRNGKey(3))
    big = build_adapted(name, {**extra, "init_scale": 2.5}, bb, jax.random.PRNGKey(3))
    for a, b in zip(leaves(ref.adapter), leaves(big.adapter), strict=True):
        assert float(jnp.abs(a).max()) > 0
        np.testing.assert_allclose(np.asarray(b), 2.5 * np.asarray(a), rtol=1e-6)
    # the identity up to float rounding: at T <= 128 the unrolled layer loop lets XLA fuse the adapted program
    # differently from the bare one (1e-7 apart for hybrid); a non-identity adapter moves logits by > 1e-3
    np.testing.assert_allclose(np.asarray(big(tokens)), np.asarray(bb(tokens)), rtol=0, atol=1e-6)


def test_rosa_main_phase_reinitialises_lora_at_its_init_scale(bb):
    from pawn.adapters.strategies.rosa import enter_main_phase

    models = [build_adapted("rosa", {"init_scale": s}, bb, jax.random.PRNGKey(0)) for s in (1.0, 0.5)]
    masks = {n: np.zeros(m.shape, bool) for n, m in models[0].adapter.sparse.mask.items()}
    main = [enter_main_phase(m, masks, jax.random.PRNGKey(9)) for m in models]
    np.testing.assert_allclose(np.asarray(main[1].adapter.lora.A["wq"]), 0.5 * np.asarray(main[0].adapter.lora.A["wq"]), rtol=1e-6)


@pytest.mark.parametrize("strategy", ["film", "sparse", "unfreeze", "specialized_clm"])
def test_init_scale_is_refused_where_nothing_is_random(strategy):
    from pydantic import ValidationError

    from pawn.train.adapt_config import AdaptSettings

    with pytest.raises(ValidationError, match=f"init_scale: strategy {strategy} has no random adapter weights"):
        AdaptSettings.load(strategy=strategy, backbone="x", init_scale=0.5)
    assert AdaptSettings.load(strategy=strategy, backbone="x", init_scale=1.0).init_scale == 1.0
    with pytest.raises(AdapterConfigError, match="init_scale"):
        build_adapted("lora", {"init_scale": 0.0}, None, jax.random.PRNGKey(0))
