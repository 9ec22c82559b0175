"""The public base of every adapter strategy (spec ``training-and-adapters.md`` §4): the
:class:`Adapter` module every strategy's module subclasses (Equinox modules implementing the
:class:`pawn.model.LayerAdapter` hooks), :class:`Composite` (several adapters at once) and the
helpers they share. Each strategy is one module of :mod:`pawn.adapters.strategies` (its settings
on :class:`pawn.adapters.configs.StrategySettings`, its module on :class:`Adapter`, its row of
the strategy table, :mod:`pawn.adapters.registry`). Linear weights are ``[d_in, d_out]`` (``x @ W``).

Per-layer parameters of a layer subset are stored for the selected layers only (``[L_sel, …]``),
so parameter counts and optimizer state cover only them; :meth:`scan_params` scatters them into
the stacked ``L`` axis inside the forward (zero-filled, or one-filled for FiLM's γ, elsewhere),
which keeps every unselected layer exactly the backbone's.
"""

from __future__ import annotations


import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from pawn.adapters.errors import AdapterError
from pawn.model import LayerAdapter, PAWNModel
from pawn.vocab import NUM_ACTIONS

UNREACHED_EMBEDDINGS = ("pad_embed", "outcome_embed")
"""Embedding tables the adapter loss never reaches (adapters train on pure moves, spec §5):
``pad_embed`` feeds only PAD inputs, which no supervised position attends (the prefix mask) and
none is supervised; ``outcome_embed`` feeds outcome tokens, which the pure-moves layout never
inputs. Their gradient is zero, so as trainable parameters they can never move by learning
(``pad_embed`` starts at zero and stays there; ``outcome_embed`` rows only shrink under weight decay)."""


def non_move_logits(vocab_size: int) -> int:
    """Tokens of the vocabulary that are never a move (PAD and the outcome tokens): 12 of 1,980.
    Under the hard legal mask their logits are −inf at every move decision, so nothing that
    feeds only their logits (``lm_head`` columns, output-FiLM entries) is reached by the loss."""
    return int(vocab_size) - NUM_ACTIONS


def unreached_backbone_params(config, *, embeddings: bool, head: bool, legal_mask: bool) -> int:
    """Parameters of trainable backbone arrays that the adapter loss never reaches: the
    :data:`UNREACHED_EMBEDDINGS` (``(1 + n_outcomes) · d``) when the embeddings train, and under the
    hard legal mask the ``lm_head`` columns of the non-move tokens (``12 · d``) when the head trains."""
    d = int(config.d_model)
    n = (1 + int(config.n_outcomes)) * d if embeddings else 0
    return n + (non_move_logits(config.vocab_size) * d if head and legal_mask else 0)

# ----------------------------------------------------------------------------- helpers


def scatter(x: Array, layers: tuple[int, ...], n_layers: int, fill: float) -> Array:
    """``x`` [len(layers), …] placed at ``layers`` of an ``[n_layers, …]`` array filled with ``fill``."""
    if layers == tuple(range(n_layers)):
        return x
    full = jnp.full((n_layers,) + x.shape[1:], fill, x.dtype)
    return full.at[np.asarray(layers)].set(x)


def norm(x) -> float:
    """Frobenius / L2 norm as a Python float."""
    return float(jnp.linalg.norm(jnp.ravel(jnp.asarray(x, jnp.float32))))


def uniform_init(key, shape, fan_in: int, scale: float = 1.0) -> Array:
    """v1 init: U(−s/√fan_in, s/√fan_in), float32, with ``s = scale`` (1 in v1; the
    ``init_scale`` setting)."""
    b = float(scale) / np.sqrt(fan_in)
    return jax.random.uniform(key, shape, jnp.float32, -b, b)


