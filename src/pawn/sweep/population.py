"""Populations: P trials that differ only in array-valued hyperparameters (learning rate, weight
decay, warm-up, adapter init scale) trained together as ONE vmapped program (issue 15).

The members share the batches (the chunk is not vmapped), the frozen half of a partitioned model
(adapters; passed once, unbatched) and the compiled executable; each member carries its own
trainable weights (their own initial values when they differ in ``init_scale``), Adam moments
and hyperparameters. The optimizer is the same clip → Adam →
decoupled weight decay → ``−lr`` chain as :func:`pawn.train.loop.make_optimizer`, wrapped in
``optax.inject_hyperparams`` so that ``learning_rate`` and ``weight_decay`` are arrays in the
optimizer state, which ``jax.vmap`` batches over members. Each member's learning rate at step s
is read from a ``[P, total_steps]`` table of its own schedule (so members may differ in peak lr,
warm-up or anything else the schedule depends on). Member p therefore follows the updates of
the sequential run with its settings, up to float rounding.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import optuna

from pawn.adapters.strategies import rosa
from pawn.adapters.io import save_adapter
from pawn.errors import PawnError
from pawn.settings import PretrainConfig
from pawn.sweep.objective import (INTERRUPTED, ask_quietly, failed_elsewhere, finish_trial, log_stale, make_objective,
                                  n_counted, trial_bucket, trial_data_seed)
from pawn.sweep.space import derive, suggest
from pawn.sweep.trials import PrunerHook, SweepError, TrialOutcome, raise_if_interrupted
from pawn.train.adapt import AdaptReuse, AdaptTask
from pawn.train.adapt_config import AdaptSettings
from pawn.train.lifecycle import EarlyStopping
from pawn.train.loop import TrainProgram, TrainState, partition_model
from pawn.train.memory import release_free_heap
from pawn.train.pretrain import PretrainTask
from pawn.train.run import ValidationEvent, to_host
from pawn.progress import counted

ARRAY_FIELDS = frozenset({"lr", "weight_decay", "warmup_steps", "warmup_frac", "init_scale"})
"""Settings members of one population may differ in; everything else must be equal."""


class PopulationError(PawnError, ValueError):
    """Configs that cannot share one population (they differ in a non-array field)."""


def _adamw_factory(b1: float, b2: float, max_grad_norm: float):
    def factory(learning_rate, weight_decay):
        return optax.chain(
            optax.clip_by_global_norm(max_grad_norm),
            optax.chain(optax.scale_by_adam(b1=b1, b2=b2, eps=1e-8), optax.add_decayed_weights(weight_decay),
                        optax.scale(-learning_rate)),
        )

    return factory


class PopState(eqx.Module):
    """Stacked member states: ``model`` (trainable half, leading axis P), ``opt_state`` (the
    ``InjectHyperparamsState``, leading axis P) and ``step`` (int32 [P], optimizer steps)."""

    model: Any
    opt_state: Any
    step: jax.Array


class PopulationProgram:
    """The vmapped K-step chunk of a population.

    Args:
        program: the members' shared :class:`~pawn.train.loop.TrainProgram` (its loss, count
            and accumulation; its own optimizer is not used).
        b1, b2, max_grad_norm: AdamW betas and the global-norm clip (shared).
    """

    def __init__(self, program: TrainProgram, *, b1: float, b2: float, max_grad_norm: float):
        self.program = program
        self.optimizer_kwargs = {"b1": b1, "b2": b2, "max_grad_norm": max_grad_norm}
        """The shared optimizer settings (:func:`pawn.train.loop.make_optimizer`'s, weight decay per member)."""
        self.optimizer = optax.inject_hyperparams(_adamw_factory(b1, b2, max_grad_norm))(learning_rate=0.0, weight_decay=0.0)
        self._jit = jax.jit(self._chunk, donate_argnums=(0,))

    def init(self, train_half, weight_decays: Sequence[float]) -> PopState:
        """The stacked start of P members with fresh optimizer states holding each member's
        weight decay.

        Args:
            train_half: one trainable half (every member starts from these weights, as
                sequential trials from the same seed do), or a sequence of P trainable halves of
                the same structure and shapes (members that differ in ``init_scale``).
            weight_decays: P floats.

        Raises:
            PopulationError: P halves whose count, structure or shapes do not match.
        """
        P = len(weight_decays)
        halves = list(train_half) if isinstance(train_half, (list, tuple)) else [train_half] * P
        if len(halves) != P:
            raise PopulationError(f"{len(halves)} initial trainable halves for {P} weight decays")
        # leaves only: static fields (e.g. the settings holding each member's init_scale) may differ;
        # the stacked state keeps member 0's
        arrays = [eqx.filter(h, eqx.is_array) for h in halves]
        shapes = [[(jnp.shape(x), jnp.result_type(x)) for x in jax.tree_util.tree_leaves(a)] for a in arrays]
        if any(s != shapes[0] for s in shapes):
            raise PopulationError("population members' trainable weights differ in structure or shape")
        arrays = [jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(arrays[0]), jax.tree_util.tree_leaves(a))
                  for a in arrays]
        states = []
        for params, wd in zip(arrays, weight_decays):
            st = self.optimizer.init(params)
            hp = dict(st.hyperparams)
            hp["weight_decay"] = jnp.asarray(wd, hp["weight_decay"].dtype)
            states.append(st._replace(hyperparams=hp))
        stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *arrays)
        model = eqx.combine(stacked, halves[0])
        opt = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *states)
        return PopState(model, opt, jnp.zeros((P,), jnp.int32))

    def _member_step(self, frozen, lr_row, state: PopState, batch):
        prog = self.program
        loss, loss_metrics, count, grads = prog.loss_metrics_grads(state.model, frozen, batch)
        grad_norm = optax.tree.norm(grads)
        lr = lr_row[jnp.minimum(state.step, lr_row.shape[0] - 1)]
        hp = dict(state.opt_state.hyperparams)
        hp["learning_rate"] = lr.astype(hp["learning_rate"].dtype)
        opt_in = state.opt_state._replace(hyperparams=hp)
        params = eqx.filter(state.model, eqx.is_array)
        updates, new_opt = self.optimizer.update(grads, opt_in, params)
        new_model = eqx.filter(eqx.apply_updates(state.model, updates), eqx.is_array)
        if count is None:
            model, opt_state, count = new_model, new_opt, jnp.int32(-1)
        else:  # a batch with nothing supervised changes nothing (as TrainProgram.optimizer_step)
            skip = count == 0
            model = jax.tree_util.tree_map(lambda a, b: jnp.where(skip, a, b), params, new_model)
            opt_state = jax.tree_util.tree_map(lambda a, b: jnp.where(skip, a, b), state.opt_state, new_opt)
        model = eqx.combine(model, state.model)
        metrics = {"loss": loss, "grad_norm": grad_norm, "n_supervised": count, "lr": lr, **loss_metrics}
        return PopState(model, opt_state, state.step + 1), metrics

    def _chunk(self, state: PopState, chunk, frozen, lr_table):
        def body(s, b):
            return jax.vmap(self._member_step, in_axes=(None, 0, 0, None))(frozen, lr_table, s, b)

        return jax.lax.scan(body, state, chunk)

    def run_chunk(self, state: PopState, chunk, lr_table, frozen=None):
        """K steps of every member on the same chunk ``{name: [K, B, ...]}``; ``lr_table``
        float32 ``[P, total_steps]``. Returns the new state (``state`` is donated) and metrics
        ``[K, P]``."""
        return self._jit(state, chunk, frozen, lr_table)


