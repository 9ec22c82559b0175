"""The adapted model: a frozen backbone plus one strategy's adapter, called like a
:class:`pawn.model.PAWNModel` (spec ``training-and-adapters.md`` §4–§5)."""

from __future__ import annotations

from typing import Any, Optional

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, Bool, Int

from pawn.adapters.base import Adapter
from pawn.adapters.configs import AdapterConfigError
from pawn.adapters.registry import get_strategy
from pawn.adapters.strategies.specialized_clm import specialized_config
from pawn.config import ModelConfig
from pawn.model import KVCache, PAWNModel


class AdaptedModel(eqx.Module):
    """Backbone + adapter with :class:`~pawn.model.PAWNModel`'s call signature (``__call__``,
    ``prefill``, ``decode``, ``config``), so the training loss and every evaluator run on it.

    Training: ``trainable, frozen = eqx.partition(m, m.trainable_filter())``; gradients w.r.t.
    ``trainable`` only, optimizer state over it only (spec §5).

    Attributes:
        backbone: the PAWNModel (frozen, except for ``specialized_clm`` where it is the model).
        adapter: the strategy's :class:`~pawn.adapters.base.Adapter`.
        strategy: strategy name (static).
        settings: the strategy's settings model (static, hashable).
    """

    backbone: PAWNModel
    adapter: Adapter
    strategy: str = eqx.field(static=True)
    settings: Any = eqx.field(static=True)

    @property
    def config(self) -> ModelConfig:
        """The backbone's :class:`ModelConfig`."""
        return self.backbone.config

    def _parts(self):
        bb = self.adapter.backbone_view(self.backbone)
        return bb, (self.adapter if self.adapter.uses_layer_hooks else None)

    def __call__(
        self,
        tokens: Int[Array, "B T"],
        attn_mask: Optional[Bool[Array, "B T"]] = None,
        *,
        dtype: Optional[str] = None,
        return_hidden: bool = False,
        remat: bool | str = False,
        prefix_mask: bool = False,
    ):
        """Adapted forward; arguments and returns as :meth:`pawn.model.PAWNModel.__call__`
        (logits float32 [B, T, V]; hidden [L+1, B, T, d] with ``return_hidden``, taken after
        each block's adapters)."""
        bb, ad = self._parts()
        return bb(tokens, attn_mask, dtype=dtype, return_hidden=return_hidden, remat=remat, prefix_mask=prefix_mask, adapter=ad)

    def prefill(self, tokens, attn_mask=None, *, dtype: Optional[str] = None, cache_len: Optional[int] = None):
        """As :meth:`pawn.model.PAWNModel.prefill`, adapted."""
        bb, ad = self._parts()
        return bb.prefill(tokens, attn_mask, dtype=dtype, cache_len=cache_len, adapter=ad)

    def decode(self, token, pos, cache: KVCache):
        """As :meth:`pawn.model.PAWNModel.decode`, adapted (use the cache of :meth:`prefill`)."""
        bb, ad = self._parts()
        return bb.decode(token, pos, cache, adapter=ad)

    def trainable_filter(self):
        """Pytree of bools with this model's structure for ``eqx.partition``: True exactly at the
        trainable arrays (adapter weights; not masks; the backbone only for ``specialized_clm``)."""
        frozen_bb = jax.tree_util.tree_map(lambda x: bool(self.adapter.trains_backbone and eqx.is_array(x)), self.backbone)
        return AdaptedModel(frozen_bb, self.adapter.trainable_filter(), self.strategy, self.settings)

    def num_trainable_params(self) -> int:
        """Trainable parameters (``sparse``: exact active count; ``specialized_clm``: the whole model)."""
        if self.adapter.trains_backbone:
            return self.backbone.num_params()
        return self.adapter.num_params()

    def num_unreached_params(self, legal_mask: bool) -> int:
        """Of the trainable parameters, those the adapter loss's gradient never reaches on pure-moves
        games (:func:`pawn.adapters.base.unreached_backbone_params`: ``pad_embed``,
        ``outcome_embed``, and under the hard legal mask the non-move tokens' ``lm_head`` columns and
        output-FiLM entries), so they can never move by learning. A comparison at equal trainable
        size counts ``trainable − unreached`` (the run records it as ``movable_params``)."""
        from pawn.adapters.base import unreached_backbone_params

        if self.adapter.trains_backbone:
            return unreached_backbone_params(self.backbone.config, embeddings=True, head=True, legal_mask=legal_mask)
        return self.adapter.num_unreached(legal_mask)

    def weight_report(self) -> dict:
        """The strategy's weight report (spec §4; names as there): norms as floats, plus
        ``unfrozen_layers`` (list) / ``n_trainable`` (int) for ``unfreeze``; empty for ``specialized_clm``."""
        return self.adapter.weight_report()

    def merged_params(self) -> dict[str, np.ndarray]:
        """The 16 canonical float32 arrays with the adapter folded in (``lora``, ``sparse``,
        ``unfreeze``, ``specialized_clm``).

        Raises:
            AdapterError: a strategy that acts on activations (film, bottleneck, hybrid).
        """
        return self.adapter.merge({k: np.asarray(v, np.float32) for k, v in self.backbone.params().items()})

    def params(self) -> dict[str, Array]:
        """The backbone's 16 canonical arrays (so code that reads ``model.params()`` still works)."""
        return self.backbone.params()

    def num_params(self) -> int:
        """The backbone's parameter count (see :meth:`num_trainable_params` for the adapter's)."""
        return self.backbone.num_params()


def build_adapted(strategy: str, settings: Any, backbone: Optional[PAWNModel], key: jax.Array) -> AdaptedModel:
    """A fresh adapted model: identity at init (logits equal the bare backbone's), except
    ``specialized_clm``, which initialises a new model of its own shape (spec model §2.7) from
    ``fold_in(key, seed)`` and uses ``backbone`` only for vocabulary and context size.

    Args:
        strategy: a name of :data:`pawn.adapters.STRATEGIES`.
        settings: dict, settings model instance or None (defaults).
        backbone: the frozen backbone (may be None for ``specialized_clm``).
        key: PRNG key for the adapter's random init.

    Raises:
        AdapterConfigError: unknown strategy, bad settings, layers outside the backbone.
    """
    st = get_strategy(strategy)
    s = st.parse(settings)
    if not st.uses_backbone:
        cfg = specialized_config(s, None if backbone is None else backbone.config)
        backbone = PAWNModel(cfg, jax.random.fold_in(key, s.seed))
    elif backbone is None:
        raise AdapterConfigError(f"the {strategy} strategy needs a backbone")
    return AdaptedModel(backbone, st.build(s, backbone, key), st.name, s)


__all__ = ["AdaptedModel", "build_adapted"]
