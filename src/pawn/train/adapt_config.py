"""``pawn adapt``'s run configuration (spec ``training-and-adapters.md`` §3 "AdapterConfig", §5):
one pydantic-settings model, so every field is a flag (``--lora-rank 8``), a ``PAWN_*`` variable
(``PAWN_LORA_RANK=8``) and a ``--config`` file key, exactly as for ``pawn pretrain``.

The strategy's own settings (:mod:`pawn.adapters.configs`) are built from the flat v1 field names
(``lora_rank``, ``bottleneck_dim``, ``adapter_layers``, …) by :data:`STRATEGY_SETTINGS`, one entry
per strategy; a strategy added to :data:`pawn.adapters.STRATEGIES` (``rosa``, issue 14) adds its
entry there (and its fields here, or passes them through ``adapter_settings``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Callable, ClassVar, Literal, Optional

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode

from pawn.data.layout import Layout
from pawn.schedules import Schedule, build_schedule
from pawn.settings import RunOutputSettings
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


class AdaptSettings(RunOutputSettings):
    """Configuration of ``pawn adapt`` (spec §3 AdapterConfig, v1 names canonical; §5 training).

    Defaults decided here: AdamW with v1's library betas (0.9, 0.999), weight decay 0 and clip 1.0
    (spec §5: the anchors were produced with these); cosine to zero (``min_lr_ratio = 0``);
    ``batch_size 64`` and ``seq_len 256`` so a first run fits a laptop (the v1 anchors used batch
    128 and 512-ply sequences: pass them); ``val_games 50,000`` (spec); K (``steps_per_chunk``)
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
    }

    # ------------------------------------------------------------------ backbone and strategy
    backbone: Optional[str] = Field(None, description="Backbone checkpoint directory or Hub id (the positional argument; read from the checkpoint with --resume).")
    variant: Optional[str] = Field(None, description="For a supernet backbone: the nested variant to adapt (small, base, large).")
    strategy: Optional[str] = Field(None, description="Adapter strategy (see --list-strategies): lora, film, bottleneck, hybrid, sparse, unfreeze, specialized_clm, rosa, retro-sparse, retro-bottleneck.")
    adapter_layers: Annotated[Optional[tuple[int, ...]], NoDecode] = Field(None, description="Comma list of 0-based layers to adapt (default: all; unfreeze: see --unfreeze-layers).")
    lora_rank: int = Field(4, ge=1, description="LoRA / hybrid rank r.")
    lora_alpha: Optional[float] = Field(None, gt=0, description="LoRA α (default r, i.e. scale 1).")
    lora_targets: Annotated[tuple[Literal["q", "k", "v", "o"], ...], NoDecode] = Field(("q", "k", "v", "o"), description="Comma list of attention projections LoRA adapts (q,k,v,o).")
    lora_ffn: bool = Field(False, description="LoRA also adapts the SwiGLU projections w_gate, w_up, w_down.")
    use_output_film: bool = Field(False, description="FiLM / hybrid: also γ/β on the output logits (2·V parameters).")
    film_layers: Annotated[Optional[tuple[int, ...]], NoDecode] = Field(None, description="Hybrid: comma list of blocks with FiLM γ/β (default all).")
    bottleneck_dim: int = Field(32, ge=1, description="Bottleneck width bn.")
    bottleneck_n_hidden: int = Field(0, ge=0, description="Extra bn×bn hidden stages in each bottleneck.")
    no_adapt_attn: bool = Field(False, description="Bottleneck: no adapter after attention.", json_schema_extra={"flag": "--no-adapt-attn/--adapt-attn"})
    no_adapt_ffn: bool = Field(False, description="Bottleneck: no adapter after the FFN.", json_schema_extra={"flag": "--no-adapt-ffn/--adapt-ffn"})
    density: float = Field(0.01, gt=0, le=1, description="Sparse and the RoSA family: fraction of each targeted matrix that trains (RoSA: exactly max(1, int(density·numel)) per matrix).")
    sparse_targets: Annotated[tuple[Literal["q", "k", "v", "o"], ...], NoDecode] = Field(("q", "k", "v", "o"), description="Comma list of projections the sparse Δ covers.")
    sparse_ffn: bool = Field(False, description="Sparse also covers the SwiGLU projections.")
    rosa_warmup_steps: int = Field(128, ge=0, description="RoSA family: LoRA warm-up steps before the gradient masks (own counter, not main steps; constant --lr).")
    mask_samples: int = Field(32, ge=1, description="RoSA family: batches whose |∂L/∂Δ|^α are summed into the mask score.")
    grad_alpha: int = Field(2, ge=1, le=2, description="RoSA family: mask score exponent α (2 = Fisher diagonal, 1 = gradient magnitude).")
    bottleneck_layers: Annotated[Optional[tuple[int, ...]], NoDecode] = Field(None, description="retro-bottleneck: comma list of layers with bottlenecks (e.g. the top 4; default all); --adapter-layers places the LoRA warm-up and Δ.")
    unfreeze_layers: Annotated[Optional[tuple[int, ...]], NoDecode] = Field(None, description="Unfreeze: comma list of layers (v1); default the top --n-unfreeze.")
    n_unfreeze: int = Field(2, ge=1, description="Unfreeze: the top N layers (when --unfreeze-layers is not given).")
    include_lm_head: bool = Field(False, description="Unfreeze: also train final_norm and lm_head.")
    include_embeddings: bool = Field(False, description="Unfreeze: also train the embedding tables.")
    d_model: int = Field(84, ge=2, description="specialized_clm: model width.")
    n_layers: int = Field(2, ge=1, description="specialized_clm: layers.")
    n_heads: int = Field(2, ge=1, description="specialized_clm: attention heads.")
    specialized_d_ff: int = Field(192, ge=1, description="specialized_clm: FFN width.")
    seed: int = Field(0, ge=0, description="Adapter initialisation seed (LoRA A, bottleneck down, specialized_clm weights).")
    init_scale: float = Field(1.0, gt=0, description="Multiplier on the random init bound 1/√fan_in of LoRA A and the bottleneck down/hidden weights (lora, hybrid, bottleneck, RoSA family; v1: 1). The adapter stays the identity at init (B and up are zero).")
    # ------------------------------------------------------------------ data (spec §6)
    data: str = Field(DEFAULT_DATA, description="Lichess games: a PGN file or folder, a parquet file or folder (pawn-lichess-full schema), or a Hub dataset id.")
    split: str = Field("train", description="Training split of a Hub or split parquet dataset.")
    elo_min: Optional[int] = Field(None, ge=0, description="Both players' Elo ≥ this.")
    elo_max: Optional[int] = Field(None, ge=0, description="Both players' Elo < this.")
    min_ply: int = Field(10, ge=0, description="Drop games with fewer plies.")
    max_games: Optional[int] = Field(None, ge=1, description="Keep at most this many filtered games (in source order).")
    val_games: int = Field(50_000, ge=1, description="Validation games: the source's validation split, else the tail min(val_games, n // 5).")
    cache_dir: Optional[Path] = Field(None, description="Root of the game caches (default $PAWN_DATA_CACHE, $HF_HOME or ~/.cache).")
    data_seed: Optional[int] = Field(None, ge=0, description="Seed of the per-epoch shuffles (default: a random 31-bit seed, stored with the run).")
    # ------------------------------------------------------------------ sizing and optimisation (spec §5)
    epochs: int = Field(50, ge=1, description="Passes over steps_per_epoch batches.")
    steps_per_epoch: Optional[int] = Field(None, ge=1, description="Batches per epoch (default all full batches: n_train // batch_size).")
    batch_size: int = Field(64, ge=1, description="Games per step.")
    seq_len: int = Field(256, ge=2, le=MAX_SEQ_LEN, description="Sequence length (plies kept per game); when not given, the backbone's trained context (its run's seq_len), else this default.")
    lr: float = Field(3e-4, gt=0, description="Peak learning rate.")
    lr_schedule: Literal["cosine", "wsd", "constant", "one_cycle", "infinite"] = Field("cosine", description="Learning-rate schedule after warmup.")
    warmup_steps: Optional[int] = Field(None, ge=0, description="Warmup steps; default int(warmup_frac · total steps).")
    warmup_frac: float = Field(0.05, ge=0, le=1, description="Warmup as a fraction of total steps.")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Cosine floor as a fraction of the peak.")
    decay_frac: float = Field(0.1, ge=0, le=1, description="Final decay fraction (wsd, infinite).")
    wsd_decay_shape: Literal["linear", "cosine"] = Field("linear", description="Final decay shape (wsd, infinite).")
    cooldown_frac: float = Field(0.2, ge=0, le=1, description="Cooldown to the plateau (infinite).")
    stable_lr_ratio: float = Field(0.1, ge=0, le=1, description="Plateau as a fraction of the peak (infinite).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay (trainable leaves only).")
    beta1: float = Field(0.9, ge=0, lt=1, description="AdamW β1.")
    beta2: float = Field(0.999, ge=0, lt=1, description="AdamW β2 (v1 adapters: 0.999).")
    max_grad_norm: float = Field(1.0, gt=0, description="Global-norm gradient clip (trainable leaves only).")
    disable_legal_mask: bool = Field(False, description="Plain full-vocabulary cross-entropy instead of the legal-move mask.", json_schema_extra={"flag": "--no-legal-mask/--legal-mask"})
    illegal_penalty: float = Field(0.0, ge=0, description="With --no-legal-mask: add λ · mean softmax mass on illegal moves to the loss.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field("auto", description="Compute dtype; auto = fp32 on CPU, bf16 on accelerators (never fp16).")
    steps_per_chunk: Optional[int] = Field(None, ge=1, description="K: optimizer steps per compiled chunk (must divide steps_per_epoch).")
    # ------------------------------------------------------------------ validation, checkpoints, output
    val_every: int = Field(1, ge=1, description="Validate after every N-th epoch (and after the last).")
    eval_interval: Optional[int] = Field(None, ge=1, description="Validate every N steps instead of per epoch.")
    checkpoint_interval: Optional[int] = Field(None, ge=1, description="Also checkpoint every N steps (checkpoints are always written after each validation and at exit).")
    keep_checkpoints: int = Field(3, ge=0, description="Keep the newest N step checkpoints (0 keeps all); the best is always kept.")
    patience: Optional[int] = Field(None, ge=1, description="Stop after N validations in a row without a strictly lower val loss.")
    out: Optional[Path] = Field(None, description="Run directory; default runs/adapt-<strategy>-<time>.")
    resume: Optional[str] = Field(None, description="A checkpoint directory, a run directory, or 'auto' (latest in --out).")
    pause_after_steps: Optional[int] = Field(None, ge=1, description="Checkpoint and stop once this many steps are done (resume later).")
    log_every_s: float = Field(30.0, ge=0, description="When the output is not a terminal: seconds between plain progress lines.")

    _split_layers = field_validator("adapter_layers", "film_layers", "unfreeze_layers", "bottleneck_layers", mode="before")(classmethod(lambda cls, v: _layers(v)))
    _split_names = field_validator("lora_targets", "sparse_targets", mode="before")(classmethod(lambda cls, v: _names(v)))

    @field_validator("dtype", mode="before")
    @classmethod
    def _dtype_spelling(cls, v: Any) -> Any:
        from pawn.dtypes import canonical_dtype

        return canonical_dtype(v, allow_auto=True) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _cross_field(self) -> "AdaptSettings":
        if self.strategy is not None and self.strategy not in STRATEGY_SETTINGS:
            from pawn.adapters import STRATEGIES

            raise ValueError(f"strategy: unknown {self.strategy!r}; choose from {', '.join(STRATEGIES)}")
        if self.illegal_penalty > 0 and not self.disable_legal_mask:
            raise ValueError("illegal_penalty > 0 needs --no-legal-mask (under the hard mask illegal moves have no mass)")
        if self.elo_min is not None and self.elo_max is not None and self.elo_min >= self.elo_max:
            raise ValueError(f"elo_min ({self.elo_min}) must be below elo_max ({self.elo_max}): the band is [min, max)")
        if self.init_scale != 1.0 and self.strategy in NO_RANDOM_INIT:
            raise ValueError(f"init_scale: strategy {self.strategy} has no random adapter weights to scale (it starts at "
                             f"exactly the backbone); leave init_scale at 1")
        if self.no_adapt_attn and self.no_adapt_ffn:
            raise ValueError("no_adapt_attn and no_adapt_ffn together leave the bottleneck nothing to adapt")
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(f"specialized_clm: d_model ({self.d_model}) / n_heads ({self.n_heads}) must be an even integer head_dim")
        if self.steps_per_epoch is not None and self.steps_per_chunk is not None and self.steps_per_epoch % self.steps_per_chunk:
            raise ValueError(f"steps_per_chunk ({self.steps_per_chunk}) must divide steps_per_epoch ({self.steps_per_epoch})")
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
        from pawn.errors import UsageError

        if self.backbone is None:
            raise UsageError("backbone: required (the BACKBONE argument, PAWN_BACKBONE or the config file)")
        if self.strategy is None:
            raise UsageError("strategy: required (--strategy; see --list-strategies)")

    def adapter_settings(self) -> dict:
        """The strategy's settings dict (:mod:`pawn.adapters.configs`) from the flat fields."""
        return STRATEGY_SETTINGS[self.strategy](self)

    def unused_strategy_fields(self) -> list[str]:
        """Strategy settings given by flag, environment or config file that this run's strategy
        does not read (``--lora-rank`` with ``--strategy film``), sorted; empty without a
        strategy. Which fields a strategy reads is taken from :data:`STRATEGY_SETTINGS` itself."""
        if self.strategy is None:
            return []
        return sorted((self.user_set_fields & strategy_specific_fields()) - strategy_fields(self.strategy, self))

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
        """The LR schedule over ``total_steps`` (spec §2).

        Raises:
            ValueError: warmup/decay lengths that do not fit (named).
        """
        warm = self.warmup_steps if self.warmup_steps is not None else int(self.warmup_frac * total_steps)
        return build_schedule(self.lr_schedule, self.lr, total_steps, warm, min_ratio=self.min_lr_ratio,
                              decay_frac=self.decay_frac, cooldown_frac=self.cooldown_frac,
                              stable_ratio=self.stable_lr_ratio, decay_shape=self.wsd_decay_shape)


NO_RANDOM_INIT = frozenset({"film", "sparse", "unfreeze", "specialized_clm"})
"""Strategies whose trainable weights start at fixed values (γ = 1, β = 0, Δ = 0, the backbone's
own weights, or a model initialised by its own ``seed``): ``init_scale`` does not apply."""


def _lora(c: AdaptSettings) -> dict:
    return {"rank": c.lora_rank, "alpha": c.lora_alpha, "targets": list(c.lora_targets), "ffn": c.lora_ffn,
            "layers": c.adapter_layers, "init_scale": c.init_scale}


def _rosa(c: AdaptSettings) -> dict:
    """RoSA family (spec §4.6): the LoRA fields (warm-up LoRA, and the targets/layers of Δ) + mask settings."""
    return {**_lora(c), "density": c.density, "rosa_warmup_steps": c.rosa_warmup_steps, "mask_samples": c.mask_samples,
            "grad_alpha": c.grad_alpha}


def _unfreeze(c: AdaptSettings) -> dict:
    sel = {"layers": c.unfreeze_layers} if c.unfreeze_layers is not None else {"top_n": c.n_unfreeze}
    return {**sel, "include_lm_head": c.include_lm_head, "include_embeddings": c.include_embeddings}


STRATEGY_SETTINGS: dict[str, Callable[[AdaptSettings], dict]] = {
    "lora": _lora,
    "film": lambda c: {"layers": c.adapter_layers, "use_output_film": c.use_output_film},
    "bottleneck": lambda c: {"bottleneck_dim": c.bottleneck_dim, "n_hidden": c.bottleneck_n_hidden,
                             "adapt_attn": not c.no_adapt_attn, "adapt_ffn": not c.no_adapt_ffn, "layers": c.adapter_layers,
                             "init_scale": c.init_scale},
    "hybrid": lambda c: {**_lora(c), "film_layers": c.film_layers, "use_output_film": c.use_output_film},
    "sparse": lambda c: {"density": c.density, "targets": list(c.sparse_targets), "ffn": c.sparse_ffn,
                         "layers": c.adapter_layers, "seed": 42},
    "unfreeze": _unfreeze,
    "specialized_clm": lambda c: {"d_model": c.d_model, "n_layers": c.n_layers, "n_heads": c.n_heads,
                                  "d_ff": c.specialized_d_ff, "seed": c.seed},
    "rosa": lambda c: _rosa(c),
    "retro-sparse": lambda c: _rosa(c),
    "retro-bottleneck": lambda c: {**_rosa(c), "bottleneck_dim": c.bottleneck_dim, "n_hidden": c.bottleneck_n_hidden,
                                   "adapt_attn": not c.no_adapt_attn, "adapt_ffn": not c.no_adapt_ffn,
                                   "bottleneck_layers": c.bottleneck_layers},
}
"""Strategy name → ``AdaptSettings -> settings dict`` of :mod:`pawn.adapters.configs`. A new
strategy (e.g. ``rosa``) registers its mapping here."""


class _ReadFields:
    """Stands in for an :class:`AdaptSettings` and records the fields read from it."""

    def __init__(self, cfg: AdaptSettings):
        self._cfg, self.read = cfg, set()

    def __getattr__(self, name: str) -> Any:
        self.read.add(name)
        return getattr(self._cfg, name)


def strategy_fields(strategy: str, cfg: Optional[AdaptSettings] = None) -> frozenset[str]:
    """The :class:`AdaptSettings` fields that ``strategy``'s :data:`STRATEGY_SETTINGS` mapping
    reads from ``cfg`` (default: the defaults), found by running it on a recording stand-in (so
    ``n_unfreeze`` is not read when ``unfreeze_layers`` is given).

    Raises:
        KeyError: an unknown strategy.
    """
    rec = _ReadFields(cfg if cfg is not None else AdaptSettings.model_construct())
    STRATEGY_SETTINGS[strategy](rec)  # type: ignore[arg-type]
    return frozenset(rec.read)


def strategy_specific_fields() -> frozenset[str]:
    """Fields some strategy reads, less ``seed`` (every strategy's adapter init seed)."""
    return frozenset().union(*(strategy_fields(s) for s in STRATEGY_SETTINGS)) - {"seed"}
