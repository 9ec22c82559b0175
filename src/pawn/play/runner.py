"""``pawn play`` end to end: load the players, play every (level, temperature) cell, summarise.

Against Stockfish, one :class:`~pawn.play.players.StockfishPool` per UCI_Elo level; against a
second checkpoint, one cell per temperature. Summaries follow spec
``eval-probe-generate-sweep-bench.md`` §4.2 (see :func:`pawn.play.match.summarize`); the Elo
estimate against Stockfish is UCI_Elo + the Elo difference of the score rate (:mod:`pawn.play.stats`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Callable, Optional

from pawn.errors import UsageError
from pawn.play.config import PlayConfig
from pawn.play.match import GameRecord, play_match, summarize
from pawn.play.players import PawnPlayer, StockfishPool, UciPool, find_stockfish


@dataclass
class PlayReport:
    """Everything a ``pawn play`` run produced.

    Attributes:
        config: the settings, the resolved player name, context and Stockfish path.
        summaries: one dict per (opponent level, temperature): ``opponent``, ``opponent_elo``
            (the level played), ``requested_elo``, ``temperature``, ``wall_seconds``,
            ``engine_restarts`` and the :func:`~pawn.play.match.summarize` fields.
        records: every finished game. interrupted: Ctrl-C stopped the run (what finished is kept).
        fits: per temperature, the maximum-likelihood Elo over every anchored opponent at once
            (:func:`pawn.play.ladder.fit_elo`; with --vs ladder or several Stockfish levels).
    """

    config: dict
    summaries: list[dict] = field(default_factory=list)
    records: list[GameRecord] = field(default_factory=list)
    interrupted: bool = False
    fits: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        """``{"config", "summaries", "games", "interrupted", "elo_fits"}`` (spec §4.2 output JSON,
        plus the joint Elo fits over anchored opponents)."""
        return {"config": self.config, "summaries": self.summaries, "games": [r.to_dict() for r in self.records],
                "interrupted": self.interrupted, "elo_fits": self.fits}


def load_player(source: str, variant: Optional[str], *, batch: int, dtype: Optional[str] = None,
                flag: str = "--variant") -> PawnPlayer:
    """The model of ``source`` as a player: a supernet plays ``variant``, else its largest
    variant; adapter checkpoints load the same way (:func:`pawn.evaluate.loading.load_models`).

    Raises:
        pawn.errors.UsageError: no such checkpoint, or a bad ``variant`` (named by ``flag``).
        pawn.checkpoint.CheckpointError, pawn.convert.ConversionError: a checkpoint that cannot be loaded.
    """
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
    return PawnPlayer(lm, Layout.resolve(None, lm.layout), batch=batch, dtype=dtype)


def _player(source: str, variant: Optional[str], cfg: PlayConfig, flag: str = "--variant") -> PawnPlayer:
    """:func:`load_player` with the batch and dtype of ``cfg``."""
    return load_player(source, variant, batch=min(cfg.concurrency, cfg.games), dtype=cfg.dtype, flag=flag)


def _uci_player(source: str, cfg: PlayConfig, name: Optional[str] = None) -> UciPool:
    """``uci:COMMAND`` as a player: one ``COMMAND`` process per slot (split like a shell does),
    ``--uci-options`` set on each, ``go movetime --uci-movetime-ms`` per move."""

    import chess.engine

    cmd = shlex.split(source[4:])
    return UciPool(cmd, cfg.options_dict(), chess.engine.Limit(time=cfg.uci_movetime_ms / 1000.0),
                   min(cfg.concurrency, cfg.games), name=name)


def _side(source: str, variant: Optional[str], cfg: PlayConfig, flag: str, log: Callable[[str], None] = lambda s: None):
    if source.startswith("uci:"):
        if variant is not None:
            raise UsageError(f"{flag} {variant}: does not apply to a uci: engine ({source})")
        pool = _uci_player(source, cfg)
        pool.start()  # fail before any game, and learn the engine's id name
        if pool.note:
            log(pool.note)
        return pool
    return _player(source, variant, cfg, flag)


def _opponents(cfg: PlayConfig, sf_path: Optional[str], opponent_b) -> list[tuple[Optional[int], object]]:
    """(requested level, opponent) per cell group: Stockfish levels, ladder rungs, or the one opponent."""
    from pawn.play.ladder import rung

    slots = min(cfg.concurrency, cfg.games)
    if cfg.vs_stockfish:
        return [(elo, StockfishPool(sf_path, elo, cfg.movetime_ms, slots)) for elo in cfg.stockfish_elo]
    if cfg.vs_ladder:
        return [(None, rung(r, slots, cfg.seed, cfg.stockfish, cfg.movetime_ms)) for r in cfg.ladder]
    return [(None, opponent_b)]


def run_play(checkpoint: str, cfg: PlayConfig, *, log: Callable[[str], None] = lambda s: None,
             on_game: Optional[Callable[[GameRecord], None]] = None) -> PlayReport:
    """Play the whole match set of ``cfg`` for ``checkpoint`` (a PAWN checkpoint, or
    ``uci:COMMAND`` for any UCI engine as player A).

    Every opponent with a rating anchor (Stockfish levels, ladder rungs) gets its own summary with
    ``elo_estimate`` = anchor + difference, and, per temperature, one maximum-likelihood fit over
    the games against all of them at once (:func:`pawn.play.ladder.fit_elo`) lands in
    :attr:`PlayReport.fits`.

    Returns:
        :class:`PlayReport`; after Ctrl-C, what finished, with ``interrupted`` true.

    Raises:
        pawn.play.players.StockfishNotFound: no Stockfish binary (one line with the install hint).
        pawn.errors.EngineFailure: Stockfish or a uci: engine cannot be started or configured.
        pawn.errors.UsageError, pawn.checkpoint.CheckpointError, pawn.convert.ConversionError:
            a checkpoint that cannot be loaded.
    """
    from pawn.play.ladder import fit_elo

    needs_sf = cfg.vs_stockfish or (cfg.vs_ladder and any(r.startswith("sf-") for r in cfg.ladder))
    sf_path = find_stockfish(cfg.stockfish) if needs_sf else None
    pawn = _side(checkpoint, cfg.variant, cfg, "--variant", log)
    opponent_b = None
    try:
        if not (cfg.vs_stockfish or cfg.vs_ladder):
            opponent_b = _side(cfg.vs, cfg.vs_variant, cfg, "--vs-variant", log)
        hub_of = lambda side: getattr(getattr(side, "loaded", None), "hub", None)  # noqa: E731 (resolved Hub commit)
        config = {"checkpoint": checkpoint, "hub": hub_of(pawn), "vs_hub": hub_of(opponent_b), "pawn": pawn.name,
                  "context": getattr(pawn, "context", None),
                  **cfg.model_dump(mode="json"), "stockfish_path": sf_path}
        report = PlayReport(config)
        cell = 0
        for elo, opp in _opponents(cfg, sf_path, opponent_b):
            anchored = not isinstance(opp, PawnPlayer) and opp.effective_elo is not None
            try:
                if not isinstance(opp, PawnPlayer):
                    opp.start()
                    if opp.note:
                        log(opp.note)
                for t in cfg.temperatures:
                    res = play_match(pawn, opp, games=cfg.games, temperature=t, first_moves=cfg.first_moves,
                                     max_ply=cfg.max_ply, seed=cfg.seed, slots=cfg.concurrency, cell=cell, on_game=on_game)
                    cell += 1
                    ref = opp.effective_elo if anchored else None
                    summary = {"opponent": opp.name, "opponent_elo": ref, "requested_elo": elo, "temperature": t,
                               "wall_seconds": res.wall_seconds, "engine_restarts": res.engine_restarts,
                               **summarize(res.records, reference_elo=ref)}
                    report.summaries.append(summary)
                    report.records.extend(res.records)
                    if res.interrupted:
                        report.interrupted = True
                        return report
            finally:
                if opp is not opponent_b:
                    opp.close()
        for t in cfg.temperatures:
            games = [r for r in report.records if r.temperature == t and r.result is not None and r.opponent_elo is not None]
            if len({r.opponent for r in games}) >= 1 and (cfg.vs_ladder or len(cfg.stockfish_elo) > 1):
                fit = fit_elo([r.opponent_elo for r in games], [{"win": 1.0, "draw": 0.5, "loss": 0.0}[r.result] for r in games])
                report.fits.append({"temperature": t, "opponents": sorted({r.opponent for r in games}), **fit})
        return report
    finally:
        for side in (pawn, opponent_b):
            if side is not None and not isinstance(side, PawnPlayer):
                side.close()
