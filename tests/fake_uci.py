"""A fake UCI engine for the ``pawn play`` tests: it always plays the first legal move python-chess
generates. ``FAKE_UCI_LOG`` names a file that receives every ``setoption`` line; when the file
named by ``FAKE_UCI_DIE_FILE`` exists at a ``go`` after ply 6, the engine deletes it and exits at
once (a crash mid-game, once). ``FAKE_UCI_NAME`` sets its ``id name`` (default ``FakeUCI``)."""

import os
import sys

import chess


def main() -> None:
    board = chess.Board()
    log = os.environ.get("FAKE_UCI_LOG")
    die = os.environ.get("FAKE_UCI_DIE_FILE")

    def say(s: str) -> None:
        sys.stdout.write(s + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "uci":
            say("id name " + os.environ.get("FAKE_UCI_NAME", "FakeUCI"))
            say("option name UCI_LimitStrength type check default false")
            say("option name UCI_Elo type spin default 2000 min 1000 max 3000")
            say("option name Hash type spin default 64 min 1 max 1024")
            say("option name Threads type spin default 2 min 1 max 8")
            say("uciok")
        elif cmd[0] == "isready":
            say("readyok")
        elif cmd[0] == "setoption" and log:
            with open(log, "a") as f:
                f.write(line)
        elif cmd[0] == "position":
            i = cmd.index("moves") if "moves" in cmd else len(cmd)
            board = chess.Board() if cmd[1] == "startpos" else chess.Board(" ".join(cmd[2:i]))
            for m in cmd[i + 1:]:
                board.push_uci(m)
        elif cmd[0] == "go":
            if die and board.ply() >= 6:
                # the engine that removes the file dies; another engine reaching this ply at the same
                # moment finds it gone and plays on (two checks of exists() then remove() raced)
                try:
                    os.remove(die)
                except FileNotFoundError:
                    pass
                else:
                    os._exit(3)
            say(f"bestmove {next(iter(board.legal_moves)).uci()}")
        elif cmd[0] == "quit":
            break


if __name__ == "__main__":
    main()
