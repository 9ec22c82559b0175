"""Play one game of ``pawn uci`` through lichess-bot's own code (its game loop, engine wrapper and
config loader) against its mocked lichess.org server (``test_bot/lichess.py`` of a lichess-bot
checkout), with the engine section in ``engine.yml`` beside this file (the one docs/play-and-uci.md shows). The mocked
server plays White with uniformly random legal moves; the bot (PAWN) plays Black until the game
ends by the rules. No network is used.

Usage (from a lichess-bot checkout, with its requirements installed, and pytest):
    PAWN_ENGINE_YML=/path/to/pawn/examples/lichess-bot/engine.yml \
        python -m pytest -q -s /path/to/pawn/examples/lichess-bot/play_one_game.py

``engine.yml``'s ``dir`` + ``name`` must point at the two-line script ``pawn-engine`` (copy it and set
its checkpoint path). Prints the result, the bot's move count and its ms per move.
"""

import os
import random
import sys
import tempfile
import threading
import time
from multiprocessing import Manager

import chess
import yaml

sys.path.insert(0, os.getcwd())  # the lichess-bot checkout
import test_bot.lichess  # noqa: E402  (lichess-bot's mocked server)
from lib import config, lichess_bot  # noqa: E402
from lib.timer import Timer, seconds  # noqa: E402

BOT_MOVES: list[tuple[str, float]] = []


def _server(move_q, board_q, clock_q, result_q) -> None:
    """White: random legal moves; Black: whatever lichess-bot sends; clocks 120 s + 1 s."""
    rng = random.Random(5)
    board, wtime, btime, inc = chess.Board(), seconds(120), seconds(120), seconds(1)
    while not board.is_game_over():
        if board.turn == chess.WHITE:
            board.push(rng.choice(list(board.legal_moves)))
            board_q.put(board)
            clock_q.put((wtime, btime, inc))
            continue
        t, t0 = Timer(), time.perf_counter()
        while (move := move_q.get()) is None:  # the bot asks for the state again
            board_q.put(board)
            clock_q.put((wtime, btime, inc))
            move_q.task_done()
        if move not in board.legal_moves:
            result_q.put(f"illegal move {move} at ply {board.ply()}")
            return
        board.push(move)
        BOT_MOVES.append((move.uci(), (time.perf_counter() - t0) * 1e3))
        move_q.task_done()
        btime = btime - t.time_since_reset() + inc
    board_q.put(board)
    clock_q.put((wtime, btime, inc))
    result_q.put(f"{board.outcome().result()} ({board.outcome().termination.name}, {board.ply()} plies)")


def test_pawn_uci_plays_a_game_through_lichess_bot() -> None:
    with open("config.yml.default") as f:
        raw = yaml.safe_load(f)
    with open(os.environ["PAWN_ENGINE_YML"]) as f:
        raw["engine"].update(yaml.safe_load(f)["engine"])
    with tempfile.TemporaryDirectory() as tmp:
        raw["token"], raw["pgn_directory"] = "", os.path.join(tmp, "games")
        config.insert_default_values(raw)
        conf = config.Configuration(raw)
        m = Manager()
        board_q, clock_q, move_q, result_q = m.Queue(), m.Queue(), m.Queue(), m.Queue()
        li = test_bot.lichess.Lichess(move_q, board_q, clock_q)
        lichess_bot.disable_restart()
        server = threading.Thread(target=_server, args=[move_q, board_q, clock_q, result_q])
        server.start()
        lichess_bot.start(li, li.get_profile(), conf, 20, None, True, one_game=True)
        result = result_q.get()
        server.join()
        # lichess-bot writes the PGN from its control queue, which may not have run by the time
        # start() returns on a loaded machine: listed when there, not required
        pgns = os.listdir(raw["pgn_directory"]) if os.path.isdir(raw["pgn_directory"]) else []
    ms = sorted(t for _, t in BOT_MOVES)
    print(f"RESULT {result}; bot moves {len(BOT_MOVES)}, median {ms[len(ms) // 2]:.0f} ms per move "
          f"(server-side, incl. lichess-bot); PGN files {pgns}")
    assert not result.startswith("illegal") and len(BOT_MOVES) >= 10
