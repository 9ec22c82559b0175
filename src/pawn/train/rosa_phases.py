"""Phases 1–2 of the RoSA family in the adapter trainer (spec ``training-and-adapters.md`` §4.6):
the LoRA warm-up and the gradient mask generation, run on the same
:class:`~pawn.train.run.Trainer` / :class:`~pawn.train.loop.TrainProgram` as every other training
loop (no copied loop), before the main phase of ``pawn adapt``.

* **Warm-up step counter.** The warm-up has its own counter ``warmup_step`` in
  ``[0, rosa_warmup_steps]``; it is *not* the main step counter (v1): the main phase starts at
  global step 0 afterwards, with the full schedule.
* **Optimizer.** A separate AdamW (same betas, weight decay and clip as the run) at the constant
  peak ``lr`` (no schedule, v1), over the LoRA leaves only.
* **Data.** Warm-up batch ``w`` is batch ``w`` of a second, independently shuffled stream of the
  training games (``data_seed`` salted by :data:`WARMUP_SEED_SALT`); the ``mask_samples`` scoring
  batches are the next ones of that stream (``W … W + mask_samples − 1``). Every batch is a pure
  function of its warm-up step, so a resumed warm-up sees exactly the batches of an uninterrupted
  one, and the main phase's epoch order is untouched.
* **Checkpoints.** Warm-up checkpoints are main-step-0 checkpoints (``checkpoints/step_0``,
  replaced in place) holding the phase-1 adapter, the warm-up optimizer state and
  ``training_state["rosa"] = {"phase": 1, "warmup_step": w}``; a resume continues the warm-up at
  ``w`` exactly. Right after the masks are installed the caller writes ``step_0`` again in
  phase 3, so mask generation never runs twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import equinox as eqx
import jax
import numpy as np

from pawn.adapters.strategies import rosa as R
from pawn.schedules import build_schedule
from pawn.train.loop import (
    TrainProgram,
    TrainState,
    counter_value,
    init_partitioned_state,
    make_optimizer,
    optimizer_from_arrays,
    optimizer_to_arrays,
    partition_model,
    step_counter,
)
from pawn.train.run import Checkpointer, Hook, StepChunks, Trainer, TrainingError, to_host

WARMUP_SEED_SALT = 0x524F5341
"""XORed into ``data_seed`` for the warm-up / mask-scoring stream (ASCII ``ROSA``)."""


def warmup_data_seed(data_seed: int) -> int:
    """The seed of the warm-up batch stream (see the module docstring)."""
    return (int(data_seed) ^ WARMUP_SEED_SALT) % 2**63


class _StepZeroCheckpointer(Checkpointer):
    """Every warm-up checkpoint is written as ``step_0`` of the main counter (replaced in place)."""

    def save(self, step: int, *, kind: str = "interval", ctx=None) -> Path:
        return super().save(0, kind="final" if kind == "best" else kind, ctx=ctx)


class _Every(Hook):
    def __init__(self, every: int, fn: Callable[[Any], None]):
        self.every, self._fn = every, fn

    def on_chunk(self, ctx) -> None:
        self._fn(ctx)


class FlagStopHook(Hook):
    """A ``sigterm`` stop when a :class:`~pawn.train.lifecycle.StopFlag` caught SIGTERM/SIGINT,
    leaving the handlers installed (the main phase's :class:`~pawn.train.run.SignalStopHook`
    restores them at the very end)."""

    def __init__(self, flag):
        self.flag = flag

    def on_chunk(self, ctx) -> None:
        if self.flag.requested:
            ctx.request_stop("sigterm", by="signal")


@dataclass
class WarmupOutcome:
    """What :func:`run_warmup_and_masks` returns.

    Attributes:
        model: the AdaptedModel — in phase 3 (masks installed) when the warm-up completed, else
            still in phase 1 (stopped early).
        warmup_step: warm-up steps done. reason: ``"completed"`` or the stop reason.
        mask_density: True mask entries / Δ entries (None if not reached).
    """

    model: Any
    warmup_step: int
    reason: str
    mask_density: Optional[float] = None


def run_warmup_and_masks(
    model,
    *,
    loss_fn: Callable[[Any, Mapping[str, Any]], Any],
    batch_at: Callable[[int], Mapping[str, np.ndarray]],
    lr: float,
    b1: float,
    b2: float,
    weight_decay: float,
    max_grad_norm: float,
    steps_per_chunk: int,
    save: Callable[[Path, Any, dict, dict], None],
    checkpoint_root: Path,
    key: jax.Array,
    resume: Optional[tuple[int, Optional[dict[str, np.ndarray]]]] = None,
    hooks: Sequence[Hook] = (),
    log_metrics: Optional[Callable[[dict], None]] = None,
    log: Callable[[str], None] = print,
    checkpoint_every: Optional[int] = None,
    is_main: bool = True,
    programs: Optional[dict] = None,
    program_key: Any = None,
    count_fn: Optional[Callable[[Mapping[str, Any]], Any]] = None,
) -> WarmupOutcome:
    """Run phase 1 (LoRA warm-up) from ``resume`` (or 0) and, if it completes, phase 2 (gradient
    masks) and the switch to phase 3 (:func:`pawn.adapters.strategies.rosa.enter_main_phase`).

    Args:
        model: an AdaptedModel with a phase-1 :class:`~pawn.adapters.strategies.rosa.RoSAAdapter`.
        loss_fn: the training loss ``(model, batch) -> (loss, metrics)`` (spec §5).
        batch_at: warm-up batch of warm-up step ``w`` (a dict of host arrays ``[B, ...]``).
        lr, b1, b2, weight_decay, max_grad_norm: the warm-up AdamW (constant ``lr``).
        steps_per_chunk: compiled chunk length K; the warm-up runs chunks of K steps and a shorter
            last one when K does not divide ``rosa_warmup_steps`` (it ran ``gcd(K, W)``-step chunks
            before: one step per compiled call for K 25, W 64).
        save: ``save(path, model, optimizer_arrays, rosa_state)`` writes a checkpoint (the caller's
            adapter checkpoint with main step 0 and ``training_state["rosa"] = rosa_state``).
        checkpoint_root: the run's ``checkpoints`` directory.
        key: PRNG key of the phase-3 LoRA re-initialisation (``rosa``).
        resume: ``(warmup_step, optimizer arrays)`` of a phase-1 checkpoint.
        hooks: extra hooks of the warm-up trainer (e.g. SIGTERM → stop; they may request a stop).
        log_metrics: receives one record per warm-up chunk: ``rosa/phase``, ``rosa/warmup_step``,
            ``rosa/warmup_loss`` (last step), ``rosa/warmup_loss_mean``, ``grad_norm``.
        checkpoint_every: warm-up steps between checkpoints (None: only at the end or a stop).
        count_fn: the loss's counted positions of a batch (the
            :class:`~pawn.train.loop.TrainProgram` ``count_fn``; None: ``loss_mask`` positions).
        programs, program_key: the compiled programs shared by the runs of this process
            (:attr:`pawn.train.adapt.AdaptReuse.programs`) and the warm-up's graph key in it: an
            earlier run's warm-up program with that key is reused with this run's lr and weight
            decay as data (issue 15); None: a program of this run alone, constants compiled in.

    Returns:
        :class:`WarmupOutcome`.

    Raises:
        TrainingError: a non-finite warm-up loss, a failed checkpoint, bad resume state.
    """
    s = model.settings
    W = int(s.rosa_warmup_steps)
    start = 0 if resume is None else int(resume[0])
    if not 0 <= start <= W:
        raise TrainingError(f"RoSA warm-up resume step {start} is outside 0..{W}")
    if model.adapter.phase != R.PHASE_WARMUP:
        raise TrainingError(f"RoSA warm-up needs a phase-1 adapter, got phase {model.adapter.phase}")
    k = max(1, min(int(steps_per_chunk), W))
    reason = "completed"
    if start < W:
        schedule = build_schedule("constant", lr, W, 0)
        optimizer = make_optimizer(schedule, b1=b1, b2=b2, weight_decay=weight_decay, max_grad_norm=max_grad_norm)
        shared = None if programs is None else programs.get(program_key)
        if shared is not None:
            program = shared.with_hyperparams(schedule, weight_decay)
        else:
            program = TrainProgram.of(optimizer, schedule, model.config, loss_fn=loss_fn, count_fn=count_fn,
                                      weight_decay=weight_decay if programs is not None else None)
            if programs is not None:
                programs[program_key] = program
        if resume is None or start == 0:
            state, frozen = init_partitioned_state(model, optimizer, trainable=model.trainable_filter(), step=start)
        else:
            train_half, frozen = partition_model(model, model.trainable_filter())
            if resume[1] is None:
                raise TrainingError("RoSA warm-up checkpoint has no optimizer state; cannot resume the warm-up exactly")
            try:
                opt = optimizer_from_arrays(optimizer.init(eqx.filter(train_half, eqx.is_array)), resume[1])
            except ValueError as e:
                raise TrainingError(f"RoSA warm-up optimizer state: {e}") from None
            state = TrainState(train_half, opt, step_counter(start))
        frozen = program.place_frozen(frozen)
        state = program.place_state(state)

        def write(path: Path, _step: int) -> None:
            st = trainer.state
            w = counter_value(to_host(st.step))
            save(path, eqx.combine(to_host(st.model), frozen), optimizer_to_arrays(to_host(st.opt_state)),
                 {"phase": R.PHASE_WARMUP, "warmup_step": w})

        checkpointer = _StepZeroCheckpointer(checkpoint_root, write, keep=1_000_000, is_main=is_main)
        hk: list[Hook] = []
        if log_metrics is not None:
            def record(ctx) -> None:
                m = ctx.result.metrics
                losses = np.asarray(m["loss"])
                log_metrics({"rosa/phase": R.PHASE_WARMUP, "rosa/warmup_step": ctx.step, "rosa/warmup_loss": float(losses[-1]),
                             "rosa/warmup_loss_mean": float(losses.mean()), "grad_norm": float(np.asarray(m["grad_norm"])[-1]),
                             "rosa/warmup_lr": [float(x) for x in np.asarray(m["lr"])]})  # every step of the chunk
            hk.append(_Every(1, record))
        if checkpoint_every:
            every = checkpoint_every
            hk.append(_Every(1, lambda ctx: checkpointer.save(ctx.step, ctx=ctx) if ctx.step % every == 0 and ctx.step < W else None))
        hk.extend(hooks)
        trainer = Trainer(program, checkpointer, hk, total_steps=W, end_step=W, completed_reason="completed")
        log(f"RoSA phase 1: LoRA warm-up, steps {start}..{W} at constant lr {lr:g} (not counted in the main step counter)")
        chunks = StepChunks(batch_at, start_step=start, end_step=W, k=k, short_last=True)
        outcome = trainer.run(state, chunks, frozen=frozen, start_step=start, resumed=resume is not None)
        reason = outcome.reason
        model = eqx.combine(to_host(outcome.state.model), frozen)
        if reason != "completed":
            return WarmupOutcome(model, outcome.step, reason)
    log(f"RoSA phase 2: gradient masks from {s.mask_samples} batches, |∂L/∂Δ|^{s.grad_alpha}, density {s.density:g}")
    masks = R.gradient_masks(model, loss_fn, (batch_at(W + i) for i in range(s.mask_samples)))
    model = R.enter_main_phase(model, masks, key)
    density = model.adapter.mask_density()
    log(f"RoSA phase 3: {model.strategy} under the fixed masks (density {density:.5f}), "
        f"{model.num_trainable_params():,} trainable parameters")
    return WarmupOutcome(model, W, "completed", density)


__all__ = ["FlagStopHook", "WARMUP_SEED_SALT", "WarmupOutcome", "run_warmup_and_masks", "warmup_data_seed"]
