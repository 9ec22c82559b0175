"""``pawn play`` end to end: load the players, play every (level, temperature) cell, summarise.

Against Stockfish, one :class:`~pawn.play.players.StockfishPool` per UCI_Elo level; against a
second checkpoint, one cell per temperature. Summaries follow spec
``eval-probe-generate-sweep-bench.md`` §4.2 (see :func:`pawn.play.match.summarize`); the Elo
estimate against Stockfish is UCI_Elo + the Elo difference of the score rate (:mod:`pawn.play.stats`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from pawn.errors import UsageError
from pawn.play.config import PlayConfig
from pawn.play.match import GameRecord, play_match, summarize
from pawn.play.players import PawnPlayer, StockfishPool, find_stockfish


@dataclass
class PlayReport:
    """Everything a ``pawn play`` run produced.

    Attributes:
        config: the settings, the resolved player name, context and Stockfish path.
        summaries: one dict per (opponent level, temperature): ``opponent``, ``opponent_elo``
            (the level played), ``requested_elo``, ``temperature``, ``wall_seconds``,
            ``engine_restarts`` and the :func:`~pawn.play.match.summarize` fields.
        records: every finished game. interrupted: Ctrl-C stopped the run (what finished is kept).
    """

    config: dict
    summaries: list[dict] = field(default_factory=list)
    records: list[GameRecord] = field(default_factory=list)
    interrupted: bool = False

    def to_json(self) -> dict:
        """``{"config", "summaries", "games", "interrupted"}`` (spec §4.2 output JSON)."""
        return {"config": self.config, "summaries": self.summaries, "games": [r.to_dict() for r in self.records],
                "interrupted": self.interrupted}


def _player(source: str, variant: Optional[str], cfg: PlayConfig, flag: str = "--variant") -> PawnPlayer:
    """The model of ``source`` as a player: a supernet plays ``variant``, else its largest
    variant; adapter checkpoints load the same way (:func:`pawn.evaluate.loading.load_models`)."""
    from pawn.data.layout import Layout
    from pawn.evaluate.loading import load_models

    try:
        models = load_models(source, variant, variant_flag=flag)
    except FileNotFoundError as e:
        raise UsageError(str(e)) from None
    except ValueError as e:
        if isinstance(e, UsageError):
            raise
        raise UsageError(str(e)) from None
    lm = models[-1]
    return PawnPlayer(lm, Layout.resolve(None, lm.layout), batch=min(cfg.concurrency, cfg.games), dtype=cfg.dtype)


def run_play(checkpoint: str, cfg: PlayConfig, *, log: Callable[[str], None] = lambda s: None,
             on_game: Optional[Callable[[GameRecord], None]] = None) -> PlayReport:
    """Play the whole match set of ``cfg`` for ``checkpoint``.

    Returns:
        :class:`PlayReport`; after Ctrl-C, what finished, with ``interrupted`` true.

    Raises:
        pawn.play.players.StockfishNotFound: no Stockfish binary (one line with the install hint).
        pawn.errors.EngineFailure: Stockfish cannot be started or configured.
        pawn.errors.UsageError, pawn.checkpoint.CheckpointError, pawn.convert.ConversionError:
            a checkpoint that cannot be loaded.
    """
    sf_path = find_stockfish(cfg.stockfish) if cfg.vs_stockfish else None
    pawn = _player(checkpoint, cfg.variant, cfg)
    opponent_b = None if cfg.vs_stockfish else _player(cfg.vs, cfg.vs_variant, cfg, "--vs-variant")
    config = {"checkpoint": checkpoint, "hub": pawn.loaded.hub,
              "vs_hub": None if opponent_b is None else opponent_b.loaded.hub, "pawn": pawn.name, "context": pawn.context,
              **cfg.model_dump(mode="json"), "stockfish_path": sf_path}
    report = PlayReport(config)
    levels: list[Optional[int]] = list(cfg.stockfish_elo) if cfg.vs_stockfish else [None]
    cell = 0
    for elo in levels:
        pool = StockfishPool(sf_path, elo, cfg.movetime_ms, min(cfg.concurrency, cfg.games)) if elo is not None else None
        try:
            if pool is not None:
                pool.start()
                if pool.note:
                    log(pool.note)
            for t in cfg.temperatures:
                res = play_match(pawn, pool if pool is not None else opponent_b, games=cfg.games, temperature=t,
                                 first_moves=cfg.first_moves, max_ply=cfg.max_ply, seed=cfg.seed,
                                 slots=cfg.concurrency, cell=cell, on_game=on_game)
                cell += 1
                opp = pool.name if pool is not None else opponent_b.name
                summary = {"opponent": opp, "opponent_elo": None if pool is None else pool.effective_elo,
                           "requested_elo": elo, "temperature": t, "wall_seconds": res.wall_seconds,
                           "engine_restarts": res.engine_restarts,
                           **summarize(res.records, reference_elo=None if pool is None else pool.effective_elo)}
                report.summaries.append(summary)
                report.records.extend(res.records)
                if res.interrupted:
                    report.interrupted = True
                    return report
        finally:
            if pool is not None:
                pool.close()
    return report