def shared_optimizer_kwargs(optimizer_kwargs: dict) -> dict:
    """The members' shared optimizer settings of a run's :func:`pawn.train.loop.make_optimizer`
    keyword arguments (``b1``, ``b2``, ``max_grad_norm``; the weight decay is each member's own)."""
    return {k: v for k, v in optimizer_kwargs.items() if k != "weight_decay"}


def member(state: PopState, p: int):
    """Member ``p``'s trainable half (host arrays) from a :class:`PopState`."""
    return jax.tree_util.tree_map(lambda x: np.asarray(x[p]) if eqx.is_array(x) else x, to_host(state.model))


def lr_table(schedules: Sequence[Callable], total_steps: int) -> jax.Array:
    """``[P, total_steps]`` float32: member p's ``schedule(step)`` at every step, evaluated on
    the float32 step as the sequential program does."""
    steps = jnp.arange(total_steps, dtype=jnp.float32)
    return jnp.stack([jax.jit(jax.vmap(lambda s, f=f: f(s).astype(jnp.float32)))(steps) for f in schedules])


def check_population(configs: Sequence[dict], ignore: Sequence[str] = ("out", "resume")) -> None:
    """Raise :class:`PopulationError` naming the first field (outside :data:`ARRAY_FIELDS`)
    in which the member configs differ."""
    first = configs[0]
    for c in configs[1:]:
        for k in sorted(set(first) | set(c)):
            if k in ARRAY_FIELDS or k in ignore:
                continue
            if first.get(k) != c.get(k):
                raise PopulationError(f"population members differ in {k} ({first.get(k)!r} vs {c.get(k)!r}); "
                                      f"only {', '.join(sorted(ARRAY_FIELDS))} may differ")


