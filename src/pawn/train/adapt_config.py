"""``pawn adapt``'s run configuration (spec ``training-and-adapters.md`` §3 "AdapterConfig", §5):
one pydantic-settings model, so every field is a flag (``--lora-rank 8``), a ``PAWN_*`` variable
(``PAWN_LORA_RANK=8``) and a ``--config`` file key, exactly as for ``pawn pretrain``.

The strategy settings are not declared here: they are derived from the strategy table
(:data:`pawn.adapters.STRATEGIES`), one setting per distinct :meth:`~pawn.adapters.Strategy.flags`
name (v1's flat names: ``lora_rank``, ``bottleneck_dim``, ``adapter_layers``, …), with the
strategies' own help text. Their default here is None, meaning "the strategy's own default"
(``--bottleneck-dim`` unset builds the same adapter as ``build_adapted("bottleneck")``), so a
strategy's defaults have one home, its settings model. A strategy added to the table gets its
flags, environment variables and config keys with no edit here.
"""

from __future__ import annotations

import math
import typing
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Optional

from pydantic import BeforeValidator, Field, create_model, field_validator, model_validator
from pydantic_settings import NoDecode

from pawn.adapters.registry import STRATEGIES, Strategy, get_strategy

from pawn.data.layout import Layout
from pawn.dtypes import canonical_dtype
from pawn.errors import UsageError
from pawn.schedules import Schedule
from pawn.settings import MUTABLE_ON_RESUME, NOT_RUN_IDENTITY, PATH, RECIPE, OptimizerSettings, RunOutputSettings, facts
from pawn.vocab import MAX_SEQ_LEN

DEFAULT_DATA = "thomas-schweich/pawn-lichess-full"
"""The published Lichess dataset (spec §3 ``pgn`` default)."""


def _layers(v: Any) -> Any:
    """A comma list (``"4,5,6,7"``) or a list of ints → tuple of ints; None stays None."""
    if v is None or v == "":
        return None
    if isinstance(v, str):
        try:
            return tuple(int(x) for x in v.replace(" ", "").split(",") if x != "")
        except ValueError:
            raise ValueError(f"expected a comma-separated list of layer indices, got {v!r}") from None
    return tuple(int(x) for x in v)


def _names(v: Any) -> Any:
    if v is None or v == "":
        return None
    if isinstance(v, str):
        return tuple(x for x in v.replace(" ", "").split(",") if x != "")
    return tuple(v)


COMMON_SETTINGS = frozenset({"seed"})
"""Strategy settings fields set by a trainer-wide :class:`AdaptSettings` field of the same name
(``specialized_clm``'s ``seed`` is the run's ``--seed``) instead of a derived flag."""


def _int_literal(v: Any) -> Any:
    """``"2"`` → 2 for an integer ``Literal`` (flags and variables arrive as strings)."""
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return v


def _shown(v: Any) -> str:
    """A default as a user types it (``q,k,v,o``, not a tuple repr)."""
    if isinstance(v, (tuple, list)):
        return ",".join(map(str, v))
    return str(v).lower() if isinstance(v, bool) else str(v)


def _strategy_flag_fields(rows: dict[str, Strategy]) -> dict[str, tuple[Any, Any]]:
    """One settings field per distinct ``pawn adapt`` name of the rows' :meth:`~pawn.adapters.Strategy.flags`
    (less :data:`COMMON_SETTINGS`), for :func:`pydantic.create_model`: the strategy field's
    type and constraints, made optional (None = the strategy's own default), its description
    plus the strategies that read it and their defaults, comma-list parsing for tuples."""
    specs: dict[str, dict] = {}
    for row in rows.values():
        for f, flag in row.flags().items():
            if flag.name in COMMON_SETTINGS:
                continue
            info = row.settings.model_fields[f]
            sp = specs.setdefault(flag.name, {"info": info, "negated": flag.negated, "defaults": {}})
            d = info.get_default(call_default_factory=True)
            sp["defaults"][row.name] = (not d) if flag.negated else d
    out: dict[str, tuple[Any, Any]] = {}
    for name, sp in specs.items():
        info, defaults = sp["info"], sp["defaults"]
        ann = bool if sp["negated"] else info.annotation
        inner = ann
        if typing.get_origin(inner) is typing.Union:
            inner = next(a for a in typing.get_args(inner) if a is not type(None))
        extra: list[Any] = []
        if typing.get_origin(inner) is tuple:
            elem = typing.get_args(inner)[0]
            extra = [NoDecode, BeforeValidator(_layers if elem is int else _names)]
        elif typing.get_origin(inner) is Literal and all(isinstance(a, int) for a in typing.get_args(inner)):
            extra = [BeforeValidator(_int_literal)]
        meta = [] if sp["negated"] else list(info.metadata)  # constraints on the Optional: flags get click ranges
        typ = Annotated[Optional[ann], *meta, *extra] if meta or extra else Optional[ann]
        if sp["negated"]:  # a --no-X flag of an on-by-default field X: say the default of X, not of "no X"
            defaults = {k: "off" if v else "on" for k, v in defaults.items()}
        values = set(map(_shown, defaults.values()))
        if all(v is None for v in defaults.values()):
            shown = ""
        elif len(values) == 1:
            shown = f"; default {values.pop()}"
        else:
            shown = "; default " + ", ".join(f"{k} {_shown(v)}" for k, v in defaults.items())
        desc = f"{(info.description or '').strip()} ({', '.join(defaults)}{shown})"
        schema = {"flag": f"--{name.replace('_', '-')}/--{name[3:].replace('_', '-')}"} if name.startswith("no_") and ann is bool else None
        out[name] = (typ, Field(None, description=desc, json_schema_extra=schema))
    return out


