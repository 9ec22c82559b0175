"""``pawn adapt``: fine-tune a frozen backbone into a player model on Lichess games (spec
``training-and-adapters.md`` §4–§6), composed from the same parts as ``pawn pretrain``:
:class:`~pawn.train.run.Run` (run directory, metrics, schedule health),
:func:`~pawn.train.run.training_steps` via :class:`~pawn.train.run.Trainer` and its hooks, and
one :class:`~pawn.train.loop.TrainProgram` whose loss is the legal-masked cross-entropy below.

Data flow: :func:`pawn.data.lichess.load_corpus` (filtered, cached, split) →
:class:`pawn.data.lichess_batches.GameBatches` (batch of global step s = a pure function of
``(data_seed, s)``, legal sets bit-packed) → K-step chunks prefetched on a thread → the compiled
step, which differentiates only the trainable half of ``eqx.partition(model,
model.trainable_filter())`` and closes over the frozen backbone.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import equinox as eqx
import jax
import numpy as np

from pawn.adapters import AdapterError, build_adapted, count_params, get_strategy
from pawn.adapters.strategies import rosa
from pawn.adapters.io import BackboneMismatchError, load_adapter, load_backbone, save_adapter
from pawn.adapters.peft import is_peft_folder, not_a_model
from pawn.checkpoint import MODEL_FILE, CheckpointError, is_hub_id
from pawn.data import split as split_record
from pawn.data.lichess import LichessFilters, load_corpus
from pawn.data.lichess_batches import GameBatches, ValidationBatches
from pawn.progress import counted
from pawn.train.adapt_config import STRATEGY_FLAGS, AdaptSettings
from pawn.train.adapter_step import (BATCH_KEYS, VAL_FIELDS, BatchChunks, batch_dict, make_adapter_count, make_adapter_loss,
                                     make_validator)
from pawn.train.lifecycle import BEST_DIR, StopFlag, step_dir_name
from pawn.train.loop import TrainProgram, init_partitioned_state, make_optimizer, optimizer_to_arrays
from pawn.train.rosa_phases import FlagStopHook, run_warmup_and_masks, warmup_data_seed
from pawn.train.validation_lines import adapt_validation_line
from pawn.errors import PawnError
from pawn.train import spine
from pawn.train.run import CheckpointEvent, Hook, HubHook, TrainingError, to_host
from pawn.model import resolve_dtype
from pawn.vocab import MAX_SEQ_LEN
from pawn.train.task import Task, TaskCost, TaskResult
from pawn.train.walltime import plan_adapt

# ============================================================================ reuse across runs
@dataclass
class AdaptReuse:
    """What consecutive :func:`run_adapt` calls in one process share (sweep trials, issue 15):
    the loaded backbone and the compiled programs, so a trial that differs from an earlier one
    only in array-valued hyperparameters (lr, weight decay, warm-up, schedule, init scale)
    neither re-reads the backbone nor re-compiles its train chunk or its validation.

    Keep one object for the runs to share and pass it as ``run_adapt(..., reuse=)``. The train
    chunk takes the learning rate and weight decay as data
    (:attr:`~pawn.train.loop.TrainProgram.weight_decay`), so one program per graph-shaping
    setting (dtype, loss masking and penalty, Adam betas, gradient clip, zero vs non-zero
    decay) serves every trial; a different adapter structure or batch shape is a new trace of
    the same jitted function (JAX's own cache). A run with ``reuse`` equals the same run
    without it up to float rounding (XLA fuses the compiled-in constants of an unshared run
    differently; measured: val losses equal to ~1e-8 relative, often bit for bit); a run
    without ``reuse`` compiles its hyperparameters in, exactly as before.

    Attributes:
        backbones: ``{(backbone source, variant): (PAWNModel, BackboneRef, run config)}``
            (:func:`load_backbone_for`'s result; JAX arrays are immutable, so sharing is safe).
        programs: ``{graph key: TrainProgram}``. validators: ``{graph key: validate}``
            (:func:`make_validator`).
    """

    backbones: dict = field(default_factory=dict)
    programs: dict = field(default_factory=dict)
    validators: dict = field(default_factory=dict)

    def backbone(self, cfg: AdaptSettings, resolve: Optional[Callable[[str], str]] = None):
        """:func:`load_backbone_for` of ``cfg``, loaded once per (source, variant).

        Raises:
            TrainingError: as :func:`load_backbone_for` (a failure is not cached).
        """
        key = (str(cfg.backbone), cfg.variant)
        if key not in self.backbones:
            self.backbones[key] = load_backbone_for(cfg, resolve)
        return self.backbones[key]


# ============================================================================ results
@dataclass
class AdaptResult(TaskResult):
    """What :func:`run_adapt` produced: :class:`~pawn.train.task.TaskResult` (``best_checkpoint``
    also linked as ``<run>/best``) and the adapter's own fields.

    Attributes:
        strategy, trainable_params: the adapter. steps_per_epoch, total_steps: the sizing.
        baseline_val: the step-0 validation (fresh runs).
        legal_mask: the loss (and the validation top-1) was under the hard legal mask.
        split: the run's :class:`pawn.data.split.SplitRecord` (which games were train/val/test).
        compute: what the run spent over all its segments, as its ``end`` record's ``compute``
            (:func:`_spent`): optimizer steps, gradient batches, trainable and movable parameters.
        extra: phase details (``rosa_warmup_step`` of a run stopped in the RoSA warm-up).
    """

    strategy: str = ""
    trainable_params: int = 0
    steps_per_epoch: int = 0
    total_steps: int = 0
    baseline_val: Optional[dict] = None
    extra: dict = field(default_factory=dict)
    legal_mask: Optional[bool] = None
    split: Any = None
    compute: dict = field(default_factory=dict)


# ============================================================================ backbone, resume
def load_backbone_for(cfg: AdaptSettings, resolve: Optional[Callable[[str], str]] = None):
    """``(PAWNModel, BackboneRef, backbone run config)`` of ``cfg.backbone`` (a local checkpoint
    directory, or a Hub id that ``resolve`` turns into one), ``cfg.variant`` sliced.

    Raises:
        TrainingError: missing, damaged or unusable backbone, or a Hub id without ``resolve`` (one line).
    """
    src = str(cfg.backbone)
    if is_peft_folder(src) and not (Path(src) / MODEL_FILE).is_file():
        raise TrainingError(not_a_model(src))
    try:
        if not Path(src).is_dir() and is_hub_id(src):
            if resolve is None:
                raise TrainingError(f"backbone {src}: not a local checkpoint directory (a Hub id needs a resolver)")
            return load_backbone(resolve(src), cfg.variant, source=src)
        return load_backbone(src, cfg.variant)
    except (FileNotFoundError, CheckpointError, AdapterError) as e:
        raise TrainingError(f"backbone {src}: {e}" if src not in str(e) else str(e)) from None


def _adapter_checkpoint(d: Path, backbone_dir: Optional[str], resolve: Optional[Callable[[str], str]]):
    """One resume candidate: the adapter checkpoint with a step in its training state, loaded
    against its backbone (hash verified; a different backbone is a :class:`TrainingError`, not
    a damaged checkpoint to skip)."""
    try:
        la = load_adapter(d, backbone_dir=backbone_dir, resolve=resolve)
    except BackboneMismatchError as e:
        raise TrainingError(str(e)) from None
    except FileNotFoundError as e:
        raise CheckpointError(str(e)) from None
    if not la.run_config:
        raise CheckpointError(f"{d}: not an adapter training checkpoint (config.json has no run_config)")
    spine.checked_step(d, la.training_state)
    return la


# ============================================================================ hooks
class BestLinkHook(Hook):
    """Keeps ``<run>/best`` a symlink to ``checkpoints/best`` once a best checkpoint exists, so
    ``pawn eval <run>/best`` reads the lowest-val-loss adapter (replaced atomically)."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir

    def on_event(self, event: Any) -> None:
        if isinstance(event, CheckpointEvent) and event.kind == "best":
            link_best(self.run_dir)


def link_best(run_dir: Path) -> None:
    """Point ``run_dir/best`` at ``checkpoints/best`` (relative symlink, atomic replace)."""
    link = run_dir / "best"
    if link.is_symlink() and os.readlink(link) == os.path.join("checkpoints", BEST_DIR):
        return
    if link.exists() and not link.is_symlink():
        return  # something the user put there: never replaced
    tmp = run_dir / ".best.tmp-link"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(os.path.join("checkpoints", BEST_DIR), tmp)
    os.replace(tmp, link)


# ============================================================================ the split record
def _record_split(corpus, cfg: AdaptSettings, run_dir: Path, *, is_main: bool):
    """Write ``run_dir/split.json`` (:mod:`pawn.data.split`): the source fingerprint, filters and
    the train/val/test rule of this run, with the game ids of each part. A resumed run keeps the
    record it has, and is refused when the games differ from it (the source was edited).

    Raises:
        TrainingError: the recorded split differs from the games now read, or it cannot be written.
    """
    rec = split_record.record_of(corpus, cfg.data, val_games=cfg.val_games, test_games=cfg.test_games,
                                 path=run_dir / split_record.SPLIT_FILE)
    if rec.path.is_file():
        try:
            old = split_record.read(rec.path, with_ids=False)
        except PawnError as e:
            raise TrainingError(str(e)) from None
        changed = [p for p in split_record.PARTS if old.n(p) != rec.n(p) or old.ids_sha256.get(p) != rec.ids_sha256.get(p)]
        if changed:
            raise TrainingError(f"{rec.path}: the {', '.join(changed)} games read now differ from the ones this run "
                                f"recorded (the source {rec.repo_or_path} changed); start a new run")
        return old
    if is_main:
        try:
            rec.path.parent.mkdir(parents=True, exist_ok=True)
            split_record.write(rec)
        except (OSError, PawnError) as e:
            raise TrainingError(f"{rec.path}: cannot write the split record ({e})") from None
    return rec


# ============================================================================ the run
def run_adapt(cfg: AdaptSettings, *, log: Callable[[str], None] = print, progress: bool = True,
              install_signal_handlers: bool = True, overwrite: bool = False, hooks: Sequence[Hook] = (),
              build_model: Optional[Callable[[AdaptSettings, Any, jax.Array], Any]] = None,
              resolve_backbone: Optional[Callable[[str], str]] = None, reuse: Optional[AdaptReuse] = None,
              sinks: Sequence[Callable[[Path], Any]] = ()) -> AdaptResult:
    """Train (or resume) an adapter on a frozen backbone (spec §5).

    Args:
        cfg: the run configuration (:class:`~pawn.train.adapt_config.AdaptSettings`).
        log: one-line status messages (parameter count, data, resume, early stop).
        progress: show a progress bar / plain progress lines.
        install_signal_handlers: SIGTERM/SIGINT finish the chunk, checkpoint and stop
            (``reason = "sigterm"``; exit 0 from the CLI); installed on entry, so a signal during
            the setup stops after the first chunk the same way.
        overwrite: ``--out`` may hold another run, which is moved aside.
        hooks: extra :class:`~pawn.train.run.Hook` objects, run after the built-in ones (which
            have set ``ctx.val``, saved the best checkpoint and applied patience) and before the
            metrics records are written: a sweep pruner, a strategy's phase switch.
        build_model: ``(cfg, backbone, key) -> model`` in place of the strategy's builder.
        resolve_backbone: turns a Hub id into a local checkpoint directory.
        reuse: an :class:`AdaptReuse` shared with other runs of this process (sweep trials):
            the backbone is loaded, and the train chunk and validation compiled, once for all.
        sinks: further record sinks of ``metrics.jsonl`` (``factory(run_dir)``, e.g. the live
            ``report.html`` of :class:`pawn.report.hook.ReportHook`), opened with the run.

    Run directory: ``config.json`` (re-feedable, resolved ``data_seed``), ``metrics.jsonl``
    (``config``; ``val`` at step 0 with ``epoch = −1``; per chunk ``train``: ``loss``,
    ``train_top1``, ``lr``, ``grad_norm``, ``epoch``, ``tokens_per_s``, ``data_wait_frac``; per
    validation ``val``: :data:`VAL_FIELDS`, ``epoch``, the strategy's weight report as
    ``weights/<name>``, patience fields), ``checkpoints/step_N`` (adapter weights, optimizer
    state, ``training_state.json`` with ``step``, ``epoch``, ``best_val_loss``,
    ``patience_counter``, ``data_seed``, ``steps_per_epoch``), ``checkpoints/best`` and the
    ``best`` link to it, ``schedule_health.json``, ``split.json`` and ``split_ids.safetensors``
    (which games were train / val / test: :mod:`pawn.data.split`).

    Raises:
        TrainingError: bad backbone, resume target or sizing; a non-finite loss; a failed write.
        pawn.errors.DataError / UsageError: the data (no games left, bad steps_per_epoch).
        AdapterConfigError: strategy settings that do not fit the backbone.
    """
    return spine.run(AdaptTask(cfg, build_model=build_model, resolve_backbone=resolve_backbone, reuse=reuse, log=log),
                     log=log, progress=progress, install_signal_handlers=install_signal_handlers, overwrite=overwrite,
                     hooks=hooks, sinks=sinks)


def adapter_val_due(cfg: AdaptSettings, step: int, *, steps_per_epoch: int, total: int) -> bool:
    """Whether an adapter run of ``cfg`` validates after ``step`` (spec §5): every
    ``eval_interval`` steps, else every ``val_every``-th epoch of ``steps_per_epoch`` steps; and
    at the last step (``total``)."""
    if cfg.eval_interval is not None:
        return step % cfg.eval_interval == 0 or step == total
    return step % steps_per_epoch == 0 and ((step // steps_per_epoch) % cfg.val_every == 0 or step == total)


def step0_label(strategy: str, init_from: bool) -> str:
    """What the step-0 validation of a fresh adapter run measures: ``the --init-from adapter``,
    ``untrained model`` (a strategy that trains a model from scratch) or ``backbone + identity
    adapter``.

    Raises:
        AdapterError: an unknown strategy.
    """
    if init_from:
        return "the --init-from adapter"
    return "backbone + identity adapter" if get_strategy(strategy).uses_backbone else "untrained model"


@dataclass
class AdaptModel:
    """The adapted model of a run (:meth:`AdaptTask.setup_model`): the strategy row, the model, its
    backbone reference (None for a from-scratch strategy), the backbone's run config, the RoSA
    warm-up resume point ``(warm-up step, optimizer arrays)``, the parameter counts and the
    ``--init-from`` checkpoint (None without one)."""

    st: Any
    model: Any
    ref: Any
    bb_run: Optional[dict]
    rosa_resume: Optional[tuple]
    n_trainable: int
    n_backbone: int
    n_movable: int = 0
    init: Any = None


def _init_adapter(cfg: AdaptSettings, resolve: Optional[Callable[[str], str]], log: Callable[[str], None]):
    """The ``--init-from`` adapter checkpoint, loaded against this run's backbone (its hash is
    checked against the recorded one): its weights and settings start the new run.

    Raises:
        TrainingError: missing or damaged, another strategy, or another backbone (one line).
    """
    src = str(cfg.backbone) if cfg.backbone is not None else None
    try:
        la = load_adapter(cfg.init_from, backbone_dir=src if src and Path(src).is_dir() else None, resolve=resolve)
    except (FileNotFoundError, CheckpointError, AdapterError) as e:
        raise TrainingError(f"--init-from {cfg.init_from}: {e}" if str(cfg.init_from) not in str(e) else str(e)) from None
    if la.model.strategy != cfg.strategy:
        raise TrainingError(f"--init-from {cfg.init_from}: a {la.model.strategy} adapter, not this run's {cfg.strategy} "
                            "(--init-from continues the same strategy)")
    given = sorted(f for f in STRATEGY_FLAGS if f in cfg.user_set_fields)
    if given:
        log(f"WARNING: --init-from keeps the checkpoint's adapter settings; {', '.join('--' + f.replace('_', '-') for f in given)} "
            "ignored")
    return la


def _build_model(cfg: AdaptSettings, resume_la, build_model, resolve, reuse: Optional[AdaptReuse],
                 log: Callable[[str], None]) -> AdaptModel:
    """The backbone and adapter: the resumed checkpoint's, the ``--init-from`` checkpoint's
    (:func:`_init_adapter`), or ``cfg.backbone`` loaded (through ``reuse`` when given) and the
    strategy built on it (``build_model`` in place of the strategy's builder). Logs the
    trainable parameter count and unused strategy flags.

    Raises:
        TrainingError: a checkpoint without its backbone, an outcome-prefix backbone, a RoSA
            warm-up checkpoint without its step.
    """
    st = get_strategy(cfg.strategy)
    init = _init_adapter(cfg, resolve, log) if resume_la is None and cfg.init_from is not None else None
    if resume_la is not None or init is not None:
        la = resume_la if resume_la is not None else init
        model, ref, bb_run = la.model, la.backbone, la.backbone_run_config
        if ref is None and st.uses_backbone:
            raise TrainingError(f"{la.path}: records no backbone")
    else:
        bb, ref, bb_run = (reuse.backbone(cfg, resolve) if reuse is not None else load_backbone_for(cfg, resolve))
        if bb_run and bb_run.get("prepend_outcome"):
            raise TrainingError(f"backbone {cfg.backbone} was trained with the outcome prefix; adapters train on pure moves "
                                "(no outcome token), so this backbone is not supported")
        key = jax.random.key(cfg.seed)
        model = (build_model(cfg, bb, key) if build_model is not None
                 else build_adapted(st.name, cfg.adapter_settings(), bb, key))
    if not st.uses_backbone:
        ref = None
    rosa_resume = None  # (warm-up step, warm-up optimizer arrays) of a checkpoint inside the RoSA warm-up
    if rosa.is_phased(model):
        if resume_la is not None and model.adapter.phase == rosa.PHASE_WARMUP:
            rs = (resume_la.training_state or {}).get("rosa") or {}
            if not isinstance(rs.get("warmup_step"), int):
                raise TrainingError(f"{resume_la.path / 'training_state.json'}: a RoSA warm-up checkpoint without rosa.warmup_step")
            rosa_resume = (int(rs["warmup_step"]), resume_la.optimizer_state)
        n_trainable = count_params(st.name, model.settings, model.config)  # the main phase's (spec §4.6)
    else:
        n_trainable = int(model.num_trainable_params())
    n_backbone = int(model.backbone.num_params()) if st.uses_backbone else 0
    n_movable = n_trainable - model.num_unreached_params(not cfg.disable_legal_mask)
    log(f"strategy {st.name}: {n_trainable:,} trainable parameters" +
        (f" ({100.0 * n_trainable / max(n_backbone, 1):.2f}% of the {n_backbone:,}-parameter backbone {model.config.name})"
         if st.uses_backbone else f" (a {model.config.name} model trained from scratch)") +
        (f", {n_movable:,} movable (the loss never reaches {n_trainable - n_movable:,} of them)" if n_movable != n_trainable else ""))
    if "lr" not in cfg.user_set_fields and cfg.lr == st.lr:
        log(f"lr {cfg.lr:g}: strategy {st.name}'s own default (--lr sets another)")
    unused = cfg.unused_strategy_fields()
    if unused:
        log(f"WARNING: strategy {st.name} does not use {', '.join('--' + f.replace('_', '-') for f in unused)} (ignored)")
    return AdaptModel(st, model, ref, bb_run, rosa_resume, n_trainable, n_backbone, n_movable, init)


def _spent(mb: AdaptModel, main_steps: int, warmup_done: Optional[int] = None) -> dict:
    """What a run spent over all its segments (the ``end`` record's ``compute``, so runs can be
    compared at equal compute from their records): ``main_steps`` (the main phase's optimizer
    steps: the global step), ``warmup_steps`` (the RoSA family's LoRA warm-up steps, spec §4.6, not
    in the main counter), ``mask_scoring_batches`` (its gradient-mask batches: a forward and backward
    pass each, no update), ``optimizer_steps`` (main + warm-up), ``gradient_batches`` (every
    forward-and-backward pass over a training batch: optimizer steps + mask batches),
    ``trainable_params`` and ``movable_params`` (trainable minus those the loss never reaches:
    :meth:`pawn.adapters.AdaptedModel.num_unreached_params`).

    Args:
        mb: the run's model setup (its model in its current phase).
        main_steps: the main phase's global step at the end.
        warmup_done: warm-up steps done when the run stopped inside the warm-up (masks not made).
    """
    w = m = 0
    if rosa.is_phased(mb.model):
        s = mb.model.settings
        if warmup_done is not None:
            w = int(warmup_done)
        elif mb.model.adapter.phase != rosa.PHASE_WARMUP:
            w, m = int(s.rosa_warmup_steps), int(s.mask_samples)
    return {"optimizer_steps": int(main_steps) + w, "main_steps": int(main_steps), "warmup_steps": w,
            "mask_scoring_batches": m, "gradient_batches": int(main_steps) + w + m,
            "trainable_params": int(mb.n_trainable), "movable_params": int(mb.n_movable)}


def _fit_seq_len(cfg: AdaptSettings, mb: AdaptModel, resume_la, log: Callable[[str], None]) -> AdaptSettings:
    """``cfg`` with ``seq_len`` = the backbone's trained context when no ``--seq-len`` was given
    (a fresh run; recorded in config.json); warns about a ``seq_len`` past that context."""
    trained_len = (mb.bb_run or {}).get("seq_len") if mb.st.uses_backbone else None
    if (isinstance(trained_len, int) and 2 <= trained_len <= MAX_SEQ_LEN and resume_la is None
            and "seq_len" not in cfg.user_set_fields and cfg.seq_len != trained_len):
        cfg = cfg.model_copy(update={"seq_len": trained_len})
        log(f"seq_len {trained_len}: the backbone's trained context (--seq-len sets another)")
    if isinstance(trained_len, int) and cfg.seq_len > trained_len:
        log(f"WARNING: --seq-len {cfg.seq_len} is longer than the {trained_len} plies the backbone was trained on; "
            f"positions past {trained_len} are outside its training (use --seq-len {trained_len} or less)")
    return cfg


@dataclass
class AdaptData:
    """The run's data and sizing (:meth:`AdaptTask.setup_data`): the resolved data seed, the corpus
    (:class:`pawn.data.lichess.Corpus`), the training batches
    (:class:`~pawn.data.lichess_batches.GameBatches`), whether batches carry legal sets, steps per
    epoch, total steps, K (steps per chunk), the test-game count, the LR schedule (step → lr) and
    the validation batches (:class:`~pawn.data.lichess_batches.ValidationBatches`)."""

    data_seed: int
    corpus: Any
    train: Any
    need_legal: bool
    spe: int
    total: int
    k: int
    n_test: int
    schedule: Any
    val_batches: Any

    @property
    def train_keys(self) -> tuple:
        """The batch arrays of each training chunk (``legal`` when the loss needs it)."""
        return (*BATCH_KEYS, "legal") if self.need_legal else BATCH_KEYS


def _build_data(cfg: AdaptSettings, resume_la, data_seed: int, log: Callable[[str], None]) -> AdaptData:
    """Load the corpus (filtered, cached, split), size the run and build the LR schedule (spec §5–§6).

    Raises:
        TrainingError: steps per epoch that differ from the resumed run's, intervals that are not
            multiples of K, a schedule that does not fit the total.
        pawn.errors.DataError: no games left.
    """
    filters = LichessFilters(cfg.elo_min, cfg.elo_max, cfg.min_ply, cfg.max_games)
    corpus = load_corpus(cfg.data, filters, split=cfg.split, val_games=cfg.val_games, cache_dir=cfg.cache_dir,
                         warn=lambda m: log(f"WARNING: {m}"), test_games=cfg.test_games)
    need_legal = (not cfg.disable_legal_mask) or cfg.illegal_penalty > 0
    train = GameBatches(corpus.train, cfg.layout, cfg.seq_len, cfg.batch_size, data_seed,
                        steps_per_epoch=cfg.steps_per_epoch, legal_mask=need_legal)
    spe = train.steps_per_epoch
    if resume_la is not None:
        saved = (resume_la.training_state or {}).get("steps_per_epoch")
        if saved is not None and int(saved) != spe:
            raise TrainingError(f"--resume {resume_la.path}: the run had {saved} steps per epoch, the data now gives {spe} "
                                "(a different corpus or batch size); resume needs the same epochs")
    total = cfg.epochs * spe
    K = cfg.chunk_steps(spe)
    for name, v in (("steps_per_epoch", spe), ("eval_interval", cfg.eval_interval),
                    ("checkpoint_interval", cfg.checkpoint_interval), ("pause_after_steps", cfg.pause_after_steps)):
        if v is not None and v % K:
            raise TrainingError(f"{name} ({v}) must be a multiple of steps_per_chunk ({K})")
    n_test = 0 if corpus.test is None else len(corpus.test)
    log(f"data: {len(corpus.train):,} training games, {len(corpus.val):,} validation games ({corpus.val_from})"
        + (f", {n_test:,} test games ({corpus.test_from})" if n_test else "") + "; "
        f"{counted(spe, 'step')} per epoch × {counted(cfg.epochs, 'epoch')} = {counted(total, 'step')} of {cfg.batch_size} games; data seed {data_seed}")
    for info in corpus.caches:  # the games the PGN parser skipped: one line (pawn data info names them all)
        line = info.stats.skipped_summary()
        if line:
            log(f"data: {line} (pawn data info {cfg.data} lists them)")
    schedule = lr_schedule(cfg, total)
    # token arrays only; each batch's legal sets are built when it is validated (O(one batch))
    val_batches = ValidationBatches(corpus.val, cfg.layout, cfg.seq_len, cfg.batch_size, BATCH_KEYS)
    return AdaptData(data_seed, corpus, train, need_legal, spe, total, K, n_test, schedule, val_batches)


def lr_schedule(cfg: AdaptSettings, total: int):
    """The learning-rate schedule (step → lr) of an adapter run of ``cfg`` over ``total`` steps
    (:meth:`~pawn.train.adapt_config.AdaptSettings.schedule`).

    Raises:
        TrainingError: a schedule that does not fit ``total`` (one line).
    """
    try:
        return cfg.schedule(total)
    except ValueError as e:
        raise TrainingError(f"learning-rate schedule over {total} steps: {e}") from None


@dataclass
class AdaptProgram:
    """The optimizer, the loss, the compiled program, the validator, the graph key they are
    shared under and the optimizer's settings besides the schedule (``b1``, ``b2``,
    ``weight_decay``, ``max_grad_norm``: :func:`pawn.train.loop.make_optimizer`'s keyword
    arguments) (:meth:`AdaptTask.setup_program`)."""

    optimizer: Any
    loss_fn: Callable
    program: TrainProgram
    validator: Callable
    graph_key: tuple
    optimizer_kwargs: dict = field(default_factory=dict)


def _build_program(cfg: AdaptSettings, model, schedule, reuse: Optional[AdaptReuse]) -> AdaptProgram:
    """The AdamW optimizer over ``schedule``, the legal-masked loss (spec §5), the
    :class:`~pawn.train.loop.TrainProgram` and the validator; with ``reuse``, the program and
    validator of an earlier run with the same graph key (lr and weight decay as data, issue 15)."""
    dtype = None if cfg.dtype == "auto" else cfg.dtype
    opt_kw = cfg.optimizer_kwargs()
    optimizer = make_optimizer(schedule, **opt_kw)
    loss_kw = dict(legal_mask=not cfg.disable_legal_mask, illegal_penalty=cfg.illegal_penalty, dtype=dtype)
    loss_fn = make_adapter_loss(**loss_kw)
    graph_key = (tuple(sorted(loss_kw.items())), cfg.beta1, cfg.beta2, cfg.max_grad_norm, cfg.weight_decay == 0.0,
                 tuple(d.id for d in jax.devices()))
    shared = None if reuse is None else reuse.programs.get(graph_key)
    if shared is not None:
        program = shared.with_hyperparams(schedule, cfg.weight_decay)
        loss_fn = program.loss_fn
    else:
        # hyperparameters as data only for shared runs: XLA rounds the compiled-in constants'
        # arithmetic differently in places, and a plain run must stay bit-identical to before
        program = TrainProgram.of(optimizer, schedule, model.config, dtype=dtype, loss_fn=loss_fn,
                                  count_fn=make_adapter_count(legal_mask=loss_kw["legal_mask"]),
                                  weight_decay=cfg.weight_decay if reuse is not None else None)
        if reuse is not None:
            reuse.programs[graph_key] = program
    validator = None if reuse is None else reuse.validators.get(graph_key[0])
    if validator is None:
        validator = make_validator(**loss_kw)
        if reuse is not None:
            reuse.validators[graph_key[0]] = validator
    return AdaptProgram(optimizer, loss_fn, program, validator, graph_key, opt_kw)


def _adapter_state(cfg: AdaptSettings, model, optimizer, resume_la, rosa_resume, data: AdaptData,
                   log: Callable[[str], None], init_la: Any = None) -> spine.InitialState:
    """:func:`pawn.train.spine.initial_state` over the adapter's trainable half: fresh at step 0
    (also for a resume inside the RoSA warm-up, which keeps the elapsed time and writes no
    step-0 validation), or the resumed checkpoint's (its optimizer state is required).

    Raises:
        TrainingError: a checkpoint without optimizer state, one that does not fit, or a resume
            step that is not a multiple of K.
    """
    if rosa_resume is not None:
        init = spine.initial_state(model, optimizer, patience=cfg.patience, trainable=model.trainable_filter(), log=log)
        init.elapsed0 = float((resume_la.training_state or {}).get("elapsed", 0.0) or 0.0)
        init.fresh = False
        log(f"resuming the RoSA LoRA warm-up from {resume_la.path} at warm-up step {rosa_resume[0]}")
    else:
        start = int(resume_la.training_state["step"]) if resume_la is not None else 0
        init = spine.initial_state(model, optimizer, patience=cfg.patience, resume=resume_la, trainable=model.trainable_filter(),
                                   init_from=init_la, missing_optimizer="refuse", where=f" (epoch {start // data.spe}, batch {start % data.spe})",
                                   log=log)
    if init.start % data.k:
        raise TrainingError(f"resume step {init.start} is not a multiple of steps_per_chunk ({data.k})")
    return init


class AdaptTask(Task):
    """Adapter training as a :class:`pawn.train.task.Task`: its checkpoints (loaded against the
    backbone the command names, else the recorded one; the strategy flags are not re-applied on
    resume: the adapter is rebuilt from the checkpoint's own settings), the backbone and
    strategy, the Lichess data and its split record, validation per epoch or ``eval_interval``
    (spec §5) with a step-0 baseline, a step checkpoint after each validation and every
    ``checkpoint_interval`` steps, the ``best`` link, and the RoSA family's warm-up and masks
    before the main phase (spec §4.6).

    Args:
        cfg: the run's settings. build_model: ``(cfg, backbone, key) -> model`` in place of the
            strategy's builder. resolve_backbone: turns a Hub id into a local checkpoint
            directory. reuse: an :class:`AdaptReuse` shared with other runs of this process.
        log: one-line status messages.
    """

    name = "adapt"
    completed_reason = "step_limit"
    not_reapplied = tuple(STRATEGY_FLAGS)

    def __init__(self, cfg: AdaptSettings, *, build_model: Optional[Callable[[AdaptSettings, Any, jax.Array], Any]] = None,
                 resolve_backbone: Optional[Callable[[str], str]] = None, reuse: Optional[AdaptReuse] = None,
                 log: Callable[[str], None] = print):
        super().__init__(cfg, log=log)
        self.build_model, self.resolve, self.reuse = build_model, resolve_backbone, reuse
        self._backbone_dir = cfg.backbone if "backbone" in cfg.user_set_fields else None
        self.last_val: dict = {}
        self.baseline: Optional[dict] = None
        self.data_seed: Optional[int] = None

    def cost(self, *, backbone_config: Any = None, steps_per_epoch: Optional[int] = None, start_step: int = 0,
             end_step: Optional[int] = None, phase_steps: Optional[tuple[int, int]] = None, **context: Any) -> Optional[TaskCost]:
        """The cost on the backbone of ``backbone_config`` (its :class:`~pawn.config.ModelConfig`;
        :func:`pawn.train.walltime.adapter_flops_per_token`: 6·N when the strategy trains the
        backbone, else 4·N) of the main steps ``[start_step, end_step)`` (the whole run, ``epochs ×
        steps_per_epoch``, by default; ``steps_per_epoch``: the data's, else the setting's) and the
        RoSA family's ``phase_steps`` (warm-up steps, mask-scoring batches still to run; by default a
        fresh run's, from the strategy settings), each counted as one step's work. None without a
        backbone config or steps per epoch (the data decides it)."""
        from pawn.train.walltime import adapter_flops_per_token

        cfg = self.cfg
        spe = steps_per_epoch if steps_per_epoch is not None else cfg.steps_per_epoch
        if backbone_config is None or spe is None:
            return None
        row = get_strategy(cfg.strategy)
        fpt = adapter_flops_per_token(backbone_config, cfg.seq_len, trains_backbone=not row.uses_backbone)
        main = max(0, (cfg.epochs * spe if end_step is None else end_step) - start_step)
        note, shorter = "", "fewer epochs or steps_per_epoch"
        if phase_steps is None:
            phase_steps = (0, 0)
            if issubclass(row.module, rosa.RoSAAdapter):  # the warm-up and mask scoring run before the main steps
                rs = row.parse(cfg.adapter_settings())
                phase_steps = (int(rs.rosa_warmup_steps), int(rs.mask_samples))
                note = (f"{rs.rosa_warmup_steps:,} RoSA warm-up steps and {rs.mask_samples:,} mask-scoring batches, "
                        "then the main steps")
                shorter += (f", or fewer rosa_warmup_steps / mask_samples ({sum(phase_steps):,} of each run's steps are "
                            "RoSA warm-up and mask scoring)")
        warm, masks = (max(0, int(x)) for x in phase_steps)
        dtype = jax.numpy.dtype(resolve_dtype(None if cfg.dtype == "auto" else cfg.dtype)).name
        return TaskCost("adapter", fpt, cfg.batch_size * cfg.seq_len, main + warm + masks, dtype, note=note, shorter=shorter,
                        advice=("fewer --epochs or --steps-per-epoch", "a smaller --batch-size or --seq-len"),
                        phase_steps=(warm, masks), phase_advice="fewer --rosa-warmup-steps or --mask-samples" if warm or masks else "")

    # ---- the resume rule
    def load_candidate(self, d: Path):
        return _adapter_checkpoint(d, self._backbone_dir, self.resolve)

    def check_fresh(self, cfg: AdaptSettings) -> None:
        cfg.check_startable()

    # ---- before the build
    def prepare(self) -> None:
        if self.cfg.resume is None:
            self.cfg.check_startable()

    def run_name(self) -> str:
        return f"adapt-{self.cfg.strategy}"

    def settle(self, ck) -> None:
        """The data seed: the resumed run's, the one given, else a random one (recorded in config.json)."""
        seed = self.cfg.data_seed
        if ck is not None:
            seed = int((ck.training_state or {}).get("data_seed", seed if seed is not None else 0))
        elif seed is None:
            seed = secrets.randbelow(2**31)
        self.data_seed = seed

    def snapshot(self) -> dict:
        return {**super().snapshot(), "data_seed": self.data_seed}

    # ---- the build
    def build(self, ck, stop: Any) -> None:
        """The backbone and adapter (:meth:`setup_model`), the data (:meth:`setup_data`), the
        wall-time plan and the program (:meth:`setup_program`).

        Raises:
            TrainingError / AdapterConfigError / pawn.errors.DataError: as those methods.
        """
        log = self.log
        mb = self.setup_model(ck)
        data = self.setup_data(ck)
        cfg = self.cfg
        start = int((ck.training_state or {}).get("step", 0)) if ck is not None else 0
        phase = (0, 0)
        if self.in_warmup:  # warm-up and masks still to run
            s = mb.model.settings
            done = mb.rosa_resume[0] if mb.rosa_resume is not None else 0
            phase = (max(0, int(s.rosa_warmup_steps) - done), int(s.mask_samples))
        cost = self.cost(backbone_config=mb.model.config, steps_per_epoch=data.spe, start_step=start, end_step=self.end_step(),
                         phase_steps=phase)
        data.k, self.wall = plan_adapt(cfg, cost, steps_per_epoch=data.spe, start_step=start, end_step=self.end_step(), k=data.k,
                                       cut="steps_per_chunk" not in cfg.user_set_fields, log=log)
        self.setup_messages(stop, start, self.end_step(), mb.n_trainable)
        self.setup_program()

    def setup_model(self, ck=None) -> AdaptModel:
        """The backbone and adapter (:func:`_build_model`: the resumed checkpoint ``ck``'s, the
        ``--init-from`` one's, or the strategy built on the backbone, loaded through ``reuse``), and
        ``seq_len`` fitted to the backbone's trained context (:func:`_fit_seq_len`); kept as
        :attr:`mb` (and :attr:`cfg` updated). The first step of :meth:`build`; the population
        trainer (:func:`pawn.sweep.population.run_adapt_population`) builds each member so.

        Raises:
            TrainingError / AdapterConfigError: as :func:`_build_model`.
        """
        self.mb = _build_model(self.cfg, ck, self.build_model, self.resolve, self.reuse, self.log)
        self.cfg = _fit_seq_len(self.cfg, self.mb, ck, self.log)
        return self.mb

    def setup_data(self, ck=None) -> AdaptData:
        """The corpus, batches, sizing, LR schedule and validation games of this run
        (:func:`_build_data`, data seed :attr:`data_seed`: :meth:`settle` first); kept as
        :attr:`data` and :attr:`schedule`.

        Raises:
            TrainingError / pawn.errors.DataError: as :func:`_build_data`.
        """
        if self.data_seed is None:
            raise TrainingError("the data seed is decided by settle() before the data is built")
        self.data = _build_data(self.cfg, ck, self.data_seed, self.log)
        self.schedule = self.data.schedule
        return self.data

    def setup_program(self) -> AdaptProgram:
        """The optimizer, loss, program and validator of :attr:`mb`'s model over :attr:`data`'s
        schedule (:func:`_build_program`, shared through ``reuse``); kept as :attr:`prog`."""
        self.prog = _build_program(self.cfg, self.mb.model, self.data.schedule, self.reuse)
        return self.prog

    def lr_schedule(self, total: int):
        """This run's learning-rate schedule over ``total`` steps (:func:`lr_schedule`).

        Raises:
            TrainingError: a schedule that does not fit ``total``.
        """
        return lr_schedule(self.cfg, total)

    def record_split(self, run_dir: Path, *, is_main: bool = True):
        """Write (or, resumed, check) ``run_dir/split.json`` of :attr:`data`'s corpus (:func:`_record_split`).

        Raises:
            TrainingError: the recorded split differs from the games now read, or it cannot be written.
        """
        return _record_split(self.data.corpus, self.cfg, run_dir, is_main=is_main)

    @property
    def in_warmup(self) -> bool:
        """The RoSA family's LoRA warm-up and masks are still to run (spec §4.6)."""
        return rosa.is_phased(self.mb.model) and self.mb.model.adapter.phase == rosa.PHASE_WARMUP

    def end_step(self) -> int:
        total = self.data.total
        return total if self.cfg.pause_after_steps is None else min(total, self.cfg.pause_after_steps)

    @property
    def total_steps(self) -> int:
        return self.data.total

    @property
    def program(self) -> TrainProgram:
        return self.prog.program

    @property
    def checkpoint_params(self) -> int:
        return self.mb.n_trainable

    def initial_state(self, ck) -> spine.InitialState:
        return _adapter_state(self.cfg, self.mb.model, self.prog.optimizer, ck, self.mb.rosa_resume, self.data, self.log,
                              self.mb.init)

    def place(self, init: spine.InitialState) -> None:
        self.frozen = self.prog.program.place_frozen(init.frozen)
        self.state = self.prog.program.place_state(init.state)

    def start_records(self, init: spine.InitialState) -> None:
        """``split.json``, the ``config`` record and, for a fresh run, the baseline ``val`` record
        at step 0 (the backbone with the identity adapter, spec §5).

        Raises:
            TrainingError: the split record differs or cannot be written; the metrics log cannot be written.
        """
        run, mb, data, corpus, log = self.run, self.mb, self.data, self.data.corpus, self.log
        self.split_rec = self.record_split(run.run_dir, is_main=run.is_main)
        spine.write_record(run, "config", run_config=self.snapshot(), strategy=mb.st.name,
                           adapter_settings=mb.model.settings.model_dump(mode="json"),
                           trainable_params=mb.n_trainable, movable_params=mb.n_movable, backbone_params=mb.n_backbone,
                           model_config=mb.model.config.to_json_dict(),
                           backbone=None if mb.ref is None else mb.ref.to_json(), steps_per_epoch=data.spe,
                           total_steps=data.total, steps_per_chunk=data.k, n_train_games=len(corpus.train),
                           n_val_games=len(corpus.val), val_from=corpus.val_from, n_test_games=data.n_test,
                           test_from=corpus.test_from, split=self.split_rec.summary(), data_seed=data.data_seed,
                           backend=jax.default_backend(), jax_version=jax.__version__)
        if init.fresh and run.logger:  # baseline validation before the first step (spec §5)
            t = time.perf_counter()
            self.baseline = {**self.prog.validator(eqx.combine(self.state.model, self.frozen), data.val_batches), "epoch": -1,
                             "weights": dict(mb.model.weight_report())}
            spine.write_record(run, "val", step=0, **self.baseline, val_wall_s=time.perf_counter() - t)
            who = step0_label(mb.st.name, mb.init is not None)
            log(f"step 0 ({who}): val loss {self.baseline['loss']:.4f}, val top-1 {100 * self.baseline['top1']:.1f}%")

    def before_loop(self, stop: Any, hooks: list) -> Optional[AdaptResult]:
        """The RoSA warm-up and masks when due (:func:`_rosa_warmup`)."""
        return _rosa_warmup(self, stop, hooks) if self.in_warmup else None

    # ---- the loop
    def training_state(self, at_step: int) -> dict:
        """``training_state.json`` of a checkpoint at ``at_step`` (spec §5)."""
        spe, es, last_val = self.data.spe, self.es, self.last_val
        ts = {"format_version": 1, "step": int(at_step), "epoch": int(at_step) // spe, "steps_per_epoch": spe,
              "total_steps": self.data.total, "data_seed": self.data.data_seed, "best_val_loss": es.best.get("loss"),
              "patience_counter": es.counter, "early_stopping": es.to_json(),
              "val_metrics": {k: last_val[k] for k in VAL_FIELDS if k in last_val}, "elapsed": round(self.run.elapsed, 3)}
        records = spine.chunk_records(self.checkpointer) if self.checkpointer is not None else []
        if records:
            ts[spine.CHUNK_RECORDS] = records
        return ts

    def write_checkpoint(self, path: Path, at_step: int) -> None:
        st = self.trainer.state
        m = eqx.combine(to_host(st.model), self.frozen)
        save_adapter(path, m, self.mb.ref, run_config=self.snapshot(), optimizer_state=optimizer_to_arrays(to_host(st.opt_state)),
                     training_state=self.training_state(at_step))

    @property
    def validates(self) -> bool:
        return True

    def validate(self, st_, at_step: int) -> dict:
        """The ``val`` fields at ``at_step`` (:data:`VAL_FIELDS`, ``epoch``, the weight report)."""
        m = eqx.combine(st_.model, self.frozen)
        fields = self.prog.validator(m, self.data.val_batches)
        self.last_val.clear()
        self.last_val.update(fields)
        return {**fields, "epoch": (at_step - 1) // self.data.spe, "weights": dict(m.weight_report())}

    def val_due(self, s: int) -> bool:
        """Validation after step ``s``: every ``eval_interval`` steps, else every ``val_every``-th
        epoch; and at the last step."""
        return adapter_val_due(self.cfg, s, steps_per_epoch=self.data.spe, total=self.data.total)

    def checkpoint_due(self, s: int) -> bool:
        """A step checkpoint after step ``s``: after each validation and every ``checkpoint_interval`` steps."""
        return self.val_due(s) or (self.cfg.checkpoint_interval is not None and s % self.cfg.checkpoint_interval == 0)

    def validation_line(self, step: int, val: dict) -> str:
        return adapt_validation_line(step, val, self.data.spe)

    def after_validation(self) -> list:
        return [BestLinkHook(self.run.run_dir)]

    def train_fields(self, rec) -> dict:
        return spine.train_record(rec, top1=float(np.mean(rec.metrics["top1"])), epoch=(rec.step - 1) // self.data.spe)

    def chunks(self, start: int, end: int) -> BatchChunks:
        return BatchChunks(self.data.train, start=start, end=end, k=self.data.k, keys=self.data.train_keys)

    def compute(self, step: int) -> dict:
        return _spent(self.mb, step)

    def result(self, outcome) -> AdaptResult:
        """The :class:`AdaptResult` of a finished loop; links ``best``."""
        metrics_hook = spine.metrics_hook(self.trainer)
        best, run_dir, es, data = self.checkpointer.best, self.run.run_dir, self.es, self.data
        if best is not None and self.run.is_main and (run_dir / "best").exists() is False:
            link_best(run_dir)
        return AdaptResult(run_dir, outcome.checkpoint, outcome.step, outcome.reason, best,
                           es.best_loss_step if best is not None else None, metrics_hook.last_train if metrics_hook else None,
                           metrics_hook.last_val if metrics_hook else None, **self._sizing(), baseline_val=self.baseline,
                           legal_mask=not self.cfg.disable_legal_mask, split=self.split_rec, compute=_spent(self.mb, outcome.step))

    def _sizing(self) -> dict:
        """The adapter and sizing fields of an :class:`AdaptResult`."""
        return dict(strategy=self.mb.st.name, trainable_params=self.mb.n_trainable, steps_per_epoch=self.data.spe,
                    total_steps=self.data.total)


def _rosa_warmup(t: AdaptTask, stop: StopFlag, hooks: Sequence[Hook]) -> Optional[AdaptResult]:
    """RoSA phases 1–2 (spec §4.6) on the same :class:`Trainer` machinery, with their own step
    counter: the LoRA warm-up and the mask. Returns the result when the warm-up stopped early
    (signal, pause, pruner); else switches ``t`` (model, state, frozen half) to the main phase
    at step 0, checkpointed so a resume never regenerates the masks, and returns None."""
    cfg, data, prog, run, mb = t.cfg, t.data, t.prog, t.run, t.mb
    warm_src = GameBatches(data.corpus.train, cfg.layout, cfg.seq_len, cfg.batch_size, warmup_data_seed(data.data_seed),
                           legal_mask=data.need_legal)
    train_keys_w = data.train_keys
    snapshot = t.snapshot()

    def save_warm(path: Path, m, opt_arrays: dict, rosa_state: dict) -> None:
        save_adapter(path, m, mb.ref, run_config=snapshot, optimizer_state=opt_arrays,
                     training_state={**t.training_state(0), "rosa": rosa_state})

    def log_warm(rec: dict) -> None:
        if run.logger:
            run.logger.write("train", step=0, **rec)

    reuse = t.reuse
    wo = run_warmup_and_masks(
        eqx.combine(to_host(t.state.model), t.frozen), loss_fn=prog.loss_fn, count_fn=prog.program.count_fn,
        batch_at=lambda w: batch_dict(warm_src.batch_at(w), train_keys_w), lr=cfg.lr, b1=cfg.beta1, b2=cfg.beta2,
        weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm, steps_per_chunk=data.k, save=save_warm,
        checkpoint_root=run.checkpoints, key=jax.random.fold_in(jax.random.key(cfg.seed), 3), resume=mb.rosa_resume,
        hooks=[FlagStopHook(stop), *hooks], log_metrics=log_warm, log=t.log, checkpoint_every=cfg.checkpoint_interval,
        is_main=run.is_main, programs=None if reuse is None else reuse.programs, program_key=("rosa-warmup", *prog.graph_key))
    if wo.reason != "completed":
        stop.restore()
        spent = _spent(mb, 0, wo.warmup_step)
        run.finish(data.schedule, 0, wo.reason, signal=stop.requested, compute=spent, pushes=next(
            (h for h in hooks if isinstance(h, HubHook)), None))
        return AdaptResult(run.run_dir, None, 0, wo.reason, **t._sizing(), baseline_val=t.baseline,
                           extra={"rosa_warmup_step": wo.warmup_step}, compute=spent)
    mb.model = wo.model
    state, frozen = init_partitioned_state(mb.model, prog.optimizer, trainable=mb.model.trainable_filter(), step=0)
    t.frozen, t.state = prog.program.place_frozen(frozen), prog.program.place_state(state)
    if run.is_main:  # step 0 in phase 3: a resume from here never regenerates the masks
        save_adapter(run.checkpoints / step_dir_name(0), eqx.combine(to_host(t.state.model), t.frozen), mb.ref,
                     run_config=snapshot, optimizer_state=optimizer_to_arrays(to_host(t.state.opt_state)),
                     training_state={**t.training_state(0), "rosa": {"phase": rosa.PHASE_TRAIN}})
    return None

__all__ = ["AdaptData", "AdaptModel", "AdaptProgram", "AdaptReuse", "AdaptResult", "AdaptSettings", "AdaptTask", "adapter_val_due",
           "load_backbone_for", "link_best", "lr_schedule", "run_adapt", "step0_label"]