def run_pretrain_population(configs: Sequence[dict], reporters: Sequence[PrunerHook], *,
                            log: Callable[[str], None] = print) -> list[TrialOutcome]:
    """Train the pretraining configs ``configs`` (differing only in :data:`ARRAY_FIELDS`) as one
    vmapped population on the shared batch stream, validating every ``val_every`` steps and
    reporting each member's val loss to its reporter (a :class:`PrunerHook`). A pruned member
    stops being validated and reported (it keeps its lane: shapes, hence the executable, stay
    the same); a member whose loss becomes non-finite fails; the others go on. Members write
    no run directory or checkpoints (re-run the best with ``pawn pretrain --config``).

    Returns:
        One :class:`TrialOutcome` per member (``train_losses``: the loss at each chunk's last
        step; ``val_losses``: the reported val losses by global step).

    Raises:
        PopulationError: configs that cannot share a population.
    """
    check_population(configs)
    cfgs = [PretrainConfig.load(**c) for c in configs]
    base = cfgs[0]
    task = PretrainTask(base, log=log)  # the data, validation rule and validation of pawn pretrain
    task.shape()
    sched, optimizer = task.setup_optimizer()
    program = TrainProgram.of(optimizer, sched, [c for _, c in task.variants], dtype=task.dtype,
                              remat="none" if base.remat == "auto" else base.remat, accumulation_steps=base.accumulation_steps)
    pop = PopulationProgram(program, **shared_optimizer_kwargs(task.optimizer_kwargs))
    state = eqx.filter_shard(pop.init(task.fresh_model(), [c.optimizer_kwargs()["weight_decay"] for c in cfgs]), program.replicated)
    T = base.total_steps
    table = lr_table([c.schedule() for c in cfgs], T)
    task.open_data()
    stream = task.chunks(0, T)
    try:
        return _train_population(
            pop, state, stream, program.place_chunk, table, None, T, configs, reporters,
            val_due=task.val_due if task.validates else (lambda s: False),
            validate=lambda m, step: task.validate(TrainState(jax.device_put(m), None, None), step))
    finally:
        stream.close()


