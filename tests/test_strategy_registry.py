"""The strategy table is the only home of a strategy (issue 22): ``pawn adapt``'s flags,
``--list-strategies`` and the sweep spaces derive from its rows, and a half-added row fails at
import. Also issue 26: ``pawn adapt --resume`` warns only about flags the user gave."""

from __future__ import annotations

import re

import jax
import pytest
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from pawn.adapters import STRATEGIES, build_adapted, count_params
from pawn.adapters.registry import Strategy, choice, register
from pawn.adapters.strategies.lora import LoRA
from pawn.cli import app
from pawn.config import ModelConfig
from pawn.sweep.adapt import adapt_fields
from pawn.sweep.space import SPACES
from pawn.train.adapt import run_adapt
from pawn.train.adapt_config import AdaptSettings

from _adapter_backbone import small_adapt_args

BB_CFG = ModelConfig(d_model=32, n_layers=2, n_heads=1, d_ff=64)  # the tiny_backbone fixture's shape


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_pawn_adapt_defaults_are_the_strategy_tables(name):
    """With no strategy flag given, ``pawn adapt`` resolves exactly the row's defaults (once
    ``--bottleneck-dim`` defaulted to 32 against the table's 8, for bottleneck and retro-bottleneck)."""
    cfg = AdaptSettings.load(backbone="x", strategy=name)
    assert STRATEGIES[name].parse(cfg.adapter_settings()) == STRATEGIES[name].settings()


def test_cli_bottleneck_builds_the_adapter_of_build_adapted(tiny_backbone, shared_data, tmp_path):
    """Round trip: `pawn adapt --strategy bottleneck` with the CLI defaults trains the adapter
    that `build_adapted("bottleneck")` builds with the spec defaults (bn = 8): 2 positions · 2
    layers · 2·d·bn = 2·2·2·32·8 = 2,048 parameters (the old CLI's bn = 32 gave 8,192)."""
    from pawn.adapters.io import load_adapter
    from pawn.model import PAWNModel

    want = build_adapted("bottleneck", None, PAWNModel(BB_CFG, jax.random.PRNGKey(0)), jax.random.PRNGKey(0))
    assert want.num_trainable_params() == count_params("bottleneck", None, BB_CFG) == 2 * 2 * 2 * 32 * 8
    out = tmp_path / "run"
    r = CliRunner().invoke(app, small_adapt_args(tiny_backbone, shared_data, tmp_path, out, "--strategy", "bottleneck",
                                                 "--steps-per-epoch", "1", "--data-seed", "1"))
    assert r.exit_code == 0, r.output
    assert re.search(r"bottleneck: 2,048 trainable parameters", r.output), r.output
    got = load_adapter(out / "best")
    assert got.model.settings == want.settings and got.model.num_trainable_params() == 2_048


def test_resume_warns_only_about_flags_given(tiny_backbone, shared_data, tmp_path):
    """Issue 26: every `pawn adapt --resume` once warned "strategy lora does not use
    --bottleneck-dim, --density, … (ignored)" about the 18 strategy flags stored with the run;
    now the stored run's strategy flags are not re-applied, and only given flags are checked."""
    kw = dict(backbone=str(tiny_backbone), strategy="lora", lora_rank=2, data=str(shared_data / "lichess"), elo_min=1200,
              elo_max=2200, epochs=1, steps_per_epoch=2, steps_per_chunk=1, batch_size=4, seq_len=32, val_games=8,
              data_seed=3, cache_dir=str(tmp_path / "cache"), out=str(tmp_path / "run"))
    first: list[str] = []
    part = run_adapt(AdaptSettings.load(**kw, pause_after_steps=1), log=first.append, progress=False,
                     install_signal_handlers=False)
    assert part.reason == "paused"
    lines: list[str] = []
    res = run_adapt(AdaptSettings.load(resume="auto", out=kw["out"]), log=lines.append, progress=False,
                    install_signal_handlers=False)
    assert res.step == 2
    assert not [m for m in first + lines if "does not use" in m], first + lines
    # rank 2 kept from the checkpoint: L·targets·2·d·r = 2·4·2·32·2 (the default rank 4 would give 2,048)
    assert any("strategy lora: 1,024 trainable parameters" in m for m in lines), lines
    # a flag given with --resume that the strategy does not read is a conflict with the stored run, named
    with pytest.raises(Exception, match="bottleneck_dim"):
        run_adapt(AdaptSettings.load(resume="auto", out=kw["out"], bottleneck_dim=16), log=lambda m: None, progress=False,
                  install_signal_handlers=False)


