"""Adapter modules (spec ``training-and-adapters.md`` §4): Equinox modules implementing the
:class:`pawn.model.LayerAdapter` hooks. Linear weights are ``[d_in, d_out]`` (``x @ W``).

Per-layer parameters of a layer subset are stored for the selected layers only (``[L_sel, …]``),
so parameter counts and optimizer state cover only them; :meth:`scan_params` scatters them into
the stacked ``L`` axis inside the forward (zero-filled, or one-filled for FiLM's γ, elsewhere),
which keeps every unselected layer exactly the backbone's.
"""

from __future__ import annotations

from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from pawn.adapters import configs as C
from pawn.adapters.errors import AdapterError
from pawn.model import PARAM_NAMES, LayerAdapter, PAWNModel, dense
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


def _scatter(x: Array, layers: tuple[int, ...], n_layers: int, fill: float) -> Array:
    """``x`` [len(layers), …] placed at ``layers`` of an ``[n_layers, …]`` array filled with ``fill``."""
    if layers == tuple(range(n_layers)):
        return x
    full = jnp.full((n_layers,) + x.shape[1:], fill, x.dtype)
    return full.at[np.asarray(layers)].set(x)


def _norm(x) -> float:
    """Frobenius / L2 norm as a Python float."""
    return float(jnp.linalg.norm(jnp.ravel(jnp.asarray(x, jnp.float32))))


def _uniform(key, shape, fan_in: int, scale: float = 1.0) -> Array:
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


# ----------------------------------------------------------------------------- LoRA


class LoRA(Adapter):
    """LoRA (Hu et al. 2021; spec §4.1): ``y = x·W + (α/r)·(x·A)·B`` for each target — equal to
    ``x·W_eff`` with ``W_eff = W + (α/r)·A·B``, computed factored so training never forms the
    ``d_in × d_out`` weight gradient.

    Attributes:
        A: target -> float32 [L_sel, d_in, r], Kaiming-uniform (bound init_scale/√d_in; v1 init:
            init_scale 1). Each
            target's values come from ``fold_in(key, canonical target index)`` drawn for all L
            layers, so target and layer subsets share values.
        B: target -> float32 [L_sel, r, d_out], zeros (identity at init).
        layers: the selected layers (static), n_layers: L, scale: α/r.
    """

    A: dict[str, Array]
    B: dict[str, Array]
    layers: tuple[int, ...] = eqx.field(static=True)
    n_layers: int = eqx.field(static=True)
    scale: float = eqx.field(static=True)

    def __init__(self, backbone: PAWNModel, targets: tuple[str, ...], rank: int, scale: float, layers: tuple[int, ...], key,
                 init_scale: float = 1.0):
        cfg = backbone.config
        shapes = {n: getattr(backbone, n).shape[1:] for n in targets}
        idx = np.asarray(layers)
        self.A = {n: _uniform(jax.random.fold_in(key, PARAM_NAMES.index(n)), (cfg.n_layers, shapes[n][0], rank), shapes[n][0],
                              init_scale)[idx]
                  for n in targets}
        self.B = {n: jnp.zeros((len(layers), rank, shapes[n][1]), jnp.float32) for n in targets}
        self.layers, self.n_layers, self.scale = tuple(layers), cfg.n_layers, float(scale)

    def scan_params(self, dtype):
        return {
            "A": {n: _scatter(a.astype(dtype), self.layers, self.n_layers, 0.0) for n, a in self.A.items()},
            "B": {n: _scatter((b * self.scale).astype(dtype), self.layers, self.n_layers, 0.0) for n, b in self.B.items()},
        }

    def project(self, name, x, y, ap):
        if name not in self.A:
            return y
        return y + dense(dense(x, ap["A"][name]), ap["B"][name])

    def weight_report(self, prefix=""):
        out = {}
        for n in self.A:
            for j, i in enumerate(self.layers):
                out[f"{prefix}layer{i}.{n}.A"] = _norm(self.A[n][j])
                out[f"{prefix}layer{i}.{n}.B"] = _norm(self.B[n][j])
        return out

    def merge(self, params):
        p = dict(params)
        for n in self.A:
            delta = self.scale * np.einsum("lir,lro->lio", np.asarray(self.A[n]), np.asarray(self.B[n]))
            w = np.array(p[n], np.float32)
            w[list(self.layers)] += delta
            p[n] = w
        return p


# ----------------------------------------------------------------------------- FiLM