def _train_population(pop: PopulationProgram, state: PopState, chunks, place: Callable, table, frozen, total: int,
                      configs: Sequence[dict], reporters: Sequence[PrunerHook], *, val_due: Callable[[int], bool],
                      validate: Callable[[Any, int], dict], patience: Optional[int] = None,
                      completed_reason: str = "completed",
                      on_best: Optional[Callable[[int, Any, int, dict], Optional[Path]]] = None) -> list[TrialOutcome]:
    """The population loop shared by pretraining and adapter populations: run every chunk
    ``(s0, {name: [K, ...]})`` of ``chunks`` for all members, fail a member whose train loss
    becomes non-finite, and at each step where ``val_due(step)`` validate every live member
    (``validate(member trainable half, step) -> fields``), report the fields to its reporter
    (:class:`PrunerHook`, ``ValidationEvent(step, fields)``) and apply its pruning verdict and,
    with ``patience`` set, its early stopping on ``val_loss`` (reason ``"patience"``, as
    :class:`~pawn.train.run.EarlyStoppingHook`). ``on_best(p, member trainable half, step,
    fields)`` is called when member p's val loss is its lowest so far (it saves the weights and
    returns the member's run directory, which becomes the outcome's ``run_dir``). Ends when
    every member has ended or the chunks run out; returns one :class:`TrialOutcome` per member."""
    P = len(configs)
    status: list[Optional[str]] = [None] * P  # None = training; else the member's end reason
    errors: list[Optional[str]] = [None] * P
    ended_at = [total] * P
    train_losses: list[dict[int, float]] = [dict() for _ in range(P)]
    stops = [EarlyStopping(patience) for _ in range(P)]
    best = [math.inf] * P
    run_dirs: list[Optional[Path]] = [None] * P
    step = 0
    for s0, host_chunk in chunks:
        raise_if_interrupted()  # a Ctrl-C Python dropped inside a callback (pawn.sweep.trials.CTRL_C)
        release_free_heap()  # as pawn.train.run.training_steps: freed heap back to the OS before the chunk
        state, m = pop.run_chunk(state, place(host_chunk), table, frozen)
        losses = np.asarray(to_host(m)["loss"])  # [K, P]
        step = s0 + losses.shape[0]
        for p in range(P):
            if status[p] is not None:
                continue
            bad = ~np.isfinite(losses[:, p])
            if bad.any():
                at = s0 + int(np.argmax(bad))
                status[p], ended_at[p] = "exception", at
                errors[p] = f"loss became {losses[int(np.argmax(bad)), p]} at step {at}"
                continue
            train_losses[p][step] = float(losses[-1, p])
        if val_due(step):
            for p in range(P):
                if status[p] is not None:
                    continue
                weights = member(state, p)
                fields = validate(weights, step)
                v = fields.get("loss")
                if on_best is not None and v is not None and math.isfinite(v) and v < best[p]:
                    best[p] = v
                    run_dirs[p] = on_best(p, weights, step, fields)
                if patience is not None:
                    stops[p].update(step, {"loss": fields.get("loss")})
                reporters[p].on_event(ValidationEvent(step, fields))
                if reporters[p].stop_reason is not None:
                    status[p], ended_at[p] = ("pruned" if reporters[p].stop_reason == "pruned" else "exception"), step
                    if status[p] == "exception":
                        errors[p] = "validation loss was not finite"
                elif patience is not None and stops[p].exhausted and step < total:
                    status[p], ended_at[p] = "patience", step
        if all(st is not None for st in status):
            break
    out = []
    for p in range(P):
        reason = status[p] or (completed_reason if step >= total else "paused")
        out.append(TrialOutcome(reporters[p].best, reason, ended_at[p] if status[p] else step, run_dirs[p], dict(configs[p]),
                                dict(reporters[p].reported), errors[p], train_losses[p]))
    return out


