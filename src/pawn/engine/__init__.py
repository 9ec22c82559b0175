"""Documented Python façade over the Rust engine ``pawn._engine`` (spec ``engine.md``).

Every function states the shapes and dtypes it takes and returns. Token ids and vocabulary
helpers live in :mod:`pawn.vocab`; this package groups the engine by area:

- :mod:`pawn.engine.games`: random games (spec §3)
"""

from __future__ import annotations

from pawn.engine.games import RandomGames, random_games