class FiLM(Adapter):
    """FiLM (Perez et al. 2018; spec §4.2): ``h ← γ_l ⊙ h + β_l`` after each selected block (after
    the FFN residual add), optional ``z ← γ_out ⊙ z + β_out`` on the float32 logits.

    Attributes:
        gamma, beta: float32 [L_sel, d], ones / zeros; cast to the compute dtype before use.
        out_gamma, out_beta: float32 [V] (ones / zeros) or None.
    """

    gamma: Array
    beta: Array
    out_gamma: Optional[Array]
    out_beta: Optional[Array]
    layers: tuple[int, ...] = eqx.field(static=True)
    n_layers: int = eqx.field(static=True)

    def __init__(self, backbone: PAWNModel, layers: tuple[int, ...], use_output_film: bool):
        cfg = backbone.config
        self.gamma = jnp.ones((len(layers), cfg.d_model), jnp.float32)
        self.beta = jnp.zeros((len(layers), cfg.d_model), jnp.float32)
        self.out_gamma = jnp.ones((cfg.vocab_size,), jnp.float32) if use_output_film else None
        self.out_beta = jnp.zeros((cfg.vocab_size,), jnp.float32) if use_output_film else None
        self.layers, self.n_layers = tuple(layers), cfg.n_layers

    def scan_params(self, dtype):
        return {"gamma": _scatter(self.gamma.astype(dtype), self.layers, self.n_layers, 1.0),
                "beta": _scatter(self.beta.astype(dtype), self.layers, self.n_layers, 0.0)}

    def after_ffn(self, h, ap):
        return h * ap["gamma"] + ap["beta"]

    def logits(self, z):
        if self.out_gamma is None:
            return z
        return z * self.out_gamma + self.out_beta

    def num_unreached(self, legal_mask: bool) -> int:
        """Under the hard legal mask, γ_out and β_out of the 12 non-move tokens (their logits are −inf
        at every move decision): 24 entries with the output FiLM, else none."""
        if self.out_gamma is None or not legal_mask:
            return 0
        return 2 * non_move_logits(int(self.out_gamma.shape[0]))

    def weight_report(self, prefix=""):
        out = {}
        for j, i in enumerate(self.layers):
            out[f"{prefix}hidden_{i}/gamma_dev"] = _norm(self.gamma[j] - 1.0)
            out[f"{prefix}hidden_{i}/beta_norm"] = _norm(self.beta[j])
        if self.out_gamma is not None:
            out[f"{prefix}output/gamma_dev"] = _norm(self.out_gamma - 1.0)
            out[f"{prefix}output/beta_norm"] = _norm(self.out_beta)
        return out


# ----------------------------------------------------------------------------- bottleneck


class Bottleneck(Adapter):
    """Houlsby bottleneck (Houlsby et al. 2019; spec §4.3) on the residual stream:
    ``z = h·down``; ``z = gelu(z)·H_k`` for each hidden stage; ``h ← h + gelu(z)·up``, exact-erf
    GELU, no biases or norms.

    Attributes:
        down: position ("attn"/"ffn") -> float32 [L_pos, d, bn], U(±init_scale/√d) (v1: init_scale 1).
        hidden: position -> float32 [L_pos, n_hidden, bn, bn], U(±init_scale/√bn) (absent if n_hidden = 0).
        up: position -> float32 [L_pos, bn, d], zeros (identity for any n_hidden).
        placement: ((position, layers), …) static.
    """

    down: dict[str, Array]
    hidden: dict[str, Array]
    up: dict[str, Array]
    placement: tuple[tuple[str, tuple[int, ...]], ...] = eqx.field(static=True)
    n_layers: int = eqx.field(static=True)
    n_hidden: int = eqx.field(static=True)

    def __init__(self, backbone: PAWNModel, placement: dict[str, tuple[int, ...]], bn: int, n_hidden: int, key,
                 init_scale: float = 1.0):
        d, L = backbone.config.d_model, backbone.config.n_layers
        self.down, self.hidden, self.up = {}, {}, {}
        for p_i, (pos, layers) in enumerate(placement.items()):
            k = jax.random.fold_in(key, p_i)
            idx = np.asarray(layers)
            self.down[pos] = _uniform(jax.random.fold_in(k, 0), (L, d, bn), d, init_scale)[idx]
            if n_hidden:
                self.hidden[pos] = _uniform(jax.random.fold_in(k, 1), (L, n_hidden, bn, bn), bn, init_scale)[idx]
            self.up[pos] = jnp.zeros((len(layers), bn, d), jnp.float32)
        self.placement = tuple((p, tuple(ls)) for p, ls in placement.items())
        self.n_layers, self.n_hidden = L, n_hidden

    def scan_params(self, dtype):
        out = {}
        for pos, layers in self.placement:
            s = {"down": self.down[pos], "up": self.up[pos]}
            if self.n_hidden:
                s["hidden"] = self.hidden[pos]
            out[pos] = {k: _scatter(v.astype(dtype), layers, self.n_layers, 0.0) for k, v in s.items()}
        return out

    def _apply(self, h, p):
        z = dense(h, p["down"])
        for k in range(self.n_hidden):
            z = dense(jax.nn.gelu(z, approximate=False), p["hidden"][k])
        return h + dense(jax.nn.gelu(z, approximate=False), p["up"])

    def after_attn(self, h, ap):
        return self._apply(h, ap["attn"]) if "attn" in ap else h

    def after_ffn(self, h, ap):
        return self._apply(h, ap["ffn"]) if "ffn" in ap else h

    def weight_report(self, prefix="adapter/"):
        out = {}
        for pos, layers in self.placement:
            for j, i in enumerate(layers):
                out[f"{prefix}layer{i}.{pos}.down"] = _norm(self.down[pos][j])
                for k in range(self.n_hidden):
                    out[f"{prefix}layer{i}.{pos}.hidden{k}"] = _norm(self.hidden[pos][j, k])
                out[f"{prefix}layer{i}.{pos}.up"] = _norm(self.up[pos][j])
        return out


