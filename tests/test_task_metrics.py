"""A task's validation reads its keys from the metric rows (pawn.metrics): a toy model validated
through the pretraining task's own validator carries every row of the ``pretrain_val`` view, a row
registered now included, and nothing else (no hand-written key list can pass this)."""

from __future__ import annotations

import jax
import pytest

from pawn import metrics as PM
from pawn.metrics import Metric
from pawn.model import PAWNModel
from pawn.settings import PretrainConfig
from pawn.train.loop import TrainState
from pawn.train.pretrain import VAL_METRICS, PretrainTask

# a row whose figure the evaluation already computes (the illegal-prediction rate), placed in the
# pretraining validation view: only a validator that reads the view carries it
EXTRA = Metric("toy_illegal_rate", "Toy illegal rate", "toy illegal", "fraction", "min", eval_key="published/illegal_pred_rate",
               kinds=("val",), views={"pretrain_val": 99})


def _validate(variant_or_supernet: dict) -> dict:
    task = PretrainTask(PretrainConfig.load(**variant_or_supernet, batch_size=4, seq_len=32, val_games=4, total_steps=2))
    task.shape()
    task.open_data()
    model = PAWNModel(task.stored_cfg, jax.random.key(0))
    return task.validate(TrainState(model, None, None), 2)


@pytest.fixture
def extra_row(request):
    PM.register(EXTRA)
    request.addfinalizer(lambda: PM.unregister(EXTRA.key))
    return EXTRA


def test_pretrain_validation_carries_exactly_its_views_rows(extra_row):
    fields = _validate({"variant": "toy"})
    assert "toy_illegal_rate" in VAL_METRICS
    assert [k for k in fields if k != "variants"] == list(VAL_METRICS)  # every row, in the view's order, nothing else
    assert 0.0 <= fields["toy_illegal_rate"] <= 1.0
    assert fields["toy_illegal_rate"] == pytest.approx(1.0 - fields["legal_rate"], abs=1e-6)


def test_a_supernet_validates_every_variant_on_the_same_rows(extra_row):
    fields = _validate({"supernet": "tiny"})
    assert set(fields["variants"]) == set(PretrainConfig.load(supernet="tiny", total_steps=2).model_configs()[1])
    for name, vals in fields["variants"].items():
        assert list(vals) == list(VAL_METRICS), name