class _AdaptHead(OptimizerSettings, RunOutputSettings):
    # ------------------------------------------------------------------ backbone and strategy
    backbone: Optional[str] = Field(None, description="Backbone checkpoint directory or Hub id (the positional argument; read from the checkpoint with --resume).", json_schema_extra=facts(MUTABLE_ON_RESUME, PATH))
    variant: Optional[str] = Field(None, description="For a supernet backbone: the nested variant to adapt (small, base, large).", json_schema_extra=facts(RECIPE))
    strategy: Optional[str] = Field(None, description=f"Adapter strategy (see --list-strategies): {', '.join(STRATEGIES)}.")
    seed: int = Field(0, ge=0, description="Adapter initialisation seed (LoRA A, bottleneck down, specialized_clm weights).", json_schema_extra=facts(RECIPE))
    lr: Optional[float] = OptimizerSettings.default_for(
        "lr", None, description="Peak learning rate; default: the strategy's own (the lr column of --list-strategies, measured per "
                                "strategy on a trained backbone).")


STRATEGY_FLAGS: dict[str, tuple[Any, Any]] = _strategy_flag_fields(STRATEGIES)
"""The derived strategy settings: ``pawn adapt`` name → (type, field), from :data:`pawn.adapters.STRATEGIES`."""

_StrategySettings = create_model("_StrategySettings", __base__=_AdaptHead, __module__=__name__, **STRATEGY_FLAGS)


