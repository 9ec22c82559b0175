"""Documented Python façade over the Rust engine ``pawn._engine`` (spec ``engine.md``).

Every function states the shapes and dtypes it takes and returns. Token ids and vocabulary
helpers live in :mod:`pawn.vocab`; this package groups the engine by area:

- :mod:`pawn.engine.games`: random games (spec §3)
- :mod:`pawn.engine.masks`: legal-move masks, perft (spec §4)
- :mod:`pawn.engine.boards`: board states and probe targets (spec §5)
- :mod:`pawn.engine.pgn`: Lichess PGN parsing (spec §6.1–§6.4); :mod:`pawn.engine.uci`: UCI/SAN ↔ tokens (§6.7)
- :mod:`pawn.engine.diagnostics`: validation, edge-case bits, diagnostic sets, accuracy ceiling (spec §7)
- :mod:`pawn.engine.state`: stateful ``GameState`` and ``BatchEnv`` (spec §8)
"""

from __future__ import annotations

from pawn.engine.games import RandomGames, random_games
from pawn.engine.boards import BoardStates, board_states, probe_targets
from pawn.engine.masks import (legal_move_counts, legal_move_grid, legal_move_masks,
                               legal_move_masks_sparse, perft)
from pawn.engine.pgn import PgnGames, parse_pgn
from pawn.engine.uci import UciGames, parse_uci_file, san_to_uci, tokens_to_san, tokens_to_uci, uci_to_san, uci_to_tokens
from pawn.engine.diagnostics import (AccuracyCeiling, DiagnosticSets, accuracy_ceiling, accuracy_ceiling_of,
                                     edge_case_bits, edge_stats_per_ply, generate_diagnostic_sets, validate_games)
from pawn.engine.state import BatchEnv, GameState

__all__ = [
    "RandomGames",
    "random_games",
    "BoardStates",
    "board_states",
    "probe_targets",
    "legal_move_counts",
    "legal_move_grid",
    "legal_move_masks",
    "legal_move_masks_sparse",
    "perft",
    "PgnGames",
    "parse_pgn",
    "UciGames",
    "parse_uci_file",
    "san_to_uci",
    "tokens_to_san",
    "tokens_to_uci",
    "uci_to_san",
    "uci_to_tokens",
    "AccuracyCeiling",
    "DiagnosticSets",
    "accuracy_ceiling",
    "accuracy_ceiling_of",
    "edge_case_bits",
    "edge_stats_per_ply",
    "generate_diagnostic_sets",
    "validate_games",
    "BatchEnv",
    "GameState",
]
