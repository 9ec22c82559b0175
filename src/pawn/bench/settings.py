"""Settings of one ``pawn bench`` run: a pydantic-settings model in the same idiom as
:class:`pawn.settings.PretrainConfig` (command-line flag > ``PAWN_BENCH_*`` environment variable >
``--config`` file > defaults; unknown fields are errors), with ``Field`` range constraints.

The model size and the train step's batch shape default to the pretrain laptop preset
(:data:`pawn.settings.LAPTOP_PRESET`: the tiny supernet on 16 games × 128 plies); the optimizer is
the pretraining one, read from :class:`~pawn.settings.PretrainConfig`'s defaults
(:func:`pretrain_optimizer`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Sequence

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from pawn.config import NAMED_CONFIGS, SUPERNETS, ModelConfig
from pawn.dtypes import canonical_dtype
from pawn.errors import UsageError
from pawn.settings import LAPTOP_PRESET, PretrainConfig, _Settings
from pawn.vocab import MAX_SEQ_LEN

_SECTION_NAMES: list[str] = []
"""The registered section names in run order, handed over by :func:`pawn.bench.section.register`
(which sits above this module), for ``--only``'s validation."""


def set_section_names(names: tuple[str, ...]) -> None:
    """Replace the section names ``--only`` accepts (called by :func:`pawn.bench.section.register`)."""
    _SECTION_NAMES[:] = names


def parse_only(values: Optional[Sequence[str]]) -> list[str]:
    """``--only`` values (repeatable, comma lists) → section names in run order.

    Raises:
        UsageError: an unknown name (listing the valid ones).
    """
    if not values:
        return list(_SECTION_NAMES)
    names = {x.strip() for v in values for x in v.split(",") if x.strip()}
    bad = sorted(names - set(_SECTION_NAMES))
    if bad:
        raise UsageError(f"unknown section(s) {', '.join(bad)}; choose from {', '.join(_SECTION_NAMES)}")
    return [n for n in _SECTION_NAMES if n in names]


def concurrency_first(sections: Sequence[str], s: "BenchSettings") -> tuple[list[str], Optional[str]]:
    """The run order when ``--concurrency N`` was set (flag, environment or config file): the
    concurrency section first, the others after it in their usual order, and a note saying so
    (None when nothing moves: concurrency not set, or only by ``--quick``'s preset, not among
    ``sections``, or already first).
    The table asked for then comes first instead of after a half-hour of other sections."""
    out = list(sections)
    given = "concurrency" in s.model_fields_set and not (s.quick and s.concurrency == QUICK_PRESET["concurrency"])
    if not given or "concurrency" not in out or out[0] == "concurrency":
        return out, None
    out.remove("concurrency")
    out.insert(0, "concurrency")
    rest = "; the others follow (Ctrl-C keeps the finished tables), --only concurrency runs it alone" if len(out) > 1 else ""
    return out, f"pawn bench: --concurrency {s.concurrency} given: the concurrency section runs first{rest}"


def resolve_pgn_files(paths: Sequence[Path]) -> tuple[str, ...]:
    """``--pgn`` values (files, or directories of PGN files: ``.pgn`` or compressed as
    :data:`pawn.data.pgn_stream.PGN_SUFFIXES` lists, e.g. ``.pgn.zst``) → the files, in order.

    Raises:
        UsageError: a path that does not exist, or a directory with no PGN file.
    """
    from pawn.data.pgn_stream import pgn_files_in

    files: list[Path] = []
    for f in paths:
        if f.is_dir():
            found = pgn_files_in(f)
            if not found:
                raise UsageError(f"--pgn: no PGN file (.pgn, .pgn.zst, .pgn.gz, .pgn.bz2) in directory {f}")
            files.extend(found)
        elif f.is_file():
            files.append(f)
        else:
            raise UsageError(f"--pgn: no such file {f}")
    return tuple(str(f) for f in files)

QUICK_PRESET: dict[str, Any] = dict(
    variant="toy", supernet=None, batch_size=4, seq_len=32, steps_per_chunk=2, repeats=2, engine_games=200,
    engine_max_ply=128, mask_games=8, chess_games=2, data_chunks=2, concurrency=2, concurrency_chunks=1, decode_games=2,
    decode_len=16, decode_long_games=4, decode_long_len=24, eval_games=8, matmul_n=256,
    adapt_strategies=("lora", "bottleneck"), population_size=2, population_steps=4, population_val_games=8)
"""``--quick``: tiny sizes, every section in well under a minute on two CPU cores. Fields given
on the command line, in the environment or in the config file win over these."""

_MODEL_FIELDS = ("variant", "supernet")


