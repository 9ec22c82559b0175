"""PGN parser A/B: games/s of two engine builds, interleaved (A, B, A, B …) in fresh processes,
and a fingerprint of everything the parser returns on the shared Lichess files.

    python benchmarks/pgn_parse.py bench A.so B.so [--rounds 5] [--threads 1[,2]] [--files DIR]
    python benchmarks/pgn_parse.py hash  ENGINE.so [--files DIR]

``bench`` runs each build in its own process (``RAYON_NUM_THREADS`` = each of ``--threads``), parsing every
``*.pgn`` under ``--files`` (default ``/work/shared/data/lichess``) with ``parse_pgn_path(path, 512, 0)``
(the call the Lichess data path makes) and prints games/s per round and the B/A ratio of the
medians. ``hash`` prints one SHA-256 per file over the tokens, lengths, outcomes, Elo, clocks,
evals, game numbers, full lengths, headers, skipped list and counts, so two builds can be shown to
return the same games and skip reasons. Engine builds are loaded straight from the ``.so``
(``importlib``), so they need not be installed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_FILES = "/work/shared/data/lichess"


def load_engine(so: str):
    """The ``_engine`` extension module at path ``so`` (PAWN's, or the reference's, whose module
    is also named ``_engine``)."""
    spec = importlib.util.spec_from_file_location("_engine", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fingerprint(rec) -> str:
    """SHA-256 hex of every field of one ``PgnGames`` record."""
    h = hashlib.sha256()
    for name in ("tokens", "lengths", "outcome", "white_elo", "black_elo", "clocks", "evals", "game_index",
                 "full_length"):
        a = getattr(rec, name)
        h.update(f"{name}{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    h.update(json.dumps(rec.headers, sort_keys=True).encode())
    h.update(json.dumps([list(s) for s in rec.skipped]).encode())
    h.update(json.dumps(dict(rec.counts), sort_keys=True).encode())
    h.update(json.dumps(rec.san).encode())
    return h.hexdigest()


def _files(folder: str) -> list[str]:
    return [str(p) for p in sorted(Path(folder).glob("*.pgn"))]


def _parse(eng, path: str) -> int:
    """Parse one file with the engine's whole-file call; the games it read."""
    if hasattr(eng, "parse_pgn_path"):
        return int(eng.parse_pgn_path(path, 512, 0).counts["read"])
    # the reference's tokens-only parser: (tokens [N, max_ply] int16, lengths, games read)
    return int(eng.parse_pgn_file(path, 512, 10**9, 0)[2])


def _one_round(so: str, folder: str) -> None:
    eng = load_engine(so)
    files = _files(folder)
    for f in files:  # warm the page cache and the allocator
        _parse(eng, f)
    t = time.perf_counter()
    n = 0
    for f in files:
        n += _parse(eng, f)
    print(json.dumps({"games": n, "seconds": time.perf_counter() - t}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["bench", "hash", "_round"])
    ap.add_argument("engines", nargs="+")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1", help="thread counts, comma-separated (each is a variant)")
    ap.add_argument("--files", default=DEFAULT_FILES)
    a = ap.parse_args()
    if a.mode == "_round":
        _one_round(a.engines[0], a.files)
        return
    if a.mode == "hash":
        eng = load_engine(a.engines[0])
        for f in _files(a.files):
            rec = eng.parse_pgn_path(f, 512, 0)
            print(f"{fingerprint(rec)}  {int(rec.counts['read']):5d} read  {len(rec):5d} kept  {Path(f).name}")
        return
    variants = [(so, int(t)) for so in a.engines for t in a.threads.split(",")]
    rates: dict[tuple[str, int], list[float]] = {v: [] for v in variants}
    for r in range(a.rounds):
        for so, t in variants:
            # numpy's OpenBLAS threads spin after import and would take a core from the parser
            env = {**os.environ, "RAYON_NUM_THREADS": str(t), "OPENBLAS_NUM_THREADS": "1"}
            out = subprocess.run([sys.executable, __file__, "_round", so, "--files", a.files], env=env,
                                 capture_output=True, text=True, check=True).stdout
            d = json.loads(out.strip().splitlines()[-1])
            rates[(so, t)].append(d["games"] / d["seconds"])
            print(f"round {r + 1} {Path(so).name:24s} {t} thr {d['games']} games  "
                  f"{d['games'] / d['seconds']:10,.0f} games/s", flush=True)
    med = {v: statistics.median(x) for v, x in rates.items()}
    base = variants[0]
    for v in variants:
        print(f"median {Path(v[0]).name:24s} {v[1]} thr {med[v]:10,.0f} games/s  ×{med[v] / med[base]:.2f} vs "
              f"{Path(base[0]).name} {base[1]} thr")


if __name__ == "__main__":
    main()
