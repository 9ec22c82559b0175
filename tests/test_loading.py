"""Which models a command evaluates: a supernet checkpoint yields its nested variants, anything
else (a variant exported from a supernet run included) yields itself."""

from __future__ import annotations

import jax

from pawn.checkpoint import save_checkpoint
from pawn.config import TINY_SUPERNET, TINY_VARIANTS
from pawn.evaluate.loading import load_models
from pawn.model import PAWNModel


def test_exported_variant_of_a_tiny_supernet_run_is_one_model_not_a_supernet(tmp_path):
    small = TINY_VARIANTS["small"]
    m = PAWNModel(small, jax.random.PRNGKey(0))
    # run_config as pretrain wrote it for variants/small: the supernet run's fields, variant None
    run_config = {"supernet": "tiny", "variant": None, "prepend_outcome": False,
                  "supernet_checkpoint": "runs/tiny/checkpoints/step_00000300"}
    path = save_checkpoint(tmp_path / "small", m.params(), small, run_config=run_config)
    (lm,) = load_models(path)
    assert lm.config == small and lm.name == small.name


def test_supernet_checkpoint_yields_every_nested_variant(tmp_path):
    m = PAWNModel(TINY_SUPERNET, jax.random.PRNGKey(0))
    path = save_checkpoint(tmp_path / "sup", m.params(), TINY_SUPERNET, run_config={"supernet": "tiny", "variant": None})
    assert [lm.name for lm in load_models(path)] == ["tiny/small", "tiny/base", "tiny/large"]