@dataclass
class AdapterPopulation:
    """An adapter population ready to train (:func:`build_adapt_population`), every part asked of
    the members' :class:`~pawn.train.adapt.AdaptTask` (the same methods a ``pawn adapt`` run builds
    with): each member's model, the lead member's data, validation rule, validator and optimizer
    settings, and each member's learning-rate schedule.

    Attributes:
        configs: the member configs (dicts), holding the shared ``data_seed``.
        tasks: one :class:`~pawn.train.adapt.AdaptTask` per member, its model built
            (:meth:`~pawn.train.adapt.AdaptTask.setup_model`); ``tasks[0]`` (:attr:`lead`) also holds
            the data (:meth:`~pawn.train.adapt.AdaptTask.setup_data`), the program
            (:meth:`~pawn.train.adapt.AdaptTask.setup_program`) and the placed frozen half.
        pop: the vmapped :class:`PopulationProgram`. state: the stacked :class:`PopState`.
        table: float32 ``[P, total_steps]``, member p's learning rate at each step.
        halves: each member's ``(trainable half, frozen half)`` as built (host arrays).
    """

    configs: list
    tasks: list
    pop: "PopulationProgram"
    state: "PopState"
    table: Any
    halves: list

    @property
    def lead(self) -> AdaptTask:
        """Member 0's task: the data, validation and program every member shares."""
        return self.tasks[0]

    @property
    def total(self) -> int:
        """The members' run length in optimizer steps."""
        return self.lead.data.total

    def val_due(self, step: int) -> bool:
        """Validation after ``step``, as ``pawn adapt`` (:meth:`pawn.train.adapt.AdaptTask.val_due`)."""
        return self.lead.val_due(step)

    def validate(self, weights: Any, step: int) -> dict:
        """The ``val`` fields of one member's trainable half ``weights`` at ``step``, as ``pawn
        adapt`` records them (:meth:`pawn.train.adapt.AdaptTask.validate`: the same games and validator)."""
        return self.lead.validate(TrainState(jax.device_put(weights), None, None), step)

    def chunks(self):
        """The shared training chunks ``(first step, {name: [K, B, ...]})`` of the whole run (closable),
        as ``pawn adapt`` draws them (:meth:`pawn.train.adapt.AdaptTask.chunks`)."""
        return self.lead.chunks(0, self.total)


def build_adapt_population(configs: Sequence[dict], *, log: Callable[[str], None] = print) -> AdapterPopulation:
    """Build the adapter population of ``configs`` (:class:`~pawn.train.adapt_config.AdaptSettings`
    dicts differing only in :data:`ARRAY_FIELDS`) from the members' tasks: the data seed decided as
    ``pawn adapt`` decides it (:meth:`~pawn.train.adapt.AdaptTask.settle`: the shared ``data_seed``,
    a random one when none is set), each member's model on one loaded backbone, the lead member's
    data and program, and each member's schedule over the run.

    Raises:
        PopulationError: configs that cannot share a population, a resume, ``pause_after_steps``
            or a phased strategy (RoSA's warm-up changes the trainable set mid-run).
        pawn.train.run.TrainingError: bad backbone or sizing (as ``run_adapt``).
    """
    check_population(configs)
    base = AdaptSettings.load(**configs[0])
    if base.resume is not None or base.pause_after_steps is not None:
        raise PopulationError("an adapter population trains fresh runs to the end (no --resume, no pause_after_steps)")
    seeded = AdaptTask(base, log=log)
    seeded.settle(None)  # one data order feeds every member
    configs = [{**c, "data_seed": seeded.data_seed} for c in configs]
    reuse = AdaptReuse()  # the backbone is loaded once for all members
    tasks = [AdaptTask(AdaptSettings.load(**c), reuse=reuse, log=log if p == 0 else (lambda m: None))
             for p, c in enumerate(configs)]
    for t in tasks:
        t.settle(None)
        t.setup_model()
    lead = tasks[0]
    if rosa.is_phased(lead.mb.model):
        raise PopulationError(f"strategy {lead.mb.st.name} changes its trainable set mid-run; its trials run one at a time")
    data = lead.setup_data()
    prog = lead.setup_program()
    schedules = [t.lr_schedule(data.total) for t in tasks]
    pop = PopulationProgram(prog.program, **shared_optimizer_kwargs(prog.optimizer_kwargs))
    halves = [partition_model(t.mb.model, t.mb.model.trainable_filter()) for t in tasks]
    state = eqx.filter_shard(pop.init([h for h, _ in halves], [t.cfg.optimizer_kwargs()["weight_decay"] for t in tasks]),
                             prog.program.replicated)
    lead.frozen = prog.program.place_frozen(halves[0][1])
    return AdapterPopulation(configs, tasks, pop, state, lr_table(schedules, data.total), halves)


