"""Run configurations (spec ``training-and-adapters.md`` §3) as pydantic-settings models.

Every field can be set four ways; the first that gives a value wins:

1. a command-line flag (``--total-steps 300``),
2. an environment variable with the ``PAWN_`` prefix (``PAWN_TOTAL_STEPS=300``),
3. a config file passed with ``--config FILE`` (JSON, or TOML with a ``.toml`` suffix; the
   same field names, flat),
4. the defaults below.

Unknown fields are errors everywhere (file, environment keys are matched by name only).
Cross-field rules are validators that fail at parse time with a message naming the fields.
"""

from __future__ import annotations

from pawn.errors import UsageError
import json
import math
import os
import re
import sys
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, Iterable, Literal, Optional

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from pawn.config import NAMED_CONFIGS, SUPERNETS, ModelConfig
from pawn.data.layout import Layout
from pawn.dtypes import canonical_dtype
from pawn.schedules import Schedule, build_schedule
from pawn.vocab import MAX_SEQ_LEN

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, packaged as tomli
    import tomli as tomllib

_REQUIRED_TOTAL_STEPS = "required (set --total-steps, PAWN_TOTAL_STEPS or the config file; --resume reads it from the checkpoint)"

VAL_SEED_PUBLISHED = 2**63 - 1
"""Seed of the published validation set (spec eval §1.1)."""

LAPTOP_PRESET: dict[str, Any] = {"batch_size": 16, "seq_len": 128, "val_games": 256, "val_every": 100, "checkpoint_every": 100}
"""Defaults of ``--supernet tiny`` and ``--variant toy`` runs (see ``PretrainConfig``)."""

# ---------------------------------------------------------------------------- facts of a field
MUTABLE_ON_RESUME = "mutable_on_resume"
"""May differ between a checkpoint's stored run config and the command that resumes it (where
to write, logging, patience, memory-only settings); such a field does not make two runs different."""
NOT_RUN_IDENTITY = "not_run_identity"
"""Resolved or recorded by the run itself (``data_seed``): does not make two runs different, but a
resume keeps the stored value."""
PATH = "path"
"""May name a local path (or a Hub id / source left as it is): read relative to the config file
that gives it (:func:`resolve_config_paths`) and written relative to the file it goes into (a
sweep's ``best_config.json``, :func:`relative_config_path`)."""
RECIPE = "recipe"
"""Part of the training recipe a model card shows (in field order)."""


def facts(*names: str, **extra: Any) -> dict[str, Any]:
    """The ``json_schema_extra`` of a field carrying ``names`` (:data:`MUTABLE_ON_RESUME`,
    :data:`NOT_RUN_IDENTITY`, :data:`PATH`, :data:`RECIPE`) and any other schema keys
    (``flag=``): ``Field(..., json_schema_extra=facts(PATH))``. They appear in the JSON schema
    (``pawn lab``'s ``lab_schema``) as ``"facts": [...]``."""
    return {"facts": list(names), **extra}


def fields_with(model: Any, *names: str) -> tuple[str, ...]:
    """The fields of the settings class (or instance) ``model`` that carry any of the facts
    ``names`` (:func:`facts`), in field order: the one reader of these tags, shared by the
    trainers, the sweep, the Hub card and the lab."""
    cls = model if isinstance(model, type) else type(model)
    out = []
    for name, f in cls.model_fields.items():
        extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
        if any(n in (extra.get("facts") or ()) for n in names):
            out.append(name)
    return tuple(out)


_config_file: ContextVar[Optional[Path]] = ContextVar("pawn_config_file", default=None)
_preset_filled: ContextVar[set] = ContextVar("pawn_preset_filled", default=set())


