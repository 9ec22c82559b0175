"""``SweepSettings``: the options of ``pawn sweep`` (flags, ``PAWN_SWEEP_*`` environment
variables and ``--config`` keys are generated from this model)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from pawn.settings import PATH, CommandSettings, facts


class SweepSettings(CommandSettings):
    """Configuration of ``pawn sweep``: an Optuna study whose trials are ``pawn adapt`` or ``pawn pretrain`` runs.

    Defaults decided here: the study name is the strategy (``pretrain`` for pretraining
    sweeps); the pruner is hyperband (the v1 default) with a MedianPruner alternative that
    waits for ``pruner_startup_trials`` finished trials; ``trials`` counts COMPLETE and PRUNED
    trials of the whole study (all workers, all invocations), so re-running the command after a
    stop continues to the same total.
    """

    model_config = SettingsConfigDict(env_prefix="PAWN_SWEEP_", extra="forbid", validate_default=True)

    run_type: Literal["adapter", "pretrain"] = Field("adapter", description="What each trial trains: an adapter on a frozen backbone (pawn adapt) or a model from scratch (pawn pretrain).")
    strategy: Optional[str] = Field(None, description="Adapter strategy whose built-in search space is used (lora, bottleneck, film, sparse, hybrid, rosa, ...); required with --run-type adapter.")
    checkpoint: Optional[str] = Field(None, description="Backbone checkpoint (directory or Hub id) the adapter trials share; required with --run-type adapter.")
    data: Optional[str] = Field(None, description="Training data: a Lichess source for adapter trials; for pretraining, an on-disk corpus directory (corpus_dir).", json_schema_extra=facts(PATH))
    trials: int = Field(20, ge=1, description="Finished (completed or pruned) trials the study should hold; re-running continues up to this total. One run makes at most this many attempts, so failed trials also end it.")
    storage: Optional[str] = Field(None, description="Study storage: a SQLAlchemy URL (sqlite:///x.db, postgresql://...), a journal file (*.log, *.journal or journal:PATH), or a path to a SQLite file; default OUT/study.db.")
    study_name: Optional[str] = Field(None, description="Study name in the storage; default: the strategy (or 'pretrain').")
    pruner: Literal["hyperband", "median", "none"] = Field("hyperband", description="Optuna pruner, fed the val loss at each validation by global step.")
    pruner_startup_trials: int = Field(2, ge=0, description="median pruner: finished trials before any pruning.")
    sampler: Literal["tpe", "random"] = Field("tpe", description="Optuna sampler.")
    seed: Optional[int] = Field(None, description="Sampler seed: a fresh study draws the same parameters again; each start (a continued sweep, each --workers process) seeds from it, the worker index and the trials the study holds, so it draws new ones. An adapter trial whose data_seed is not set also draws it from --seed and its trial number, so a fresh study repeats its losses too.")
    workers: int = Field(1, ge=1, description="Worker processes on the same storage (more can be started by hand with the same command).")
    timeout: Optional[float] = Field(None, gt=0, description="Stop starting new trials after this many seconds (per worker).")
    space: Optional[Path] = Field(None, description="TOML or JSON file overriding the search space: field = {type=float|int|categorical, low, high, log, step, choices} or a fixed value.")
    base_config: Optional[Path] = Field(None, description="TOML or JSON file of fixed settings of the trial command (pawn adapt / pawn pretrain); a field set here is not searched unless --space names it.")
    population: int = Field(1, ge=1, description="Train P trials that differ only in lr, weight decay, warm-up and (adapters) init_scale as one vmapped program sharing the batches (pretraining and adapter sweeps; adapters also share the frozen backbone).")
    heartbeat_s: int = Field(60, ge=1, description="Seconds between a running trial's heartbeats (RDB storages).")
    grace_s: int = Field(900, ge=1, description="A trial with no heartbeat for this long (a killed worker) is marked failed and retried once; keep above the first compile time.")
    db_retry_s: float = Field(300.0, ge=0, description="A server database (PostgreSQL, MySQL) that stops answering (a restart, a network cut) is waited for and retried this many seconds, then the worker stops with one line; 0 stops at once.")
    fail_running: bool = Field(False, description="At start, mark every RUNNING trial FAILED (journal storages have no heartbeat; use only when no other worker runs).")
    compilation_cache: Optional[str] = Field(None, description="JAX persistent compilation cache directory shared by the workers and re-runs of this sweep (trials that differ only in lr, weight decay or warm-up reuse one compiled program); default OUT/jax-cache; 'none' disables it.")
    out: Path = Field(..., description="Sweep directory: the default SQLite storage, one run directory per trial, best_config.json.")
    json_out: Optional[Path] = Field(None, description="Write every trial (state, value, params, reason) to this JSON file.", json_schema_extra={"flag": "--json"})
    push_to_bucket: Optional[str] = Field(None, description="Sync each trial's checkpoints, metrics.jsonl and config.json to this Hugging Face storage bucket (owner/name, or owner/name/folder) under <folder, default the --out directory's name>/<study>/trial_NNNN/ (as push_to_bucket in --base-config, which this overrides); a folder holding another sweep's or a run's files is refused at start. Needs hf_xet.")

    @model_validator(mode="after")
    def _check(self) -> "SweepSettings":
        if self.run_type == "adapter" and (self.strategy is None or self.checkpoint is None or self.data is None):
            raise ValueError("an adapter sweep needs --strategy, --checkpoint and --data (or use --run-type pretrain)")
        if self.push_to_bucket is not None:
            from pawn.hub.bucket import split_bucket_target

            split_bucket_target(self.push_to_bucket)
        if self.grace_s <= self.heartbeat_s:
            raise ValueError(f"grace_s ({self.grace_s}) must exceed heartbeat_s ({self.heartbeat_s})")
        return self

    @property
    def compilation_cache_dir(self) -> Optional[Path]:
        """The JAX persistent compilation cache directory: ``compilation_cache``, default
        ``out/jax-cache``; None when it is ``none`` (disabled)."""
        if self.compilation_cache is None:
            return self.out / "jax-cache"
        if self.compilation_cache.strip().lower() == "none":
            return None
        return Path(self.compilation_cache)

    @property
    def space_name(self) -> str:
        """The §6.1 space: the strategy for adapter sweeps, ``pretrain`` otherwise."""
        return self.strategy if self.run_type == "adapter" else "pretrain"

    @property
    def resolved_study_name(self) -> str:
        """``study_name``, default the space name."""
        return self.study_name or self.space_name
