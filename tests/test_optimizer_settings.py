"""One optimizer/schedule settings model in both trainers (issue 22): :class:`pawn.settings.OptimizerSettings`.

The fixtures under ``tests/data/configs_c5d65a6`` are the ``config.json`` files that the code at
commit c5d65a6 (before the settings were shared) wrote for two real runs, with non-default
optimizer and schedule values:

* ``adapt-lora``: ``pawn adapt BB --strategy lora --lora-rank 2 --val-games 8 --epochs 2
  --steps-per-epoch 2 --batch-size 4 --seq-len 32 --data-seed 7 --lr 0.001 --lr-schedule wsd
  --warmup-steps 1 --decay-frac 0.25 --weight-decay 0.05 --beta2 0.98 --max-grad-norm 0.5
  --min-lr-ratio 0.2`` (4 steps);
* ``pretrain-toy``: ``pawn pretrain --variant toy --total-steps 4 --val-games 4 --val-every 2
  --checkpoint-every 2 --batch-size 2 --seq-len 16 --lr 0.002 --lr-schedule infinite
  --warmup-steps 1 --cooldown-frac 0.25 --decay-frac 0.25 --stable-lr-ratio 0.3 --beta1 0.85``.
"""

from __future__ import annotations

import json
import typing
from typing import Optional
from pathlib import Path

import pytest
from pydantic import ValidationError

from pawn.cli._options import settings_parameters
from pawn.settings import OptimizerSettings, PretrainConfig
from pawn.train.adapt_config import AdaptSettings

OLD = Path(__file__).parent / "data" / "configs_c5d65a6"
OPTIMIZER_FIELDS = ["lr", "lr_schedule", "warmup_steps", "warmup_frac", "min_lr_ratio", "decay_frac", "wsd_decay_shape",
                    "cooldown_frac", "stable_lr_ratio", "weight_decay", "beta1", "beta2", "max_grad_norm"]


def _old(name: str) -> dict:
    return json.loads((OLD / f"{name}.config.json").read_text())


def test_old_adapter_config_json_loads_with_its_values_and_schedule():
    stored = _old("adapt-lora")
    # as --resume reads a stored run config (unset fields dropped)
    cfg = AdaptSettings.load(**{k: v for k, v in stored.items() if v is not None})
    dumped = cfg.model_dump(mode="json")
    assert {k: dumped[k] for k in stored} == stored  # every stored key round-trips, flat, same names
    assert cfg.optimizer_kwargs() == {"b1": 0.9, "b2": 0.98, "weight_decay": 0.05, "max_grad_norm": 0.5}
    s = cfg.schedule(4)  # epochs 2 × steps_per_epoch 2
    assert (s.name, s.peak, s.total_steps, s.warmup_steps, s.min_ratio, s.decay_steps) == ("wsd", 0.001, 4, 1, 0.2, 1)
    # the config-file form: the same file passed as --config
    from_file = AdaptSettings.load(config_file=OLD / "adapt-lora.config.json")
    assert from_file.model_dump(mode="json") == dumped


def test_old_pretrain_config_json_loads_with_its_values_and_schedule():
    stored = _old("pretrain-toy")
    cfg = PretrainConfig.load(**stored)
    dumped = cfg.model_dump(mode="json")
    added_since = {"checkpoint_every_minutes", "push_to_bucket"}  # fields added after this config was written
    assert {k: v for k, v in dumped.items() if k not in added_since} == stored  # same keys (order aside) and values
    assert {k: dumped[k] for k in added_since} == {k: PretrainConfig.model_fields[k].default for k in added_since}
    assert cfg.optimizer_kwargs() == {"b1": 0.85, "b2": 0.95, "weight_decay": 0.01, "max_grad_norm": 1.0}
    s = cfg.schedule()
    assert (s.name, s.peak, s.total_steps, s.warmup_steps, s.decay_steps, s.cooldown_steps, s.stable_ratio) == (
        "infinite", 0.002, 4, 1, 1, 1, 0.3)
    assert PretrainConfig.load(config_file=OLD / "pretrain-toy.config.json").model_dump(mode="json") == dumped


@pytest.mark.parametrize("cls, name, defaults", [
    (PretrainConfig, "pretrain-toy", {"beta2": 0.95, "weight_decay": 0.01, "min_lr_ratio": 0.1}),
    (AdaptSettings, "adapt-lora", {"beta2": 0.999, "weight_decay": 0.0, "min_lr_ratio": 0.0}),
])
def test_each_trainer_keeps_its_spec_defaults(cls, name, defaults):
    """A stored config without these keys (or a fresh run) takes the trainer's own default:
    pretraining spec §1.1, adapters spec §5."""
    stored = {k: v for k, v in _old(name).items() if k not in defaults and v is not None}
    cfg = cls.load(**stored)
    assert {k: getattr(cfg, k) for k in defaults} == defaults
    assert {k: cls.model_fields[k].default for k in defaults} == defaults


def test_one_declaration_of_each_optimizer_field():
    assert list(OptimizerSettings.model_fields) == OPTIMIZER_FIELDS
    for name in OPTIMIZER_FIELDS:
        p, a, o = PretrainConfig.model_fields[name], AdaptSettings.model_fields[name], OptimizerSettings.model_fields[name]
        # adapt's lr may be unset (None: the strategy's own default, resolved when the config is built)
        assert p.annotation == o.annotation == (a.annotation if name != "lr" else typing.get_args(a.annotation)[0]), name
        assert name != "lr" or a.annotation == Optional[float]
        assert p.metadata == a.metadata == o.metadata, name  # one range per field
    differ = sorted(n for n in OPTIMIZER_FIELDS if PretrainConfig.model_fields[n].default != AdaptSettings.model_fields[n].default)
    assert differ == ["beta2", "lr", "min_lr_ratio", "weight_decay"]
    assert AdaptSettings.model_fields["lr"].default is None


@pytest.mark.parametrize("cls", [PretrainConfig, AdaptSettings])
def test_flags_of_the_group_follow_seq_len_in_both_commands(cls):
    params = settings_parameters(cls)
    names = [p.name for p in params]
    i = names.index("seq_len")
    assert names[i + 1:i + 1 + len(OPTIMIZER_FIELDS)] == OPTIMIZER_FIELDS
    opt = {p.name: p.default for p in params}
    assert opt["warmup_frac"].param_decls == ("--warmup-frac",)
    # a float's range is checked by the model (non-finite values first) and written in the help, not given to click
    assert (opt["warmup_frac"].min, opt["warmup_frac"].max) == (None, None) and "Range [0, 1]." in opt["warmup_frac"].help
    assert "Env: PAWN_MAX_GRAD_NORM." in opt["max_grad_norm"].help


def test_pretrain_ranges_are_the_shared_ones():
    with pytest.raises(ValidationError, match="warmup_frac"):
        PretrainConfig.load(total_steps=10, warmup_frac=1.5)
    with pytest.raises(ValidationError, match="beta2"):
        PretrainConfig.load(total_steps=10, beta2=1.0)
    with pytest.raises(ValidationError, match="mate_boost"):  # pretraining's own field keeps its rule
        PretrainConfig.load(total_steps=10, mate_boost=2.0)
