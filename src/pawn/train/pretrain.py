"""``pawn pretrain``: train a supernet (or one model) on engine games.

Data flow per chunk: the background :class:`~pawn.data.stream.ChunkStream` builds K batches
(batch s = games ``[s·B, (s+1)·B)`` of the run seed's stream), the host shards them over the
device mesh, one jitted ``lax.scan`` runs K optimizer steps, then the host logs, validates and
checkpoints. Resuming from a checkpoint at step s continues with batch s and the saved optimizer
state, so on CPU a stopped-and-resumed run reproduces the uninterrupted one exactly.
"""

from __future__ import annotations

from pawn.errors import PawnError
import datetime as _dt
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from pydantic import ValidationError

from pawn.checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint, write_json
from pawn.config import ModelConfig
from pawn import metrics_core
from pawn.data.stream import ChunkStream, CorpusSource, EngineSource, build_corpus
from pawn.model import PAWNModel, resolve_dtype, sliced
from pawn.progress import ProgressReporter
from pawn.settings import PretrainConfig, format_validation_error
from pawn.train.lifecycle import (
    BEST_DIR,
    EarlyStopping,
    StopFlag,
    resume_candidates,
    rotate_checkpoints,
    step_checkpoints,
    step_dir_name,
    write_schedule_health,
)
from pawn.train.loop import (
    TrainProgram,
    TrainState,
    init_state,
    make_mesh,
    make_optimizer,
    optimizer_from_arrays,
    optimizer_to_arrays,
    step_counter,
    with_count,
)
from pawn.hub.push import HubPushError, check_can_push, open_run_push
from pawn.train.hooks import HookError, check_extras, open_run_hooks
from pawn.train.metrics import MetricsLogger, truncate_metrics
from pawn.train.rundir import RunDirError, check_run_dir
from pawn.train.summary import run_summary, summary_lines


class TrainingError(PawnError):
    """A run that cannot start or continue; the message is one line naming the cause."""


VAL_KEYS = {
    "published/loss": "loss", "published/perplexity": "perplexity", "published/top1": "accuracy",
    "published/top5": "top5_accuracy", "published/legal_rate": "legal_move_rate",
    "published/late_legal_rate": "late_legal_move_rate", "published/completion_rate": "game_completion_rate",
    "published/avg_plies_completed": "avg_plies_completed", "published/avg_pct_completion": "avg_pct_completion",
    "published/median_forfeit_ply": "median_forfeit_ply", "moves_only/top1": "moves_only_top1",
}
"""Evaluation keys written to ``val`` records, with their v1 metric names (spec eval §1.2)."""

# Fields that may differ between a checkpoint's run config and the resuming command.
RESUME_MUTABLE = {"resume", "out", "prefetch_chunks", "corpus_dir", "pause_after_steps", "keep_checkpoints", "patience",
                  "distributed_timeout_s", "log_every_s", "tensorboard", "wandb", "wandb_project", "wandb_mode",
                  "remat", "accumulation_steps",  # these two change memory, not the update
                  "push_to_hub", "hub_branch", "hub_private", "hub_exit_wait_s"}


@dataclass
class PretrainResult:
    """What a finished (or stopped) run produced.

    Attributes:
        run_dir: the run directory. checkpoint: the last checkpoint written (None if none).
        step: optimizer steps done. reason: ``reason_for_stop`` (spec §1.10).
        best_checkpoint: ``checkpoints/best``, the lowest-val-loss checkpoint (None without
            validation). best_step: its step.
        variant_checkpoints: standalone checkpoints of each nested variant (supernet runs that
            completed). last_train / last_val: the last metrics records written.
    """

    run_dir: Path
    checkpoint: Optional[Path]
    step: int
    reason: str
    variant_checkpoints: dict[str, Path] = field(default_factory=dict)
    last_train: Optional[dict] = None
    last_val: Optional[dict] = None
    best_checkpoint: Optional[Path] = None
    best_step: Optional[int] = None


