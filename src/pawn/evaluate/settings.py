"""Settings of ``pawn eval``, ``pawn probe`` and ``pawn generate`` (spec
``eval-probe-generate-sweep-bench.md`` §1–§3) in the one config idiom of :mod:`pawn.settings`.

Every field is a flag of its command (``--field-name``, or the flag named in
``json_schema_extra``), a ``PAWN_EVAL_*`` / ``PAWN_PROBE_*`` / ``PAWN_GENERATE_*`` environment
variable, or a key of a ``--config`` JSON/TOML file; precedence: command line > environment >
file > defaults. Ranges are ``Field`` constraints; the defaults below are the only copies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from pawn.settings import PATH, VAL_SEED_PUBLISHED, CommandSettings, facts
from pawn.vocab import OUTCOME_NAMES

EVAL_GAMES = 2048
"""``pawn eval``'s random games: the published validation set (spec eval §1.1)."""
SUITE_GAMES = 256
"""``pawn eval --suite``'s random games when ``--games`` is not given (a CPU-sized default)."""

_PREFIX_HELP = "Sequence layout. Default: what the checkpoint records, else pure moves (the published models)."


class _ModelCommand(CommandSettings):
    """Fields every model-reading command shares."""

    variant: Optional[str] = Field(None, description="For a supernet checkpoint: evaluate only this nested variant (default: all).")
    dtype: Optional[str] = Field(None, description="Compute dtype: float32 (fp32) or bfloat16 (bf16). Default: float32 on CPU, bfloat16 on accelerators.", json_schema_extra={"callback": "dtype"})
    json_out: Optional[Path] = Field(None, description="Write every figure and the exact settings to this JSON file.", json_schema_extra={"flag": "--json"})

    @field_validator("dtype", mode="before")
    @classmethod
    def _dtype_spelling(cls, v: Any) -> Any:
        """bf16/fp32/... → the canonical name (:func:`pawn.dtypes.canonical_dtype`); ValueError lists them."""
        from pawn.dtypes import canonical_dtype

        return canonical_dtype(v) if isinstance(v, str) else v


class EvalSettings(_ModelCommand):
    """``pawn eval``: teacher-forced accuracy on random games (spec eval §1) and, with ``pgn``,
    on Lichess games by Elo band (§4.1)."""

    model_config = SettingsConfigDict(env_prefix="PAWN_EVAL_")

    games: Optional[int] = Field(None, ge=1, description=f"Number of games. Default: {EVAL_GAMES:,} (the published validation set), {SUITE_GAMES:,} with --suite (sized for a CPU; --games {EVAL_GAMES} for the published figures).")
    seed: int = Field(VAL_SEED_PUBLISHED, ge=0, le=2**64 - 1, description="Random-game seed; default is the published validation seed 2^63 − 1.")
    max_ply: Optional[int] = Field(None, ge=1, description="Ply cap of the random games; the sequence length is max_ply (+1 with the outcome prefix), capped at the model context. Default: the checkpoint's trained context (its run config's seq_len, less 1 with the outcome prefix), so the numbers match the run's own validation; 512 for a checkpoint that records none (published models).")
    batch_size: int = Field(256, ge=1, description="Games per model call; also the batch of the published per-batch means (256 in the published runs).")
    late_ply: Optional[int] = Field(None, description="First sequence position of the late-game legal rate (default: sequence length // 2 = 256).")
    pgn: Optional[Path] = Field(None, description="Also evaluate on Lichess games from this PGN file (or folder of .pgn files, or a named pipe such as <(zstdcat month.pgn.zst)), by Elo band.")
    elo_edges: str = Field("600,1000,1400,1800,2200", description="Comma-separated Elo band edges for --pgn, by the average of both players' Elo (pawn adapt --elo-min/--elo-max bound both players).")
    pgn_games_per_band: int = Field(1000, ge=1, description="At most this many games per Elo band.")
    pgn_min_ply: int = Field(10, ge=0, description="Skip PGN games shorter than this.")
    split: Optional[Literal["val", "test"]] = Field(None, description="For an adapter checkpoint of a pawn adapt run: evaluate on that run's held-out validation or test games (pawn adapt --test-games), re-derived from the source and rule its split.json records; refused if the source changed since.")
    pgn_only: bool = Field(False, description="Skip the random-game pass (it says nothing about a player model); needs --pgn or --split.")
    cache_dir: Optional[Path] = Field(None, description="Game cache root for --split (default: the run's --cache-dir, else $PAWN_DATA_CACHE, $HF_HOME or ~/.cache).", json_schema_extra=facts(PATH))
    prepend_outcome: Optional[bool] = Field(None, description=_PREFIX_HELP, json_schema_extra={"flag": "--prepend-outcome/--pure-moves"})
    suite: bool = Field(False, description="The whole backbone evaluation in one command (v2 run_evals_backbone): the random-game eval, the nine linear probes and the outcome diagnostics (the five outcome-conditioned tests, skipped for a pure-moves model, and the edge-case legality), written to ONE JSON that pawn report shows (--json, default eval_suite_<checkpoint>.json in the checkpoint's run directory, else in the current one). Sized for a CPU by --games, --probe-games, --probe-epochs, --diagnostic-games and --edge-positions.")
    probe_games: int = Field(512, ge=1, description="With --suite: probe training games (validation: a quarter; seeds as pawn probe's: 12345, 12346). pawn probe's default is 4,096.")
    probe_epochs: int = Field(5, ge=0, description="With --suite: probe training epochs (pawn probe: 20).")
    diagnostic_games: int = Field(32, ge=1, description="With --suite: games per cell of the outcome-conditioned tests (per outcome × masking, per bucket × condition, per pair, per scenario; pawn generate --diagnostics uses 200/100/200/100).")
    edge_positions: int = Field(64, ge=1, description="With --suite: positions per edge-case category (one batch of 64; the published table used 10,000).")

    @model_validator(mode="after")
    def _games_default(self) -> "EvalSettings":
        """``games`` left unset: :data:`EVAL_GAMES`, or :data:`SUITE_GAMES` with ``suite``."""
        if self.games is None:
            self.games = SUITE_GAMES if self.suite else EVAL_GAMES
        return self