class ConfigFileError(UsageError):
    """A config file that cannot be read; the message names the file."""


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a flat JSON or TOML config file into a dict.

    Raises:
        ConfigFileError: missing file, bad syntax, or a top level that is not a table/object.
    """
    try:
        text = Path(path).read_text("utf-8")
    except OSError as e:
        raise ConfigFileError(f"{path}: cannot read config file ({e.strerror or e})") from None
    try:
        data = tomllib.loads(text) if Path(path).suffix.lower() == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        raise ConfigFileError(f"{path}: not valid {'TOML' if Path(path).suffix.lower() == '.toml' else 'JSON'} ({e})") from None
    if not isinstance(data, dict):
        raise ConfigFileError(f"{path}: the top level must be a table of field = value")
    return data


def resolve_config_paths(values: dict[str, Any], config_file: Path, *models: Any) -> dict[str, Any]:
    """``values`` read from ``config_file`` with each relative entry of a field tagged
    :data:`PATH` (:func:`fields_with`) in any of the settings classes ``models`` (those the file
    may be for) that exists beside the file
    (relative to the file's folder) rewritten as that path seen from the working directory
    (``os.path.relpath``, so ``runs/base`` stays ``runs/base`` when the file sits in the working
    directory). A relative value that does not exist there is kept as given (a path from the
    working directory, a Hub id), so files written with paths relative to the working directory,
    or absolute ones, read as before. ``pawn sweep`` writes ``best_config.json`` with its local
    paths relative to itself (:func:`relative_config_path`)."""
    base = os.path.dirname(os.path.abspath(config_file))
    out = dict(values)
    for key in dict.fromkeys(k for m in models for k in fields_with(m, PATH)):
        v = out.get(key)
        if isinstance(v, str) and v and not os.path.isabs(v):
            beside = os.path.normpath(os.path.join(base, v))
            if os.path.exists(beside):
                out[key] = os.path.relpath(beside)
    return out


def relative_config_path(value: str, config_dir: Path) -> str:
    """``value``, a path that exists from the working directory, spelled relative to
    ``config_dir`` (the folder of the config file it goes into) when it was given relative,
    so that the file and the paths it names can move together; an absolute ``value`` stays
    absolute. The inverse of :func:`resolve_config_paths`."""
    if os.path.isabs(value):
        return value
    return os.path.relpath(os.path.abspath(value), os.path.abspath(config_dir))


class _FileSource(PydanticBaseSettingsSource):
    """Settings source for ``--config FILE`` (lowest priority above defaults); the relative paths
    of the settings class's :data:`PATH` fields are read relative to the file
    (:func:`resolve_config_paths`)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = _config_file.get()
        return resolve_config_paths(read_config_file(path), path, self.settings_cls) if path is not None else {}


class _Settings(BaseSettings):
    """Base of every command's settings: flags (built by ``pawn.cli._options.settings_parameters``),
    ``<env_prefix><FIELD>`` environment variables, a ``--config`` file and defaults, in that order.
    A field's ``json_schema_extra={"flag": "--json"}`` names its flag when it differs from
    ``--field-name`` (``"--on/--off"`` for a boolean pair)."""

    # allow_inf_nan=False: no setting means anything at inf or nan (and such a value cannot be
    # written to a JSON config snapshot); "lr: Input should be a finite number" at parse time.
    model_config = SettingsConfigDict(env_prefix="PAWN_", extra="forbid", validate_default=True, allow_inf_nan=False)
    _preset_fields: set = PrivateAttr(default_factory=set)
    _config_path: Optional[Path] = PrivateAttr(default=None)  # the --config file load() read, if any

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings):
        return (init_settings, env_settings, _FileSource(settings_cls))

    @classmethod
    def load(cls, config_file: Optional[Path] = None, **cli: Any):
        """Build the config from CLI values (only those the user gave), ``PAWN_*`` environment
        variables, an optional config file and defaults, in that order of precedence.

        Raises:
            ConfigFileError: unreadable config file.
            pydantic.ValidationError: unknown fields, bad values, broken cross-field rules.
        """
        token = _config_file.set(Path(config_file) if config_file else None)
        filled = _preset_filled.set(set())
        try:
            obj = cls(**{k: v for k, v in cli.items() if v is not None})
            obj._preset_fields = set(_preset_filled.get())
            obj._config_path = Path(config_file) if config_file else None
            return obj
        finally:
            _config_file.reset(token)
            _preset_filled.reset(filled)

    @classmethod
    def field_sources(cls, config_file: Optional[Path] = None, given: Iterable[str] = ()) -> dict[str, tuple[str, str]]:
        """Where each field set by the user came from, in the order of precedence of :meth:`load`:
        its flag (``--lora-rank``; ``given`` = the fields given on the command line), its
        environment variable (``PAWN_LORA_RANK``, matched case-insensitively like
        pydantic-settings does) or the config file's path (also for keys that are no field, so an
        unknown key is reported against its file). Fields left at their defaults are absent.
        Returns ``{field: (kind, name)}``, kind one of ``"flag"``, ``"env"``, ``"file"``. Used by
        :func:`format_validation_error` to name the source of a bad value."""
        out: dict[str, tuple[str, str]] = {}
        if config_file is not None:
            try:
                out.update({k: ("file", str(config_file)) for k in read_config_file(Path(config_file))})
            except ConfigFileError:
                pass  # load() reports the unreadable file itself
        prefix = cls.model_config.get("env_prefix", "") or ""
        env = {k.upper(): k for k in os.environ}
        for name in cls.model_fields:
            if (prefix + name).upper() in env:
                out[name] = ("env", env[(prefix + name).upper()])
        for name in given:
            f = cls.model_fields.get(name)
            extra = f.json_schema_extra if f is not None and isinstance(f.json_schema_extra, dict) else {}
            out[name] = ("flag", (extra.get("flag") or "--" + name.replace("_", "-")).split("/")[0])
        return out

    def config_path_note(self, name: str) -> str:
        """For an error about the path in field ``name``: ``" (read relative to FILE, as ABS, nor
        found from the working directory)"`` when that value is a relative path the ``--config``
        FILE gave (:func:`resolve_config_paths` looked beside the file, then from the working
        directory), else ``""`` (a flag, a variable, an absolute path, no config file)."""
        f = self._config_path
        if f is None:
            return ""
        try:
            raw = read_config_file(f).get(name)
        except ConfigFileError:
            return ""
        if not isinstance(raw, str) or not raw or os.path.isabs(raw) or str(getattr(self, name, None)) != raw:
            return ""
        beside = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(f)), raw))
        return f" (read relative to {f}, as {beside}, nor found from the working directory)"


