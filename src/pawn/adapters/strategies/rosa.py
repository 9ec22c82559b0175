"""The RoSA family (spec ``training-and-adapters.md`` §4.6; Nikdan et al. 2024, "RoSA: Accurate
Parameter-Efficient Fine-Tuning via Robust Adaptation"): ``rosa``, ``retro-sparse`` and
``retro-bottleneck``, three rows of the strategy table sharing one adapter module,
:class:`RoSAAdapter`, whose training runs in three phases. This module holds the family (the three
settings models, the module, the masks, the phases) and the ``rosa`` row;
:mod:`~pawn.adapters.strategies.retro_sparse` and :mod:`~pawn.adapters.strategies.retro_bottleneck`
hold the other two rows.

1. **LoRA warm-up** (``phase = 1``): only the LoRA ``A, B`` train, ``rosa_warmup_steps`` optimizer
   steps with their own step counter and their own AdamW at constant lr (v1);
2. **gradient mask generation** (``phase = 2``, :func:`gradient_masks`): every mask all-True with
   ``Δ = 0``, so ``∂L/∂Δ = ∂L/∂W_eff``; per matrix the score ``Σ_batches |∂L/∂Δ|^α`` over
   ``mask_samples`` batches; keep exactly the top ``k = max(1, int(density · numel))`` entries
   (:func:`top_k_mask`, ties to the lower flat index);
3. **training under the fixed mask** (``phase = 3``, :func:`enter_main_phase`): masks installed,
   ``Δ`` re-zeroed; ``rosa`` re-initialises the LoRA (v1: A random, B = 0) and trains LoRA + Δ;
   ``retro-sparse`` discards the LoRA (the frozen backbone is untouched, so this is v1's "fresh
   backbone") and trains Δ only; ``retro-bottleneck`` trains Δ **and** Houlsby bottlenecks
   together (the intended semantics of the caution paragraph in §4.6), bottlenecks on
   ``bottleneck_layers`` (e.g. the top 4), Δ on ``layers`` (default all) — the published combos.

The phase is a static field, so it is part of the adapter's structure: the checkpoint records it
(:meth:`RoSAAdapter.checkpoint_state`) and :func:`pawn.adapters.io.load_adapter` rebuilds the
phase the weights belong to; masks are saved with the weights (``adapter.sparse.mask.{key}``).
Every phase starts as the identity (``B = 0``, ``Δ = 0`` / mask all False, bottleneck ``up = 0``).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterable, Literal, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from pydantic import Field, model_validator

from pawn.adapters.base import Adapter
from pawn.adapters.configs import check_layers
from pawn.adapters.errors import AdapterError
from pawn.adapters.strategies.bottleneck import Bottleneck, BottleneckConfig, build_bottleneck
from pawn.adapters.strategies.lora import LoRA, LoRAConfig
from pawn.adapters.strategies.sparse import Sparse
from pawn.adapters.table import FloatRange, IntRange, SpaceEntry, Strategy, choice, register
from pawn.adapters.table import TARGET_CHOICES
from pawn.config import ModelConfig
from pawn.model import PAWNModel, param_shapes

MODES: tuple[str, ...] = ("rosa", "retro-sparse", "retro-bottleneck")
"""The strategy names served by :class:`RoSAAdapter`."""

PHASE_WARMUP, PHASE_MASK, PHASE_TRAIN = 1, 2, 3
"""``rosa/phase`` values (spec §4.6 numbering)."""


# ----------------------------------------------------------------------------- settings


class RoSAConfig(LoRAConfig):
    """``rosa`` (spec §4.6): LoRA (``rank``, ``alpha``, ``targets``, ``ffn``, ``layers``) plus a
    sparse Δ on the same matrices with gradient masks of ``density``.

    v1 defaults: ``rosa_warmup_steps = 128``, ``mask_samples = 32``, ``grad_alpha = 2`` (Fisher
    diagonal; 1 = gradient magnitude), ``density = 0.01``.
    """

    density: float = Field(0.01, gt=0.0, le=1.0, description="Fraction of each targeted matrix that trains (RoSA family: exactly "
                                                             "max(1, int(density·numel)) per matrix).")
    rosa_warmup_steps: int = Field(128, ge=0, description="RoSA family: LoRA warm-up steps before the gradient masks (own counter, "
                                                         "not main steps; constant --lr).")
    mask_samples: int = Field(32, ge=1, description="RoSA family: batches whose |∂L/∂Δ|^α are summed into the mask score.")
    grad_alpha: Literal[1, 2] = Field(2, description="RoSA family: mask score exponent α (2 = Fisher diagonal, 1 = gradient magnitude).")


class RetroSparseConfig(RoSAConfig):
    """``retro-sparse`` (spec §4.6, v1 only): RoSA warm-up and masks, then Δ alone is trained; the
    LoRA fields size the warm-up LoRA only (it is discarded)."""


class RetroBottleneckConfig(RetroSparseConfig):
    """``retro-bottleneck`` (spec §4.6): as ``retro-sparse`` plus Houlsby bottlenecks (spec §4.3)
    trained together with Δ. ``bottleneck_layers`` places the bottlenecks (e.g. ``6,7,8,9`` = top-4
    on large); ``layers`` places the LoRA warm-up and Δ (default all — the published combos)."""

    flag_names: ClassVar[dict[str, str]] = {**LoRAConfig.flag_names, "n_hidden": "bottleneck_n_hidden", "adapt_attn": "no_adapt_attn",
                                            "adapt_ffn": "no_adapt_ffn"}
    negated_flags: ClassVar[frozenset[str]] = frozenset({"adapt_attn", "adapt_ffn"})

    bottleneck_dim: int = Field(8, ge=1, description="Bottleneck width bn.")
    n_hidden: int = Field(0, ge=0, description="Extra bn×bn hidden stages in each bottleneck.")
    adapt_attn: bool = Field(True, description="Bottleneck after attention (off: --no-adapt-attn).")
    adapt_ffn: bool = Field(True, description="Bottleneck after the FFN (off: --no-adapt-ffn).")
    bottleneck_layers: Optional[tuple[int, ...]] = Field(None, min_length=1, description="retro-bottleneck: comma list of layers with "
                                                         "bottlenecks (e.g. the top 4; default all); --adapter-layers places the LoRA warm-up and Δ.")

    @model_validator(mode="after")
    def _some_position(self):
        if not (self.adapt_attn or self.adapt_ffn):
            raise ValueError("adapt_attn and adapt_ffn are both off: the bottleneck would adapt nothing")
        return self

    def bottleneck(self) -> BottleneckConfig:
        """The bottleneck half's settings."""
        return BottleneckConfig(bottleneck_dim=self.bottleneck_dim, n_hidden=self.n_hidden, adapt_attn=self.adapt_attn,
                                  adapt_ffn=self.adapt_ffn, layers=self.bottleneck_layers, init_scale=self.init_scale)


