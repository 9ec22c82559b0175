"""PGN parser A/B: games/s of engine builds, each round running every build in turn in fresh
processes, and a fingerprint of everything the parser returns on the shared Lichess files.

    python benchmarks/pgn_parse.py bench A.so B.so … [--rounds 5] [--threads 1[,2]] [--files DIR]
    python benchmarks/pgn_parse.py hash  ENGINE.so [--files DIR]

``bench`` runs each build in its own process (``RAYON_NUM_THREADS`` = each of ``--threads``,
``OPENBLAS_NUM_THREADS=1`` so numpy's idle OpenBLAS threads take no core), in the same order every
round (A at each thread count, then B …), parsing every ``*.pgn`` under ``--files`` (default
``/work/shared/data/lichess``) once to warm up and once timed. A PAWN build is called with
``parse_pgn_path(path, 512, 0)`` (the call the Lichess data path makes); a build of the public
reference's engine (its ``.so`` also defines a module ``_engine``, e.g. ``REF/target/release/
libchess_engine.so``) with its tokens-only ``parse_pgn_file(path, 512, 10**9, 0)``. Printed: games/s
per round (each build's own count of games read: the reference counts 7,306 of the shared files'
7,321) and each variant's ratio to the first, of the median seconds for the same files. ``hash`` prints one SHA-256 per file over the tokens, lengths, outcomes, Elo, clocks,
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


def _check(a) -> None:
    """One-line errors for arguments the rounds would fail on."""
    for so in a.engines:
        if not os.path.isfile(so):
            sys.exit(f"error: {so}: no such engine build (.so file)")
    if not _files(a.files):
        sys.exit(f"error: --files {a.files}: no *.pgn files there")
    if a.rounds < 1:
        sys.exit(f"error: --rounds must be ≥ 1, got {a.rounds}")
    if not all(t.isdigit() and int(t) >= 1 for t in a.threads.split(",")):
        sys.exit(f"error: --threads takes thread counts ≥ 1, comma-separated, got {a.threads!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["bench", "hash", "_round"], help="bench or hash (_round: one timed round, internal)")
    ap.add_argument("engines", nargs="+")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1", help="thread counts, comma-separated (each is a variant)")
    ap.add_argument("--files", default=DEFAULT_FILES)
    a = ap.parse_args()
    if a.mode == "_round":
        _one_round(a.engines[0], a.files)
        return
    _check(a)
    if a.mode == "hash":
        eng = load_engine(a.engines[0])
        if not hasattr(eng, "parse_pgn_path"):
            sys.exit(f"error: hash needs a PAWN engine build; {a.engines[0]} has no parse_pgn_path")
        for f in _files(a.files):
            rec = eng.parse_pgn_path(f, 512, 0)
            print(f"{fingerprint(rec)}  {int(rec.counts['read']):5d} read  {len(rec):5d} kept  {Path(f).name}")
        return
    variants = [(so, int(t)) for so in a.engines for t in a.threads.split(",")]
    rates: dict[tuple[str, int], list[float]] = {v: [] for v in variants}
    secs: dict[tuple[str, int], list[float]] = {v: [] for v in variants}
    for r in range(a.rounds):
        for so, t in variants:
            # numpy's OpenBLAS threads spin after import and would take a core from the parser
            env = {**os.environ, "RAYON_NUM_THREADS": str(t), "OPENBLAS_NUM_THREADS": "1"}
            out = subprocess.run([sys.executable, __file__, "_round", so, "--files", a.files], env=env,
                                 capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"error: {so} ({t} threads) failed:\n{out.stderr[-2000:]}")
            d = json.loads(out.stdout.strip().splitlines()[-1])
            rates[(so, t)].append(d["games"] / d["seconds"])
            secs[(so, t)].append(d["seconds"])
            print(f"round {r + 1} {Path(so).name:24s} {t} thr {d['games']} games  "
                  f"{d['games'] / d['seconds']:10,.0f} games/s", flush=True)
    med = {v: statistics.median(x) for v, x in rates.items()}
    med_s = {v: statistics.median(x) for v, x in secs.items()}
    base = variants[0]
    for v in variants:
        print(f"median {Path(v[0]).name:24s} {v[1]} thr {med[v]:10,.0f} games/s  ×{med_s[base] / med_s[v]:.2f} vs "
              f"{Path(base[0]).name} {base[1]} thr (same files, median seconds)")

if __name__ == "__main__":
    main()