def maybe_initialize_distributed(timeout_s: int = 300) -> None:
    """Join a multi-host run through ``jax.distributed.initialize()`` when the coordinator is
    configured in the environment (``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``,
    ``JAX_PROCESS_ID``; on managed clusters JAX also auto-detects SLURM/TPU settings).

    Args:
        timeout_s: seconds to wait for every process to join (``initialization_timeout``;
            the ``distributed_timeout_s`` setting).

    Raises:
        TrainingError: non-integer process counts, or the processes did not all join in time.
    """
    # Must run before anything touches the XLA backend (even jax.process_count()).
    env = os.environ
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
        try:
            jax.distributed.initialize(**kwargs, initialization_timeout=int(timeout_s))
        except Exception as e:  # the backend's runtime error: report it in one line
            raise TrainingError(
                f"jax.distributed could not join the coordinator {kwargs['coordinator_address']} within "
                f"{timeout_s} s (raise --distributed-timeout-s if processes start slowly): {' '.join(str(e).split())[:300]}"
            ) from None


def _default_run_dir() -> Path:
    return Path("runs") / ("pretrain-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S"))


def _check_run_dir(run_dir: Path) -> None:
    """Refuse, before any work, a run directory that is (or lies under) a file."""
    for p in (run_dir, *run_dir.parents):
        if p.exists():
            if not p.is_dir():
                raise TrainingError(f"--out {run_dir}: {p} is a file, not a directory")
            return


