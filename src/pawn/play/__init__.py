"""Matches of PAWN models against Stockfish and against each other, with an Elo estimate (spec
``eval-probe-generate-sweep-bench.md`` §4.2). Entry point: :func:`run_play`; pieces:
:mod:`pawn.play.players` (PAWN and Stockfish players), :mod:`pawn.play.match` (the game loop and
summaries), :mod:`pawn.play.stats` (score and Elo interval), :mod:`pawn.play.pgn` (PGN output)."""

from pawn.play.config import PlayConfig
from pawn.play.match import GameRecord, MatchResult, play_match, summarize
from pawn.play.players import PawnPlayer, StockfishNotFound, StockfishPool, find_stockfish
from pawn.play.runner import PlayReport, run_play
from pawn.play.stats import Score, elo_diff

__all__ = ["PlayConfig", "GameRecord", "MatchResult", "play_match", "summarize", "PawnPlayer", "StockfishNotFound",
           "StockfishPool", "find_stockfish", "PlayReport", "run_play", "Score", "elo_diff"]
