"""PGN of ``pawn play`` games, written through python-chess (:mod:`chess.pgn`).

Each game has the seven-tag roster (Event, Site, Date, Round, White, Black, Result), a standard
``Termination`` tag (``normal`` for an ending by the rules, ``adjudication`` for the ply limit,
``abandoned`` for an engine error; PGN standard §9.8.1), ``PlyCount``, ``WhiteElo``/``BlackElo``
for the Stockfish side (its UCI_Elo), and PAWN's own ``PawnTermination`` (the exact ending),
``PawnTemperature`` and ``Opening`` book move. Tag values are escaped as the PGN standard asks
(:func:`tag_value`): python-chess writes them as given.
"""

from __future__ import annotations

import datetime as _dt
import os
from typing import Sequence

from pawn.play.match import ENGINE_ERROR, PLY_LIMIT, GameRecord

_STANDARD_TERMINATION = {PLY_LIMIT: "adjudication", ENGINE_ERROR: "abandoned"}


def tag_value(text: str) -> str:
    """``text`` as a PGN tag value (PGN standard §8.1.1 and §7): ``\\`` for a backslash, ``\\"``
    for a quote, and control characters (a newline would end the tag) as spaces. python-chess
    writes tag values as given, so an engine or model name with a ``"`` made the file malformed."""
    text = "".join(" " if ord(c) < 32 or ord(c) == 127 else c for c in str(text))
    return text.replace("\\", "\\\\").replace('"', '\\"')


def game_pgn(rec: GameRecord, event: str, round_no: int, date: str):
    """A :class:`chess.pgn.Game` for one record (module docstring for the headers)."""
    import chess
    import chess.pgn

    g = chess.pgn.Game()
    h = g.headers
    h["Event"], h["Site"], h["Date"], h["Round"] = event, "pawn play", date, str(round_no)
    h["White"], h["Black"], h["Result"] = rec.white, rec.black, rec.pgn_result
    if rec.opponent_elo is not None:
        # a whole number, as PGN's Elo tags are (a ladder rung's measured anchor is a float: 478.3 → "478")
        h["BlackElo" if rec.pawn_white else "WhiteElo"] = str(int(round(rec.opponent_elo)))
    h["Termination"] = _STANDARD_TERMINATION.get(rec.term, "normal")
    h["PawnTermination"] = rec.term
    h["PawnTemperature"] = f"{rec.temperature:g}"
    h["PlyCount"] = str(rec.plies)
    if rec.book and rec.first_move:
        h["Opening"] = rec.first_move
    for k in list(h):
        h[k] = tag_value(h[k])
    node = g
    for m in rec.moves:
        node = node.add_variation(chess.Move.from_uci(m))
    if rec.error:
        node.comment = f"engine error: {rec.error}"
    return g


def write_pgn(path: str | os.PathLike, records: Sequence[GameRecord], event: str = "PAWN match") -> None:
    """Write ``records`` to ``path`` as PGN, atomically (whole file or nothing).

    Raises:
        OSError: the file cannot be written.
    """
    from pawn.fileio import atomic_output

    date = _dt.date.today().strftime("%Y.%m.%d")
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for k, rec in enumerate(records):
            f.write(str(game_pgn(rec, event, k + 1, date)) + "\n\n")
