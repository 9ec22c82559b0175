"""Settings of ``pawn play`` (spec ``eval-probe-generate-sweep-bench.md`` §4.2 defaults).

Built on the same settings base as ``pawn pretrain`` (:mod:`pawn.settings`): every field is a
command-line flag, a ``PAWN_PLAY_<NAME>`` environment variable and a ``--config`` file key, with
that precedence over the defaults. List fields take comma-separated strings (``1320,1600``)
everywhere, or JSON/TOML lists in a config file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from pawn.settings import _Settings


def _split(v: Any) -> Any:
    if isinstance(v, str):
        return [p.strip() for p in v.split(",") if p.strip()]
    if isinstance(v, (int, float)):
        return [v]
    return v


class PlayConfig(_Settings):
    """Configuration of ``pawn play CHECKPOINT``: a match of the checkpoint against Stockfish at
    one or more UCI_Elo levels, or against another checkpoint, at one or more temperatures."""

    model_config = SettingsConfigDict(env_prefix="PAWN_PLAY_", extra="forbid", validate_default=True)

    vs: str = Field("stockfish", description="Opponent: 'stockfish' (each --stockfish-elo), 'ladder' (each --ladder rung, one Elo fit over all), 'uci:COMMAND' (any UCI engine, e.g. 'uci:pawn uci CKPT'), or a second checkpoint (directory or Hub id).")
    ladder: Annotated[list[str], NoDecode] = Field(["random", "greedy", "sf-1350"], description="Comma-separated rungs for --vs ladder: random (anchor 0, a convention), greedy (one-ply material, anchor measured against random), sf-<UCI_Elo> (anchor = UCI_Elo), sf-skill<S>-depth<D>[-random<P>] (Stockfish Skill Level S, go depth D, P % random moves; anchor measured here, see docs).")
    uci_movetime_ms: float = Field(1000.0, description="Per-move time (go movetime) for uci:COMMAND players; PAWN via 'pawn uci' answers as soon as its model has the move.")
    uci_options: Annotated[list[str], NoDecode] = Field([], description="Comma-separated NAME=VALUE UCI options for every uci:COMMAND player (e.g. Temperature=0.5,Seed=3).")
    variant: Optional[str] = Field(None, description="For a supernet checkpoint: the nested variant that plays (default: the largest).")
    vs_variant: Optional[str] = Field(None, description="The same for the --vs checkpoint.")
    stockfish: Optional[str] = Field(None, description="Stockfish binary (default: stockfish on PATH, else /usr/games/stockfish).")
    stockfish_elo: Annotated[list[int], NoDecode] = Field([1320], description="Comma-separated UCI_Elo levels (clamped to the range the engine supports).")
    movetime_ms: float = Field(1.0, description="Stockfish search time per move (go movetime), ms.")
    games: int = Field(100, description="Games per temperature and level (colours alternate: even games PAWN is white).")
    temperatures: Annotated[list[float], NoDecode] = Field([0.0, 0.5, 1.0], description="Comma-separated sampling temperatures (0 = greedy).")
    first_moves: Annotated[list[str], NoDecode] = Field(["e2e4", "d2d4", "g1f3"], description="Opening book (UCI) for PAWN's first move as white, rotated by white-game count.")
    max_ply: int = Field(400, description="Ply limit; a game reaching it is a draw.")
    seed: int = Field(42, description="Sampling seed (each game draws from its own generator seeded by seed, cell and game index).")
    concurrency: int = Field(8, description="Games in flight at once: rows per model forward and Stockfish processes.")
    dtype: Optional[Literal["float32", "bfloat16"]] = Field(None, description="Compute dtype (default: float32 on CPU, bfloat16 on accelerators).")
    json_out: Optional[Path] = Field(None, description="Write {config, summaries, games} to this JSON file.",
                                     json_schema_extra={"flag": "--json"})
    pgn_out: Optional[Path] = Field(None, description="Write every game as PGN (players, result, termination headers).")

    @field_validator("stockfish_elo", "temperatures", "first_moves", "ladder", "uci_options", mode="before")
    @classmethod
    def _lists(cls, v: Any) -> Any:
        return _split(v)

    @field_validator("ladder", mode="after")
    @classmethod
    def _rung_spelling(cls, v: list[str]) -> list[str]:
        """``stockfish-<elo>``, the name the results table gives an ``sf-<elo>`` rung, is read as that rung."""
        return [f"sf-{r[len('stockfish-'):]}" if r.startswith("stockfish-") and r[len("stockfish-"):].isdigit() else r
                for r in v]

    @field_validator("dtype", mode="before")
    @classmethod
    def _dtype_spelling(cls, v: Any) -> Any:
        from pawn.dtypes import canonical_dtype

        return canonical_dtype(v) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _check(self) -> "PlayConfig":
        import chess

        for name in ("games", "max_ply", "concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if not self.uci_movetime_ms > 0:
            raise ValueError(f"uci_movetime_ms must be > 0, got {self.uci_movetime_ms}")
        bad = [o for o in self.uci_options if "=" not in o or not o.split("=", 1)[0].strip()]
        if bad:
            raise ValueError(f"uci_options: {bad[0]!r} is not NAME=VALUE")
        from pawn.play.ladder import RUNG_HELP, is_rung

        bad = [r for r in self.ladder if not is_rung(r)]
        if bad or not self.ladder:
            raise ValueError(f"ladder: {bad[0] if bad else '(empty)'!r} is not a rung ({RUNG_HELP})")
        if self.vs.startswith("uci:") and not self.vs[4:].strip():
            raise ValueError("vs: 'uci:' needs a command, e.g. uci:/usr/games/stockfish")
        if not self.movetime_ms > 0:
            raise ValueError(f"movetime_ms must be > 0, got {self.movetime_ms}")
        for name in ("stockfish_elo", "temperatures", "first_moves"):
            if not getattr(self, name):
                raise ValueError(f"{name}: give at least one value")
        bad = [t for t in self.temperatures if not t >= 0]
        if bad:
            raise ValueError(f"temperatures must be ≥ 0, got {bad[0]}")
        legal = {m.uci() for m in chess.Board().legal_moves}
        for m in self.first_moves:
            if m not in legal:
                raise ValueError(f"first_moves: {m!r} is not a legal first move in UCI (e.g. e2e4, g1f3)")
        return self

    @property
    def vs_stockfish(self) -> bool:
        """Whether the opponent is Stockfish (else a checkpoint)."""
        return self.vs.strip().lower() == "stockfish"

    @property
    def vs_ladder(self) -> bool:
        """Whether the opponents are the :attr:`ladder` rungs."""
        return self.vs.strip().lower() == "ladder"

    def options_dict(self) -> dict[str, str]:
        """:attr:`uci_options` as ``{name: value}``."""
        return {k.strip(): v.strip() for k, v in (o.split("=", 1) for o in self.uci_options)}

    def n_opponents(self) -> int:
        """Opponent cells per temperature: Stockfish levels, ladder rungs, or 1."""
        return len(self.stockfish_elo) if self.vs_stockfish else len(self.ladder) if self.vs_ladder else 1
