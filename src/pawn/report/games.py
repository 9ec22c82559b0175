"""The Games page: games from PGN files (``pawn play --pgn-out``, or any PGN) as SVG boards drawn
by python-chess (:func:`chess.svg.board`), one per ply, with the last move highlighted, so the page
steps through them with no JS framework.

PAWN's own tags are shown when present (``PawnTermination``, ``PawnTemperature``, ``Termination``:
a forfeit is an ending PAWN adjudicated, e.g. an illegal move or the ply limit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from pawn.errors import PawnError

MAX_GAMES = 40
"""Games kept per report (the first ones of the files, in order): each ply is an SVG of ~10 KB."""
MAX_PLIES = 400
"""Plies drawn per game (a longer game is cut there; the page says so)."""
BOARD_SIZE = 360


class GamesError(PawnError):
    """A PGN file that cannot be read (one line naming it)."""


def find_pgns(paths: Iterable[Path]) -> list[Path]:
    """PGN files among ``paths`` (files ending in ``.pgn``) and under the directories among them
    (recursive), sorted, without duplicates."""
    out: set[Path] = set()
    for p in paths:
        p = Path(p)
        if p.is_file() and p.suffix.lower() == ".pgn":
            out.add(p.resolve())
        elif p.is_dir():
            out.update(q.resolve() for q in p.rglob("*.pgn") if "checkpoints" not in q.parts)
    return sorted(out)


def read_games(pgns: Iterable[Path], max_games: int = MAX_GAMES, max_plies: int = MAX_PLIES) -> list[dict[str, Any]]:
    """The games of ``pgns`` (at most ``max_games`` in all), each as ``{"file", "index", "headers",
    "white", "black", "result", "termination", "temperature", "opponent", "sans": [SAN per ply],
    "boards": [SVG per position, the start included], "truncated"}``.

    Raises:
        GamesError: a file that cannot be opened or decoded.
    """
    import chess
    import chess.pgn
    import chess.svg

    games: list[dict[str, Any]] = []
    for path in pgns:
        try:
            fh = open(path, encoding="utf-8", errors="replace")
        except OSError as e:
            raise GamesError(f"{path}: cannot read the PGN ({e.strerror or e})") from None
        with fh:
            index = 0
            while len(games) < max_games:
                game = chess.pgn.read_game(fh)
                if game is None:
                    break
                index += 1
                h = dict(game.headers)
                board = game.board()
                boards = [chess.svg.board(board, size=BOARD_SIZE)]
                sans: list[str] = []
                truncated = False
                for mv in game.mainline_moves():
                    if len(sans) >= max_plies:
                        truncated = True
                        break
                    sans.append(board.san(mv))
                    board.push(mv)
                    boards.append(chess.svg.board(board, size=BOARD_SIZE, lastmove=mv,
                                                  check=board.king(board.turn) if board.is_check() else None))
                white, black = h.get("White", "?"), h.get("Black", "?")
                opponent = black if "pawn" in white.lower() else white if "pawn" in black.lower() else f"{white} – {black}"
                games.append({"file": str(path), "index": index, "headers": h, "white": white, "black": black,
                              "result": h.get("Result", "*"),
                              "termination": h.get("PawnTermination") or h.get("Termination") or "",
                              "temperature": h.get("PawnTemperature", ""), "opponent": opponent,
                              "sans": sans, "boards": boards, "truncated": truncated,
                              "errors": [str(e) for e in game.errors]})
        if len(games) >= max_games:
            break
    return games