class Adapter(LayerAdapter):
    """Base of every strategy's module. Beyond the forward hooks of
    :class:`~pawn.model.LayerAdapter`:

    * :attr:`trains_backbone` — the backbone's own leaves are trainable (``specialized_clm``);
    * :attr:`uses_layer_hooks` — False when no in-scan hook is overridden (the backbone then runs
      its plain forward);
    * :meth:`backbone_view` — the backbone with replaced arrays (``unfreeze``);
    * :meth:`trainable_filter`, :meth:`num_params`, :meth:`weight_report`, :meth:`merge`;
    * :meth:`checkpoint_state` / :meth:`restore_state` — structure recorded with the weights.
    """

    trains_backbone = False
    uses_layer_hooks = True

    def backbone_view(self, backbone: PAWNModel) -> PAWNModel:
        """The backbone the forward runs (default: unchanged)."""
        return backbone

    def trainable_filter(self):
        """Pytree of bools matching this module: True at trainable arrays (default: every array)."""
        return jax.tree_util.tree_map(eqx.is_array, self)

    def num_params(self) -> int:
        """Trainable parameters (default: size of every trainable array)."""
        leaves = jax.tree_util.tree_leaves(eqx.filter(self, self.trainable_filter()))
        return int(sum(int(np.prod(x.shape)) for x in leaves))

    def num_unreached(self, legal_mask: bool) -> int:
        """Of :meth:`num_params`, the entries the adapter loss's gradient never reaches (so they
        can never move by learning) on pure-moves games, under the hard legal mask or not
        (default: none; ``unfreeze`` with embeddings or head, output FiLM)."""
        return 0

    def weight_report(self, prefix: str = "") -> dict:
        """Norms per spec §4 (names as there), keys prefixed by ``prefix``."""
        return {}

    def merge(self, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The 16 canonical arrays with this adapter folded in.

        Raises:
            AdapterError: the strategy acts on activations and cannot be merged.
        """
        raise AdapterError(f"a {type(self).__name__} adapter acts on activations and cannot be merged into the weights")

    def checkpoint_state(self) -> dict:
        """JSON-able structural state saved next to the weights (``config.json`` ``adapter.state``;
        the RoSA family's phase). Default: none."""
        return {}

    def restore_state(self, state: dict) -> "Adapter":
        """This freshly built adapter in the structure ``state`` (from :meth:`checkpoint_state`)
        describes, before the saved tensors are filled in. Default: unchanged."""
        return self


# ----------------------------------------------------------------------------- composition


class Composite(Adapter):
    """Several adapters at once (``hybrid`` = LoRA + FiLM; the RoSA family = LoRA/bottleneck +
    sparse). Hooks apply in ``parts`` order; the report prefixes each part's keys."""

    parts: tuple[Adapter, ...]
    prefixes: tuple[str, ...] = eqx.field(static=True)

    def __init__(self, parts: tuple[Adapter, ...], prefixes: tuple[str, ...]):
        self.parts, self.prefixes = tuple(parts), tuple(prefixes)

    def scan_params(self, dtype):
        return tuple(p.scan_params(dtype) for p in self.parts)

    def layer_weights(self, lw, ap):
        for p, a in zip(self.parts, ap):
            lw = p.layer_weights(lw, a)
        return lw

    def project(self, name, x, y, ap):
        for p, a in zip(self.parts, ap):
            y = p.project(name, x, y, a)
        return y

    def after_attn(self, h, ap):
        for p, a in zip(self.parts, ap):
            h = p.after_attn(h, a)
        return h

    def after_ffn(self, h, ap):
        for p, a in zip(self.parts, ap):
            h = p.after_ffn(h, a)
        return h

    def logits(self, z):
        for p in self.parts:
            z = p.logits(z)
        return z

    def backbone_view(self, backbone):
        for p in self.parts:
            backbone = p.backbone_view(backbone)
        return backbone

    def trainable_filter(self):
        f = jax.tree_util.tree_map(eqx.is_array, self)
        return eqx.tree_at(lambda c: c.parts, f, replace=tuple(p.trainable_filter() for p in self.parts))

    def num_params(self):
        return sum(p.num_params() for p in self.parts)

    def num_unreached(self, legal_mask: bool) -> int:
        return sum(p.num_unreached(legal_mask) for p in self.parts)

    def weight_report(self, prefix=""):
        out = {}
        for p, pre in zip(self.parts, self.prefixes):
            out.update(p.weight_report(prefix + pre))
        return out

    def merge(self, params):
        for p in self.parts:
            params = p.merge(params)
        return params


