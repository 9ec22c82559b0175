"""The engine benchmark's child process: ``python -m pawn.bench.engine_child GAMES MAX_PLY
MASK_GAMES REPEATS PGN_FILES_JSON`` times the Rust engine with the thread count fixed by the
parent through ``RAYON_NUM_THREADS`` (rayon sizes its pool once, at first use, so each thread
count needs a fresh process) and prints one JSON line:
``{"random_games": {samples_s, games, plies}, "parse_pgn": {samples_s, games, mb, source},
"legal_masks": {samples_s, positions}}`` (seconds per repetition, plies per repetition).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Sequence

import numpy as np

PGN_HEADER = '[Event "bench"]\n[Site "?"]\n[White "a"]\n[Black "b"]\n[Result "1/2-1/2"]\n[Termination "Normal"]\n\n'
"""Tags of each random game written as PGN (the parser needs a result and a termination)."""


def games_as_pgn(san: Sequence[Sequence[str]]) -> bytes:
    """PGN text of games given as SAN move lists, numbered moves, each a draw."""
    parts = []
    for moves in san:
        body = " ".join((f"{k // 2 + 1}. " if k % 2 == 0 else "") + m for k, m in enumerate(moves))
        parts.append(f"{PGN_HEADER}{body} 1/2-1/2\n")
    return "\n".join(parts).encode()


def measure(n: int, max_ply: int, mask_games: int, repeats: int, pgn_files: Sequence[str]) -> dict[str, Any]:
    """Random games (a new seed per repetition), PGN parsing from memory (the last repetition's
    games written as PGN, or the given files concatenated) and dense legal masks of the first
    ``mask_games`` games; each after one untimed warm-up call."""
    from pawn.engine import legal_move_masks, parse_pgn, random_games, tokens_to_san

    out: dict[str, Any] = {}
    random_games(min(n, 200), max_ply, seed=10**6)  # warm-up: thread pool start, page faults
    t, plies = [], []
    for rep in range(repeats):
        t0 = time.perf_counter()
        g = random_games(n, max_ply, seed=rep)
        t.append(time.perf_counter() - t0)
        plies.append(int(g.lengths.astype(np.int64).sum()))
    out["random_games"] = {"samples_s": t, "games": n, "plies": plies}
    text = games_as_pgn(tokens_to_san(g.tokens, g.lengths))
    if pgn_files:  # real files instead: the games of every file, in order
        from pawn.data.pgn_stream import read_pgn_bytes  # decompressed before timing: the parse is timed

        text = b"\n\n".join(read_pgn_bytes(f) for f in pgn_files)
    parse_pgn(text, max_ply=max_ply)
    t = []
    for rep in range(repeats):
        t0 = time.perf_counter()
        p = parse_pgn(text, max_ply=max_ply)
        t.append(time.perf_counter() - t0)
    if not pgn_files and len(p) != n:
        raise RuntimeError(f"the PGN parser kept {len(p)} of {n} games: {p.counts}")
    out["parse_pgn"] = {"samples_s": t, "games": int(p.counts["read"]) if pgn_files else len(p), "mb": len(text) / 1e6,
                        "source": "files" if pgn_files else "random games as PGN"}
    mt, ml = np.ascontiguousarray(g.tokens[:mask_games]), np.ascontiguousarray(g.lengths[:mask_games])
    legal_move_masks(mt, ml)
    t = []
    for rep in range(repeats):
        t0 = time.perf_counter()
        legal_move_masks(mt, ml)
        t.append(time.perf_counter() - t0)
    out["legal_masks"] = {"samples_s": t, "positions": int(ml.astype(np.int64).sum())}
    return out


def main(argv: Sequence[str]) -> None:
    n, max_ply, mask_games, repeats = (int(a) for a in argv[:4])
    print(json.dumps(measure(n, max_ply, mask_games, repeats, json.loads(argv[4]))))


if __name__ == "__main__":
    main(sys.argv[1:])
