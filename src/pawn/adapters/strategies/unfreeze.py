"""Unfreezing the selected blocks of the backbone (spec ``training-and-adapters.md`` §4.7): its
settings, its adapter module and its row of the strategy table.
"""

from __future__ import annotations

from typing import ClassVar, Optional

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array
from pydantic import Field, model_validator

from pawn.adapters.base import UNREACHED_EMBEDDINGS, Adapter, non_move_logits
from pawn.adapters.configs import LAYER_WEIGHTS, AdapterConfigError, StrategySettings, check_layers
from pawn.adapters.table import Strategy, register
from pawn.model import PAWNModel


class UnfreezeConfig(StrategySettings):
    """Unfreeze (spec §4.7): ``layers`` (explicit, v1) or ``top_n`` (indices ≥ L − n, v2); neither
    given means ``top_n = 2``."""

    flag_names: ClassVar[dict[str, str]] = {"layers": "unfreeze_layers", "top_n": "n_unfreeze"}

    layers: Optional[tuple[int, ...]] = Field(None, min_length=1, description="Unfreeze: comma list of layers (v1); default the top --n-unfreeze.")
    top_n: Optional[int] = Field(None, ge=1, description="Unfreeze: the top N layers, when no layer list is given (default 2).")
    include_lm_head: bool = Field(False, description="Unfreeze: also train final_norm and lm_head.")
    include_embeddings: bool = Field(False, description="Unfreeze: also train the five embedding tables.")

    @model_validator(mode="after")
    def _one_selection(self):
        if self.layers is not None and self.top_n is not None:
            raise ValueError("give layers or top_n, not both")
        return self

    def selected(self, n_layers: int) -> Optional[tuple[int, ...]]:
        """The unfrozen layer indices (None when ``layers`` must be validated by the caller)."""
        if self.layers is not None:
            return self.layers
        n = 2 if self.top_n is None else self.top_n
        if n > n_layers:
            raise AdapterConfigError(f"unfreeze top_n={n} exceeds the backbone's {n_layers} layers")
        return tuple(range(n_layers - n, n_layers))


class Unfreeze(Adapter):
    """Selected backbone weights made trainable (spec §4.7) as copies that replace the backbone's
    slices in the forward (``W.at[layers].set(copy)``), so the frozen slices never reach the
    gradient, the clip norm, the Adam moments or weight decay.

    Attributes:
        blocks: weight name -> float32 [L_sel, …], copies of the selected layers' nine weights.
        head: ``final_norm``, ``lm_head`` copies (empty unless include_lm_head).
        embeddings: the five embedding tables (empty unless include_embeddings).
    """

    blocks: dict[str, Array]
    head: dict[str, Array]
    embeddings: dict[str, Array]
    layers: tuple[int, ...] = eqx.field(static=True)

    uses_layer_hooks = False

    def __init__(self, backbone: PAWNModel, layers: tuple[int, ...], include_lm_head: bool, include_embeddings: bool):
        idx = np.asarray(layers)
        self.blocks = {n: jnp.asarray(getattr(backbone, n))[idx] for n in LAYER_WEIGHTS}
        self.head = {n: jnp.asarray(getattr(backbone, n)) for n in ("final_norm", "lm_head")} if include_lm_head else {}
        emb = ("src_embed", "dst_embed", "promo_embed", "pad_embed", "outcome_embed")
        self.embeddings = {n: jnp.asarray(getattr(backbone, n)) for n in emb} if include_embeddings else {}
        self.layers = tuple(layers)

    def _replacements(self, backbone: PAWNModel) -> dict[str, Array]:
        idx = np.asarray(self.layers)
        rep = {n: getattr(backbone, n).at[idx].set(w) for n, w in self.blocks.items()}
        rep.update(self.head)
        rep.update(self.embeddings)
        return rep

    def backbone_view(self, backbone):
        rep = self._replacements(backbone)
        names = list(rep)
        return eqx.tree_at(lambda m: [getattr(m, n) for n in names], backbone, [rep[n] for n in names])

    def weight_report(self, prefix=""):
        return {f"{prefix}unfrozen_layers": list(self.layers), f"{prefix}n_trainable": self.num_params()}

    def num_unreached(self, legal_mask: bool) -> int:
        """``pad_embed`` and ``outcome_embed`` with the embeddings, and under the hard legal mask the
        ``lm_head`` columns of the 12 non-move tokens with the head (:func:`unreached_backbone_params`)."""
        n = sum(int(np.prod(self.embeddings[k].shape)) for k in UNREACHED_EMBEDDINGS if k in self.embeddings)
        if "lm_head" in self.head and legal_mask:
            d, v = self.head["lm_head"].shape
            n += non_move_logits(v) * int(d)
        return n

    def merge(self, params):
        p = dict(params)
        for n, w in self.blocks.items():
            a = np.array(p[n], np.float32)
            a[list(self.layers)] = np.asarray(w)
            p[n] = a
        for n, w in {**self.head, **self.embeddings}.items():
            p[n] = np.asarray(w, np.float32)
        return p


def build(s: UnfreezeConfig, bb: PAWNModel, key) -> Unfreeze:
    """The unfrozen copies of the layers ``s`` selects on ``bb`` (``key`` unused).

    Raises:
        AdapterConfigError: layers outside the backbone, or ``top_n`` above its depth.
    """
    layers = check_layers(s.selected(bb.config.n_layers), bb.config.n_layers, "unfreeze layers")
    return Unfreeze(bb, layers, s.include_lm_head, s.include_embeddings)


ROW = register(Strategy(
    "unfreeze", "all weights of the selected blocks (+ head, + embeddings)",
    "L_sel·(4d² + 3·d·d_ff + 2d) (+ d + d·V head, + 145·d embeddings)", UnfreezeConfig, build, True, order=60, lr=1e-3,
    module=Unfreeze, random_init=False,
))
"""Unfreeze's row of the strategy table."""