SETTINGS: dict[str, type[RoSAConfig]] = {"rosa": RoSAConfig, "retro-sparse": RetroSparseConfig, "retro-bottleneck": RetroBottleneckConfig}


# ----------------------------------------------------------------------------- masks


def top_k_count(density: float, numel: int) -> int:
    """``k = max(1, int(density · numel))`` entries kept per matrix (spec §4.6)."""
    return max(1, int(density * numel))


def top_k_mask(scores: np.ndarray, k: int) -> np.ndarray:
    """Exact top-``k`` boolean mask of one matrix (never a ``≥`` threshold).

    Tie rule: entries are ranked by score, descending; equal scores are ranked by their row-major
    flat index, **lower index first** (a stable sort of ``-score``). So exactly ``k`` entries are
    True, and the result depends only on the scores.

    Args:
        scores: float [d_in, d_out] (any shape; flattened row-major).
        k: 1 ≤ k ≤ scores.size.

    Returns:
        bool array of ``scores.shape`` with exactly ``k`` True entries.

    Raises:
        ValueError: ``k`` out of range or a non-finite score.
    """
    s = np.asarray(scores, np.float64).ravel()
    if not 1 <= k <= s.size:
        raise ValueError(f"top-k mask: k={k} outside 1..{s.size}")
    if not np.isfinite(s).all():
        raise ValueError("top-k mask: a mask score is not finite (NaN/inf gradient)")
    keep = np.argsort(-s, kind="stable")[:k]
    out = np.zeros(s.size, bool)
    out[keep] = True
    return out.reshape(np.shape(scores))


# ----------------------------------------------------------------------------- the adapter