class ProbeSettings(_ModelCommand):
    """``pawn probe``: the nine linear probes (spec §2.4 v2 defaults; :class:`pawn.evaluate.probes.ProbeConfig`
    takes its defaults from here)."""

    model_config = SettingsConfigDict(env_prefix="PAWN_PROBE_")

    games: int = Field(4096, ge=1, description="Training games (seed).")
    val_games: Optional[int] = Field(None, ge=1, description="Validation games (seed + 1). Default: --games / 4, i.e. 1,024 for the default 4,096 (a 4:1 split).")
    seed: int = Field(12345, ge=0, description="Training-corpus seed; validation uses seed + 1, probe init seed + 7.")
    max_ply: Optional[int] = Field(None, ge=1, description="Ply cap of the probe games. Default (v2): min(context, 256), the context being the checkpoint's trained seq_len when it records one. The v1 per-run probe script used the full context (--max-ply 512 for the published models); which of 256 or 512 produced the published v1.0.0 table is not recorded.")
    epochs: int = Field(20, ge=0, description="Training epochs.")
    lr: float = Field(1e-3, gt=0.0, description="AdamW learning rate.")
    weight_decay: float = Field(1e-4, ge=0.0, description="AdamW weight decay. 1e-4 = the v2 default (optax); 0.01 = v1 (torch AdamW default), the setting of the published v1.0.0 probe table (use --weight-decay 0.01 --max-ply 512 to reproduce its v1 probe-script settings).")
    feature_cache_gb: Optional[float] = Field(None, ge=0.0, description="Cache at most this many GiB of hidden states (validation set first); a set that does not fit is recomputed every epoch (same numbers, slower). Default: half the accelerator's memory, or 30% of available host memory on CPU.")
    probe: Optional[list[str]] = Field(None, description="Probe to run (repeatable; default all nine).")
    plot: Optional[Path] = Field(None, description="Draw accuracy (R² for regression) by layer to this PNG (needs matplotlib).")
    prepend_outcome: Optional[bool] = Field(None, description=_PREFIX_HELP, json_schema_extra={"flag": "--prepend-outcome/--pure-moves"})


OutcomeName = Literal[OUTCOME_NAMES]  # type: ignore[valid-type]


class GenerateSettings(_ModelCommand):
    """``pawn generate``: autoregressive games from a checkpoint, or random games (spec §3)."""

    model_config = SettingsConfigDict(env_prefix="PAWN_GENERATE_")

    checkpoint: Optional[str] = Field(None, description="Sample games from this checkpoint (v2 directory or Hub id).")
    random: bool = Field(False, description="Uniformly random games from the engine instead of a model.")
    games: int = Field(64, ge=1, description="Number of games.")
    seed: int = Field(0, ge=0, description="Sampling seed (or random-game seed with --random).")
    max_ply: Optional[int] = Field(None, ge=1, description="Ply cap (default: the model context, 512 with --random).")
    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature (> 0).")
    top_k: Optional[int] = Field(None, ge=1, description="Sample only among the k most likely tokens.")
    mask_illegal: bool = Field(False, description="Restrict sampling to legal moves.")
    outcome: Optional[OutcomeName] = Field(None, description="Condition on this outcome token name (e.g. WHITE_CHECKMATES); only for models trained with the outcome prefix.")
    prefix: Optional[str] = Field(None, description="Start every game from these UCI moves (space-separated) or from the first game of a PGN file.")
    kv_cache: bool = Field(True, description="Decode with the KV cache (default) or recompute the full forward each step.")
    batch_size: int = Field(64, ge=1, description="Games per batch.")
    out: Optional[Path] = Field(None, description="Write the games to this parquet file (tokens, UCI, SAN, length, termination, outcome).")
    pgn_out: Optional[Path] = Field(None, description="Also write the games as PGN.")
    diagnostics: bool = Field(False, description="Run the five outcome-conditioned tests and the edge-case diagnostics.")
    edge_positions: int = Field(10_000, ge=1, description="Positions per edge-case category (the published models' figures used 10,000).")
    outcome_prefix_trained: Optional[bool] = Field(None, description=_PREFIX_HELP, json_schema_extra={"flag": "--prepend-outcome/--pure-moves"})
