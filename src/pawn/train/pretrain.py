"""``pawn pretrain``: train a supernet (or one model) on engine games.

Data flow per chunk: the background :class:`~pawn.data.stream.ChunkStream` builds K batches
(batch s = games ``[s·B, (s+1)·B)`` of the run seed's stream), the host shards them over the
device mesh, one jitted ``lax.scan`` runs K optimizer steps, then the host logs, validates and
checkpoints. Resuming from a checkpoint at step s continues with batch s and the saved optimizer
state, so on CPU a stopped-and-resumed run reproduces the uninterrupted one exactly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from pydantic import ValidationError

from pawn.checkpoint import MANIFEST, Checkpoint, CheckpointError, check_init_layout, load_checkpoint, save_checkpoint
from pawn.config import ModelConfig, param_count
from pawn import metrics_core
from pawn.data.stream import ChunkStream, CorpusSource, EngineSource, build_corpus
from pawn.engine import random_games
from pawn.model import REMAT_MODES, PAWNModel, resolve_dtype, sliced
from pawn.progress import counted
from pawn.settings import PretrainConfig
from pawn.train.lifecycle import BEST_DIR, EarlyStopping
from pawn.train import distributed
from pawn.train.memory import InsufficientMemoryError
from pawn.train import step_plan
from pawn.train.loop import TrainProgram, TrainState, make_optimizer, optimizer_to_arrays
from pawn.train.run import Hook, Run, TrainingError, to_host
from pawn.train import spine
from pawn.train.summary import run_summary, summary_lines
from pawn.train.validation_lines import pretrain_validation_line
from pawn.train.task import Task, TaskCost, TaskResult
from pawn.train.walltime import plan_pretrain
from pawn.metrics import ViewKeys, eval_values


VAL_METRICS = ViewKeys("pretrain_val")
"""The :mod:`pawn.metrics` keys a pretraining ``val`` record carries per variant (spec eval §1.2): the
rows of the ``pretrain_val`` view."""

@dataclass
class PretrainResult(TaskResult):
    """What a finished (or stopped) pretraining run produced: :class:`~pawn.train.task.TaskResult`
    (``best_checkpoint`` is None without validation) and ``variant_checkpoints``, the standalone
    checkpoints of each nested variant (supernet runs that completed)."""

    variant_checkpoints: dict[str, Path] = field(default_factory=dict)


def maybe_initialize_distributed(timeout_s: int = 300) -> None:
    """Join a multi-host run through ``jax.distributed.initialize()`` when the coordinator is
    configured in the environment (``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``,
    ``JAX_PROCESS_ID``), or when ``srun`` started this process as one of several Slurm tasks
    (:func:`pawn.train.distributed.slurm_coordinator`; JAX reads the rest from ``SLURM_*``).

    Args:
        timeout_s: seconds to wait for every process to join (``initialization_timeout``;
            the ``distributed_timeout_s`` setting).

    Raises:
        TrainingError: non-integer process counts, or the processes did not all join in time.
    """
    # Must run before anything touches the XLA backend (even jax.process_count()).
    env = os.environ
    if not env.get("JAX_COORDINATOR_ADDRESS") and (slurm := distributed.slurm_coordinator(env)):  # under srun
        env = {**env, "JAX_COORDINATOR_ADDRESS": slurm}  # the rest JAX reads from SLURM_* itself
    if env.get("JAX_COORDINATOR_ADDRESS") and not jax.distributed.is_initialized():
        kwargs = {"coordinator_address": env["JAX_COORDINATOR_ADDRESS"]}
        try:
            if env.get("JAX_NUM_PROCESSES"):
                kwargs["num_processes"] = int(env["JAX_NUM_PROCESSES"])
            if env.get("JAX_PROCESS_ID"):
                kwargs["process_id"] = int(env["JAX_PROCESS_ID"])
        except ValueError:
            raise TrainingError("JAX_NUM_PROCESSES and JAX_PROCESS_ID must be integers") from None
        # CPU processes exchange gradients through gloo (accelerators use their own collectives).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        try:  # a failed join raises here instead of aborting the process (pawn.train.distributed)
            distributed.initialize(int(timeout_s), **kwargs)
        except Exception as e:  # the backend's runtime error: report it in one line
            raise TrainingError(
                f"jax.distributed could not join the coordinator {kwargs['coordinator_address']} within "
                f"{timeout_s} s (raise --distributed-timeout-s if processes start slowly): {' '.join(str(e).split())[:300]}"
            ) from None


def _pretraining_checkpoint(d: Path) -> Checkpoint:
    """Load and check one resume candidate: verified files, a pretraining run config that says
    ``prepend_outcome`` and still validates, a training state with a step.

    Raises:
        CheckpointError: anything that makes ``d`` unusable (the message names the file).
        pydantic.ValidationError: the stored run config no longer validates.
    """
    try:
        ck = load_checkpoint(d)
    except FileNotFoundError as e:
        raise CheckpointError(str(e)) from None
    stored = ck.run_config
    if stored is None:
        raise CheckpointError(f"{d}: not a pretraining checkpoint (config.json has no run_config)")
    if "sliced_from" in stored:
        src = stored["sliced_from"].get("checkpoint") if isinstance(stored["sliced_from"], dict) else None
        raise CheckpointError(
            f"{d} is a variant exported from a finished supernet run (weights only, no optimizer state or step); "
            "it cannot be resumed" + (f" (the supernet checkpoint it came from is {src})" if src else "")
        )
    if "prepend_outcome" not in stored:
        raise CheckpointError(f"{d}: run_config lacks prepend_outcome; refusing to guess the sequence format")
    spine.checked_step(d, ck.training_state)
    PretrainConfig.load(**{**{k: v for k, v in stored.items() if k != "pause_after_steps"}, "resume": str(d)})
    return ck


def _check_fresh(cfg: PretrainConfig) -> None:
    """``--resume auto`` found no checkpoint: a new run needs ``--total-steps``."""
    if cfg.total_steps is None:
        raise TrainingError(f"--resume auto: no checkpoint in {cfg.out} yet, so this starts a new run, which needs --total-steps")


def _end_step(cfg: PretrainConfig) -> int:
    """The step this invocation stops at: ``total_steps``, or ``pause_after_steps`` when that is sooner."""
    return cfg.total_steps if cfg.pause_after_steps is None else min(cfg.total_steps, cfg.pause_after_steps)


def _finished_resume(cfg: PretrainConfig, ck: Optional[Checkpoint]) -> Optional[tuple[int, str]]:
    """``(step, why)`` when resuming ``ck`` has no step left to run: the checkpoint is at (or
    past) ``total_steps`` or ``pause_after_steps``, or early stopping already ended the run;
    else None. Decided from ``training_state.json`` alone, so ``--resume auto`` on a finished run
    answers before any compile."""
    if ck is None or not ck.training_state:
        return None
    step = int(ck.training_state.get("step", -1))
    end = _end_step(cfg)
    if step >= end:
        return step, f"{ck.path}: at step {step} of {cfg.total_steps}; no step left to run"
    es = EarlyStopping.from_json(ck.training_state.get("early_stopping"), cfg.patience)
    if es.exhausted:
        return step, (f"early stopping already ended this run ({es.counter} validations without improvement, "
                      f"patience {es.patience}); raise --patience to continue it")
    return None


def _extension(stored: dict, given: dict, ck: Checkpoint) -> Optional[dict]:
    """The settings that extend a resumed run to ``given["total_steps"]``, or None when this is
    no extension: a larger total for a ``constant``-schedule run, whose LR before the checkpoint
    (warm-up, then the peak) does not depend on the total once the warm-up length and the chunk
    size are pinned to the stored run's (``warmup_steps``, ``steps_per_chunk``). The data
    stream is a function of the step (batch s = games [s·B, (s+1)·B)), so the extended run's
    steps equal those of a run planned that long from the start."""
    new_total = given.get("total_steps")
    old_total = stored.get("total_steps")
    if new_total is None or old_total is None or new_total <= old_total or stored.get("lr_schedule") != "constant":
        return None
    if any(k in given and given[k] != stored.get(k) for k in ("lr_schedule", "warmup_steps", "steps_per_chunk")):
        return None
    try:
        old = PretrainConfig.load(**{k: v for k, v in stored.items() if k not in ("pause_after_steps", "resume")})
    except ValidationError:
        return None
    return {"total_steps": int(new_total), "warmup_steps": old.resolved_warmup_steps, "steps_per_chunk": old.chunk_steps}


def _model_label(cfg: PretrainConfig) -> str:
    """``variant <name>`` or ``supernet <name>``: what a pretraining run trains, as the plan names it."""
    return f"variant {cfg.variant}" if cfg.variant else f"supernet {cfg.supernet or 'large'}"


def _variant_list(cfg: PretrainConfig) -> tuple[ModelConfig, list[tuple[str, ModelConfig]]]:
    stored, variants = cfg.model_configs()
    return stored, list(variants.items())


def _checkpoint_payload(state: TrainState, cfg: PretrainConfig, step: int, elapsed: float, k: int, es: EarlyStopping,
                        records: Sequence[dict] = ()):
    model = to_host(state.model)
    params = {k_: np.asarray(v) for k_, v in model.params().items()}
    opt = optimizer_to_arrays(to_host(state.opt_state))
    ts = {
        "format_version": 1,
        "step": int(step),
        "next_game": int(step) * cfg.batch_size,
        "seed": cfg.seed,
        "val_seed": cfg.val_seed,
        "steps_per_chunk": k,
        "elapsed": round(elapsed, 3),
        "early_stopping": es.to_json(),
        "rng": "none: data is a pure function of (seed, game index); init used model_seed",
    }
    if records:
        ts[spine.CHUNK_RECORDS] = list(records)
    return params, opt, ts


def _check_memory(program: TrainProgram, stored_cfg: ModelConfig, cfg: PretrainConfig, k: int, n_dev: int,
                  log: Callable[[str], None], after_plan: Callable[[], None] = lambda: None,
                  run_s: Optional[float] = None) -> dict:
    """Compile the K-step chunk from shapes (nothing allocated) and refuse, in one line, a step
    whose XLA memory analysis exceeds the device (see :mod:`pawn.train.memory`); with
    ``remat = auto`` take the fastest (remat × accumulation) plan that fits, by measured speed
    (:func:`pawn.train.step_plan.choose_step_plan`; the first that fits for a short run or an
    explicit ``accumulation_steps``). The program keeps the
    executable, so the run does not compile twice. Returns the figures for the run summary
    (:func:`pawn.train.summary.run_summary`'s ``compiled_memory``)."""
    if cfg.batch_size % (n_dev * cfg.accumulation_steps):
        raise TrainingError(f"batch_size {cfg.batch_size} does not split into {cfg.accumulation_steps} micro-batches "
                            f"on each of the {n_dev} devices (needs a multiple of {n_dev * cfg.accumulation_steps})")
    candidates = list(REMAT_MODES) if cfg.remat == "auto" else [cfg.remat]
    label = f"variant {cfg.variant}" if cfg.variant else f"supernet {cfg.supernet or 'large'}"
    log(f"plan: {label} ({param_count(stored_cfg):,} parameters), {cfg.total_steps:,} steps of {cfg.batch_size} games × "
        f"{cfg.seq_len} tokens ({counted(k, 'step')} per compiled chunk), {n_dev} {jax.default_backend()} device(s), remat {cfg.remat}, "
        f"accumulation {cfg.accumulation_steps}")
    after_plan()  # the plan's wall time, under the plan line and before the compile
    search = cfg.remat == "auto" and "accumulation_steps" not in cfg.user_set_fields
    key = step_plan.plan_key(device_kind=jax.devices()[0].device_kind, n_devices=n_dev, variants=[c for c, _ in program.variants],
                             stored_config=stored_cfg, batch_size=cfg.batch_size, seq_len=cfg.seq_len,
                             dtype=str(program.dtype), jax_version=jax.__version__,
                             extra=(cfg.prepend_outcome, cfg.max_grad_norm, cfg.weight_decay == 0.0))
    try:
        plan = step_plan.choose_step_plan(program, stored_cfg, k=k, batch_size=cfg.batch_size, seq_len=cfg.seq_len,
                                          total_steps=cfg.total_steps, search=search, remat_candidates=candidates,
                                          cache_key=key, prepend_outcome=cfg.prepend_outcome,
                                          what="this training step", log=log, estimated_run_s=run_s)
    except InsufficientMemoryError as e:
        raise TrainingError(str(e)) from None
    est, info = plan.estimate, plan.info
    return {"peak_bytes": est.peak_bytes, "temp_bytes": est.temp_bytes, "fixed_bytes": est.fixed_bytes, "remat": plan.remat,
            "accumulation_steps": plan.accumulation_steps, "capacity_bytes": info.get("capacity_bytes"),
            "capacity_source": info.get("capacity_source"), "plan_search": plan.to_dict()}


@dataclass
class PretrainReuse:
    """What consecutive :func:`run_pretrain` calls in one process share (sweep trials, issue 15):
    the compiled train chunk, with its memory check, so a trial that differs from an earlier one
    only in the learning-rate schedule (lr, warm-up, decay shape) or a non-zero weight decay
    does not compile again. The pretraining counterpart of :class:`pawn.train.adapt.AdaptReuse`.

    The chunk takes the per-step learning rates and the weight decay as data
    (:attr:`~pawn.train.loop.TrainProgram.weight_decay`); one program serves each graph key
    (model variants, dtype, remat setting, accumulation steps, Adam betas, gradient clip, zero
    vs non-zero decay, devices) at each chunk shape (K, batch size, seq_len). A run with
    ``reuse`` equals the same run without it up to float rounding (XLA fuses compiled-in
    constants differently; measured on the toy variant, 6 steps: val losses bit-identical);
    a run without ``reuse`` compiles its hyperparameters in, exactly as before.

    Attributes:
        programs: ``{graph key: (TrainProgram, compiled-memory figures of the run summary)}``.
    """

    programs: dict = field(default_factory=dict)


def run_pretrain(
    cfg: PretrainConfig,
    *,
    log: Callable[[str], None] = print,
    progress: bool = True,
    install_signal_handlers: bool = True,
    overwrite: bool = False,
    hooks: Sequence[Hook] = (),
    reuse: Optional[PretrainReuse] = None,
    dry_run: bool = False,
    sinks: Sequence[Callable[[Path], Any]] = (),
) -> PretrainResult:
    """Run (or resume) a pretraining job described by ``cfg``.

    With ``dry_run`` every check runs (resume target, run directory, the plan and the compiled
    memory check) and the run summary is logged, then it returns ``reason = "dry_run"`` with
    nothing trained and nothing written.

    Args:
        cfg: the run configuration.
        log: receives one-line status messages.
        progress: show progress (step, loss, tokens/s, ETA): a rich bar in a terminal, else a
            plain line every ``cfg.log_every_s`` seconds (:class:`pawn.progress.ProgressReporter`).
        install_signal_handlers: SIGTERM/SIGINT finish the chunk, checkpoint and stop (a second
            SIGINT stops at once, see :class:`pawn.train.lifecycle.StopFlag`); installed on entry,
            so a signal during the setup stops after the first chunk the same way.
        overwrite: ``--out`` may hold another run, which is moved aside (never deleted) before
            this one writes (:mod:`pawn.train.rundir`).
        hooks: extra :class:`~pawn.train.run.Hook` objects, called after each chunk once the
            built-in ones (validation, best checkpoint, patience, checkpoints, signals) have run
            and before the metrics records are written; they see ``ctx.val`` at the global step,
            :class:`~pawn.train.run.CheckpointEvent` after each save, and may
            ``ctx.request_stop(reason)`` (the run then saves this step and records ``reason``).
        reuse: a :class:`PretrainReuse` shared with other runs of this process (sweep
            trials): the compiled chunk of an earlier run with the same graph and shapes is
            reused, with this run's learning rates and weight decay as data.
        sinks: further record sinks of ``metrics.jsonl`` (``factory(run_dir)``, e.g. the live
            ``report.html`` of :class:`pawn.report.hook.ReportHook`), opened with the run.

    Returns:
        :class:`PretrainResult`.

    Metrics (``metrics.jsonl``, spec §1.6): each ``train`` record times its chunk alone
    (``chunk_wall_s``: waiting for data + the K compiled steps + copying metrics back;
    ``tokens_per_s``/``games_per_s`` from it) and reports the validation and checkpoint writing
    that followed it as ``val_wall_s`` and ``checkpoint_wall_s``. ``train/accuracy`` is the
    top-1 accuracy on supervised positions of the stored model (the supernet itself, or the one
    variant) at the chunk's last step, ``train/accuracy_mean`` its chunk mean and
    ``accuracy_<variant key>`` each variant's last-step value.

    Best checkpoint and early stopping (spec §1.8, §7.1): after every validation whose val loss
    (of the stored model) is the lowest so far, the weights are saved to ``checkpoints/best``,
    which rotation never deletes; with ``patience`` set, the run stops (``reason = "patience"``)
    after that many validations in a row without improvement under the compound rule
    (:class:`~pawn.train.lifecycle.EarlyStopping`). Bests and the counter are stored in every
    checkpoint's ``training_state.json`` and restored on resume.

    Raises:
        TrainingError: bad resume target (or no intact checkpoint to resume), ``--out`` holding
            another run (without --resume or --overwrite), batch not divisible over devices (and
            micro-batches), a compiled step that does not fit the device's memory (checked before
            any work, the message names the flags that would fit), corpus mismatch, a checkpoint
            or metrics write that fails (disk full, ...; the previous checkpoint stays loadable),
            or a NaN/Inf loss (no checkpoint is written from non-finite weights). Every message
            is one line.
    """
    return spine.run(PretrainTask(cfg, reuse=reuse, log=log), log=log, progress=progress,
                     install_signal_handlers=install_signal_handlers, overwrite=overwrite, hooks=hooks, sinks=sinks,
                     dry_run=dry_run)


class PretrainTask(Task):
    """Pretraining as a :class:`pawn.train.task.Task`: its checkpoints (a ``--total-steps`` for a
    new run, the extension of a constant-schedule run), the variants of a supernet and their
    slicing, the memory-checked program, the engine or corpus games, the validation of every
    variant (§1.7) every ``val_every`` steps, interval checkpoints every ``checkpoint_every``
    steps, and the export of the variants of a finished supernet.

    Args:
        cfg: the run's settings. reuse: a :class:`PretrainReuse` shared with other runs of this
            process. log: one-line status messages.
    """

    name = "pretrain"
    precompiled = True  # the memory check compiled the chunk

    def __init__(self, cfg: PretrainConfig, *, reuse: Optional[PretrainReuse] = None, log: Callable[[str], None] = print):
        super().__init__(cfg, log=log)
        self.reuse = reuse

    def shape(self) -> None:
        """What the settings alone decide (after the resume rule; JAX's backend is touched, so
        never before :meth:`prepare`): the variants, the monitored one, the dtype, K."""
        cfg = self.cfg
        self.stored_cfg, self.variants = _variant_list(cfg)
        self.monitored = _monitored(self.stored_cfg, self.variants)
        self.loss_name = "joint loss" if len(self.variants) > 1 else "loss"
        self.dtype = None if cfg.dtype == "auto" else cfg.dtype
        self.k, self.n_proc = cfg.chunk_steps, jax.process_count()

    def cost(self, *, start_step: int = 0, end_step: Optional[int] = None, **context: Any) -> TaskCost:
        """The cost of steps ``[start_step, end_step)`` (the whole run, ``total_steps``, by
        default): the supernet's variants trained jointly (:func:`pawn.config.flops_per_token`
        summed); the advice names ``--variant small`` unless the model is already small."""
        from pawn.config import flops_per_token

        cfg = self.cfg
        variants = _variant_list(cfg)[1]
        dtype = None if cfg.dtype == "auto" else cfg.dtype
        steps = max(0, (cfg.total_steps if end_step is None else end_step) - start_step)
        small = cfg.variant in ("small", "toy") or cfg.supernet == "tiny"
        return TaskCost(_model_label(cfg), sum(flops_per_token(c, cfg.seq_len) for _, c in variants),
                        cfg.batch_size * cfg.seq_len, steps, jnp.dtype(resolve_dtype(dtype)).name,
                        shorter="a smaller --total-steps", advice=() if small else ("--variant small",))

    # ---- the resume rule
    def load_candidate(self, d: Path) -> Checkpoint:
        return _pretraining_checkpoint(d)

    def check_fresh(self, cfg: PretrainConfig) -> None:
        _check_fresh(cfg)

    def extension(self, stored: dict, given: dict, ck: Checkpoint) -> Optional[dict]:
        return _extension(stored, given, ck)

    # ---- before the build
    def prepare(self) -> None:
        maybe_initialize_distributed(self.cfg.distributed_timeout_s)

    def finished(self, ck: Optional[Checkpoint]) -> Optional[tuple[int, str]]:
        return _finished_resume(self.cfg, ck)

    def no_op_result(self, ck: Checkpoint, step: int) -> PretrainResult:
        run_dir = ck.path.parent.parent
        best = run_dir / "checkpoints" / BEST_DIR
        return PretrainResult(run_dir, ck.path, step, "resume_no_op", best_checkpoint=best if (best / MANIFEST).is_file() else None)

    def end_step(self) -> int:
        return _end_step(self.cfg)

    @property
    def total_steps(self) -> int:
        return self.cfg.total_steps

    # ---- the build
    def build(self, ck: Optional[Checkpoint], stop: Any) -> None:
        """The variants, the ``--init-from`` checkpoint, the optimizer, the wall-time plan and the
        memory-checked program (:func:`_pretrain_program`).

        Raises:
            TrainingError: a batch that does not split over the devices, a wrong ``--init-from``,
                a step that does not fit the device's memory.
        """
        cfg, log = self.cfg, self.log
        self.n_dev = jax.device_count()
        if cfg.batch_size % self.n_dev:
            raise TrainingError(f"batch_size {cfg.batch_size} is not divisible by the {self.n_dev} devices it is sharded over")
        self.shape()  # the settings after the resume rule
        self.setup_optimizer()
        self.init_ck = _load_init_from(cfg, self.stored_cfg)  # before the compile: a wrong checkpoint fails at once
        self.start = int(ck.training_state["step"]) if ck is not None else 0
        self.resume_dir = ck.path if ck is not None else None
        wall_lines: list[str] = []  # printed under the plan line (or here, for a reused program)
        self.k, self.wall = plan_pretrain(cfg, self.cost(start_step=self.start, end_step=self.end_step()),
                                          start_step=self.start, end_step=self.end_step(), k=cfg.chunk_steps,
                                          cut="steps_per_chunk" not in cfg.user_set_fields, log=wall_lines.append)

        def say_wall_time() -> None:
            for line in wall_lines:
                log(line)
            wall_lines.clear()

        self.setup_messages(stop, self.start, self.end_step(), self.checkpoint_params)
        self._program, self.compiled_memory = _pretrain_program(
            cfg, self.stored_cfg, self.variants, self.optimizer, self.schedule, self.dtype, self.k, self.n_dev, self.reuse,
            log, say_wall_time, run_s=self.wall.total_s)
        say_wall_time()

    def setup_optimizer(self) -> tuple[Any, Any]:
        """``(schedule, optimizer)``: the learning-rate schedule of these settings (step → lr) and
        the AdamW chain over it (:func:`pawn.train.loop.make_optimizer` with
        :meth:`~pawn.settings.PretrainConfig.optimizer_kwargs`, kept as :attr:`optimizer_kwargs`);
        kept as :attr:`schedule` and :attr:`optimizer`. Part of :meth:`build`; the population
        trainer (:func:`pawn.sweep.population.run_pretrain_population`) takes its optimizer so."""
        self.optimizer_kwargs = self.cfg.optimizer_kwargs()
        self.schedule = self.cfg.schedule()
        self.optimizer = make_optimizer(self.schedule, **self.optimizer_kwargs)
        return self.schedule, self.optimizer

    def fresh_model(self) -> PAWNModel:
        """A new run's model (:func:`fresh_model`; after :meth:`shape`)."""
        return fresh_model(self.cfg, self.stored_cfg)

    def plan(self, start: int, end: int) -> dict:
        """The run summary of steps ``[start, end)`` with the wall-time plan."""
        return {**_summary(self.cfg, self.stored_cfg, self.variants, start, end, self.k, self.n_dev, self.n_proc, self.dtype,
                           self.compiled_memory), "wall_time": self.wall.to_dict()}

    @property
    def program(self) -> TrainProgram:
        return self._program

    @property
    def checkpoint_params(self) -> int:
        return param_count(_variant_list(self.cfg)[0])

    def dry_run_result(self) -> PretrainResult:
        for line in summary_lines(self.plan(self.start, self.end_step())):
            self.log(line)
        return PretrainResult(self.run_dir, None, self.start, "dry_run")

    def initial_state(self, ck: Optional[Checkpoint]) -> spine.InitialState:
        init = _initial_state(self.cfg, self.stored_cfg, self.optimizer, ck, self.log, self.init_ck)
        self.init_ck = None  # the host copy of the weights is no longer needed
        return init

    def open_data(self) -> None:
        """The training games (:func:`_data_source`: the corpus, built first when missing, or the
        engine stream) and the validation games (None without ``val_games``).

        Raises:
            TrainingError: a corpus that does not match the run.
        """
        cfg = self.cfg
        self.source = _data_source(cfg, self.log)
        self.val_set = random_games(cfg.val_games, cfg.max_ply, cfg.val_seed) if cfg.val_games > 0 else None

    def place(self, init: spine.InitialState) -> None:
        self.n_params = int(init.state.model.num_params())
        self.state, self.frozen = self.program.place_state(init.state), None

    def start_records(self, init: spine.InitialState) -> None:
        _write_config_record(self.run, self.cfg, self.plan(init.start, self.end_step()), self.stored_cfg, self.variants,
                             self.n_params, self.k, self.n_dev, self.n_proc, self.resume_dir, self.log)

    # ---- the loop
    @property
    def validates(self) -> bool:
        return self.val_set is not None

    def val_due(self, step: int) -> bool:
        return step % self.cfg.val_every == 0 or step == self.cfg.total_steps

    def validate(self, state: TrainState, step: int) -> dict:
        return _validate(state, self.val_set, self.variants, self.cfg, self.dtype, self.monitored)

    def validation_line(self, step: int, val: dict) -> str:
        shown = [(n, n) for n, c in sorted(self.variants, key=lambda nc: nc[1].d_model)]
        return pretrain_validation_line(step, val, shown)

    def checkpoint_due(self, step: int) -> bool:
        return step % self.cfg.checkpoint_every == 0

    def train_fields(self, r) -> dict:
        m, variants = r.metrics, self.variants
        acc_key = f"accuracy_{self.monitored.name}"
        names = {vcfg.name: name for name, vcfg in variants}
        per_variant = {names[c]: {"loss": float(m[f"loss_{c}"][-1]), "top1": float(m[f"accuracy_{c}"][-1])}
                       for c in names if f"loss_{c}" in m and f"accuracy_{c}" in m} if len(variants) > 1 else None
        return spine.train_record(r, top1=float(m[acc_key][-1]), top1_mean=float(np.mean(m[acc_key])),
                                  n_supervised_mean=float(np.mean(m["n_supervised"])),
                                  **({"variants": per_variant} if per_variant else {}))

    def write_checkpoint(self, path: Path, at_step: int) -> None:
        params, opt, ts = _checkpoint_payload(self.trainer.state, self.cfg, at_step, self.run.elapsed, self.k, self.es,
                                              spine.chunk_records(self.checkpointer))
        save_checkpoint(path, params, self.stored_cfg, run_config=self.cfg.model_dump(mode="json"), optimizer_state=opt,
                        training_state=ts)

    def chunks(self, start: int, end: int) -> ChunkStream:
        cfg = self.cfg
        return ChunkStream(self.source, start_step=start, end_step=end, k=self.k, batch_size=cfg.batch_size,
                           seq_len=cfg.seq_len, prepend_outcome=cfg.prepend_outcome, prefetch=cfg.prefetch_chunks,
                           process_index=jax.process_index(), process_count=self.n_proc)

    def result(self, outcome) -> PretrainResult:
        """The :class:`PretrainResult` of a finished loop: the last records, the best checkpoint
        and, for a supernet run that completed, its exported variants."""
        step, reason, last_ckpt = outcome.step, outcome.reason, outcome.checkpoint
        metrics_hook = spine.metrics_hook(self.trainer)
        last_train, last_val = (metrics_hook.last_train, metrics_hook.last_val) if metrics_hook else (None, None)
        variant_ckpts = _export_variants(self.cfg, self.run.run_dir, outcome.state, self.variants, last_ckpt) if (
            reason in ("completed", "patience") and len(self.variants) > 1 and self.run.is_main) else {}
        best_ckpt = self.checkpointer.best
        return PretrainResult(self.run.run_dir, last_ckpt, step, reason, best_ckpt,
                              self.es.best_loss_step if best_ckpt is not None else None, last_train, last_val,
                              variant_checkpoints=variant_ckpts)


def _pretrain_program(cfg: PretrainConfig, stored_cfg: ModelConfig, variants, optimizer, schedule, dtype, k: int, n_dev: int,
                      reuse: Optional["PretrainReuse"], log: Callable[[str], None],
                      after_plan: Callable[[], None] = lambda: None, run_s: Optional[float] = None) -> tuple[TrainProgram, dict]:
    """``(program, compiled-memory figures)``: the K-step chunk over ``variants``, memory-checked
    (:func:`_check_memory`), or with ``reuse`` the program of an earlier run with the same graph
    and shapes, this run's learning rates and weight decay as data (sweep trials, issue 15)."""
    graph_key = (tuple((n, c.to_json_dict().__repr__()) for n, c in variants), dtype, cfg.remat, cfg.accumulation_steps,
                 cfg.beta1, cfg.beta2, cfg.max_grad_norm, cfg.weight_decay == 0.0, k, cfg.batch_size, cfg.seq_len,
                 tuple(d.id for d in jax.devices()))
    shared = None if reuse is None else reuse.programs.get(graph_key)
    if shared is not None:
        return shared[0].with_hyperparams(schedule, cfg.weight_decay), dict(shared[1])
    program = TrainProgram.of(optimizer, schedule, [c for _, c in variants], dtype=dtype, accumulation_steps=cfg.accumulation_steps,
                              weight_decay=cfg.weight_decay if reuse is not None else None)
    compiled_memory = _check_memory(program, stored_cfg, cfg, k, n_dev, log, after_plan, run_s=run_s)
    if reuse is not None:
        reuse.programs[graph_key] = (program, dict(compiled_memory))
    return program, compiled_memory


def _summary(cfg: PretrainConfig, stored_cfg: ModelConfig, variants, start: int, end: int, k: int, n_dev: int, n_proc: int,
             dtype, compiled_memory: dict) -> dict:
    """The run summary (:func:`pawn.train.summary.run_summary`) of steps ``[start, end)``."""
    return run_summary(
        stored_cfg, variants, label=_model_label(cfg),
        batch_size=cfg.batch_size, seq_len=cfg.seq_len, start_step=start, end_step=end, total_steps=cfg.total_steps,
        steps_per_chunk=k, devices=n_dev, processes=n_proc, backend=jax.default_backend(),
        dtype=jnp.dtype(resolve_dtype(dtype)).name, compiled_memory=compiled_memory,
    )


def _write_config_record(run: Run, cfg: PretrainConfig, summary: dict, stored_cfg: ModelConfig, variants, param_count_: int,
                         k: int, n_dev: int, n_proc: int, resume_dir: Optional[Path], log: Callable[[str], None]) -> None:
    """Log the run summary and write the ``config`` record (spec §1.6) of an opened run.

    Raises:
        TrainingError: the metrics log cannot be written.
    """
    if run.logger is None:
        return
    for line in summary_lines(summary):
        log(line)
    spine.write_record(
        run, "config", summary=summary, run_config=cfg.model_dump(mode="json"), model_config=stored_cfg.to_json_dict(),
        variants={n: c.to_json_dict() for n, c in variants}, param_count=param_count_,
        steps_per_chunk=k, devices=n_dev, processes=n_proc, backend=jax.default_backend(),
        jax_version=jax.__version__, resumed_from=str(resume_dir) if resume_dir else None,
    )


def _load_init_from(cfg: PretrainConfig, stored_cfg: ModelConfig) -> Optional[Checkpoint]:
    """The ``--init-from`` checkpoint (verified), or None (not given, or a resume).

    Raises:
        TrainingError: unreadable or damaged, or a model config other than the run's.
    """
    if cfg.init_from is None or cfg.resume is not None:
        return None
    try:
        ck = load_checkpoint(cfg.init_from)
    except (CheckpointError, FileNotFoundError) as e:
        raise TrainingError(f"--init-from {cfg.init_from}: {e}") from None
    if ck.config != stored_cfg:
        differ = ", ".join(f"{k} {v} (this run: {getattr(stored_cfg, k)})" for k, v in ck.config.model_dump().items()
                           if getattr(stored_cfg, k, None) != v)
        raise TrainingError(f"--init-from {cfg.init_from}: its model {ck.config.name} is not this run's {stored_cfg.name}: "
                            f"{differ} (--init-from takes the weights of the same model shape)")
    try:
        if (warning := check_init_layout(ck, cfg.prepend_outcome)) is not None:
            print(warning)
    except CheckpointError as e:
        raise TrainingError(str(e)) from None
    return ck


def fresh_model(cfg: PretrainConfig, stored_cfg: ModelConfig) -> PAWNModel:
    """A new run's model of ``stored_cfg`` (the supernet or variant), initialised from
    ``model_seed`` (``seed`` when it is None)."""
    return PAWNModel(stored_cfg, jax.random.key(cfg.model_seed if cfg.model_seed is not None else cfg.seed))


def _initial_state(cfg: PretrainConfig, stored_cfg: ModelConfig, optimizer, resume_ck: Optional[Checkpoint],
                   log: Callable[[str], None], init_ck: Optional[Checkpoint] = None) -> spine.InitialState:
    """The run's model — fresh from ``model_seed``, the ``--init-from`` checkpoint's weights
    (``init_ck``) or the resumed checkpoint's — and :func:`pawn.train.spine.initial_state` over it.

    Raises:
        TrainingError: the checkpoint's model config or optimizer state does not fit the run.
    """
    if resume_ck is not None:
        if resume_ck.config != stored_cfg:
            raise TrainingError(f"{resume_ck.path}: model config {resume_ck.config.name} does not match the run's {stored_cfg.name}")
        model = PAWNModel(resume_ck.config, params=resume_ck.params)
    elif init_ck is not None:  # --init-from: the weights only, a fresh optimizer and step 0
        model = PAWNModel(init_ck.config, params=init_ck.params)
    else:
        model = fresh_model(cfg, stored_cfg)
    return spine.initial_state(model, optimizer, patience=cfg.patience, resume=resume_ck, init_from=init_ck, log=log)


def _data_source(cfg: PretrainConfig, log: Callable[[str], None]):
    """The training games: the on-disk corpus (built first when missing) or the engine stream;
    batch s is games ``[s·B, (s+1)·B)`` either way (spec §1.2).

    Raises:
        TrainingError: a corpus that does not match the run (one line).
    """
    if cfg.corpus_dir is None:
        return EngineSource(cfg.seed, cfg.max_ply, cfg.mate_boost)
    n_needed = cfg.total_steps * cfg.batch_size
    if not (Path(cfg.corpus_dir) / "corpus.json").exists():
        log(f"building corpus of {n_needed:,} games in {cfg.corpus_dir}")
        build_corpus(Path(cfg.corpus_dir), n_needed, cfg.max_ply, cfg.seed, mate_boost=cfg.mate_boost)
    try:
        return CorpusSource(Path(cfg.corpus_dir), seed=cfg.seed, max_ply=cfg.max_ply, mate_boost=cfg.mate_boost, n_games=n_needed)
    except ValueError as e:
        raise TrainingError(str(e)) from None


def _monitored(stored_cfg: ModelConfig, variants: list[tuple[str, ModelConfig]]) -> ModelConfig:
    """The variant whose validation fields are the run's top-level ones (bests, early stopping): the
    stored model's shape when it is one of ``variants`` (``[(name, ModelConfig)]``), else the last."""
    return next((c for _, c in variants if c == stored_cfg), variants[-1][1])


def _validate(state: TrainState, val_set, variants, cfg: PretrainConfig, dtype, monitored) -> dict:
    """The ``val`` fields of spec §1.7 (:data:`VAL_METRICS`, :mod:`pawn.metrics` keys): the
    monitored model's at the top level and, for a supernet, every variant's under ``variants``
    (``{variant name: {key: value}}``)."""
    fields: dict = {}
    per_variant: dict[str, dict] = {}
    # One host copy, placed once on the default device (not re-sent with every val batch).
    model_now = jax.device_put(to_host(state.model))
    for name, vcfg in variants:
        m = model_now if vcfg == model_now.config else sliced(model_now, vcfg)
        rep = metrics_core.evaluate_games(
            m, val_set.tokens, val_set.lengths, val_set.outcome, seq_len=cfg.seq_len,
            batch_size=cfg.batch_size, prepend_outcome=cfg.prepend_outcome, dtype=dtype,
        ).to_dict()
        vals = eval_values(rep)
        per_variant[name] = {k: vals[k] for k in VAL_METRICS if k in vals}
        if vcfg == monitored:
            fields.update(per_variant[name])
    if len(variants) > 1:
        fields["variants"] = per_variant
    return fields


def _export_variants(cfg: PretrainConfig, run_dir: Path, state: TrainState, variants, last_ckpt: Optional[Path]) -> dict[str, Path]:
    """Standalone checkpoints of each nested variant of a finished supernet run (``variants/``).

    Raises:
        TrainingError: a write fails (the run's own checkpoint is intact).
    """
    out: dict[str, Path] = {}
    final = to_host(state.model)
    try:
        for name, vcfg in variants:
            vm = sliced(final, vcfg)
            out[name] = save_checkpoint(
                run_dir / "variants" / name, {k: np.asarray(v) for k, v in vm.params().items()}, vcfg,
                run_config={**cfg.model_dump(mode="json"), "supernet": None, "variant": name,
                            "sliced_from": {"checkpoint": str(last_ckpt), "supernet": cfg.supernet or "large"}},
            )
    except OSError as e:
        raise TrainingError(f"cannot write the variant checkpoints under {run_dir / 'variants'} ({e.strerror or e}); "
                            f"the run's checkpoint {last_ckpt} is intact") from None
    return out