class RoSAAdapter(Adapter):
    """One module for ``rosa``, ``retro-sparse`` and ``retro-bottleneck`` (see the module docstring).

    Attributes:
        lora: :class:`~pawn.adapters.strategies.lora.LoRA` on the targets of ``layers`` (None for the retro
            modes in phase 3: discarded).
        sparse: :class:`~pawn.adapters.strategies.sparse.Sparse` on the same matrices; masks all False in
            phase 1, all True in phase 2, the gradient masks in phase 3.
        bottleneck: :class:`~pawn.adapters.strategies.bottleneck.Bottleneck` (``retro-bottleneck`` only; used and
            trained in phase 3 only).
        mode: the strategy name. phase: 1, 2 or 3 (static).
    """

    lora: Optional[LoRA]
    sparse: Sparse
    bottleneck: Optional[Bottleneck]
    mode: str = eqx.field(static=True)
    phase: int = eqx.field(static=True)

    def _active(self) -> tuple[Adapter, ...]:
        if self.phase == PHASE_WARMUP:
            parts = (self.lora,)
        elif self.phase == PHASE_MASK:
            parts = (self.lora, self.sparse)
        else:
            parts = (self.lora, self.sparse, self.bottleneck)
        return tuple(p for p in parts if p is not None)

    # forward hooks: the active parts in order (LoRA, sparse Δ, bottleneck)
    def scan_params(self, dtype):
        return tuple(p.scan_params(dtype) for p in self._active())

    def layer_weights(self, lw, ap):
        for p, a in zip(self._active(), ap):
            lw = p.layer_weights(lw, a)
        return lw

    def project(self, name, x, y, ap):
        for p, a in zip(self._active(), ap):
            y = p.project(name, x, y, a)
        return y

    def after_attn(self, h, ap):
        for p, a in zip(self._active(), ap):
            h = p.after_attn(h, a)
        return h

    def after_ffn(self, h, ap):
        for p, a in zip(self._active(), ap):
            h = p.after_ffn(h, a)
        return h

    # what trains
    def trainable_filter(self):
        """Phase 1: LoRA only. Phase 2: Δ only (the mask-score gradient). Phase 3: ``rosa`` LoRA +
        Δ; ``retro-sparse`` Δ; ``retro-bottleneck`` Δ + bottleneck. Masks never."""
        def part(p, on):
            return None if p is None else jax.tree_util.tree_map(lambda x: bool(on and eqx.is_array(x)), p)

        sparse = eqx.tree_at(lambda s: s.mask, part(self.sparse, self.phase >= PHASE_MASK),
                             replace={n: False for n in self.sparse.mask})
        lora_on = self.phase == PHASE_WARMUP or (self.phase == PHASE_TRAIN and self.mode == "rosa")
        return RoSAAdapter(part(self.lora, lora_on), sparse, part(self.bottleneck, self.phase == PHASE_TRAIN), self.mode, self.phase)

    def num_params(self) -> int:
        """Trainable parameters now: phase 1 the LoRA; phase 3 Σ k (+ LoRA for ``rosa``, +
        bottleneck for ``retro-bottleneck``); phase 2 the full Δ size (what is scored)."""
        if self.phase == PHASE_WARMUP:
            return self.lora.num_params()
        if self.phase == PHASE_MASK:
            return int(sum(int(np.prod(d.shape)) for d in self.sparse.delta.values()))
        n = self.sparse.num_params()
        if self.mode == "rosa":
            n += self.lora.num_params()
        if self.bottleneck is not None:
            n += self.bottleneck.num_params()
        return n

    def mask_density(self) -> float:
        """True mask entries / Δ entries (0 in phase 1, 1 in phase 2)."""
        total = sum(int(np.prod(m.shape)) for m in self.sparse.mask.values())
        return self.sparse.num_params() / total

    def weight_report(self, prefix=""):
        """Spec §4.6 names: ``rosa/phase``, ``rosa/mask_density``, ``rosa/total_active_params``
        (trainable now), ``rosa/total_params`` (every stored adapter entry, Δ at full size);
        ``rosa``: ``rosa/layer{i}.{proj}.lora_B`` in every phase and
        ``rosa/layer{i}.{proj}.delta = ‖Δ ⊙ mask‖`` in phase 3; retro modes in phase 3:
        ``sparse/layer{i}.{proj}.delta`` and ``bottleneck/layer{i}.{attn|ffn}.up``. The retro modes
        never report ``lora_B``: their warm-up LoRA only scores the mask and is discarded (the step-0
        validation row of a retro-sparse run listed its norms)."""
        out: dict[str, Any] = {
            f"{prefix}rosa/phase": self.phase,
            f"{prefix}rosa/mask_density": self.mask_density(),
            f"{prefix}rosa/total_active_params": self.num_params(),
            f"{prefix}rosa/total_params": int(sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(
                eqx.filter((self.lora, self.sparse.delta, self.bottleneck), eqx.is_inexact_array)))),
        }
        if self.lora is not None and self.mode == "rosa":
            out.update({k[:-2] + ".lora_B": v for k, v in self.lora.weight_report(prefix + "rosa/").items() if k.endswith(".B")})
        if self.phase == PHASE_TRAIN:
            if self.mode == "rosa":
                out.update({k: v for k, v in self.sparse.weight_report(prefix + "rosa/").items()})
            else:
                out.update(self.sparse.weight_report(prefix + "sparse/"))
            if self.bottleneck is not None:
                out.update({k: v for k, v in self.bottleneck.weight_report(prefix + "bottleneck/").items() if k.endswith(".up")})
        return out

    def merge(self, params):
        """Fold LoRA + Δ (phase 3, ``rosa``/``retro-sparse``) into the weights.

        Raises:
            AdapterError: before phase 3, or ``retro-bottleneck`` (acts on activations).
        """
        if self.phase != PHASE_TRAIN:
            raise AdapterError(f"a {self.mode} adapter in phase {self.phase} has no mask yet and cannot be merged")
        if self.bottleneck is not None:
            raise AdapterError("a retro-bottleneck adapter acts on activations and cannot be merged into the weights")
        for p in self._active():
            params = p.merge(params)
        return params

    # checkpoints
    def checkpoint_state(self) -> dict:
        """What :func:`pawn.adapters.io.save_adapter` records next to the weights: ``{"phase": p}``."""
        return {"phase": self.phase}

    def restore_state(self, state: dict) -> "RoSAAdapter":
        """This (freshly built) adapter in the structure of the recorded phase (weights to be
        filled in from the checkpoint's tensors).

        Raises:
            AdapterError: an unknown phase value.
        """
        phase = state.get("phase", PHASE_WARMUP)
        if phase not in (PHASE_WARMUP, PHASE_MASK, PHASE_TRAIN):
            raise AdapterError(f"{self.mode} adapter checkpoint records phase {phase!r}; expected 1, 2 or 3")
        lora = None if (phase == PHASE_TRAIN and self.mode != "rosa") else self.lora
        return RoSAAdapter(lora, self.sparse, self.bottleneck, self.mode, phase)


