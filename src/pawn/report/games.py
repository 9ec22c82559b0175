"""The Games page: games from PGN files (``pawn play --pgn-out``, or any PGN) as SVG boards drawn
by python-chess (:func:`chess.svg.board`), one per ply, with the last move highlighted, so the page
steps through them with no JS framework.

PAWN's own tags are shown when present (``PawnTermination``, ``PawnTemperature``, ``Termination``:
a forfeit is an ending PAWN adjudicated, e.g. an illegal move or the ply limit).
"""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any, Iterable, Optional

from pawn.errors import PawnError

MAX_GAMES = 40
"""Games kept per report (the first ones of the files, in order): each ply is an SVG of ~30 KB,
~1 KB once a game's boards are packed together (:func:`pack_boards`)."""
MAX_PLIES = 400
"""Plies drawn per game (a longer game is cut there; the page says so)."""
BOARD_SIZE = 360


class GamesError(PawnError):
    """A PGN file that cannot be read (one line naming it)."""


def find_pgns(paths: Iterable[Path]) -> list[Path]:
    """PGN files among ``paths`` (files ending in ``.pgn``) and the regular ``.pgn`` files under the
    directories among them (recursive; a dangling link, a link loop, a FIFO or device is not one),
    sorted, without duplicates."""
    out: set[Path] = set()
    for p in paths:
        p = Path(p)
        if p.is_file() and p.suffix.lower() == ".pgn":
            out.add(p.resolve())
        elif p.is_dir():
            # regular files only (links followed): a FIFO named *.pgn would be waited on for good
            out.update(q.resolve() for q in p.rglob("*.pgn") if "checkpoints" not in q.parts and q.is_file())
    return sorted(out)