def run_adapt_population(configs: Sequence[dict], reporters: Sequence[PrunerHook], *,
                         log: Callable[[str], None] = print) -> list[TrialOutcome]:
    """Train the ``pawn adapt`` configs ``configs`` (:class:`~pawn.train.adapt_config.AdaptSettings`
    dicts differing only in :data:`ARRAY_FIELDS`: ``lr``, ``weight_decay``, ``warmup_frac`` /
    ``warmup_steps``, ``init_scale``) as
    one vmapped population (:func:`build_adapt_population`): the adapter weights and Adam state of
    every member are stacked on a leading axis P, the frozen backbone is passed once (unbatched),
    every member sees the same :class:`~pawn.data.lichess_batches.GameBatches` steps (the shared
    ``data_seed``; a random one when none is set, written into each outcome's config) and is
    trained on the loss of ``pawn adapt``'s program and validated by its validator at the steps it
    validates (``eval_interval`` or every ``val_every`` epochs, and the last step), all asked of
    :class:`~pawn.train.adapt.AdaptTask`, so member p follows ``run_adapt`` with its config up to
    float rounding. Pruning and patience act per member as in :func:`_train_population`. Each member
    with an ``out`` keeps its adapter at its lowest val loss in ``out/best`` (an adapter checkpoint:
    ``pawn eval OUT/best``) and the games it trained, validated and tested on in ``out/split.json``
    (as ``pawn adapt``); there are no step checkpoints or metrics files (re-run the best with
    ``pawn adapt --config`` for those).

    Returns:
        One :class:`TrialOutcome` per member (reason ``"step_limit"`` when it ran to the end, as
        ``run_adapt``).

    Raises:
        PopulationError / pawn.train.run.TrainingError: as :func:`build_adapt_population`; a split
            record that cannot be written.
    """
    pp = build_adapt_population(configs, log=log)
    lead, configs, data = pp.lead, pp.configs, pp.lead.data
    log(f"adapter population of {len(configs)} ({lead.mb.st.name}): {counted(data.spe, 'step')} per epoch x "
        f"{counted(lead.cfg.epochs, 'epoch')} = {counted(data.total, 'step')}, one data stream (the data line above)")
    for c in configs:  # the games each member trained, validated and tested on, as pawn adapt records them
        if c.get("out") is not None:
            lead.record_split(Path(c["out"]))

    def save_best(p: int, weights, step: int, fields: dict) -> Optional[Path]:
        """Member p's adapter at its lowest val loss so far → ``OUT/best`` (an adapter checkpoint
        as ``pawn adapt`` writes, run config = the member's config): eval, play and generate
        load it; a sequential trial's run directory has the same ``best``."""
        if configs[p].get("out") is None:
            return None
        own_half, frozen_half = pp.halves[p]
        own = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(own_half), jax.tree_util.tree_leaves(weights))
        run_dir = Path(configs[p]["out"])
        save_adapter(run_dir / "best", eqx.combine(own, frozen_half), pp.tasks[p].mb.ref, run_config=configs[p])
        return run_dir

    chunks = pp.chunks()
    try:
        return _train_population(pp.pop, pp.state, chunks, lead.program.place_chunk, pp.table, lead.frozen, pp.total,
                                 configs, reporters, val_due=pp.val_due, patience=lead.cfg.patience,
                                 completed_reason=lead.completed_reason, validate=pp.validate, on_best=save_best)
    finally:
        chunks.close()