# ----------------------------------------------------------------------------- sparse


def random_masks(shapes: dict[str, tuple[int, int]], layers: tuple[int, ...], density: float, seed: int) -> dict[str, np.ndarray]:
    """v1 sparse masks (spec §4.5): one ``numpy.random.default_rng(seed)`` drawing ``U(0,1) <
    density`` per matrix, iterating ``layers`` in order and the targets (in ``shapes`` order)
    within each layer. Returns target -> bool [len(layers), d_in, d_out]."""
    rng = np.random.default_rng(seed)
    out = {n: np.zeros((len(layers),) + tuple(s), bool) for n, s in shapes.items()}
    for j in range(len(layers)):
        for n, s in shapes.items():
            out[n][j] = rng.random(s, dtype=np.float32) < density
    return out


class Sparse(Adapter):
    """Sparse additive delta (spec §4.5, v1): ``W_eff = W + Δ ⊙ mask`` per targeted matrix of the
    selected layers; ``Δ`` zero-initialised, full size, but only masked entries get gradient.

    Attributes:
        delta: target -> float32 [L_sel, d_in, d_out] (trainable).
        mask: target -> bool [L_sel, d_in, d_out] (fixed, not trainable; saved with the weights).
    """

    delta: dict[str, Array]
    mask: dict[str, Array]
    layers: tuple[int, ...] = eqx.field(static=True)
    n_layers: int = eqx.field(static=True)

    def __init__(self, backbone: PAWNModel, targets: tuple[str, ...], layers: tuple[int, ...], masks: dict[str, np.ndarray]):
        self.mask = {n: jnp.asarray(masks[n], bool) for n in targets}
        self.delta = {n: jnp.zeros(self.mask[n].shape, jnp.float32) for n in targets}
        self.layers, self.n_layers = tuple(layers), backbone.config.n_layers

    def scan_params(self, dtype):
        return {n: _scatter((d * self.mask[n]).astype(dtype), self.layers, self.n_layers, 0.0) for n, d in self.delta.items()}

    def layer_weights(self, lw, ap):
        return {k: (w + ap[k] if k in ap else w) for k, w in lw.items()}

    def trainable_filter(self):
        f = jax.tree_util.tree_map(eqx.is_array, self)
        return eqx.tree_at(lambda s: s.mask, f, replace={n: False for n in self.mask})

    def num_params(self) -> int:
        """Exact active parameters: the number of True mask entries."""
        return int(sum(int(np.asarray(m).sum()) for m in self.mask.values()))

    def weight_report(self, prefix="sparse/"):
        out = {}
        for n in self.delta:
            for j, i in enumerate(self.layers):
                out[f"{prefix}layer{i}.{n}.delta"] = _norm(self.delta[n][j] * self.mask[n][j])
        return out

    def merge(self, params):
        p = dict(params)
        for n in self.delta:
            w = np.array(p[n], np.float32)
            w[list(self.layers)] += np.asarray(self.delta[n]) * np.asarray(self.mask[n])
            p[n] = w
        return p


# ----------------------------------------------------------------------------- unfreeze


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
        self.blocks = {n: jnp.asarray(getattr(backbone, n))[idx] for n in C.LAYER_WEIGHTS}
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


# ----------------------------------------------------------------------------- from scratch


class FromScratch(Adapter):
    """``specialized_clm`` (spec §4.8): no adapter; the (freshly initialised) backbone itself is
    the trainable model."""

    trains_backbone = True
    uses_layer_hooks = False

    def merge(self, params):
        return dict(params)


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


def build_bottleneck(s: C.BottleneckConfig, bb: PAWNModel, key) -> "Bottleneck":
    """The Houlsby bottleneck of settings ``s`` on ``bb`` (the ``bottleneck`` row's builder, and
    the bottleneck half of ``retro-bottleneck``).

    Raises:
        AdapterConfigError: layers outside the backbone.
    """
    L = bb.config.n_layers
    placement = {}
    if s.adapt_attn:
        placement["attn"] = C.check_layers(s.attn_layers if s.attn_layers is not None else s.layers, L, "bottleneck attn layers")
    if s.adapt_ffn:
        placement["ffn"] = C.check_layers(s.ffn_layers if s.ffn_layers is not None else s.layers, L, "bottleneck ffn layers")
    return Bottleneck(bb, placement, s.bottleneck_dim, s.n_hidden, key, s.init_scale)