@pytest.mark.parametrize("fields,unused", [
    (dict(strategy="film", lora_rank=8, adapter_layers="0"), ["lora_rank"]),
    (dict(strategy="bottleneck", bottleneck_dim=16, density=0.1), ["density"]),
    (dict(strategy="retro-bottleneck", bottleneck_dim=16, density=0.1, lora_rank=2, seed=3), []),
    (dict(strategy="lora", lora_rank=2, init_scale=0.5, seed=3), []),
    (dict(strategy="sparse", sparse_seed=7, lora_ffn=True), ["lora_ffn"]),
])
def test_unused_flags_come_from_the_row(fields, unused):
    assert AdaptSettings.load(backbone="x", **fields).unused_strategy_fields() == unused


def test_strategy_checks_run_at_parse_time():
    """A strategy's own validation (both bottleneck positions off; unfreeze given a list and a
    top-N; an odd head_dim) refuses the configuration when it is parsed, naming the setting."""
    with pytest.raises(Exception, match="adapt_attn and adapt_ffn"):
        AdaptSettings.load(backbone="x", strategy="bottleneck", no_adapt_attn=True, no_adapt_ffn=True)
    with pytest.raises(Exception, match="give layers or top_n"):
        AdaptSettings.load(backbone="x", strategy="unfreeze", unfreeze_layers="0", n_unfreeze=3)
    with pytest.raises(Exception, match="head_dim"):
        AdaptSettings.load(backbone="x", strategy="specialized_clm", d_model=84, n_heads=4)
    with pytest.raises(Exception, match="greater than or equal to 1"):
        AdaptSettings.load(backbone="x", strategy="lora", lora_rank=0)
    # the same flag is fine for a strategy that does not read it
    assert AdaptSettings.load(backbone="x", strategy="lora", no_adapt_attn=True, no_adapt_ffn=True).adapter_settings() == {}


def test_flags_env_and_comma_lists_are_derived(monkeypatch):
    monkeypatch.setenv("PAWN_BOTTLENECK_ATTN_LAYERS", "1")
    cfg = AdaptSettings.load(backbone="x", strategy="retro-bottleneck", grad_alpha="1", lora_targets="q,v", no_adapt_ffn=True)
    assert cfg.adapter_settings() == {"targets": ("q", "v"), "grad_alpha": 1, "adapt_ffn": False}
    cfg = AdaptSettings.load(backbone="x", strategy="bottleneck")
    assert cfg.adapter_settings() == {"attn_layers": (1,)}
    help_text = " ".join(CliRunner().invoke(app, ["adapt", "--help"], env={"COLUMNS": "200", "TERM": "dumb"}).output.split())
    assert "--bottleneck-dim" in help_text and "--no-adapt-attn" in help_text and "--sparse-seed" in help_text


def test_sweep_spaces_come_from_the_rows():
    for name, row in STRATEGIES.items():
        assert set(row.space) <= set(SPACES[name]), name
    assert adapt_fields("sparse", {"targets": "qv", "density": 0.1}) == {"sparse_targets": ["q", "v"], "density": 0.1}
    assert adapt_fields("retro-bottleneck", {"rank": 4, "n_hidden": 1}) == {"lora_rank": 4, "bottleneck_n_hidden": 1}
    assert adapt_fields("tiny", {"d_model": 64, "lr": 1e-3}) == {"d_model": 64, "lr": 1e-3}


class _Undocumented(BaseModel):
    rank: int = Field(4, ge=1)  # no description: no help text for its flag


class _Documented(BaseModel):
    rank: int = Field(4, ge=1, description="r.")


@pytest.mark.parametrize("kwargs,match", [
    (dict(settings=_Undocumented, module=LoRA, random_init=True), "no description"),
    (dict(settings=_Documented, module=dict, random_init=True), "module must be an Adapter"),
    (dict(settings=_Documented, module=LoRA, random_init=True, space={"nope": choice(1, 2)}), "sweep-space name 'nope'"),
    (dict(settings=type("BadRank", (BaseModel,), {"__annotations__": {"lora_rank": float},
                                                  "lora_rank": Field(1.0, description="x")}),
          module=LoRA, random_init=True), "one pawn adapt flag, one type"),
    (dict(name="lora", settings=_Documented, module=LoRA, random_init=True), "registered twice"),
])
def test_a_half_added_strategy_fails_at_registration(kwargs, match):
    row = Strategy(kwargs.pop("name", "halfway"), "x", "x", kwargs.pop("settings"), lambda s, bb, k: None, False, **kwargs)
    with pytest.raises(TypeError, match=match):
        register(row)
    assert "halfway" not in STRATEGIES
    with pytest.raises(TypeError):  # module / random_init are required: a row without them does not even construct
        Strategy("halfway", "x", "x", _Documented, lambda s, bb, k: None, False)
