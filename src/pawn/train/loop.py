"""The compiled training loop: K optimizer steps per ``lax.scan`` inside one jitted function
with donated buffers (spec ``training-and-adapters.md`` §1.4–1.5), sharded over devices with
``jax.sharding``.

The host stages a chunk ``[K, B, T]``, calls :func:`TrainProgram.run_chunk` once, and gets back
the new state and per-step metrics stacked ``[K]``; it only logs, validates and checkpoints
between chunks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from pawn.config import ModelConfig
from pawn.model import PAWNModel
from pawn.train.losses import joint_loss
from pawn.train.schedules import Schedule

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

    Raises:
        TypeError: ``update`` called without ``step=``.
    """

    def init_fn(params):
        del params
        return optax.EmptyState()

    def update_fn(updates, state, params=None, *, step=None, **extra):
        del params, extra
        if step is None:
            raise TypeError("this optimizer's update needs step= (the optimizer step count) for its LR schedule")
        s = counter_as_float(step) if getattr(step, "shape", ()) == (2,) else jnp.asarray(step, jnp.float32)
        lr = schedule(s).astype(jnp.float32)
        return jax.tree_util.tree_map(lambda u: u * (-lr).astype(u.dtype), updates), state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def make_optimizer(schedule: Schedule, *, b1: float, b2: float, weight_decay: float, max_grad_norm: float) -> optax.GradientTransformationExtraArgs:
    """``clip_by_global_norm(max_grad_norm)`` then AdamW (ε 1e-8, decoupled weight decay on all
    parameters) driven by ``schedule`` (spec §1.4).

    The AdamW chain is optax's own (``scale_by_adam``, ``add_decayed_weights``) with the learning
    rate applied by :func:`scale_by_step_schedule`, so ``update`` must be given ``step=`` (the
    :class:`TrainState` counter). The state has the same structure (and ``optimizer.safetensors``
    names) as ``optax.adamw`` except that it has no schedule count.
    """
    return optax.chain(
        optax.clip_by_global_norm(max_grad_norm),
        optax.chain(
            optax.scale_by_adam(b1=b1, b2=b2, eps=1e-8),
            optax.add_decayed_weights(weight_decay),
            scale_by_step_schedule(schedule),
        ),
    )


def init_state(model: PAWNModel, optimizer: optax.GradientTransformation, step: int = 0) -> TrainState:
    """A fresh optimizer state for ``model`` at ``step``."""
    return TrainState(model, optimizer.init(eqx.filter(model, eqx.is_array)), step_counter(step))


def _tree_where(pred, new, old):
    return jax.tree_util.tree_map(lambda a, b: jnp.where(pred, a, b), new, old)


@dataclass
class TrainProgram:
    """The jitted K-step chunk for one run configuration.

    Attributes:
        optimizer: the optax transformation.
        schedule: LR schedule (reported per step).
        variants: ``(config, weight)`` pairs trained jointly.
        dtype: compute dtype name or None (auto).
        remat: rematerialise layers in the backward pass.
        mesh: device mesh with one ``data`` axis; the batch axis is sharded over it.
    """

    optimizer: optax.GradientTransformation
    schedule: Schedule
    variants: Sequence[tuple[ModelConfig, float]]
    dtype: Optional[str]
    remat: bool
    mesh: Mesh

    def __post_init__(self):
        self.variants = tuple(self.variants)
        self._chunk = eqx.filter_jit(self._chunk_impl, donate="all")

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

    def place_chunk(self, chunk: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        """Turn this process's part of a chunk into global arrays sharded over the mesh."""
        return {k: jax.make_array_from_process_local_data(self.chunk_sharding, v) for k, v in chunk.items()}

    # ------------------------------------------------------------------ compiled step
    def _step(self, state: TrainState, batch: dict[str, jax.Array]):
        def loss_fn(model):
            return joint_loss(model, batch, self.variants, dtype=self.dtype, remat=self.remat, with_accuracy=True)

        (loss, (per_variant, count, accuracy)), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(state.model)
        grad_norm = optax.tree.norm(grads)
        params = eqx.filter(state.model, eqx.is_array)
        updates, new_opt = self.optimizer.update(grads, state.opt_state, params, step=state.step)
        new_model = eqx.apply_updates(state.model, updates)
        # A batch with nothing supervised changes nothing: no decay, optimizer count kept.
        skip = count == 0
        model = _tree_where(skip, eqx.filter(state.model, eqx.is_array), eqx.filter(new_model, eqx.is_array))
        model = eqx.combine(model, state.model)
        opt_state = _tree_where(skip, state.opt_state, new_opt)
        metrics = {
            "loss": loss,
            "grad_norm": grad_norm,
            "n_supervised": count,
            "lr": self.schedule(counter_as_float(state.step)).astype(jnp.float32),
            **{f"loss_{name}": v for name, v in per_variant.items()},
            **{f"accuracy_{name}": v for name, v in accuracy.items()},
        }
        return TrainState(model, opt_state, _counter_increment(state.step)), metrics

    def _chunk_impl(self, state: TrainState, chunk: dict[str, jax.Array]):
        return jax.lax.scan(self._step, state, chunk)

    def run_chunk(self, state: TrainState, chunk: dict[str, jax.Array]) -> tuple[TrainState, dict[str, jax.Array]]:
        """Run K steps (K = leading axis of the chunk arrays). ``state`` and ``chunk`` are donated:
        do not use them afterwards. Returns the new state and metrics stacked [K]."""
        return self._chunk(state, chunk)


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