class BenchSettings(_Settings):
    """Sizes of one ``pawn bench`` run (defaults = the full run; ``quick=True`` = the smoke run of
    :data:`QUICK_PRESET`).

    Attributes:
        variant / supernet: the model (a single ``NAMED_CONFIGS`` size, or a ``SUPERNETS`` name
            trained jointly over its variants); exactly one is used, supernet ``tiny`` by default.
        batch_size, seq_len, steps_per_chunk: the train step's B, T (tokens) and K.
        dtype: compute dtype (None or auto = float32 on CPU, bfloat16 on accelerators).
        remat: :data:`pawn.model.REMAT_MODES` or ``"auto"`` (the first that fits the device; the
            memory section then reports every mode).
        engine_games, engine_max_ply: random-game workload of the engine section;
        decode_long_games, decode_long_len: the second decode workload (default 64 games × 257
            positions = 256 plies after the outcome token). The other fields are described on
            their ``Field``.

    Raises (on construction):
        pydantic.ValidationError: a value out of range, an unknown name, both variant and
            supernet, or a batch that does not split into ``accumulation_steps`` micro-batches.
    """

    model_config = SettingsConfigDict(env_prefix="PAWN_BENCH_", extra="forbid", validate_default=True)

    variant: Optional[Literal["toy", "small", "base", "large"]] = Field(None, description="Benchmark one model of this size.")
    supernet: Optional[Literal["tiny", "large"]] = Field("tiny", description="Benchmark the joint step of this supernet (toy variant with --quick).")
    batch_size: int = Field(LAPTOP_PRESET["batch_size"], ge=1, description="Games per train step.")
    seq_len: int = Field(LAPTOP_PRESET["seq_len"], ge=1, le=MAX_SEQ_LEN, description="Train-step sequence length.")
    steps_per_chunk: int = Field(10, ge=1, description="K, optimizer steps per lax.scan chunk.")
    dtype: Optional[Literal["auto", "float32", "bfloat16"]] = Field(None, description="Compute dtype: float32 (fp32) or bfloat16 (bf16); default float32 on CPU, bfloat16 on accelerators.",
                                                                json_schema_extra={"callback": "dtype"})
    remat: Literal["auto", "none", "attention", "full"] = Field("auto", description="Per-layer rematerialisation; auto = the first that fits (the memory section reports all three).")
    accumulation_steps: int = Field(1, ge=1, description="Micro-batches per optimizer step.")
    repeats: int = Field(5, ge=1, description="Timed runs per measurement (median, min, max).")
    warmup: int = Field(1, ge=0, description="Untimed runs before the timed ones.")
    engine_games: int = Field(4000, ge=1, description="Random games per engine repetition.")
    engine_max_ply: int = Field(512, ge=1, description="Ply cap of the engine's random games.")
    mask_games: int = Field(64, ge=1, description="Games whose legal masks are computed.")
    chess_games: int = Field(20, ge=0, description="python-chess random games per repetition.")
    data_chunks: int = Field(4, ge=1, description="Chunks timed in the data-wait measurement.")
    concurrency: int = Field(2, ge=1, description="Run 1..N independent training processes at once (spawned).")
    concurrency_chunks: int = Field(3, ge=1, description="Chunks timed per concurrent process.")
    decode_games: int = Field(8, ge=1, description="Games of the first decode workload.")
    decode_len: int = Field(128, ge=2, le=MAX_SEQ_LEN, description="Sequence length of the first decode workload.")
    decode_long_games: int = Field(64, ge=1, description="Games of the long decode workload.")
    decode_long_len: int = Field(257, ge=2, le=MAX_SEQ_LEN, description="Sequence length of the long decode workload.")
    eval_games: int = Field(64, ge=1, description="Games scored by the teacher-forced evaluation.")
    matmul_n: int = Field(1024, ge=1, description="Size of the CPU peak matmul.")
    pgn_files: tuple[str, ...] = Field((), description="PGN file (.pgn, or compressed: .pgn.zst, .pgn.gz, .pgn.bz2), or a directory of them, for the parsing workload (repeatable), e.g. "
                                       "Lichess exports; default: the random games written as PGN.", json_schema_extra={"flag": "--pgn"})
    adapt_data: Optional[str] = Field(None, description="Lichess games (PGN/parquet file or folder, Hub dataset id) of the adapt and population sections; default $PAWN_SHARED_DIR/data/lichess, else ../shared/data/lichess, else examples/lichess (the repository's sample) from the working directory; when none exists the sections time engine random games and say so.")
    adapt_strategies: tuple[str, ...] = Field(("lora", "film", "bottleneck", "hybrid", "sparse", "unfreeze"), description="Adapter strategies the adapt section times against full fine-tuning (repeatable).")
    population_size: int = Field(4, ge=1, description="P, trials of the population section trained as one vmapped program (and one after another).")
    population_strategy: str = Field("lora", description="Adapter strategy of the population section's adapter trials (not the RoSA family).")
    population_steps: int = Field(20, ge=2, description="Steps per trial of the population section (even: validation halfway and at the end); trials/hour are per this many steps.")
    population_val_games: int = Field(32, ge=1, description="Validation games of the population section's end-to-end trials.")
    population_end_to_end: bool = Field(True, description="The population section also times whole trials (population run vs sequential runs).")
    quick: bool = Field(False, description="Every section at tiny sizes (a smoke run).")
    seed: int = Field(0, description="Game stream seed of the train-step and data sections.")
    only: Annotated[Optional[tuple[str, ...]], NoDecode] = Field(
        None, description="Run only these sections (repeatable or comma list): memory, engine, step, mfu, data, concurrency, "
                          "eval, decode, adapt, population. Default: all.", json_schema_extra={"flag": "--only", "repeatable": True})
    json_out: Optional[Path] = Field(None, description="Write every figure and the exact settings to this JSON file.",
                                     json_schema_extra={"flag": "--json"})

    @model_validator(mode="before")
    @classmethod
    def _quick_preset(cls, data: Any) -> Any:
        """``quick``: :data:`QUICK_PRESET` under every value given (a given variant or supernet
        replaces the preset's model choice)."""
        if isinstance(data, dict) and str(data.get("quick", "")).lower() in ("true", "1", "yes"):
            preset = dict(QUICK_PRESET)
            if any(data.get(k) is not None for k in _MODEL_FIELDS):
                for k in _MODEL_FIELDS:
                    preset.pop(k)
                    data.setdefault(k, None)
            return {**preset, **data}
        if isinstance(data, dict) and data.get("variant") is not None and "supernet" not in data:
            return {**data, "supernet": None}  # --variant alone replaces the default supernet
        return data

    @field_validator("pgn_files", mode="before")
    @classmethod
    def _pgn_folders(cls, v: Any) -> Any:
        """Directories expand to their ``*.pgn`` files (see :func:`resolve_pgn_files`)."""
        if isinstance(v, str):
            v = [v]
        return resolve_pgn_files([Path(p) for p in v]) if v else ()

    @field_validator("only", mode="before")
    @classmethod
    def _sections(cls, v: Any) -> Any:
        """``--only`` values (repeated flags, comma lists, a config-file list or a comma string)
        → the section names in run order (see :func:`parse_only`); None = all."""
        if v is None or v == "":
            return None
        try:
            return tuple(parse_only([v] if isinstance(v, str) else [str(x) for x in v]))
        except UsageError as e:
            raise ValueError(str(e)) from None

    @field_validator("dtype", mode="before")
    @classmethod
    def _dtype_spelling(cls, v: Any) -> Any:
        """Accept the common spellings (bf16, fp32, …); see :func:`pawn.dtypes.canonical_dtype`."""
        return canonical_dtype(v, allow_auto=True) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _cross_field(self) -> "BenchSettings":
        if self.variant is not None and self.supernet is not None:
            raise ValueError("give either --variant or --supernet, not both")
        if self.batch_size % self.accumulation_steps:
            raise ValueError(f"batch_size {self.batch_size} is not a multiple of accumulation_steps {self.accumulation_steps}")
        if self.population_steps % 2:
            raise ValueError(f"population_steps must be even (validation halfway and at the end), got {self.population_steps}")
        return self

    @classmethod
    def quick_defaults(cls) -> dict[str, Any]:
        """The ``--quick`` sizes (:data:`QUICK_PRESET`) with ``quick=True``."""
        return {**QUICK_PRESET, "quick": True}

    @classmethod
    def defaults(cls, quick: bool = False) -> "BenchSettings":
        """The default (or ``--quick``) settings, ignoring the environment and config file."""
        return cls.model_construct(**(cls.quick_defaults() if quick else {}))

    def model(self) -> tuple[ModelConfig, list[tuple[ModelConfig, float]], str]:
        """``(stored config, [(variant config, weight 1.0)], label)``."""
        if self.variant is not None:
            cfg = NAMED_CONFIGS[self.variant]
            return cfg, [(cfg, 1.0)], f"variant {self.variant}"
        name = self.supernet or "tiny"
        sup, variants = SUPERNETS[name]
        return sup, [(c, 1.0) for c in variants.values()], f"supernet {name} ({', '.join(variants)})"

    def check(self) -> None:
        """Kept for callers of the dataclass version: every rule is checked on construction."""

    def remat_candidates(self) -> list[str]:
        """Remat modes to try, cheapest compute first (``auto``: all of them)."""
        from pawn.model import REMAT_MODES

        return list(REMAT_MODES) if self.remat == "auto" else [self.remat]

    def compute_dtype(self) -> Optional[str]:
        """The dtype name passed to the model (None = auto)."""
        return None if self.dtype in (None, "auto") else self.dtype

    def to_dict(self) -> dict[str, Any]:
        """Every field, as written to the ``--json`` report's ``settings``."""
        return self.model_dump()


def pretrain_optimizer():
    """``(optimizer, schedule)`` of the benchmarked train step: pretraining's AdamW, with the peak
    learning rate (held constant), betas, weight decay and clip read from
    :class:`~pawn.settings.PretrainConfig`'s defaults (lr 3e-4, β 0.9/0.95, wd 0.01, clip 1.0)."""
    from pawn.schedules import build_schedule
    from pawn.train.loop import make_optimizer

    d = {k: f.default for k, f in PretrainConfig.model_fields.items()}
    schedule = build_schedule("constant", d["lr"], 10**9, 0)
    opt = make_optimizer(schedule, b1=d["beta1"], b2=d["beta2"], weight_decay=d["weight_decay"], max_grad_norm=d["max_grad_norm"])
    return opt, schedule