def _load_resumable(d: Path) -> Checkpoint:
    """Load and check one resume candidate: verified files, a pretraining run config that says
    ``prepend_outcome``, a training state with a step.

    Raises:
        CheckpointError: anything that makes ``d`` unusable (the message names the file).
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
    step = (ck.training_state or {}).get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError(f"{d / 'training_state.json'}: no valid step ({step!r})")
    return ck


def _set_aside_newer(ckpt_root: Path, step: int, log: Callable[[str], None]) -> None:
    """Rename the step checkpoints newer than the one resumed (the damaged ones ``--resume``
    skipped) to ``step_N.damaged`` (``.damaged-2``, … if taken), so the resumed run neither
    overwrites nor rotates them away: nothing is deleted.

    Raises:
        TrainingError: a rename fails (the message names the folder).
    """
    for n, d in step_checkpoints(ckpt_root):
        if n <= step:
            continue
        target, k = d.with_name(f"{d.name}.damaged"), 1
        while target.exists():
            k += 1
            target = d.with_name(f"{d.name}.damaged-{k}")
        try:
            d.rename(target)
        except OSError as e:
            raise TrainingError(f"cannot set the damaged checkpoint {d} aside ({e.strerror or e}); nothing was changed") from None
        log(f"kept the damaged checkpoint {d.name} as {target.name} (the resumed run writes a new {d.name})")


def _resolve_resume(cfg: PretrainConfig, log: Callable[[str], None] = print) -> tuple[PretrainConfig, Optional[Checkpoint]]:
    """Find the checkpoint to resume and reconcile the stored run config with this command.

    With ``--resume auto`` or a run directory, a damaged checkpoint (hash mismatch, truncated
    or missing file, no manifest, unreadable config or state) is skipped with a one-line warning
    naming it, and the next older one is tried; nothing is deleted. A checkpoint named directly
    is used or refused, never substituted.
    """
    if cfg.resume is None:
        return cfg, None
    try:
        candidates, fallback = resume_candidates(cfg.resume, cfg.out)
    except FileNotFoundError as e:
        raise TrainingError(str(e)) from None
    if not candidates:  # --resume auto with nothing yet: start fresh
        if cfg.total_steps is None:
            raise TrainingError(f"--resume auto: no checkpoint in {cfg.out} yet, so this starts a new run, which needs --total-steps")
        return cfg, None
    ck, problems = None, []
    for d in candidates:
        try:
            ck = _load_resumable(d)
            stored = {k: v for k, v in ck.run_config.items() if k != "pause_after_steps"}  # a pause applies to one invocation
            PretrainConfig.load(**{**stored, "resume": str(d)})
            break
        except (CheckpointError, ValidationError) as e:
            msg = format_validation_error(e) if isinstance(e, ValidationError) else str(e)
            if not fallback:
                raise TrainingError(f"--resume {d}: {msg}" if str(d) not in msg else msg) from None
            problems.append(d)
            log(f"WARNING: skipping damaged checkpoint {d}: {msg}" if str(d) not in msg else f"WARNING: skipping damaged checkpoint: {msg}")
            ck = None
    if ck is None:
        raise TrainingError(
            f"--resume {cfg.resume}: no intact checkpoint in {candidates[0].parent} "
            f"({len(problems)} damaged, newest {candidates[0].name}); nothing was deleted. To start over "
            f"there instead, drop --resume and add --overwrite (the old run is moved aside, not deleted)"
        )
    if problems:
        log(f"WARNING: resuming from {ck.path.name}, the newest intact checkpoint (skipped {', '.join(p.name for p in problems)})")
    stored = ck.run_config
    given = {k: v for k, v in cfg.model_dump(mode="json").items() if k in cfg.user_set_fields}
    conflicts = sorted(k for k, v in given.items() if k not in RESUME_MUTABLE and stored.get(k) != v)
    if conflicts:
        raise TrainingError(
            f"--resume {ck.path}: settings differ from the checkpoint's run ({', '.join(conflicts)}); "
            "resume continues the stored run exactly, so drop those flags"
        )
    stored = {k: v for k, v in stored.items() if k != "pause_after_steps"}  # a pause applies to one invocation
    merged = {**stored, **{k: v for k, v in given.items() if k in RESUME_MUTABLE}}
    merged["out"] = str(cfg.out) if cfg.out is not None else str(ck.path.parent.parent)
    merged["resume"] = str(ck.path)
    try:
        return PretrainConfig.load(**merged), ck
    except ValidationError as e:  # e.g. --patience on a run without validation
        raise TrainingError(f"--resume {ck.path}: its stored run config is not usable ({format_validation_error(e)})") from None


def _variant_list(cfg: PretrainConfig) -> tuple[ModelConfig, list[tuple[str, ModelConfig]]]:
    stored, variants = cfg.model_configs()
    return stored, list(variants.items())


def to_host(tree):
    """Copy a pytree of replicated arrays to host NumPy. In a multi-process run a global array is
    not fully addressable from one process, but every process holds a full replica of the
    (replicated) model and optimizer state, so its first local shard is the whole value."""
    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(x.addressable_data(0))
        return np.asarray(x) if isinstance(x, jax.Array) else x

    return jax.tree_util.tree_map(one, tree)


def _checkpoint_payload(state: TrainState, cfg: PretrainConfig, step: int, elapsed: float, k: int, es: EarlyStopping):
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
    return params, opt, ts


def _check_memory(program: TrainProgram, stored_cfg: ModelConfig, cfg: PretrainConfig, k: int, n_dev: int,
                  log: Callable[[str], None]) -> dict:
    """Compile the K-step chunk from shapes (nothing allocated) and refuse, in one line, a step
    whose XLA memory analysis exceeds the device (see :mod:`pawn.train.memory`); with
    ``remat = auto`` take the first of none, attention, full that fits. The program keeps the
    executable, so the run does not compile twice. Returns the figures for the run summary
    (:func:`pawn.train.summary.run_summary`'s ``compiled_memory``)."""
    from pawn.model import REMAT_MODES
    from pawn.train.memory import InsufficientMemoryError, check_step_memory

    if cfg.batch_size % (n_dev * cfg.accumulation_steps):
        raise TrainingError(f"batch_size {cfg.batch_size} does not split into {cfg.accumulation_steps} micro-batches "
                            f"on each of the {n_dev} devices (needs a multiple of {n_dev * cfg.accumulation_steps})")
    candidates = list(REMAT_MODES) if cfg.remat == "auto" else [cfg.remat]
    try:
        mode, est, info = check_step_memory(program, stored_cfg, k=k, batch_size=cfg.batch_size, seq_len=cfg.seq_len,
                                            remat_candidates=candidates, what="this training step")
    except InsufficientMemoryError as e:
        raise TrainingError(str(e)) from None
    return {"peak_bytes": est.peak_bytes, "temp_bytes": est.temp_bytes, "fixed_bytes": est.fixed_bytes, "remat": mode,
            "accumulation_steps": cfg.accumulation_steps, "capacity_bytes": info["capacity_bytes"],
            "capacity_source": info["capacity_source"]}


def run_pretrain(
    cfg: PretrainConfig,
    *,
    log: Callable[[str], None] = print,
    progress: bool = True,
    install_signal_handlers: bool = True,
    overwrite: bool = False,
) -> PretrainResult:
    """Run (or resume) a pretraining job described by ``cfg``.

    Args:
        cfg: the run configuration.
        log: receives one-line status messages.
        progress: show progress (step, loss, tokens/s, ETA): a rich bar in a terminal, else a
            plain line every ``cfg.log_every_s`` seconds (:class:`pawn.progress.ProgressReporter`).
        install_signal_handlers: SIGTERM/SIGINT finish the chunk, checkpoint and stop (a second
            SIGINT stops at once, see :class:`pawn.train.lifecycle.StopFlag`).
        overwrite: ``--out`` may hold another run, which is moved aside (never deleted) before
            this one writes (:mod:`pawn.train.rundir`).

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
    given_resume = cfg.resume
    maybe_initialize_distributed(cfg.distributed_timeout_s)
    cfg, resume_ck = _resolve_resume(cfg, log)
    resume_dir = resume_ck.path if resume_ck is not None else None
    run_dir = Path(cfg.out) if cfg.out is not None else _default_run_dir()
    _check_run_dir(run_dir)
    try:
        check_extras(tensorboard=cfg.tensorboard, wandb=cfg.wandb)
        if cfg.push_to_hub is not None:  # [hub] offline refusal before any work (no network here)
            check_can_push(cfg.push_to_hub)
        run_dir_plan = check_run_dir(run_dir, resume=given_resume, resume_from=resume_dir, overwrite=overwrite,
                                     new_config=cfg.model_dump(mode="json"), ignored_fields=RESUME_MUTABLE)
    except (RunDirError, HookError, HubPushError) as e:
        raise TrainingError(str(e)) from None
    n_dev, n_proc, proc = jax.device_count(), jax.process_count(), jax.process_index()
    if cfg.batch_size % n_dev:
        raise TrainingError(f"batch_size {cfg.batch_size} is not divisible by the {n_dev} devices it is sharded over")
    K = cfg.chunk_steps
    schedule = cfg.schedule()
    stored_cfg, variants = _variant_list(cfg)
    monitored = next((c for _, c in variants if c == stored_cfg), variants[-1][1])  # bests follow the stored model
    optimizer = make_optimizer(schedule, b1=cfg.beta1, b2=cfg.beta2, weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm)
    dtype = None if cfg.dtype == "auto" else cfg.dtype
    mesh = make_mesh()
    program = TrainProgram(optimizer, schedule, [(c, 1.0) for _, c in variants], dtype, "none", mesh, cfg.accumulation_steps)
    compiled_memory = _check_memory(program, stored_cfg, cfg, K, n_dev, log)

    # ---- model and optimizer state
    start_step, elapsed0 = 0, 0.0
    es = EarlyStopping(cfg.patience)
    if resume_ck is not None:
        ck = resume_ck
        if ck.config != stored_cfg:
            raise TrainingError(f"{resume_dir}: model config {ck.config.name} does not match the run's {stored_cfg.name}")
        model = PAWNModel(ck.config, params=ck.params)
        start_step = int(ck.training_state["step"])
        elapsed0 = float(ck.training_state.get("elapsed", 0.0) or 0.0)
        try:
            es = EarlyStopping.from_json(ck.training_state.get("early_stopping"), cfg.patience)
        except ValueError as e:
            raise TrainingError(f"{resume_dir / 'training_state.json'}: {e}") from None
        template = optimizer.init(eqx.filter(model, eqx.is_array))
        if ck.optimizer_state is None:
            log(f"WARNING: {resume_dir} has no optimizer state: Adam moments restart from zero at step {start_step}")
            opt_state = with_count(template, start_step)
        else:
            try:
                opt_state = optimizer_from_arrays(template, ck.optimizer_state)
            except ValueError as e:
                raise TrainingError(f"{resume_dir}: {e}") from None
        state = TrainState(model, opt_state, step_counter(start_step))
        log(f"resuming from {resume_dir} at step {start_step}")
        del ck, resume_ck  # the host copy of the weights is no longer needed
    else:
        model_seed = cfg.model_seed if cfg.model_seed is not None else cfg.seed
        state = init_state(PAWNModel(stored_cfg, jax.random.key(model_seed)), optimizer)

    # ---- data
    if cfg.corpus_dir is not None:
        n_needed = cfg.total_steps * cfg.batch_size
        if not (Path(cfg.corpus_dir) / "corpus.json").exists():
            log(f"building corpus of {n_needed:,} games in {cfg.corpus_dir}")
            build_corpus(Path(cfg.corpus_dir), n_needed, cfg.max_ply, cfg.seed, mate_boost=cfg.mate_boost)
        try:
            source = CorpusSource(Path(cfg.corpus_dir), seed=cfg.seed, max_ply=cfg.max_ply, mate_boost=cfg.mate_boost, n_games=n_needed)
        except ValueError as e:
            raise TrainingError(str(e)) from None
    else:
        source = EngineSource(cfg.seed, cfg.max_ply, cfg.mate_boost)
    val_set = None
    if cfg.val_games > 0:
        from pawn.engine import random_games

        val_set = random_games(cfg.val_games, cfg.max_ply, cfg.val_seed)

    # ---- run directory (only now: every check above has passed)
    ckpt_root = run_dir / "checkpoints"
    is_main = proc == 0
    hooks = None
    # [hub] BEGIN push call site (pawn.hub; spec §1.11): a RunHook-style object with
    # on_checkpoint(path, step) / close(wait_s); the repo and branch are created here, before the run writes.
    hub = None
    if is_main and cfg.push_to_hub is not None:
        try:
            hub = open_run_push(cfg.push_to_hub, run_dir, branch=cfg.hub_branch, private=cfg.hub_private,
                                wait_s=cfg.hub_exit_wait_s, log=log)
        except (HubPushError, PawnError) as e:
            raise TrainingError(str(e)) from None
    # [hub] END
    if is_main:
        try:
            moved = run_dir_plan.prepare()
        except RunDirError as e:
            raise TrainingError(str(e)) from None
        if moved is not None:
            log(f"moved the old run in {run_dir} aside to {moved}")
        if resume_dir is not None and resume_dir.parent.resolve() == ckpt_root.resolve():
            _set_aside_newer(ckpt_root, start_step, log)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            hooks = open_run_hooks(run_dir, config=cfg.model_dump(mode="json"), tensorboard=cfg.tensorboard, wandb=cfg.wandb,
                                   wandb_project=cfg.wandb_project, wandb_mode=cfg.wandb_mode, start_step=start_step, log=log)
            ckpt_root.mkdir(parents=True, exist_ok=True)
            # Re-feedable with --config: the run's settings, without the checkpoint this invocation
            # resumed from (re-fed, that would silently rewind the run; metrics.jsonl records it).
            run_cfg_json = {**cfg.model_dump(mode="json"), "resume": None, "pause_after_steps": None}
            tmp = run_dir / "config.json.tmp"
            write_json(tmp, run_cfg_json)
            tmp.replace(run_dir / "config.json")
        except (OSError, HookError) as e:
            if hooks is not None:
                hooks.close()
            if hub is not None:  # [hub]
                hub.close(0)
            raise TrainingError(str(e) if isinstance(e, HookError) else f"--out {run_dir}: cannot write the run directory ({e.strerror or e})") from None
    metrics_path = run_dir / "metrics.jsonl"
    summary = run_summary(
        stored_cfg, variants, label=f"variant {cfg.variant}" if cfg.variant else f"supernet {cfg.supernet or 'large'}",
        batch_size=cfg.batch_size, seq_len=cfg.seq_len, start_step=start_step,
        end_step=cfg.total_steps if cfg.pause_after_steps is None else min(cfg.total_steps, cfg.pause_after_steps),
        total_steps=cfg.total_steps, steps_per_chunk=K, devices=n_dev, processes=n_proc, backend=jax.default_backend(),
        dtype=jnp.dtype(resolve_dtype(dtype)).name, compiled_memory=compiled_memory,
    )
    try:
        if resume_dir is not None and is_main:
            truncate_metrics(metrics_path, start_step)
        logger = MetricsLogger(metrics_path, elapsed_offset=elapsed0, hooks=hooks) if is_main else None
        if logger:
            for line in summary_lines(summary):
                log(line)
            logger.write(
                "config", summary=summary, run_config=cfg.model_dump(mode="json"), model_config=stored_cfg.to_json_dict(),
                variants={n: c.to_json_dict() for n, c in variants}, param_count=int(state.model.num_params()),
                steps_per_chunk=K, devices=n_dev, processes=n_proc, backend=jax.default_backend(),
                jax_version=jax.__version__, resumed_from=str(resume_dir) if resume_dir else None,
            )
    except OSError as e:
        if hub is not None:  # [hub]
            hub.close(0)
        raise TrainingError(f"{metrics_path}: cannot write metrics ({e.strerror or e})") from None
    if hub is not None and logger is not None:  # [hub] push outcomes become "hub" records in metrics.jsonl;
        hub.write, hub.after_records = logger.write, True  # a checkpoint is queued once its step's record is written
        hooks.hooks.append(hub)

    state = program.place_state(state)
    stop = StopFlag(install_signal_handlers)
    end_step = cfg.total_steps if cfg.pause_after_steps is None else min(cfg.total_steps, cfg.pause_after_steps)
    if es.exhausted:  # resuming a run that early stopping already ended
        log(f"early stopping already ended this run ({es.counter} validations without improvement, patience {es.patience}); "
            "raise --patience to continue it")
        end_step = start_step
    stream = ChunkStream(
        source, start_step=start_step, end_step=end_step, k=K, batch_size=cfg.batch_size, seq_len=cfg.seq_len,
        prepend_outcome=cfg.prepend_outcome, prefetch=cfg.prefetch_chunks, process_index=proc, process_count=n_proc,
    )

    step, reason, last_ckpt = start_step, "completed", None
    last_train = last_val = None
    best_path = ckpt_root / BEST_DIR
    best_ckpt: Optional[Path] = best_path if (es.best_loss_step is not None and best_path.is_dir()) else None
    tokens_per_chunk = K * cfg.batch_size * cfg.seq_len

    def save(at_step: int, path: Optional[Path] = None) -> Path:
        params, opt, ts = _checkpoint_payload(state, cfg, at_step, logger.elapsed if logger else 0.0, K, es)
        path = path if path is not None else ckpt_root / step_dir_name(at_step)
        if is_main:
            try:
                save_checkpoint(path, params, stored_cfg, run_config=cfg.model_dump(mode="json"), optimizer_state=opt, training_state=ts)
                if path.name != BEST_DIR:
                    rotate_checkpoints(ckpt_root, cfg.keep_checkpoints)
            except OSError as e:
                kept = f"the last complete checkpoint, {last_ckpt}, is intact" if last_ckpt else "earlier checkpoints are intact"
                raise TrainingError(f"cannot write checkpoint {path} ({e.strerror or e}); {kept}") from None
            if hub is not None:  # [hub] queue the complete checkpoint; returns at once
                hub.on_checkpoint(path, at_step)
        return path

    def validate() -> dict:
        fields: dict = {}
        # One host copy, placed once on the default device (not re-sent with every val batch).
        model_now = jax.device_put(to_host(state.model))
        for name, vcfg in variants:
            m = model_now if vcfg == model_now.config else sliced(model_now, vcfg)
            rep = metrics_core.evaluate_games(
                m, val_set.tokens, val_set.lengths, val_set.outcome, seq_len=cfg.seq_len,
                batch_size=cfg.batch_size, prepend_outcome=cfg.prepend_outcome, dtype=dtype,
            ).to_dict()
            # v1 names (spec eval §1.2), suffixed by the variant's metric key.
            for key, name_v1 in VAL_KEYS.items():
                fields[f"val/{name_v1}_{vcfg.name}"] = rep[key]
        return fields

    bar = None
    loss_name = "joint loss" if len(variants) > 1 else "loss"
    if progress and is_main:
        bar = ProgressReporter("pretrain", end_step, start=start_step, fields={loss_name: "-", "tok/s": "-"},
                               every_s=cfg.log_every_s).start()

    acc_key = f"accuracy_{monitored.name}"
    try:
        t_prev = time.perf_counter()
        wait_prev = stream.wait_s
        for s0, host_chunk in stream:
            chunk = program.place_chunk(host_chunk)
            state, m = program.run_chunk(state, chunk)
            m = to_host(m)
            step = s0 + K
            # The chunk alone: from the end of the previous chunk's validation/checkpoint to here.
            now = time.perf_counter()
            dt, wait = now - t_prev, stream.wait_s - wait_prev
            losses = np.asarray(m["loss"])
            if not np.all(np.isfinite(losses)):
                bad = s0 + int(np.argmax(~np.isfinite(losses)))
                raise TrainingError(
                    f"loss became {losses[bad - s0]} at step {bad}; stopping without writing a checkpoint from these weights"
                    + (f" (last good checkpoint: {last_ckpt})" if last_ckpt else "")
                )
            rec = {
                "loss": float(losses[-1]), "loss_mean": float(losses.mean()),
                "train/accuracy": float(m[acc_key][-1]), "train/accuracy_mean": float(np.mean(m[acc_key])),
                "lr": float(m["lr"][-1]), "grad_norm": float(m["grad_norm"][-1]),
                "grad_norm_mean": float(np.mean(m["grad_norm"])), "n_supervised_mean": float(np.mean(m["n_supervised"])),
                **{k: float(v[-1]) for k, v in m.items() if k.startswith(("loss_d", "accuracy_d"))},
                "chunk_wall_s": dt, "tokens_per_s": tokens_per_chunk / dt, "games_per_s": K * cfg.batch_size / dt,
                "data_wait_s": wait, "data_wait_frac": wait / dt if dt > 0 else 0.0, "step_start": s0,
                "includes_compile": s0 == start_step,
            }
            if bar is not None:
                bar.update(step, **{loss_name: f"{rec['loss']:.4f}", "tok/s": f"{rec['tokens_per_s']:,.0f}"})
            val_fields, val_s, ckpt_s = None, 0.0, 0.0
            try:
                if val_set is not None and logger is not None and (step % cfg.val_every == 0 or step == cfg.total_steps):
                    t = time.perf_counter()
                    val_fields = validate()
                    val_s = time.perf_counter() - t
                    improved, new_best = es.update(step, {k: val_fields.get(f"val/{k}_{monitored.name}") for k in
                                                          ("loss", "late_legal_move_rate", "game_completion_rate", "avg_plies_completed")})
                    val_fields.update({"val/improved": improved, "val/patience_counter": es.counter,
                                       "val/best_loss": es.best.get("loss"), "val/best_loss_step": es.best_loss_step,
                                       "val_wall_s": val_s})
                    if new_best:
                        t = time.perf_counter()
                        best_ckpt = save(step, best_path)
                        ckpt_s += time.perf_counter() - t
                if step % cfg.checkpoint_every == 0 and step < end_step:
                    t = time.perf_counter()
                    last_ckpt = save(step)
                    ckpt_s += time.perf_counter() - t
            finally:
                if logger:
                    last_train = logger.write("train", step=step, **rec, val_wall_s=val_s, checkpoint_wall_s=ckpt_s)
                    if val_fields is not None:
                        last_val = logger.write("val", step=step, **val_fields)
            stop_early = es.exhausted
            if cfg.patience is not None and n_proc > 1 and val_set is not None and (step % cfg.val_every == 0 or step == cfg.total_steps):
                # Only process 0 validates: every process must take its decision, or the others
                # would wait forever in the next chunk's collectives.
                from jax.experimental import multihost_utils

                stop_early = bool(multihost_utils.broadcast_one_to_all(np.asarray(es.exhausted)))
            if stop_early and step < cfg.total_steps:
                if is_main:
                    log(f"early stopping at step {step}: {es.counter} validations without improvement (patience {es.patience}); "
                        f"best val loss {es.best.get('loss', float('nan')):.4f} at step {es.best_loss_step}")
                reason = "patience"
                break
            if stop.requested and step < end_step:  # a signal during the last chunk changes nothing
                reason = "sigterm"
                break
            t_prev, wait_prev = time.perf_counter(), stream.wait_s
        if reason == "completed" and step < cfg.total_steps:
            reason = "paused"
        if last_ckpt is None or last_ckpt.name != step_dir_name(step):
            if step > start_step or resume_dir is None:
                last_ckpt = save(step)
            else:
                reason = "resume_no_op"
    except OSError as e:  # e.g. a metrics write on a full disk: one line, not a traceback
        reason = "exception"
        raise TrainingError(f"I/O error on {e.filename or metrics_path} ({e.strerror or e}); "
                            f"last complete checkpoint: {last_ckpt}") from None
    except BaseException:
        reason = "exception"
        raise
    finally:
        stream.close()
        stop.restore()
        if bar is not None:
            bar.stop()
        if hub is not None:  # [hub] drain pending uploads (bounded wait) before the metrics log closes
            try:
                hub.close()
            except Exception as e:  # never hide the run's own outcome behind a push problem
                log(f"WARNING: hub: closing the uploader failed ({type(e).__name__}: {e})")
        try:
            if is_main:
                write_schedule_health(run_dir / "schedule_health.json", schedule, step, reason)
            if logger:
                logger.close()
        except OSError as e:  # never hide the run's own outcome behind a second failure
            log(f"WARNING: could not write {run_dir / 'schedule_health.json'} or close the metrics ({e.strerror or e})")

    variant_ckpts: dict[str, Path] = {}
    if reason in ("completed", "patience") and len(variants) > 1 and is_main:
        final = to_host(state.model)
        try:
            for name, vcfg in variants:
                vm = sliced(final, vcfg)
                variant_ckpts[name] = save_checkpoint(
                    run_dir / "variants" / name, {k: np.asarray(v) for k, v in vm.params().items()}, vcfg,
                    run_config={**cfg.model_dump(mode="json"), "supernet": None, "variant": name,
                                "sliced_from": {"checkpoint": str(last_ckpt), "supernet": cfg.supernet or "large"}},
                )
        except OSError as e:
            raise TrainingError(f"cannot write the variant checkpoints under {run_dir / 'variants'} ({e.strerror or e}); "
                                f"the run's checkpoint {last_ckpt} is intact") from None
    return PretrainResult(run_dir, last_ckpt, step, reason, variant_ckpts, last_train, last_val,
                          best_ckpt, es.best_loss_step if best_ckpt is not None else None)
