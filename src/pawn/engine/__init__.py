"""Documented Python façade over the Rust engine ``pawn._engine`` (spec ``engine.md``).

Every function states the shapes and dtypes it takes and returns. Token ids and vocabulary
helpers live in :mod:`pawn.vocab`; this package groups the engine by area:

- :mod:`pawn.engine.games`: random games (spec §3)
- :mod:`pawn.engine.diagnostics`: validation, edge-case bits, diagnostic sets, accuracy ceiling (spec §7)
- :mod:`pawn.engine.state`: stateful ``GameState`` and ``BatchEnv`` (spec §8)
"""

from __future__ import annotations

from pawn.engine.games import RandomGames, random_games
from pawn.engine.diagnostics import (accuracy_ceiling, accuracy_ceiling_of, edge_case_bits, edge_stats_per_ply,
                                     generate_diagnostic_sets, validate_games)
from pawn.engine.state import BatchEnv, GameState