def read_games(pgns: Iterable[Path], max_games: int = MAX_GAMES, max_plies: int = MAX_PLIES) -> list[dict[str, Any]]:
    """The games of ``pgns`` (at most ``max_games`` in all), each as ``{"file", "index", "headers",
    "white", "black", "result", "termination", "temperature", "opponent", "sans": [SAN per ply],
    "uci": [UCI per ply], "standard_start" (False for a set-up position, FEN), "boards": [SVG per
    position, the start included], "truncated", "errors"}``.

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
                ucis: list[str] = []
                truncated = False
                standard = board.fen() == chess.STARTING_FEN and not board.chess960
                for mv in game.mainline_moves():
                    if len(sans) >= max_plies:
                        truncated = True
                        break
                    sans.append(board.san(mv))
                    ucis.append(mv.uci())
                    board.push(mv)
                    boards.append(chess.svg.board(board, size=BOARD_SIZE, lastmove=mv,
                                                  check=board.king(board.turn) if board.is_check() else None))
                white, black = h.get("White", "?"), h.get("Black", "?")
                opponent = black if "pawn" in white.lower() else white if "pawn" in black.lower() else f"{white} – {black}"
                games.append({"file": str(path), "index": index, "headers": h, "white": white, "black": black,
                              "result": h.get("Result", "*"),
                              "termination": h.get("PawnTermination") or h.get("Termination") or "",
                              "temperature": h.get("PawnTemperature", ""), "opponent": opponent,
                              "sans": sans, "uci": ucis, "standard_start": standard, "boards": boards, "truncated": truncated,
                              "errors": [str(e) for e in game.errors]})
        if len(games) >= max_games:
            break
    return games


def pack_boards(games: list[dict[str, Any]]) -> None:
    """Replace each game's ``boards`` (SVG strings) by ``boards_gz``: the JSON list, gzip-compressed
    (mtime 0, so a page is the same bytes for the same games) and base64-encoded, which the page
    unpacks with the browser's ``DecompressionStream("gzip")`` when the game is opened.

    The boards of one game share all but a few squares, so they compress ~29×: the README's
    ladder (36 games, 5,321 boards) embedded 148 MB of SVG, 6.8 MB packed. In place; a game
    without ``boards`` is left as it is.
    """
    for g in games:
        boards = g.pop("boards", None)
        if boards is not None:
            raw = gzip.compress(json.dumps(boards, separators=(",", ":")).encode("utf-8"), compresslevel=6, mtime=0)
            g["boards_gz"] = base64.b64encode(raw).decode("ascii")


def unpack_boards(game: dict[str, Any]) -> list[str]:
    """The SVG boards of a game packed by :func:`pack_boards` (what the page's script decodes)."""
    return json.loads(gzip.decompress(base64.b64decode(game["boards_gz"])).decode("utf-8"))


TOP_K = 5
"""Moves shown per position on the Games page."""
ARROW = "#2f6fdbcc"
"""Colour of the arrow of the model's most likely move on the board."""


def add_predictions(games: list[dict[str, Any]], model: Any, *, name: str, source: str, seq_len: int,
                    prepend_outcome: bool = False, k: int = TOP_K, dtype: Optional[str] = None) -> None:
    """Add to each game of :func:`read_games` the model's top-``k`` moves at each position
    (:func:`pawn.metrics_core.ply_predictions`: teacher-forced, legal-masked, probabilities of the
    softmax over the legal moves) as ``game["predictions"]`` = ``{"model", "source", "k", "seq_len",
    "layout", "first_ply", "last_ply", "first_illegal_ply", "plies": [None | {"top": [[SAN, UCI, p],
    …], "played": [SAN, p, rank] | None, "argmax": UCI or "PAD"/outcome name, "argmax_legal",
    "p_illegal", "p_end"}]}``, and redraw each board with an arrow for the model's most likely move.
    A game from a set-up position (FEN) gets ``predictions_note`` instead (the model knows games
    from the standard start only).

    Raises:
        ValueError: a move the engine refuses (named by it).
    """
    import chess
    import chess.svg

    from pawn.engine import uci_to_tokens
    from pawn.metrics_core import ply_predictions
    from pawn.vocab import OUTCOME_NAMES, OUTCOME_TOKEN_BASE, PAD_TOKEN, token_to_uci

    todo = [g for g in games if g.get("standard_start", True) and g.get("uci") is not None]
    for g in games:
        if g not in todo:
            g["predictions_note"] = "starts from a set-up position (FEN): the model knows games from the standard start only"
    if not todo:
        return
    width = max(1, max(len(g["uci"]) for g in todo))
    tokens, lengths = uci_to_tokens([g["uci"] for g in todo], width)
    preds = ply_predictions(model, tokens, lengths, seq_len=seq_len, k=k, prepend_outcome=prepend_outcome, dtype=dtype)

    def word(t: int) -> str:
        if t == PAD_TOKEN:
            return "PAD"
        if t >= OUTCOME_TOKEN_BASE:
            return OUTCOME_NAMES[t - OUTCOME_TOKEN_BASE]
        return token_to_uci(t) or str(t)

    for g, pr in zip(todo, preds):
        board = chess.Board()
        plies: list[Optional[dict[str, Any]]] = []
        boards = []
        last = None
        for i, x in enumerate(pr["plies"]):
            entry = None
            arrows = []
            if x is not None:
                top = []
                for t, p in x["top"]:
                    u = word(t)
                    san = "game over" if t == PAD_TOKEN else board.san(chess.Move.from_uci(u))
                    top.append([san, u, p])
                played = None
                if x["played"] is not None:
                    played = [g["sans"][i], x["played"][1], x["played"][2]]
                entry = {"top": top, "played": played, "argmax": word(x["argmax"]), "argmax_legal": x["argmax_legal"],
                         "p_illegal": x["p_illegal"], "p_end": x["p_end"]}
                if top and top[0][1] != "PAD":
                    m = chess.Move.from_uci(top[0][1])
                    arrows = [chess.svg.Arrow(m.from_square, m.to_square, color=ARROW)]
            plies.append(entry)
            boards.append(chess.svg.board(board, size=BOARD_SIZE, lastmove=last, arrows=arrows,
                                          check=board.king(board.turn) if board.is_check() else None))
            if i < len(g["uci"]):
                last = chess.Move.from_uci(g["uci"][i])
                board.push(last)
        g["boards"] = boards
        g["predictions"] = {"model": name, "source": source, "k": k, "seq_len": seq_len,
                            "layout": "outcome_prefix" if prepend_outcome else "pure_moves",
                            "first_ply": pr["first_ply"], "last_ply": pr["last_ply"],
                            "first_illegal_ply": pr["first_illegal_ply"], "plies": plies}