# ----------------------------------------------------------------------------- build, count


def _targets_shapes(s: RoSAConfig, cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    shapes = param_shapes(cfg)
    return {n: tuple(shapes[n][1:]) for n in s.target_names()}


def build(mode: str) -> Callable[[RoSAConfig, PAWNModel, jax.Array], RoSAAdapter]:
    """The strategy-table builder of ``mode``: a phase-1 :class:`RoSAAdapter` (identity: ``B = 0``,
    ``Δ = 0``, masks all False, bottleneck ``up = 0``). Keys: LoRA ``fold_in(key, 0)``,
    bottleneck ``fold_in(key, 2)``."""
    def _build(s: RoSAConfig, bb: PAWNModel, key) -> RoSAAdapter:
        layers = check_layers(s.layers, bb.config.n_layers, f"{mode} layers")
        lora = LoRA(bb, s.target_names(), s.rank, s.scale, layers, jax.random.fold_in(key, 0), s.init_scale)
        shapes = _targets_shapes(s, bb.config)
        sparse = Sparse(bb, s.target_names(), layers, {n: np.zeros((len(layers),) + sh, bool) for n, sh in shapes.items()})
        bottleneck = None
        if mode == "retro-bottleneck":
            bottleneck = build_bottleneck(s.bottleneck(), bb, jax.random.fold_in(key, 2))
        return RoSAAdapter(lora, sparse, bottleneck, mode, PHASE_WARMUP)

    return _build


def count(mode: str) -> Callable[[RoSAConfig, ModelConfig], int]:
    """Exact phase-3 trainable count from shapes (spec §4.6 "Params"): ``Σ k`` over the targeted
    matrices of ``layers`` (``k = max(1, int(density·numel))``), + LoRA ``L_sel·Σ r·(d_in + d_out)``
    for ``rosa``, + bottleneck ``positions·L_sel·(2·d·bn + n_hidden·bn²)`` for ``retro-bottleneck``."""
    def _count(s: RoSAConfig, cfg: ModelConfig) -> int:
        layers = check_layers(s.layers, cfg.n_layers, f"{mode} layers")
        shapes = _targets_shapes(s, cfg)
        n = len(layers) * sum(top_k_count(s.density, a * b) for a, b in shapes.values())
        if mode == "rosa":
            n += len(layers) * sum(s.rank * (a + b) for a, b in shapes.values())
        if mode == "retro-bottleneck":
            b = s.bottleneck()
            per = 2 * cfg.d_model * b.bottleneck_dim + b.n_hidden * b.bottleneck_dim ** 2
            for pos, on in (("attn", b.adapt_attn), ("ffn", b.adapt_ffn)):
                if on:
                    n += per * len(check_layers(b.layers, cfg.n_layers, f"{mode} bottleneck_layers"))
        return n

    return _count


# ----------------------------------------------------------------------------- phases


def is_phased(model) -> bool:
    """True if ``model`` (an AdaptedModel) trains in RoSA phases."""
    return isinstance(getattr(model, "adapter", None), RoSAAdapter)


def with_phase(model, adapter: RoSAAdapter):
    """``model`` (AdaptedModel) with ``adapter`` in place of its adapter."""
    return eqx.tree_at(lambda m: m.adapter, model, adapter)


def enter_mask_phase(model):
    """Phase 2: every mask all-True and ``Δ = 0`` (so ``∂L/∂Δ = ∂L/∂W_eff``); only Δ is trainable."""
    ad: RoSAAdapter = model.adapter
    sp = ad.sparse
    sp = eqx.tree_at(lambda s: (s.mask, s.delta), sp,
                     ({n: jnp.ones(m.shape, bool) for n, m in sp.mask.items()},
                      {n: jnp.zeros(d.shape, d.dtype) for n, d in sp.delta.items()}))
    return with_phase(model, RoSAAdapter(ad.lora, sp, ad.bottleneck, ad.mode, PHASE_MASK))


def _loss_scalar(out):
    return out[0] if isinstance(out, tuple) else out


@eqx.filter_jit
def _mask_score(diff, static, batch, loss_fn, grad_alpha):
    # module level: runs with the same loss_fn object (sweep trials sharing their programs,
    # pawn.train.adapt.AdaptReuse) and shapes share one compilation
    g = jax.grad(lambda d: _loss_scalar(loss_fn(eqx.combine(d, static), batch)).astype(jnp.float32))(diff)
    return {n: (jnp.abs(x) if grad_alpha == 1 else jnp.square(x)) for n, x in g.adapter.sparse.delta.items()}


def mask_scores(model, loss_fn: Callable[[Any, Any], Any], batches: Iterable[Any], grad_alpha: int) -> dict[str, np.ndarray]:
    """Phase-2 scores: ``Σ_batches |∂L/∂Δ|^α`` per targeted matrix, with masks all True and ``Δ = 0``.

    Args:
        model: an AdaptedModel with a :class:`RoSAAdapter` (any phase; the LoRA as it is now is kept).
        loss_fn: ``(model, batch) -> loss`` or ``(loss, aux)``; the mean training loss (spec §5).
        batches: the ``mask_samples`` batches.
        grad_alpha: 1 or 2.

    Returns:
        target name -> float32 [L_sel, d_in, d_out] (the LoRA gradients are discarded).

    Raises:
        ValueError: no batches, or ``grad_alpha`` not 1 or 2.
    """
    if grad_alpha not in (1, 2):
        raise ValueError(f"grad_alpha must be 1 or 2, got {grad_alpha}")
    m = enter_mask_phase(model)
    diff, static = eqx.partition(m, m.trainable_filter())
    total, n = None, 0
    for batch in batches:
        s = _mask_score(diff, static, batch, loss_fn, grad_alpha)
        total = s if total is None else {k: total[k] + s[k] for k in total}
        n += 1
    if total is None:
        raise ValueError("mask generation got no batches")
    return {k: np.asarray(v, np.float32) for k, v in total.items()}


def masks_from_scores(scores: dict[str, np.ndarray], density: float) -> dict[str, np.ndarray]:
    """Per layer and target, the exact top-``k`` mask of :func:`top_k_mask`
    (``k = max(1, int(density · d_in · d_out))``). Returns target -> bool [L_sel, d_in, d_out]."""
    out = {}
    for n, s in scores.items():
        k = top_k_count(density, int(np.prod(s.shape[1:])))
        out[n] = np.stack([top_k_mask(s[j], k) for j in range(s.shape[0])])
    return out


def gradient_masks(model, loss_fn, batches, *, density: Optional[float] = None, grad_alpha: Optional[int] = None) -> dict[str, np.ndarray]:
    """Phase 2 of spec §4.6: :func:`mask_scores` then :func:`masks_from_scores`; ``density`` and
    ``grad_alpha`` default to the model's settings."""
    s = model.settings
    scores = mask_scores(model, loss_fn, batches, s.grad_alpha if grad_alpha is None else grad_alpha)
    return masks_from_scores(scores, s.density if density is None else density)


def enter_main_phase(model, masks: dict[str, np.ndarray], key: jax.Array):
    """Phase 3: install ``masks`` (target -> bool [L_sel, d_in, d_out]), ``Δ = 0``; ``rosa``
    re-initialises its LoRA from ``key`` (v1: A Kaiming-uniform, B = 0); the retro modes drop the
    LoRA. The result is the identity on the backbone (Δ = 0, B = 0, bottleneck ``up`` untouched = 0
    unless trained).

    Raises:
        ValueError: a mask missing or of the wrong shape.
    """
    ad: RoSAAdapter = model.adapter
    sp = ad.sparse
    for n, m in sp.mask.items():
        if n not in masks or tuple(np.shape(masks[n])) != tuple(m.shape):
            raise ValueError(f"{ad.mode} mask for {n}: expected bool{list(m.shape)}, got "
                             f"{'none' if n not in masks else list(np.shape(masks[n]))}")
    sp = eqx.tree_at(lambda s: (s.mask, s.delta), sp,
                     ({n: jnp.asarray(masks[n], bool) for n in sp.mask},
                      {n: jnp.zeros(d.shape, d.dtype) for n, d in sp.delta.items()}))
    lora = None
    if ad.mode == "rosa":
        s = model.settings
        layers = check_layers(s.layers, model.config.n_layers, "rosa layers")
        lora = LoRA(model.backbone, s.target_names(), s.rank, s.scale, layers, key, s.init_scale)
    return with_phase(model, RoSAAdapter(lora, sp, ad.bottleneck, ad.mode, PHASE_TRAIN))


__all__ = [
    "MODES", "PHASE_MASK", "PHASE_TRAIN", "PHASE_WARMUP", "RetroBottleneckConfig", "RetroSparseConfig", "RoSAAdapter",
    "RoSAConfig", "SETTINGS", "build", "count", "enter_main_phase", "enter_mask_phase", "gradient_masks", "is_phased",
    "mask_scores", "masks_from_scores", "top_k_count", "top_k_mask", "with_phase",
]


SPACE: dict[str, SpaceEntry] = {"density": FloatRange(1e-3, 0.1, log=True), "rank": choice(2, 4, 8, 16), "targets": TARGET_CHOICES,
                                "rosa_warmup_steps": IntRange(32, 256, step=32), "mask_samples": choice(16, 32, 64),
                                "grad_alpha": choice(1, 2)}
"""The sweep space the three rows share (``retro-bottleneck`` adds the bottleneck's)."""

ROW = register(Strategy(
    "rosa", "LoRA warm-up, then LoRA (re-initialised) + Δ under a fixed gradient mask",
    "L_sel·Σ_targets r·(d_in + d_out) + Σ max(1, int(density·numel))", RoSAConfig, build("rosa"), True, order=80, lr=1e-2,
    count=count("rosa"), module=RoSAAdapter, random_init=True, space=SPACE,
))
"""rosa's row of the strategy table."""