class SettingsError(UsageError):
    """Settings that do not validate, in one line naming each field and where its value came
    from (flag, environment variable or config file); see :func:`format_validation_error`."""


CommandSettings = _Settings
"""Public name of the settings base for the command settings defined above ``pawn.settings``."""


class RunOutputSettings(_Settings):
    """The logging sinks and the Hugging Face Hub push shared by the training commands
    (:class:`PretrainConfig`, :class:`pawn.train.adapt_config.AdaptSettings`; spec
    ``training-and-adapters.md`` §1.11 for the push): one definition of their fields, defaults,
    flags, ``PAWN_*`` variables, config-file keys and the ``push_to_hub`` check.

    Class variables read by the flag generator (``pawn.cli._options.settings_parameters``):
    ``cli_fields_last`` lists these fields after the command's own ones (where both commands
    always listed them), and a subclass's ``field_help`` maps a field name to that command's
    help text where it differs from the one here.

    Raises (on construction):
        UsageError: ``push_to_hub`` is not ``owner/name`` (:func:`pawn.hub.push.check_repo_id`), or
            ``push_to_bucket`` not ``owner/name[/folder]`` (:func:`pawn.hub.bucket.split_bucket_target`).
        pydantic.ValidationError: ``hub_exit_wait_s`` < 0 or not a number.
    """

    cli_fields_last: ClassVar[bool] = True
    field_help: ClassVar[dict[str, str]] = {}

    # logging hooks (curves.png is drawn whenever matplotlib is installed)
    tensorboard: bool = Field(False, description="Also write TensorBoard event files under RUN/tensorboard/ (needs pawn[tensorboard], i.e. tensorboardX).", json_schema_extra=facts(MUTABLE_ON_RESUME))
    wandb: bool = Field(False, description="Also log to Weights & Biases (needs pawn[wandb]); run name and group = the run directory name.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    wandb_project: Optional[str] = Field(None, description="W&B project; default $WANDB_PROJECT, else pawn.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    wandb_mode: Literal["online", "offline", "disabled"] = Field("online", description="W&B mode: offline writes RUN/wandb/ without a network (upload later with wandb sync).", json_schema_extra=facts(MUTABLE_ON_RESUME))
    # Hugging Face Hub push (pawn.hub; spec training-and-adapters.md §1.11)
    push_to_hub: Optional[str] = Field(None, description="Push every checkpoint to this Hugging Face model repo (owner/name; created if missing) as one commit each, in the background; outcomes are hub records in metrics.jsonl. Refused at start with HF_HUB_OFFLINE=1.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    hub_branch: Optional[str] = Field(None, description="Branch for --push-to-hub (created if missing); default run/<run directory name>.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    hub_private: bool = Field(False, description="Create the --push-to-hub repo and the --push-to-bucket bucket private (existing ones keep their visibility).", json_schema_extra=facts(MUTABLE_ON_RESUME))
    hub_exit_wait_s: float = Field(300.0, ge=0, description="At exit, wait at most this many seconds for pending pushes (for each of --push-to-hub and --push-to-bucket); the rest are reported as not pushed.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    push_to_bucket: Optional[str] = Field(None, description="Sync every checkpoint, metrics.jsonl and config.json to this Hugging Face storage bucket (owner/name, created if missing; owner/name/folder names the folder in it) under <run directory name>/ by default (refused at start when that folder holds another run's or a sweep's files; a sweep gives each trial <sweep directory name>/<study>/trial_NNNN/), in the background and once more at exit; outcomes are hub records in metrics.jsonl. Needs hf_xet. Refused at start with HF_HUB_OFFLINE=1.", json_schema_extra=facts(MUTABLE_ON_RESUME))

    @model_validator(mode="after")
    def _push_repo_id(self):
        """``push_to_hub`` is ``owner/name`` (see :func:`pawn.hub.push.check_repo_id`; its one-line
        error names the flag)."""
        from pawn.hub.push import check_repo_id

        if self.push_to_hub is not None:
            check_repo_id(self.push_to_hub)
        if self.push_to_bucket is not None:
            from pawn.hub.bucket import split_bucket_target

            split_bucket_target(self.push_to_bucket)
        return self


class OptimizerSettings(_Settings):
    """The AdamW optimizer and learning-rate schedule settings shared by the training commands
    (:class:`PretrainConfig`, :class:`pawn.train.adapt_config.AdaptSettings`; spec
    ``training-and-adapters.md`` §2 for the schedules, §1.1 and §5 for the optimizer): one
    definition of each field's type, range, help text, flag (``--lr``), ``PAWN_*`` variable
    and config-file key, which stay flat (``lr``, not ``optimizer.lr``), as in every run's
    ``config.json``.

    The defaults here are the adapter trainer's (spec §5 and the spec's shared run-config
    defaults: AdamW betas (0.9, 0.999), weight decay 0, cosine to 0); a trainer whose spec
    default differs overrides only that default with :meth:`default_for` (pretraining: β2 0.95,
    weight decay 0.01, cosine floor 0.1, spec §1.1).

    Class variable read by the flag generator (``pawn.cli._options.settings_parameters``):
    ``cli_fields_after`` places these flags right after the command's ``--seq-len``, where
    both commands have always listed them.

    Raises (on construction):
        pydantic.ValidationError: a value out of its range (lr ≤ 0, a fraction or ratio outside
            [0, 1], β outside [0, 1), weight decay < 0, clip ≤ 0, warm-up steps < 0).
    """

    cli_fields_after: ClassVar[str] = "seq_len"

    lr: float = Field(3e-4, gt=0, description="Peak learning rate.", json_schema_extra=facts(RECIPE))
    lr_schedule: Literal["cosine", "wsd", "constant", "one_cycle", "infinite"] = Field("cosine", description="Learning-rate schedule after warmup.", json_schema_extra=facts(RECIPE))
    warmup_steps: Optional[int] = Field(None, ge=0, description="Warmup steps; default int(warmup_frac · total_steps).", json_schema_extra=facts(RECIPE))
    warmup_frac: float = Field(0.05, ge=0, le=1, description="Warmup as a fraction of total steps (when --warmup-steps is not given).", json_schema_extra=facts(RECIPE))
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Cosine floor as a fraction of the peak.", json_schema_extra=facts(RECIPE))
    decay_frac: float = Field(0.1, ge=0, le=1, description="Final decay as a fraction of total steps (wsd, infinite).")
    wsd_decay_shape: Literal["linear", "cosine"] = Field("linear", description="Shape of the final decay (wsd, infinite).")
    cooldown_frac: float = Field(0.2, ge=0, le=1, description="Cooldown from the peak to the plateau, as a fraction of total steps (infinite).")
    stable_lr_ratio: float = Field(0.1, ge=0, le=1, description="Plateau as a fraction of the peak (infinite).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.", json_schema_extra=facts(RECIPE))
    beta1: float = Field(0.9, ge=0, lt=1, description="AdamW β1.", json_schema_extra=facts(RECIPE))
    beta2: float = Field(0.999, ge=0, lt=1, description="AdamW β2.", json_schema_extra=facts(RECIPE))
    max_grad_norm: float = Field(1.0, gt=0, description="Global-norm gradient clip.", json_schema_extra=facts(RECIPE))

    @classmethod
    def default_for(cls, name: str, default: Any, **changes: Any) -> FieldInfo:
        """Field ``name`` as declared here (type, range, flag) with another ``default`` (and
        optionally another ``description``): a subclass writes ``beta2: float =
        OptimizerSettings.default_for("beta2", 0.95)``.

        Raises:
            KeyError: ``name`` is no field of this model.
        """
        return FieldInfo.merge_field_infos(OptimizerSettings.model_fields[name], default=default, **changes)

    def warmup_for(self, total_steps: int) -> int:
        """W over ``total_steps``: ``warmup_steps`` if given, else ``int(warmup_frac · total_steps)`` (spec §2)."""
        return self.warmup_steps if self.warmup_steps is not None else int(self.warmup_frac * total_steps)

    def lr_schedule_over(self, total_steps: int) -> Schedule:
        """The resolved LR schedule over ``total_steps`` (spec §2; :func:`pawn.schedules.build_schedule`).

        Raises:
            ValueError: warm-up, decay or cooldown lengths that do not fit ``total_steps`` (named).
        """
        return build_schedule(
            self.lr_schedule, self.lr, total_steps, self.warmup_for(total_steps),
            min_ratio=self.min_lr_ratio, decay_frac=self.decay_frac, cooldown_frac=self.cooldown_frac,
            stable_ratio=self.stable_lr_ratio, decay_shape=self.wsd_decay_shape,
        )

    def optimizer_kwargs(self) -> dict[str, float]:
        """The keyword arguments of :func:`pawn.train.loop.make_optimizer` besides the schedule:
        ``b1``, ``b2``, ``weight_decay``, ``max_grad_norm``."""
        return {"b1": self.beta1, "b2": self.beta2, "weight_decay": self.weight_decay, "max_grad_norm": self.max_grad_norm}


class PretrainConfig(OptimizerSettings, RunOutputSettings):
    """Configuration of ``pawn pretrain``. Defaults follow the published v1.0.0 run (the
    published PAWN models' training): lr 3e-4 peak, AdamW (β 0.9/0.95, ε 1e-8) with decoupled weight decay 0.01 on
    all parameters, global-norm clip 1.0, batch 256, 512-ply sequences, cosine schedule floored at
    0.1 × peak, warmup 5 % of total steps (10,000 at 200K).

    Defaults decided here (the published run does not record them): β2 = 0.95 (the single-model trainer's
    value; the published cotrain path may have used 0.999); the supernet ``large`` is trained
    when neither ``supernet`` nor ``variant`` is given; ``seed = 42`` so batch s is games
    ``[s·B, (s+1)·B)`` of ``random_games(seed=42)``, as in the published stream's base seed;
    ``steps_per_chunk`` is the largest divisor ≤ 50 of gcd(total_steps, val_every,
    checkpoint_every); the last 3 step checkpoints are kept, plus ``checkpoints/best``.
    Early stopping (``patience``) and the best checkpoint follow the stored model's validation
    metrics: the supernet itself (its largest variant) or the one variant.
    """

    # model
    supernet: Optional[Literal["tiny", "large"]] = Field(None, description="Train a supernet jointly over its nested variants (large when neither --supernet nor --variant is given).", json_schema_extra=facts(RECIPE))
    variant: Optional[Literal["toy", "small", "base", "large"]] = Field(None, description="Train one model of this size.", json_schema_extra=facts(RECIPE))
    dtype: Literal["auto", "float32", "bfloat16"] = Field("auto", description="Compute dtype; auto = fp32 on CPU, bf16 on accelerators (bf16, fp32 and f32 are accepted spellings).", json_schema_extra=facts(RECIPE))
    remat: Literal["auto", "none", "attention", "full"] = Field("auto", description="Per-layer rematerialisation in the backward pass: none (fastest), attention (keep only q, k, v and the attention output of each layer; recompute norms and FFN), full (keep only each layer's input; recompute the layer); auto = the fastest plan that fits: each mode at the least --accumulation-steps that fits is compiled and timed, unless that would cost over 5% of the run's estimated time or --accumulation-steps is given (then the first of none, attention, full that fits); the plan found is kept in the user's cache (step_plans.json) for the next run on this device, model and shapes.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    accumulation_steps: int = Field(1, description="Micro-batches per optimizer step (gradients summed inside the compiled step: the full-batch update with the activation memory of batch_size / N games).", json_schema_extra=facts(MUTABLE_ON_RESUME))
    # optimisation
    total_steps: Optional[int] = Field(None, description="Optimizer steps to run (required, except with --resume, which reads it from the checkpoint).", json_schema_extra=facts(RECIPE))
    batch_size: int = Field(256, description="Games per step (global, over all devices).", json_schema_extra=facts(RECIPE))
    seq_len: int = Field(512, description="Sequence length in tokens (pure moves: = max plies).", json_schema_extra=facts(RECIPE))
    # lr, the schedule and AdamW: OptimizerSettings's fields; the pretraining defaults (spec §1.1):
    min_lr_ratio: float = OptimizerSettings.default_for("min_lr_ratio", 0.1, description="Cosine floor as a fraction of the peak (pretraining: 0.1).")
    weight_decay: float = OptimizerSettings.default_for("weight_decay", 0.01)
    beta2: float = OptimizerSettings.default_for("beta2", 0.95)
    steps_per_chunk: Optional[int] = Field(None, description="K: optimizer steps per compiled lax.scan chunk; default: the largest divisor ≤ 50 of gcd(total_steps, val_every, checkpoint_every).")
    # data
    seed: int = Field(42, description="Game stream seed: batch s = games [s·B, (s+1)·B).", json_schema_extra=facts(RECIPE))
    model_seed: Optional[int] = Field(None, description="Parameter init seed; default = seed.")
    prepend_outcome: bool = Field(False, description="Put the outcome token before the moves (published models: off).", json_schema_extra=facts(RECIPE))
    mate_boost: float = Field(0.0, description="Probability of playing an available mate in one in the random games (published: 0).", json_schema_extra=facts(RECIPE))
    corpus_dir: Optional[Path] = Field(None, description="Read games from an on-disk corpus (built there once if missing).", json_schema_extra=facts(MUTABLE_ON_RESUME, RECIPE, PATH))
    prefetch_chunks: int = Field(2, description="Chunks generated ahead of the device by the background thread.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    # validation, checkpoints, output
    val_games: int = Field(2048, description="Fixed validation games.", json_schema_extra=facts(RECIPE))
    val_seed: int = Field(VAL_SEED_PUBLISHED, description="Seed of the validation games (the published set: 2^63 − 1).")
    val_every: int = Field(1000, description="Validate every N steps (and at the end).", json_schema_extra=facts(RECIPE))
    checkpoint_every: int = Field(5000, description="Write a step checkpoint every N steps (and at the end).", json_schema_extra=facts(RECIPE))
    checkpoint_every_minutes: float = Field(30.0, ge=0, description="Also write a step checkpoint once this many minutes have passed since the last one (0: off), and shorten compiled chunks (when --steps-per-chunk is not given) to take about this long at most, so a stop waits for no longer and a killed run loses no more.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    keep_checkpoints: int = Field(3, description="Keep the newest N step checkpoints (0 keeps all); checkpoints/best is always kept.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    patience: Optional[int] = Field(None, description="Early stopping: stop after N validations in a row with no improvement, where any of val loss down, late legal rate, game completion rate or average plies completed up counts. Off when unset; needs val_games > 0.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    out: Optional[Path] = Field(None, description="Run directory; default runs/pretrain-<time>.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    resume: Optional[str] = Field(None, description="A checkpoint directory, a run directory, or 'auto' (latest in --out).", json_schema_extra=facts(MUTABLE_ON_RESUME))
    init_from: Optional[Path] = Field(None, description="Start this new run from a checkpoint's weights only (a checkpoint directory, or a run directory: its best checkpoint): a fresh optimizer, schedule and step counter from step 0; the model must be the same size; recorded in config.json. Ignored by --resume (which continues the stored run).", json_schema_extra=facts(PATH))
    pause_after_steps: Optional[int] = Field(None, description="Checkpoint and stop once this many steps are done (resume later).", json_schema_extra=facts(MUTABLE_ON_RESUME))
    distributed_timeout_s: int = Field(300, description="Multi-process runs: seconds jax.distributed.initialize waits for every process to reach the coordinator.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    log_every_s: float = Field(30.0, description="When the output is not a terminal (nohup, Slurm, tee): seconds between plain progress lines.", json_schema_extra=facts(MUTABLE_ON_RESUME))


    @field_validator("dtype", mode="before")
    @classmethod
    def _dtype_spelling(cls, v: Any) -> Any:
        """Accept the common spellings (bf16, fp32, …); see :func:`pawn.dtypes.canonical_dtype`."""
        return canonical_dtype(v, allow_auto=True) if isinstance(v, str) else v

    @model_validator(mode="before")
    @classmethod
    def _laptop_preset(cls, data: Any) -> Any:
        """The tiny supernet and the toy model are for laptops and first runs: unless given,
        they train on batches of 16 games × 128 plies, validate on 256 games and validate and
        checkpoint every 100 steps, so ``pawn pretrain --supernet tiny --total-steps 300``
        finishes in minutes on a CPU. Every other choice uses the published defaults."""
        if isinstance(data, dict) and (data.get("supernet") == "tiny" or data.get("variant") == "toy"):
            _preset_filled.get().update(k for k in LAPTOP_PRESET if k not in data)
            return {**LAPTOP_PRESET, **data}
        return data

    @field_validator("remat", mode="before")
    @classmethod
    def _remat_bool(cls, v: Any) -> Any:
        """Run configs written before remat modes stored a bool: true = full, false = none."""
        if isinstance(v, bool):
            return "full" if v else "none"
        if isinstance(v, str) and v.lower() in ("true", "false", "1", "0", "yes", "no"):
            return "full" if v.lower() in ("true", "1", "yes") else "none"
        return v

    @property
    def user_set_fields(self) -> set[str]:
        """Fields given on the command line, in the environment or in the config file (not
        defaults, and not values filled in by the laptop preset)."""
        return set(self.model_fields_set) - self._preset_fields

    @model_validator(mode="after")
    def _cross_field(self) -> "PretrainConfig":
        if self.supernet is not None and self.variant is not None:
            raise ValueError("give either supernet or variant, not both")
        if not self.log_every_s >= 0:
            raise ValueError(f"log_every_s must be ≥ 0, got {self.log_every_s}")
        if self.total_steps is None:
            if self.resume is None:
                raise ValueError(f"total_steps: {_REQUIRED_TOTAL_STEPS}")
            return self  # resuming: the stored run config supplies it and is validated when merged
        for name in ("total_steps", "batch_size", "seq_len", "val_every", "checkpoint_every", "prefetch_chunks", "accumulation_steps"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.batch_size % self.accumulation_steps:
            raise ValueError(f"batch_size ({self.batch_size}) must be a multiple of accumulation_steps ({self.accumulation_steps})")
        for name in ("val_games", "keep_checkpoints"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be ≥ 0, got {getattr(self, name)}")
        if self.distributed_timeout_s <= 0:
            raise ValueError(f"distributed_timeout_s must be > 0, got {self.distributed_timeout_s}")
        if self.patience is not None:
            if self.patience <= 0:
                raise ValueError(f"patience must be > 0, got {self.patience}")
            if self.val_games == 0:
                raise ValueError("patience needs validation: set val_games > 0")
        if self.seq_len > MAX_SEQ_LEN:
            raise ValueError(f"seq_len ({self.seq_len}) exceeds the model context max_seq_len ({MAX_SEQ_LEN})")
        if self.prepend_outcome and self.seq_len < 2:
            raise ValueError("seq_len must be ≥ 2 with prepend_outcome (outcome token + at least one move)")
        if not 0.0 <= self.mate_boost <= 1.0:  # the optimizer and schedule ranges are OptimizerSettings's fields
            raise ValueError(f"mate_boost must be in [0, 1], got {self.mate_boost}")
        self.schedule()  # raises ValueError naming warmup/decay/cooldown vs total_steps
        k = self.chunk_steps
        for name in ("total_steps", "val_every", "checkpoint_every", "pause_after_steps"):
            v = getattr(self, name)
            if v is not None and (v <= 0 or v % k):
                if self.steps_per_chunk is not None:
                    raise ValueError(f"{name} ({v}) must be a positive multiple of steps_per_chunk ({k})")
                # K was not set: say where it came from, and which K would fit (not a value the user never gave)
                g = math.gcd(math.gcd(math.gcd(self.total_steps, self.val_every), self.checkpoint_every), max(v, 0))
                fit = max(d for d in range(1, min(g, 50) + 1) if g % d == 0) if g else 1
                raise ValueError(f"{name} ({v}) must be a positive multiple of the steps per compiled chunk, here {k} (the "
                                 "largest divisor up to 50 of total_steps, val_every and checkpoint_every); choose a "
                                 f"multiple of {k}, or set steps_per_chunk (e.g. {fit})")
        return self

    # ---------------------------------------------------------------- resolved values
    @property
    def resolved_warmup_steps(self) -> int:
        """W: ``warmup_steps`` if given, else ``int(warmup_frac · total_steps)``."""
        return self.warmup_for(self.total_steps)

    @property
    def chunk_steps(self) -> int:
        """K, the steps per compiled chunk (see the class docstring for the default)."""
        if self.steps_per_chunk is not None:
            if self.steps_per_chunk <= 0:
                raise ValueError(f"steps_per_chunk must be > 0, got {self.steps_per_chunk}")
            return self.steps_per_chunk
        g = math.gcd(math.gcd(self.total_steps, self.val_every), self.checkpoint_every)
        return max(d for d in range(1, min(g, 50) + 1) if g % d == 0)

    def schedule(self) -> Schedule:
        """The resolved LR schedule over ``total_steps`` (spec §2; :meth:`OptimizerSettings.lr_schedule_over`)."""
        return self.lr_schedule_over(self.total_steps)

    def model_configs(self) -> tuple[ModelConfig, dict[str, ModelConfig]]:
        """``(stored model config, {variant name: config})``. For a supernet the stored model
        is the supernet and the dict its nested variants (all trained jointly); for a single
        variant both are that config."""
        if self.variant is not None:
            cfg = NAMED_CONFIGS[self.variant]
            return cfg, {self.variant: cfg}
        sup, variants = SUPERNETS[self.supernet or "large"]
        return sup, dict(variants)

    @property
    def layout(self) -> Layout:
        """The sequence layout this run trains with (``prepend_outcome``)."""
        return Layout.of(self.prepend_outcome)

    @property
    def max_ply(self) -> int:
        """Plies per game: seq_len, or seq_len − 1 with the outcome prefix (spec engine §3.4)."""
        return self.layout.max_ply(self.seq_len)


def _name_sources(msg: str, sources: dict[str, tuple[str, str]]) -> str:
    """``msg`` with each field name that came from a flag or an environment variable written as
    that flag or variable (``total_steps must be > 0`` → ``--total-steps must be > 0``); a field
    from a config file keeps its name, which is what the file says. Only names with an underscore
    are renamed (``strategy``, ``data`` or ``out`` may be plain words in a message), and only as
    whole words that start the message or follow a space or ``(``."""
    for field, (kind, name) in sorted(sources.items(), key=lambda kv: -len(kv[0])):
        if kind in ("flag", "env") and "_" in field:
            msg = re.sub(rf"(?<![^\s(]){re.escape(field)}(?![\w])", name, msg)
    return msg


def format_validation_error(e: ValidationError, sources: Optional[dict[str, tuple[str, str]]] = None) -> str:
    """One line per problem, naming the field (or the model for cross-field rules).

    ``sources`` (:meth:`CommandSettings.field_sources`) maps a field to where its value came
    from; such a field is named by that source: ``--lr: Input should be a finite number``,
    ``PAWN_LORA_RANK: Input should be a valid integer ...``, ``c1.toml: lora_rnak: unknown field``.
    """
    sources = sources or {}
    lines = []
    for err in e.errors():
        # a list item is "item N (value)", 1-based, not pydantic's ".0" index: --lora-targets item 2 ('x')
        loc = "".join(str(p) if i == 0 else (f" item {p + 1}" if isinstance(p, int) else f".{p}")
                      for i, p in enumerate(err["loc"]))
        if err["loc"] and isinstance(err["loc"][-1], int) and isinstance(err.get("input"), (str, int, float)):
            loc += f" ({err['input']!r})"
        msg = err["msg"].removeprefix("Value error, ")
        kind, name = sources.get(str(err["loc"][0]), (None, None)) if err["loc"] else (None, None)
        if not loc:  # a cross-field rule: its message names the fields, each by its source when known
            lines.append(_name_sources(msg, sources))
            continue
        if err["type"] == "missing":
            msg = "required (set --" + loc.replace("_", "-") + ", PAWN_" + loc.upper() + " or the config file)"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field"
        if kind in ("flag", "env"):  # the flag or variable names the field: --lr, PAWN_LR[ item 2 (…)]
            loc = name + loc[len(str(err["loc"][0])):]
        elif kind == "file":
            loc = f"{name}: {loc}"
        lines.append(f"{loc}: {msg}")
    return "; ".join(lines)