class AdaptSettings(_StrategySettings):
    """Configuration of ``pawn adapt`` (the published adapters' v1 settings; v1 names canonical).

    Defaults decided here: AdamW with v1's library betas (0.9, 0.999), weight decay 0 and clip 1.0
    (the published v1 adapter results were produced with these); cosine to zero (``min_lr_ratio = 0``);
    ``batch_size 64`` and ``seq_len 256`` so a first run fits a laptop (the v1 anchors used batch
    128 and 512-ply sequences: pass them); ``val_games 50,000`` (v1's); K (``steps_per_chunk``)
    = the largest divisor ≤ 32 of gcd(steps_per_epoch, eval_interval, checkpoint_interval).
    ``steps_per_epoch`` unset = ``"all"`` (``n_train // batch_size``).

    The logging sinks and the Hub push (``tensorboard``, ``wandb*``, ``push_to_hub``, ``hub_*``)
    are :class:`pawn.settings.RunOutputSettings`'s, as for ``pawn pretrain``.
    """

    field_help: ClassVar[dict[str, str]] = {
        "tensorboard": "Also write TensorBoard event files (pawn[tensorboard]).",
        "wandb": "Also log to Weights & Biases (pawn[wandb]).",
        "wandb_mode": "W&B mode.",
        "push_to_hub": "Push every checkpoint (adapter weights, model card) to this Hugging Face model repo (owner/name; created "
                       "if missing) as one commit each, in the background; outcomes are hub records in metrics.jsonl. Refused "
                       "at start with HF_HUB_OFFLINE=1.",
        "weight_decay": "AdamW weight decay (trainable leaves only).",
        "beta2": "AdamW β2 (v1 adapters: 0.999).",
        "max_grad_norm": "Global-norm gradient clip (trainable leaves only).",
    }

    # ------------------------------------------------------------------ data (spec §6)
    data: str = Field(DEFAULT_DATA, description="Lichess games: a PGN file or folder, a parquet file or folder (pawn-lichess-full schema), or a Hub dataset id.", json_schema_extra=facts(PATH))
    split: str = Field("train", description="Training split of a Hub or split parquet dataset.")
    elo_min: Optional[int] = Field(None, ge=0, description="Both players' Elo ≥ this.")
    elo_max: Optional[int] = Field(None, ge=0, description="Both players' Elo < this.")
    min_ply: int = Field(10, ge=0, description="Drop games with fewer plies.")
    max_games: Optional[int] = Field(None, ge=1, description="Keep at most this many filtered games (in source order).")
    val_games: int = Field(50_000, ge=1, description="Validation games: the source's validation split, else the tail min(val_games, n // 5).", json_schema_extra=facts(RECIPE))
    test_games: int = Field(0, ge=0, description="Also hold out this many test games, carved as validation is: the source's test split, else the min(test_games, n // 5) games just before the validation tail (the validation games stay the same); never trained or validated on. Evaluate with pawn eval OUT/best --split test. Recorded with the source fingerprint in OUT/split.json.")
    cache_dir: Optional[Path] = Field(None, description="Root of the game caches (default $PAWN_DATA_CACHE, $HF_HOME or ~/.cache).", json_schema_extra=facts(MUTABLE_ON_RESUME, PATH))
    data_seed: Optional[int] = Field(None, ge=0, description="Seed of the per-epoch shuffles (default: a random 31-bit seed, stored with the run).", json_schema_extra=facts(NOT_RUN_IDENTITY))
    # ------------------------------------------------------------------ sizing and optimisation (spec §5)
    epochs: int = Field(50, ge=1, description="Passes over steps_per_epoch batches.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    steps_per_epoch: Optional[int] = Field(None, ge=1, description="Batches per epoch (default all full batches: n_train // batch_size).")
    batch_size: int = Field(64, ge=1, description="Games per step.", json_schema_extra=facts(RECIPE))
    seq_len: int = Field(256, ge=2, le=MAX_SEQ_LEN, description="Sequence length (plies kept per game); when not given, the backbone's trained context (its run's seq_len), else this default.", json_schema_extra=facts(RECIPE))
    # lr, the schedule and AdamW (lr … max_grad_norm): OptimizerSettings's fields, with its defaults (spec §5)
    disable_legal_mask: bool = Field(False, description="Plain full-vocabulary cross-entropy instead of the legal-move mask. An adapter trained under the mask (the default) must be decoded under it (pawn eval's legal-masked top-1, pawn generate --mask-illegal).", json_schema_extra={"flag": "--no-legal-mask/--legal-mask"})
    illegal_penalty: float = Field(0.0, ge=0, description="With --no-legal-mask: add λ · mean softmax mass on illegal moves to the loss.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field("auto", description="Compute dtype; auto = fp32 on CPU, bf16 on accelerators (never fp16).", json_schema_extra=facts(RECIPE))
    steps_per_chunk: Optional[int] = Field(None, ge=1, description="K: optimizer steps per compiled chunk (must divide steps_per_epoch).")
    # ------------------------------------------------------------------ validation, checkpoints, output
    val_every: int = Field(1, ge=1, description="Validate after every N-th epoch (and after the last).", json_schema_extra=facts(RECIPE))
    eval_interval: Optional[int] = Field(None, ge=1, description="Validate every N steps instead of per epoch.")
    checkpoint_interval: Optional[int] = Field(None, ge=1, description="Also checkpoint every N steps (checkpoints are always written after each validation and at exit).")
    checkpoint_every_minutes: float = Field(30.0, ge=0, description="Also write a step checkpoint once this many minutes have passed since the last one (0: off), and shorten compiled chunks (when --steps-per-chunk is not given) to take about this long at most, so a stop waits for no longer and a killed run loses no more.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    keep_checkpoints: int = Field(3, ge=0, description="Keep the newest N step checkpoints (0 keeps all); the best is always kept.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    patience: Optional[int] = Field(None, ge=1, description="Stop after N validations in a row without a strictly lower val loss.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    out: Optional[Path] = Field(None, description="Run directory; default runs/adapt-<strategy>-<time>.", json_schema_extra=facts(MUTABLE_ON_RESUME))
    resume: Optional[str] = Field(None, description="A checkpoint directory, a run directory, or 'auto' (latest in --out).", json_schema_extra=facts(MUTABLE_ON_RESUME))
    init_from: Optional[Path] = Field(None, description="Start this new run from an adapter checkpoint's weights only (a checkpoint directory, or a run directory: its best checkpoint): the same strategy on the same backbone, with the checkpoint's adapter settings; a fresh optimizer, schedule and step counter from step 0; recorded in config.json. Ignored by --resume (which continues the stored run).", json_schema_extra=facts(PATH))
    pause_after_steps: Optional[int] = Field(None, ge=1, description="Checkpoint and stop once this many steps are done (resume later).", json_schema_extra=facts(MUTABLE_ON_RESUME))
    log_every_s: float = Field(30.0, ge=0, description="When the output is not a terminal: seconds between plain progress lines.", json_schema_extra=facts(MUTABLE_ON_RESUME))

    @field_validator("dtype", mode="before")
    @classmethod
    def _dtype_spelling(cls, v: Any) -> Any:
        return canonical_dtype(v, allow_auto=True) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _cross_field(self) -> "AdaptSettings":
        if self.strategy is not None and self.strategy not in STRATEGIES:
            raise ValueError(f"strategy: unknown {self.strategy!r}; choose from {', '.join(STRATEGIES)}")
        if self.illegal_penalty > 0 and not self.disable_legal_mask:
            raise ValueError("illegal_penalty > 0 needs --no-legal-mask (under the hard mask illegal moves have no mass)")
        if self.elo_min is not None and self.elo_max is not None and self.elo_min >= self.elo_max:
            raise ValueError(f"elo_min ({self.elo_min}) must be below elo_max ({self.elo_max}): the band is [min, max)")
        if self.steps_per_epoch is not None and self.steps_per_chunk is not None and self.steps_per_epoch % self.steps_per_chunk:
            raise ValueError(f"steps_per_chunk ({self.steps_per_chunk}) must divide steps_per_epoch ({self.steps_per_epoch})")
        if self.strategy is not None:
            row = STRATEGIES[self.strategy]
            init_scale = getattr(self, "init_scale", None)
            if init_scale is not None and init_scale != 1.0 and not row.random_init:
                raise ValueError(f"init_scale: strategy {self.strategy} has no random adapter weights to scale (it starts at "
                                 f"exactly the backbone); leave init_scale at 1")
            try:  # the strategy's own checks, at parse time (a run refuses before it loads anything)
                row.parse(self.strategy_settings(self.strategy))
            except Exception as e:  # AdapterConfigError: one line naming the strategy and field
                raise ValueError(str(e)) from None
            if self.lr is None:  # the strategy's default, resolved here so config.json records it; not user-set
                object.__setattr__(self, "lr", row.lr)
        return self

    # ------------------------------------------------------------------ resolved values
    @property
    def user_set_fields(self) -> set[str]:
        """Fields given by flag, environment or config file (not defaults)."""
        return set(self.model_fields_set)

    @property
    def layout(self) -> Layout:
        """Adapters train on pure moves (the published backbones' layout, spec §5)."""
        return Layout.of(False)

    def check_startable(self) -> None:
        """A fresh run needs a backbone and a strategy (checked at run start, not at parse time,
        so ``--list-strategies`` and the positional BACKBONE work).

        Raises:
            UsageError: naming the missing one.
        """
        if self.backbone is None:
            raise UsageError("backbone: required (the BACKBONE argument, PAWN_BACKBONE or the config file)")
        if self.strategy is None:
            raise UsageError("strategy: required (--strategy; see --list-strategies)")

    def strategy_settings(self, strategy: str) -> dict:
        """The settings dict of ``strategy`` (its :class:`~pawn.adapters.Strategy` settings model's
        field names) from this configuration: every strategy setting that is set (not None),
        mapped through the row's :meth:`~pawn.adapters.Strategy.flags` (``lora_rank`` → ``rank``,
        ``no_adapt_attn`` → ``adapt_attn = False``); unset ones take the strategy's defaults.

        Raises:
            AdapterConfigError: unknown strategy.
        """
        out = {}
        for f, flag in get_strategy(strategy).flags().items():
            v = getattr(self, flag.name, None)
            if v is not None:
                out[f] = (not v) if flag.negated else v
        return out

    def adapter_settings(self) -> dict:
        """The settings dict of this run's strategy (:meth:`strategy_settings`)."""
        return self.strategy_settings(self.strategy)

    def unused_strategy_fields(self) -> list[str]:
        """Strategy settings given by flag, environment or config file that this run's strategy
        does not read (``--lora-rank`` with ``--strategy film``), sorted; empty without a
        strategy. Which settings a strategy reads is its row's :meth:`~pawn.adapters.Strategy.flags`."""
        if self.strategy is None:
            return []
        used = {flag.name for flag in STRATEGIES[self.strategy].flags().values()}
        return sorted((self.user_set_fields & set(STRATEGY_FLAGS)) - used)

    def chunk_steps(self, steps_per_epoch: int) -> int:
        """K: ``steps_per_chunk``, else the largest divisor ≤ 32 of gcd(steps_per_epoch,
        eval_interval, checkpoint_interval, pause_after_steps) (those set)."""
        if self.steps_per_chunk is not None:
            return self.steps_per_chunk
        g = steps_per_epoch
        for v in (self.eval_interval, self.checkpoint_interval, self.pause_after_steps):
            if v is not None:
                g = math.gcd(g, v)
        return max(d for d in range(1, min(g, 32) + 1) if g % d == 0)

    def schedule(self, total_steps: int) -> Schedule:
        """The LR schedule over ``total_steps`` (spec §2; :meth:`~pawn.settings.OptimizerSettings.lr_schedule_over`).

        Raises:
            ValueError: warmup/decay lengths that do not fit (named).
        """
        return self.lr_schedule_over(total_steps)
