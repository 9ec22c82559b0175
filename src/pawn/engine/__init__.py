"""Documented Python façade over the Rust engine ``pawn._engine`` (spec ``engine.md``).

Every function states the shapes and dtypes it takes and returns. Token ids and vocabulary
helpers live in :mod:`pawn.vocab`; this package groups the engine by area:

- :mod:`pawn.engine.games`: random games (spec §3)
- :mod:`pawn.engine.pgn`: Lichess PGN parsing (spec §6.1–§6.4); :mod:`pawn.engine.uci`: UCI/SAN ↔ tokens (§6.7)
"""

from __future__ import annotations

from pawn.engine.games import RandomGames, random_games
from pawn.engine.pgn import PgnGames, parse_pgn
from pawn.engine.uci import UciGames, parse_uci_file, san_to_uci, tokens_to_san, tokens_to_uci, uci_to_san, uci_to_tokens
