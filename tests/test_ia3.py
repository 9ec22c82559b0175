"""IA³ (Liu et al. 2022), the 11th strategy, added through the strategy table alone
(:mod:`pawn.adapters.strategies.ia3`): parameter count by hand, identity at init, the forward
semantics (keys, values and the FFN activation rescaled), merging, and `pawn adapt --strategy ia3`
/ `--list-strategies` / the sweep space with no other edit."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

from pawn.adapters import STRATEGIES, build_adapted, count_params
from pawn.cli import app
from pawn.config import VARIANTS
from pawn.model import PAWNModel

from _adapter_backbone import CFG, bb, small_adapt_args, tokens  # noqa: F401 (shared fixtures)


@pytest.mark.parametrize("cfg,settings,want", [
    (VARIANTS["base"], {}, 8 * (2 * 512 + 2048)),  # 24,576
    (VARIANTS["large"], {}, 10 * (2 * 640 + 2560)),  # 38,400
    (VARIANTS["large"], {"layers": [6, 7, 8, 9]}, 4 * (2 * 640 + 2560)),  # 15,360
    (VARIANTS["base"], {"ffn": False}, 8 * 2 * 512),  # 8,192
    (CFG, {}, 3 * (2 * 32 + 64)),  # 384
])
def test_parameter_count_is_l_sel_times_2d_plus_dff(bb, cfg, settings, want):
    assert count_params("ia3", settings, cfg) == want
    if cfg == CFG:
        assert build_adapted("ia3", settings, bb, jax.random.PRNGKey(0)).num_trainable_params() == want


@pytest.mark.parametrize("settings", [{}, {"layers": [1]}, {"ffn": False}])
def test_identity_at_init(bb, tokens, settings):
    """Every vector is ones: the logits (and hidden states) equal the backbone's exactly."""
    m = build_adapted("ia3", settings, bb, jax.random.PRNGKey(3))
    ref, ref_h = bb(tokens, dtype="float32", return_hidden=True)
    out, h = m(tokens, dtype="float32", return_hidden=True)
    assert np.array_equal(np.asarray(out), np.asarray(ref)) and np.array_equal(np.asarray(h), np.asarray(ref_h))
    assert all(abs(v) == 0.0 for v in m.weight_report().values())


def test_scales_are_keys_values_and_the_ffn_activation(bb, tokens):
    """Setting l_k, l_v, l_ff to c equals a backbone whose W_k, W_v, W_up output columns are
    scaled by c (the fold :meth:`merge` does); the merged checkpoint reproduces the adapted logits."""
    m = build_adapted("ia3", {"layers": [0, 2]}, bb, jax.random.PRNGKey(0))
    c = jax.random.uniform(jax.random.PRNGKey(5), (3, 2, CFG.d_model), minval=0.5, maxval=1.5)
    cf = jax.random.uniform(jax.random.PRNGKey(6), (2, CFG.d_ff), minval=0.5, maxval=1.5)
    m = eqx.tree_at(lambda a: (a.adapter.l_k, a.adapter.l_v, a.adapter.l_ff), m, (c[0], c[1], cf))
    by_hand = dict(bb.params())
    for n, v in (("wk", c[0]), ("wv", c[1]), ("w_up", cf)):
        by_hand[n] = by_hand[n].at[jnp.array([0, 2])].multiply(v[:, None, :])
    ref = PAWNModel(CFG, params=by_hand)(tokens, dtype="float32")
    out = m(tokens, dtype="float32")
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=0, atol=2e-5)
    assert float(jnp.abs(out - bb(tokens, dtype="float32")).max()) > 1e-3  # really wired in
    merged = PAWNModel(CFG, params={k: jnp.asarray(v) for k, v in m.merged_params().items()})(tokens, dtype="float32")
    np.testing.assert_allclose(np.asarray(merged), np.asarray(out), rtol=0, atol=2e-5)
    np.testing.assert_allclose(m.weight_report()["layer2.l_ff_dev"], float(jnp.linalg.norm(cf[1] - 1)), rtol=1e-5)


def test_ia3_works_from_the_cli_list_and_sweep_with_no_other_edit(tiny_backbone, shared_data, tmp_path):
    from pawn.sweep.space import SPACES
    from pawn.train.adapt_config import AdaptSettings

    assert "ia3" in STRATEGIES and not STRATEGIES["ia3"].random_init
    assert "ffn" in SPACES["ia3"] and "lr" in SPACES["ia3"]
    assert AdaptSettings.load(backbone="x", strategy="ia3", ia3_ffn=False).adapter_settings() == {"ffn": False}
    with pytest.raises(Exception, match="init_scale: strategy ia3 has no random adapter weights"):
        AdaptSettings.load(backbone="x", strategy="ia3", init_scale=0.5)
    res = CliRunner().invoke(app, ["adapt", "--list-strategies"], env={"COLUMNS": "400", "TERM": "dumb"})
    assert any(line.startswith("│ ia3 ") and "ffn=True" in line for line in res.output.splitlines()), res.output
    out = tmp_path / "run"
    r = CliRunner().invoke(app, small_adapt_args(tiny_backbone, shared_data, tmp_path, out, "--strategy", "ia3",
                                                 "--steps-per-epoch", "2", "--lr", "3e-2"))
    assert r.exit_code == 0, r.output
    assert "ia3: 256 trainable parameters" in r.output  # tiny backbone: 2 layers · (2·32 + 64)
    from pawn.adapters.io import load_adapter

    la = load_adapter(out / "best")
    assert la.model.strategy == "ia3" and not np.all(np.asarray(la.model.adapter.l_k) == 1.0)  # it trained