def run_population_worker(s, shared, runner, space, remaining: int, log: Callable[[str], None]) -> None:
    """A worker loop for ``--population P``: ask P trials (members 2…P are enqueued with the
    leader's values of every searched field outside :data:`ARRAY_FIELDS`, so the sampler only
    varies the array-valued ones), train them as one population and tell Optuna each member's
    verdict. A member that another worker's enqueued values reached with different fixed fields
    runs on its own (sequentially). The P trials are claimed under the study's lock
    (:func:`pawn.sweep.study.claim_trial`'s rules; ``shared``: the
    :class:`~pawn.sweep.storage.SharedStudy`). Stops when the study holds ``s.trials`` finished or running trials
    (:func:`pawn.sweep.objective.n_counted`; a population is cut to what is left), after ``remaining``
    attempts, or after ``s.timeout`` seconds.

    Raises:
        pawn.sweep.trials.SweepError: the run type has no population trainer.
    """
    trainers = {PretrainTask: run_pretrain_population, AdaptTask: run_adapt_population}  # by the task the trials run
    train_population = trainers.get(getattr(runner, "task", None))
    if train_population is None:
        raise SweepError(f"--population is implemented for pretraining and adapter sweeps; {getattr(runner, 'command', '')} "
                         "trials run one at a time")
    study = shared.study
    t0, attempts = time.monotonic(), 0
    objective = make_objective(s, runner, space, log)
    while attempts < remaining:
        if s.timeout is not None and time.monotonic() - t0 > s.timeout:
            break
        with shared.lock():
            log_stale(shared.fail_stale(), shared, log)
            # other workers' running trials count
            P = min(s.population, remaining - attempts, s.trials - n_counted(study))
            if P <= 0:
                break
            leader = ask_quietly(study)
            shared.begin(leader)
            p0 = derive(s.space_name, suggest(leader, space))
            fixed = {k: v for k, v in leader.params.items() if k not in ARRAY_FIELDS}
            members, solo = [(leader, p0)], []
            for _ in range(P - 1):
                # a WAITING trial (a retry) is asked first: enqueueing then would leave ours WAITING
                if not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
                    study.enqueue_trial(fixed)
                t = ask_quietly(study)
                shared.begin(t)
                params = derive(s.space_name, suggest(t, space))
                (members if all(t.params.get(k) == v for k, v in fixed.items()) else solo).append((t, params))
        attempts += len(members) + len(solo)
        configs, alive = [], []
        for t, params in members:
            trial_dir = s.out / s.resolved_study_name / f"trial_{t.number:04d}"
            try:
                # every member shares the leader's data order (one batch stream feeds the population)
                cfg = trial_bucket(trial_data_seed(runner.config(params, trial_dir), s.seed, members[0][0].number), runner, trial_dir)
            except Exception as e:  # a refused combination fails that member only
                t.set_user_attr("fail_reason", f"settings refused: {' '.join(str(e).split())[:300]}")
                study.tell(t, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
                continue
            t.set_user_attr("config", cfg)
            t.set_user_attr("population", [m.number for m, _ in members])
            configs.append(cfg)
            alive.append(t)
        if alive:
            log(f"population of {len(alive)}: trials {[t.number for t in alive]}")
            reporters = [PrunerHook(t, lambda m: m[runner.objective_key], log=log) for t in alive]
            try:
                with shared.beating(alive, s.heartbeat_s):
                    outcomes = train_population(configs, reporters, log=log)
            except BaseException as e:  # Ctrl-C or an error: no member stays RUNNING
                why = (INTERRUPTED if isinstance(e, KeyboardInterrupt)
                       else f"population stopped: {type(e).__name__}: {' '.join(str(e).split())[:200]}")
                for t in alive:
                    t.set_user_attr("fail_reason", why)
                    study.tell(t, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
                raise
            for t, o in zip(alive, outcomes):
                try:
                    value = finish_trial(t, o, log)
                    study.tell(t, value if math.isfinite(value) else None,
                               state=None if math.isfinite(value) else optuna.trial.TrialState.FAIL, skip_if_finished=True)
                except optuna.TrialPruned:
                    study.tell(t, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
                except optuna.exceptions.UpdateFinishedTrialError:  # failed by a stale check while it ran
                    log(failed_elsewhere(shared, t.number))
        for t, params in solo:
            try:
                with shared.beating([t], s.heartbeat_s):
                    value = objective(t)
                study.tell(t, value if math.isfinite(value) else None,
                           state=None if math.isfinite(value) else optuna.trial.TrialState.FAIL, skip_if_finished=True)
            except optuna.TrialPruned:
                study.tell(t, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
            except optuna.exceptions.UpdateFinishedTrialError:
                log(failed_elsewhere(shared, t.number))
