"""The compiled training loop: K optimizer steps per ``lax.scan`` inside one jitted function
with donated buffers (spec ``training-and-adapters.md`` §1.4–1.5), sharded over devices with
``jax.sharding``.

The host stages a chunk ``[K, B, T]``, calls :func:`TrainProgram.run_chunk` once, and gets back
the new state and per-step metrics stacked ``[K]``; it only logs, validates and checkpoints
between chunks.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import KW_ONLY, dataclass
from typing import Any, Callable, Optional, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from pawn.config import ModelConfig
from pawn.model import PAWNModel, remat_mode
from pawn.train.losses import joint_loss
from pawn.schedules import Schedule

DATA_AXIS = "data"


STEP_BLOCK = 2**30
"""The step counter is two int32 words ``(step // STEP_BLOCK, step % STEP_BLOCK)``: exact up to
2^61 steps without JAX's x64 mode (a plain int32 overflows at 2^31 − 1)."""


def step_counter(step: int) -> jax.Array:
    """The int32 [2] counter ``(step // 2^30, step % 2^30)`` of a Python step count.

    Raises:
        ValueError: ``step`` negative or ≥ 2^61.
    """
    step = int(step)
    if not 0 <= step < STEP_BLOCK * 2**31:
        raise ValueError(f"step {step} is outside [0, 2^61)")
    return jnp.array([step // STEP_BLOCK, step % STEP_BLOCK], jnp.int32)


def counter_value(counter) -> int:
    """The Python int held by a :func:`step_counter` array (host side)."""
    hi, lo = (int(x) for x in np.asarray(counter).reshape(2))
    return hi * STEP_BLOCK + lo


def counter_as_float(counter: jax.Array) -> jax.Array:
    """The step as a float32 scalar (traced): what the LR schedule is evaluated at. Exact below
    2^24; beyond, rounded to float32 like any schedule argument."""
    return counter[0].astype(jnp.float32) * jnp.float32(STEP_BLOCK) + counter[1].astype(jnp.float32)


def _counter_increment(counter: jax.Array) -> jax.Array:
    lo = counter[1] + 1
    carry = lo >= STEP_BLOCK
    return jnp.stack([counter[0] + carry.astype(jnp.int32), jnp.where(carry, 0, lo)])


class TrainState(eqx.Module):
    """Everything the compiled loop carries: the model (fp32 master weights), the optax state
    (Adam moments and Adam's own int32 count, which optax saturates at 2^31 − 1 — harmless, as it
    only enters the bias correction ``1 − β^count``) and the optimizer steps taken as an
    overflow-free int32 [2] :func:`step_counter`, from which the learning rate is computed."""

    model: PAWNModel
    opt_state: optax.OptState
    step: jax.Array


def scale_by_step_schedule(schedule: Schedule) -> optax.GradientTransformationExtraArgs:
    """Multiply updates by ``−schedule(step)``, where ``step`` is an extra argument of ``update``
    (a :func:`step_counter` array or a number), not optax's int32 count: optax saturates that
    count at 2^31 − 1, so a schedule driven by it would stop (or, before optax 0.2.4, go
    negative) on long runs. Stateless.

    ``update(..., learning_rate=lr)`` (a float32 scalar, possibly traced) uses ``lr`` instead of
    ``schedule(step)``: the learning rate as data of the compiled program (see
    :attr:`TrainProgram.weight_decay`), so programs that differ only in their schedule share one
    executable (issue 15).

    Raises:
        TypeError: ``update`` called with neither ``step=`` nor ``learning_rate=``.
    """

    def init_fn(params):
        del params
        return optax.EmptyState()

    def update_fn(updates, state, params=None, *, step=None, learning_rate=None, **extra):
        del params, extra
        if learning_rate is not None:
            lr = jnp.asarray(learning_rate, jnp.float32)
        elif step is None:
            raise TypeError("this optimizer's update needs step= (the optimizer step count) for its LR schedule")
        else:
            s = counter_as_float(step) if getattr(step, "shape", ()) == (2,) else jnp.asarray(step, jnp.float32)
            lr = schedule(s).astype(jnp.float32)
        return jax.tree_util.tree_map(lambda u: u * (-lr).astype(u.dtype), updates), state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def add_decayed_weights(weight_decay: float) -> optax.GradientTransformationExtraArgs:
    """``optax.add_decayed_weights(weight_decay)`` (``g + wd · p``, nothing at all for a zero
    constant, the same empty state) whose ``update`` also takes ``weight_decay=`` (a float32
    scalar, possibly traced) in place of the constant: the weight decay as data of the compiled
    program (:attr:`TrainProgram.weight_decay`, issue 15).

    Raises:
        ValueError: ``update`` without ``params``.
    """
    base = optax.add_decayed_weights(weight_decay)

    def update_fn(updates, state, params=None, *, weight_decay=None, **extra):
        del extra
        if weight_decay is None:
            return base.update(updates, state, params)
        if params is None:
            raise ValueError("weight decay needs the parameters (update(..., params))")
        wd = jnp.asarray(weight_decay, jnp.float32)
        return jax.tree_util.tree_map(lambda g, p: None if g is None else g + wd * p, updates, params,
                                      is_leaf=lambda x: x is None), state

    return optax.GradientTransformationExtraArgs(base.init, update_fn)


def make_optimizer(schedule: Schedule, *, b1: float, b2: float, weight_decay: float, max_grad_norm: float) -> optax.GradientTransformationExtraArgs:
    """``clip_by_global_norm(max_grad_norm)`` then AdamW (ε 1e-8, decoupled weight decay on all
    parameters) driven by ``schedule`` (spec §1.4).

    The AdamW chain is optax's own (``scale_by_adam``, ``add_decayed_weights``) with the learning
    rate applied by :func:`scale_by_step_schedule`, so ``update`` must be given ``step=`` (the
    :class:`TrainState` counter). The state has the same structure (and ``optimizer.safetensors``
    names) as ``optax.adamw`` except that it has no schedule count. ``update`` may also be given
    ``learning_rate=`` and ``weight_decay=`` (scalars, possibly traced) in place of the schedule's
    value and the constant: :class:`TrainProgram` does so when its :attr:`~TrainProgram.weight_decay`
    is set, which keeps both out of the compiled program (issue 15).
    """
    return optax.chain(
        optax.clip_by_global_norm(max_grad_norm),
        optax.chain(
            optax.scale_by_adam(b1=b1, b2=b2, eps=1e-8),
            add_decayed_weights(weight_decay),
            scale_by_step_schedule(schedule),
        ),
    )


def init_state(model: PAWNModel, optimizer: optax.GradientTransformation, step: int = 0) -> TrainState:
    """A fresh optimizer state for ``model`` at ``step``."""
    return TrainState(model, optimizer.init(eqx.filter(model, eqx.is_array)), step_counter(step))


def partition_model(model, trainable: Any = None) -> tuple[Any, Any]:
    """Split ``model`` into ``(trainable, frozen)`` halves with ``eqx.partition(model, trainable)``
    (spec ``training-and-adapters.md`` §5); ``trainable=None`` trains everything and returns
    ``(model, None)``.

    Args:
        model: an equinox module (e.g. :class:`~pawn.model.PAWNModel`, or an adapter wrapping one).
        trainable: an equinox filter spec: a callable ``leaf -> bool`` or a pytree prefix of bools
            (``True`` = trained). Non-array leaves follow the filter too; only array leaves are
            optimised.

    Returns:
        ``(trainable half, frozen half)``: both have ``model``'s structure with ``None`` where the
        other half holds the leaf; ``eqx.combine(trainable, frozen)`` rebuilds ``model``.
    """
    if trainable is None:
        return model, None
    return eqx.partition(model, trainable)


def init_partitioned_state(model, optimizer: optax.GradientTransformation, trainable: Any = None,
                           step: int = 0) -> tuple[TrainState, Any]:
    """A fresh :class:`TrainState` over the trainable half of ``model`` and the frozen half
    (:func:`partition_model`). The optimizer state covers the trainable array leaves only (the
    Adam moments hold ``None`` at frozen leaves). With ``trainable=None`` this is
    :func:`init_state` and the frozen half is ``None``.

    Returns:
        ``(state, frozen)``: pass ``frozen`` to :meth:`TrainProgram.run_chunk` with every chunk.
    """
    train_half, frozen = partition_model(model, trainable)
    return init_state(train_half, optimizer, step), frozen


def _tree_where(pred, new, old):
    return jax.tree_util.tree_map(lambda a, b: jnp.where(pred, a, b), new, old)


@dataclass
class TrainProgram:
    """The jitted K-step chunk for one run configuration.

    Every field after :attr:`optimizer` is keyword-only; :meth:`of` builds the common cases (one
    model or a supernet's equally weighted variants) with the defaults filled in.

    Attributes:
        optimizer: the optax transformation.
        schedule: LR schedule (reported per step).
        variants: ``(config, weight)`` pairs trained jointly.
        dtype: compute dtype name or None (auto).
        remat: per-layer rematerialisation, one of :data:`pawn.model.REMAT_MODES` (``False`` =
            ``"none"``, ``True`` = ``"full"``).
        mesh: device mesh with one ``data`` axis; the batch axis is sharded over it.
        accumulation_steps: A, micro-batches per optimizer step. Each step's batch [B, T] is cut
            into A micro-batches of B/A games (game ``j·A + i`` goes to micro-batch ``i``, so
            every device keeps its share); their gradients are summed inside the compiled step,
            each weighted by its share of the batch's supervised positions, which gives the
            full-batch loss and update (spec §1.3–1.4) with the activation memory of B/A games.
        loss_fn: ``loss_fn(model, batch) -> (loss, metrics)``: the loss (float32 scalar, the mean
            over the batch's supervised positions) and a dict of float32 scalar metrics returned
            per step beside ``loss``, ``grad_norm``, ``n_supervised`` and ``lr``. ``model`` is the
            whole model (trainable and frozen halves combined); ``batch`` is one step's slice of
            the chunk dict (any keys, arrays ``[B, ...]``). None: the supernet joint loss of
            :attr:`variants` (:func:`~pawn.train.losses.joint_loss`, metrics ``loss_<variant>``
            and ``accuracy_<variant>``), i.e. pretraining.
        count_fn: ``count_fn(batch) -> int32 scalar``: the batch's supervised positions. A batch
            with none skips its update (§1.4), and under accumulation it weights each
            micro-batch's loss and metrics by its share. None: ``batch["loss_mask"].sum()`` when
            the batch has a ``loss_mask``, else no skipping and equal micro-batch shares.
        weight_decay: None (the default): the optimizer's constants and :attr:`schedule` are
            compiled into the chunk, as any optax optimizer's are. A float (the weight decay the
            optimizer was built with; the optimizer must be :func:`make_optimizer`'s):
            hyperparameters as data (issue 15) — the compiled chunk takes each step's learning
            rate (float32 [K], :attr:`schedule` evaluated on the host side by a small jitted
            function, bit-identical to the in-graph value) and the weight decay (float32 scalar)
            as arguments, so programs that differ only in peak lr, warm-up, schedule shape or
            weight decay run the same executable (:meth:`with_hyperparams` shares it in a
            process; JAX's persistent compilation cache across processes). The learning rates
            are bit-identical to the in-graph schedule's; updates equal the default program's
            up to float rounding (XLA fuses compiled-in constants differently: last-bit
            differences were measured with a warm-up and weight decay), so ``pawn pretrain`` and
            ``pawn adapt`` keep the default and sweeps opt in. A zero weight decay is compiled
            out as in the default (``g + 0·p`` could flip the sign of a zero), so zero and
            non-zero decays are two programs.

    The trainable/frozen split (adapters, §5) is carried by the arguments, not the program:
    :class:`TrainState` holds only the trainable half (:func:`init_partitioned_state`), and the
    frozen half is passed to :meth:`run_chunk` as a separate, non-donated argument (traced, not
    baked into the executable as constants). Gradients, clipping, Adam moments and weight decay
    see only the trainable leaves.

    Raises:
        ValueError: ``accumulation_steps < 1`` or an unknown remat mode.
        TypeError: a field after ``optimizer`` passed by position.
    """

    optimizer: optax.GradientTransformation
    _: KW_ONLY  # every field after the optimizer by name
    schedule: Schedule
    variants: Sequence[tuple[ModelConfig, float]]
    dtype: Optional[str]
    remat: bool | str
    mesh: Mesh
    accumulation_steps: int = 1
    loss_fn: Optional[Callable[[Any, dict[str, jax.Array]], tuple[jax.Array, dict[str, jax.Array]]]] = None
    count_fn: Optional[Callable[[dict[str, jax.Array]], jax.Array]] = None
    weight_decay: Optional[float] = None

    @classmethod
    def of(cls, optimizer: optax.GradientTransformation, schedule: Schedule, models: "ModelConfig | Sequence[ModelConfig]", *,
           dtype: Optional[str] = None, remat: bool | str = "none", mesh: Optional[Mesh] = None, accumulation_steps: int = 1,
           loss_fn: Optional[Callable] = None, count_fn: Optional[Callable] = None,
           weight_decay: Optional[float] = None) -> "TrainProgram":
        """The program of one model (``models``: a :class:`~pawn.config.ModelConfig`) or of the
        variants of a supernet trained jointly with equal weights (a sequence of configs), every
        other setting by name with its default: compute ``dtype`` auto, no remat, all devices
        (:func:`make_mesh`), no accumulation, PAWN's loss.

        Raises:
            ValueError: as the class (``accumulation_steps < 1``, an unknown remat mode).
        """
        configs = [models] if isinstance(models, ModelConfig) else list(models)
        return cls(optimizer, schedule=schedule, variants=[(c, 1.0) for c in configs], dtype=dtype, remat=remat,
                   mesh=mesh if mesh is not None else make_mesh(), accumulation_steps=accumulation_steps, loss_fn=loss_fn,
                   count_fn=count_fn, weight_decay=weight_decay)

    def __post_init__(self):
        self.variants = tuple(self.variants)
        self.remat = remat_mode(self.remat)
        if self.accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be ≥ 1, got {self.accumulation_steps}")
        if self.weight_decay is not None:
            self.weight_decay = float(self.weight_decay)
        self._jit = self._make_jit()
        self._compiled: dict = {}
        self._lr_fn = None

    @property
    def hyperparams_as_data(self) -> bool:
        """Whether the learning rate and weight decay are arguments of the compiled chunk
        (:attr:`weight_decay` set) rather than constants in it."""
        return self.weight_decay is not None

    def _make_jit(self):
        if self.hyperparams_as_data:
            def chunk_fn(state, chunk, frozen, hparams):  # a fresh function: its own trace cache
                return self._chunk_impl(state, chunk, frozen, hparams)
        else:
            def chunk_fn(state, chunk, frozen):  # a fresh function: its own trace cache
                return self._chunk_impl(state, chunk, frozen)

        return jax.jit(chunk_fn, donate_argnums=(0, 1))

    def with_hyperparams(self, schedule: Schedule, weight_decay: float) -> "TrainProgram":
        """This program with another learning-rate schedule and weight decay, sharing its jitted
        chunk (hence its trace and executable cache: no new compilation for the same shapes).

        Only for a program with :attr:`hyperparams_as_data`; the returned program's optimizer
        is this one's, whose own schedule and decay constant the chunk no longer reads.

        Raises:
            ValueError: this program compiles its hyperparameters in (``weight_decay`` None), or
                ``weight_decay`` is zero where this program's is not, or the reverse (a zero
                decay is compiled out: build a new program).
        """
        if not self.hyperparams_as_data:
            raise ValueError("with_hyperparams needs a program with hyperparameters as data (weight_decay set)")
        if (float(weight_decay) == 0.0) != (self.weight_decay == 0.0):
            raise ValueError(f"weight decay {weight_decay} and {self.weight_decay}: a zero decay is compiled out, "
                             "so one of zero and one non-zero need two programs")
        other = copy.copy(self)
        other.schedule, other.weight_decay = schedule, float(weight_decay)
        other._compiled = dict(self._compiled)
        other._lr_fn = None
        return other

    def hyperparams(self, step: int, k: int) -> dict[str, jax.Array]:
        """The data-hyperparameters of the K-step chunk starting at optimizer step ``step``:
        ``learning_rate`` float32 [K] (:attr:`schedule` at steps ``step … step+K−1``, evaluated
        on the same float32 step as the in-graph schedule) and, for a non-zero decay,
        ``weight_decay`` float32 []; replicated over the mesh.

        Raises:
            ValueError: a program without :attr:`hyperparams_as_data`.
        """
        if not self.hyperparams_as_data:
            raise ValueError("this program compiles its hyperparameters in (weight_decay is None)")
        if self._lr_fn is None:
            sched = self.schedule
            self._lr_fn = jax.jit(jax.vmap(lambda c: sched(counter_as_float(c)).astype(jnp.float32)))
        steps = np.arange(int(step), int(step) + k, dtype=np.int64)
        counters = np.stack([steps // STEP_BLOCK, steps % STEP_BLOCK], axis=1).astype(np.int32)
        out = {"learning_rate": self._lr_fn(counters)}
        if self.weight_decay != 0.0:
            out["weight_decay"] = jnp.float32(self.weight_decay)
        return jax.device_put(out, self.replicated)

    def set_remat(self, remat: bool | str) -> None:
        """Switch the rematerialisation mode (drops compiled executables)."""
        self.remat = remat_mode(remat)
        self._jit = self._make_jit()
        self._compiled = {}

    def set_plan(self, remat: bool | str, accumulation_steps: int) -> None:
        """Switch the rematerialisation mode and the micro-batches per step together (drops the
        compiled executables; :meth:`snapshot` keeps them for :meth:`restore`).

        Raises:
            ValueError: ``accumulation_steps < 1`` or an unknown remat mode."""
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be ≥ 1, got {accumulation_steps}")
        self.accumulation_steps = int(accumulation_steps)
        self.set_remat(remat)

    def snapshot(self) -> tuple:
        """This program's plan and compiled executables, for :meth:`restore` (the executables are
        shared, not copied)."""
        return self.remat, self.accumulation_steps, self._jit, dict(self._compiled)

    def restore(self, snap: tuple) -> None:
        """Go back to a :meth:`snapshot`: its plan and its executables (no compilation)."""
        self.remat, self.accumulation_steps, self._jit, compiled = snap
        self._compiled = dict(compiled)

    # ------------------------------------------------------------------ sharding
    @property
    def replicated(self) -> NamedSharding:
        """Sharding that puts a full copy on every device of the mesh (model, optimizer state)."""
        return NamedSharding(self.mesh, PartitionSpec())

    @property
    def chunk_sharding(self) -> NamedSharding:
        """[K, B, T] arrays: batch axis split over devices."""
        return NamedSharding(self.mesh, PartitionSpec(None, DATA_AXIS, None))

    def place_state(self, state: TrainState) -> TrainState:
        """Replicate the state on every device of the mesh."""
        return eqx.filter_shard(state, self.replicated)

    def place_frozen(self, frozen):
        """Replicate the frozen half of a partitioned model on every device (None stays None)."""
        return None if frozen is None else eqx.filter_shard(frozen, self.replicated)

    def _sharding_for(self, ndim: int) -> NamedSharding:
        # [K, B, ...]: the batch axis (1) is split over devices, whatever the rank.
        if ndim == 3:
            return self.chunk_sharding
        if ndim < 2:
            raise ValueError(f"chunk arrays are [K, B, ...]; got one of rank {ndim}")
        return NamedSharding(self.mesh, PartitionSpec(None, DATA_AXIS, *([None] * (ndim - 2))))

    def place_chunk(self, chunk: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        """Turn this process's part of a chunk (any dict of ``[K, B, ...]`` arrays) into global
        arrays sharded over the mesh along the batch axis."""
        return {k: jax.make_array_from_process_local_data(self._sharding_for(np.ndim(v)), v) for k, v in chunk.items()}

    # ------------------------------------------------------------------ compiled step
    def _default_loss(self, model, batch: dict[str, jax.Array]):
        """The supernet joint loss (pretraining) as ``(loss, metrics)``."""
        loss, (per, _count, acc) = joint_loss(model, batch, self.variants, dtype=self.dtype, remat=self.remat, with_accuracy=True)
        return loss, {**{f"loss_{k}": v for k, v in per.items()}, **{f"accuracy_{k}": v for k, v in acc.items()}}

    def _count(self, batch: dict[str, jax.Array]) -> Optional[jax.Array]:
        if self.count_fn is not None:
            return jnp.asarray(self.count_fn(batch), jnp.int32)
        if "loss_mask" in batch:
            return batch["loss_mask"].sum(dtype=jnp.int32)
        return None

    def _loss_and_grads(self, model: PAWNModel, batch: dict[str, jax.Array]):
        """Pretraining's view (default loss, nothing frozen): ``(joint loss, per-variant CE,
        n_supervised, per-variant top-1, grads)`` of one batch."""
        loss, metrics, count, grads = self.loss_metrics_grads(model, None, batch)
        names = [cfg.name for cfg, _ in self.variants]
        return (loss, {n: metrics[f"loss_{n}"] for n in names}, count,
                {n: metrics[f"accuracy_{n}"] for n in names}, grads)

    def loss_metrics_grads(self, train_half, frozen, batch: dict[str, jax.Array]):
        """``(loss, metrics, n_supervised or None, grads w.r.t. the trainable half)`` of one
        batch, over :attr:`accumulation_steps` micro-batches when that is above 1 (traceable:
        called inside the compiled chunk, and by the sweep's vmapped population step).

        Args:
            train_half: the trained half of the model (the whole model when nothing is frozen).
            frozen: the frozen half (:func:`partition_model`) or None.
            batch: ``{name: [B, ...]}`` device arrays (``loss_mask`` counts the supervised positions).

        Returns:
            loss: float32 []. metrics: the loss function's own ``{name: float32 []}``.
            n_supervised: int32 [] (None without a count). grads: the trainable half's structure.

        Raises:
            ValueError: ``B`` not a multiple of :attr:`accumulation_steps`.
        """
        user_loss = self.loss_fn if self.loss_fn is not None else self._default_loss

        def loss_fn(t, b):
            return user_loss(t if frozen is None else eqx.combine(t, frozen), b)

        A = self.accumulation_steps
        count = self._count(batch)
        if A == 1:
            (loss, metrics), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(train_half, batch)
            return loss, metrics, count, grads
        B = next(iter(batch.values())).shape[0]
        if B % A:
            raise ValueError(f"batch of {B} games does not split into {A} micro-batches")
        # [B, ...] → [A, B/A, ...] with game j·A + i in micro-batch i: a device's contiguous block
        # of games contributes to every micro-batch, so the batch sharding carries over.
        micro = {k: v.reshape(B // A, A, *v.shape[1:]).swapaxes(0, 1) for k, v in batch.items()}
        denom = None if count is None else jnp.maximum(count, 1).astype(jnp.float32)

        def weighted(m, b):
            # CE_i · n_i / N: the micro-batch's share of the full batch's masked mean (the same
            # weighting makes the micro-batch accuracies sum to the full batch's).
            loss, metrics = loss_fn(m, b)
            share = jnp.float32(1.0 / A) if denom is None else self._count(b).astype(jnp.float32) / denom
            return loss * share, {k: v * share for k, v in metrics.items()}

        def body(carry, b):
            g_acc, l_acc, met_acc = carry
            (l, met), g = eqx.filter_value_and_grad(weighted, has_aux=True)(train_half, b)
            g_acc = jax.tree_util.tree_map(jnp.add, g_acc, g)
            return (g_acc, l_acc + l, {k: met_acc[k] + met[k] for k in met_acc}), None

        zeros = jax.tree_util.tree_map(jnp.zeros_like, eqx.filter(train_half, eqx.is_array))
        shapes = jax.eval_shape(weighted, train_half, {k: v[0] for k, v in micro.items()})[1]
        met0 = {k: jnp.zeros(s.shape, s.dtype) for k, s in shapes.items()}
        (grads, loss, metrics), _ = jax.lax.scan(body, (zeros, jnp.float32(0.0), met0), micro)
        return loss, metrics, count, grads

    def optimizer_step(self, frozen, state: TrainState, batch: dict[str, jax.Array], hp: Optional[dict[str, jax.Array]] = None):
        """One optimizer step (traceable; the body of the compiled chunk's ``lax.scan``, and the
        step the benchmark times on its own).

        Args:
            frozen: the frozen half of a partitioned model, or None. state: the :class:`TrainState`.
            batch: ``{name: [B, ...]}`` device arrays.
            hp: this step's data-hyperparameters (``learning_rate`` and maybe ``weight_decay``
                float32 scalars) or None (the optimizer's compiled-in schedule).

        Returns:
            ``(new state, {"loss", "grad_norm", "n_supervised", "lr", ...loss metrics})``: a batch
            with nothing supervised leaves the weights and optimizer count as they were.
        """
        loss, loss_metrics, count, grads = self.loss_metrics_grads(state.model, frozen, batch)
        grad_norm = optax.tree.norm(grads)
        params = eqx.filter(state.model, eqx.is_array)
        updates, new_opt = self.optimizer.update(grads, state.opt_state, params, step=state.step, **(hp or {}))
        new_model = eqx.apply_updates(state.model, updates)
        if count is None:
            model, opt_state = eqx.filter(new_model, eqx.is_array), new_opt
            count = jnp.int32(-1)
        else:
            # A batch with nothing supervised changes nothing: no decay, optimizer count kept.
            skip = count == 0
            model = _tree_where(skip, eqx.filter(state.model, eqx.is_array), eqx.filter(new_model, eqx.is_array))
            opt_state = _tree_where(skip, state.opt_state, new_opt)
        model = eqx.combine(model, state.model)
        metrics = {
            "loss": loss,
            "grad_norm": grad_norm,
            "n_supervised": count,
            "lr": (self.schedule(counter_as_float(state.step)).astype(jnp.float32) if hp is None
                   else hp["learning_rate"]),
            **loss_metrics,
        }
        return TrainState(model, opt_state, _counter_increment(state.step)), metrics

    def _chunk_impl(self, state: TrainState, chunk: dict[str, jax.Array], frozen=None, hparams=None):
        if hparams is None:
            return jax.lax.scan(lambda s, b: self.optimizer_step(frozen, s, b), state, chunk)
        wd = {"weight_decay": hparams["weight_decay"]} if "weight_decay" in hparams else {}

        def body(s, xs):
            b, lr = xs
            return self.optimizer_step(frozen, s, b, {"learning_rate": lr, **wd})

        return jax.lax.scan(body, state, (chunk, hparams["learning_rate"]))

    def abstract_chunk(self, k: int, batch_size: int, seq_len: int) -> dict[str, jax.ShapeDtypeStruct]:
        """Shapes, dtypes and shardings of a chunk [K, B, T] as :meth:`place_chunk` makes it
        (``input_ids``/``targets`` int32, ``attn_mask``/``loss_mask`` bool); no memory is used."""
        dt = {"input_ids": jnp.int32, "targets": jnp.int32, "attn_mask": jnp.bool_, "loss_mask": jnp.bool_}
        return {n: jax.ShapeDtypeStruct((k, batch_size, seq_len), d, sharding=self.chunk_sharding) for n, d in dt.items()}

    @staticmethod
    def _signature(chunk) -> tuple:
        return tuple(sorted((n, tuple(a.shape), str(a.dtype)) for n, a in chunk.items()))

    def compile(self, state, chunk, frozen=None):
        """Compile (without running) the K-step chunk for ``state`` and ``chunk``, which may be
        arrays or ``jax.ShapeDtypeStruct`` trees (e.g. from ``jax.eval_shape`` and
        :meth:`abstract_chunk`, so nothing is allocated). The executable is kept and used by
        :meth:`run_chunk` for chunks of the same shapes, so checking memory first costs no second
        compilation. ``frozen``: the frozen half of a partitioned model (None when all is
        trained). Returns the ``jax.stages.Compiled`` (see its ``memory_analysis()``)."""
        st = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=self.replicated), state)
        fr = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=self.replicated), frozen)
        ch = {n: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=self._sharding_for(len(a.shape))) for n, a in chunk.items()}
        args = (st, ch, fr)
        if self.hyperparams_as_data:
            k = next(iter(ch.values())).shape[0]
            hp = {"learning_rate": jax.ShapeDtypeStruct((k,), jnp.float32, sharding=self.replicated)}
            if self.weight_decay != 0.0:
                hp["weight_decay"] = jax.ShapeDtypeStruct((), jnp.float32, sharding=self.replicated)
            args = (*args, hp)
        with warnings.catch_warnings():
            # The chunk's int/bool inputs are donated but have no same-shaped output to reuse.
            warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
            compiled = self._jit.lower(*args).compile()
        self._compiled[self._signature(ch)] = compiled
        return compiled

    def run_chunk(self, state: TrainState, chunk: dict[str, jax.Array], frozen=None) -> tuple[TrainState, dict[str, jax.Array]]:
        """Run K steps (K = leading axis of the chunk arrays). ``state`` and ``chunk`` are donated:
        do not use them afterwards; ``frozen`` (the frozen half of a partitioned model, placed
        with :meth:`place_frozen`; None when everything is trained) is not donated and is reused
        across chunks. Returns the new state and metrics stacked [K] (``n_supervised`` is −1 when
        the program has no count, see ``count_fn``). With :attr:`hyperparams_as_data` the
        chunk's learning rates are computed from the state's step counter (read to the host)."""
        args = (state, chunk, frozen)
        if self.hyperparams_as_data:
            step = state.step.addressable_data(0) if hasattr(state.step, "addressable_data") else state.step
            args = (*args, self.hyperparams(counter_value(step), next(iter(chunk.values())).shape[0]))
        compiled = self._compiled.get(self._signature(chunk))
        if compiled is not None:
            return compiled(*args)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
            return self._jit(*args)


def make_mesh(devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
    """A 1-D ``data`` mesh over ``devices`` (default: all devices of all processes)."""
    devs = np.asarray(devices if devices is not None else jax.devices())
    return Mesh(devs, (DATA_AXIS,))


# ---------------------------------------------------------------------- optimizer (de)serialisation


def _leaf_names(tree) -> list[tuple[str, jax.Array]]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [(jax.tree_util.keystr(path), leaf) for path, leaf in leaves]


def optimizer_to_arrays(opt_state) -> dict[str, np.ndarray]:
    """Flatten an optax state to ``{path: array}`` for ``optimizer.safetensors``."""
    return {name: np.asarray(leaf) for name, leaf in _leaf_names(opt_state) if hasattr(leaf, "shape")}


def optimizer_from_arrays(template, arrays: dict[str, np.ndarray]):
    """Rebuild an optax state with the structure of ``template`` from saved arrays.

    Raises:
        ValueError: a leaf missing from ``arrays`` or of the wrong shape (named).
    """
    flat, treedef = jax.tree_util.tree_flatten_with_path(template)
    out = []
    for path, leaf in flat:
        name = jax.tree_util.keystr(path)
        if not hasattr(leaf, "shape"):
            out.append(leaf)
            continue
        if name not in arrays:
            raise ValueError(f"optimizer state has no entry {name}")
        a = arrays[name]
        if leaf.ndim == 0 and a.size == 1:
            a = a.reshape(())  # safetensors round-trips 0-d arrays as shape [1]
        if tuple(a.shape) != tuple(leaf.shape):
            raise ValueError(f"optimizer entry {name} has shape {a.shape}, expected {leaf.shape}")
        out.append(jnp.asarray(a, dtype=leaf.dtype))
    return jax.tree_util.tree_unflatten(treedef, out)


def with_count(opt_state, step: int):
    """Set every optax ``count`` leaf to ``step``, saturated at its dtype's maximum as optax's own
    increment does (resuming without saved optimizer state keeps Adam's bias correction where the
    run was; the LR position comes from :class:`TrainState`'s counter)."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(opt_state)

    def count(leaf):
        return jnp.asarray(min(int(step), int(jnp.iinfo(leaf.dtype).max)), leaf.dtype)

    leaves = [count(leaf) if jax.tree_util.keystr(p).endswith(".count") else leaf for p, leaf in flat]
    return jax.tree_util.tree_unflatten(treedef, leaves)
