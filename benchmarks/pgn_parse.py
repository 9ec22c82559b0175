"""PGN parser A/B: games/s of engine builds, each round running every build in turn in fresh
processes, and a fingerprint of everything the parser returns on the shared Lichess files.

    python benchmarks/pgn_parse.py bench A.so B.so … [--rounds 5] [--passes 1] [--threads 1[,2]] [--ceiling]
                                                   [--call path|bytes] [--files DIR]
    python benchmarks/pgn_parse.py hash  ENGINE.so [--files DIR]

``bench`` runs each build in its own process (``RAYON_NUM_THREADS`` = each of ``--threads``,
``OPENBLAS_NUM_THREADS=1`` so numpy's idle OpenBLAS threads take no core), in the same order every
round (A at each thread count, then B …, then the ``--ceiling`` pairs), parsing every ``*.pgn`` directly in ``--files`` (default
``/work/shared/data/lichess``) once to warm up and ``--passes`` times timed (the median pass counts:
one pass over the shared files is 30–150 ms, short enough for one scheduler hiccup to move it). A PAWN build is called with
``parse_pgn_path(path, 512, 0)`` (``pawn.engine.parse_pgn(path)``'s call, which reads the whole file; ``--call bytes``
below is the data path's); a build of the public
reference's engine (its ``.so`` also defines a module ``_engine``, e.g. ``REF/target/release/
libchess_engine.so``) with its tokens-only ``parse_pgn_file(path, 512, 10**9, 0)``. Printed: games/s
per round, each variant's median with the rounds' range, (each build's own count of games read: the reference counts 7,306 of the shared files'
7,321) and each variant's ratio to the first, of the median games/s. ``--ceiling`` adds, per build, two
1-thread processes released at one instant (a shared start time after their warm-up), their games/s
summed: what two cores give this workload with no sharing at all in the parser. Virtual machines whose
two vCPUs share a physical core give well under 2× there, and a thread-scaling figure means little
without it. ``hash`` prints, for each build given, one SHA-256 per file over the tokens, lengths, outcomes, Elo, clocks,
evals, game numbers, full lengths, headers, SAN, skipped list and counts, so two builds can be shown to
return the same games and skip reasons. ``--call bytes`` times PAWN's
``parse_pgn_bytes(data, 512, 0)`` on each file's bytes, read before the timed passes, instead of
``parse_pgn_path``: the call ``pawn data`` / ``pawn adapt --data`` make on each piece of ≤ 64 MiB, whose read (and
decompression) overlaps the previous piece's parse in a background thread, so this is the parser's own
thread scaling without the file read that ``parse_pgn_path`` does on the caller's thread (the reference has no
bytes call). Engine builds are loaded straight from the ``.so``
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
    is also named ``_engine``). Exits with a one-line error when ``so`` is not an extension module
    (only ``.so`` / ``.pyd`` files are loaded, so no Python source is ever run) or defines no
    ``_engine`` module."""
    if not so.endswith((".so", ".pyd")):
        sys.exit(f"error: {so}: not an engine build (a .so or .pyd extension module)")
    spec = importlib.util.spec_from_file_location("_engine", so)
    try:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except (ImportError, OSError) as e:
        sys.exit(f"error: {so}: not an engine build ({str(e).splitlines()[0]})")
    if not (hasattr(mod, "parse_pgn_path") or hasattr(mod, "parse_pgn_file")):
        sys.exit(f"error: {so}: an _engine module without a PGN parser (neither parse_pgn_path nor parse_pgn_file)")
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
    return [str(p) for p in sorted(Path(folder).glob("*.pgn")) if p.is_file()]  # not a folder named x.pgn


def _parse(eng, path: str, data: bytes | None = None) -> int:
    """Parse one file with the engine's whole-file call, or PAWN's ``parse_pgn_bytes`` on ``data``
    (the file's bytes) when given; the games it read."""
    if data is not None:
        return int(eng.parse_pgn_bytes(data, 512, 0).counts["read"])
    if hasattr(eng, "parse_pgn_path"):
        return int(eng.parse_pgn_path(path, 512, 0).counts["read"])
    # the reference's tokens-only parser: (tokens [N, max_ply] int16, lengths, games read)
    return int(eng.parse_pgn_file(path, 512, 10**9, 0)[2])


def _one_round(so: str, folder: str, passes: int, start_at: float | None, call: str = "path") -> None:
    """Warm up once, wait for ``start_at`` (epoch seconds) if given, then time ``passes`` passes
    over every file (``call``: ``path`` or ``bytes``, see the module's docstring); print the median pass."""
    eng = load_engine(so)
    files = _files(folder)
    data = {f: Path(f).read_bytes() if call == "bytes" else None for f in files}
    for f in files:  # warm the page cache and the allocator
        _parse(eng, f, data[f])
    late = False
    if start_at is not None:
        late = time.time() > start_at
        while time.time() < start_at:
            time.sleep(max(0.0, min(0.05, start_at - time.time())))
    times = []
    for _ in range(passes):
        t = time.perf_counter()
        n = 0
        for f in files:
            n += _parse(eng, f, data[f])
        times.append(time.perf_counter() - t)
    print(json.dumps({"games": n, "seconds": statistics.median(times), "late": late}))


def _check(a) -> None:
    """One-line errors for arguments the rounds would fail on."""
    for so in a.engines:
        if not os.path.isfile(so):
            sys.exit(f"error: {so}: no such engine build (.so file)")
    if len(set(map(os.path.realpath, a.engines))) < len(a.engines):
        sys.exit("error: an engine build is named twice")
    if a.mode == "hash" or a.call == "bytes":
        for so in a.engines:
            if not hasattr(load_engine(so), "parse_pgn_path") and a.mode == "bench":
                sys.exit(f"error: --call bytes times PAWN's parse_pgn_bytes; {so} (the reference's engine) has none: "
                         "use --call path")
    if not _files(a.files):
        sys.exit(f"error: --files {a.files}: no *.pgn files there")
    if a.rounds < 1:
        sys.exit(f"error: --rounds must be ≥ 1, got {a.rounds}")
    if a.passes < 1:
        sys.exit(f"error: --passes must be ≥ 1, got {a.passes}")
    if not all(t.isdigit() and int(t) >= 1 for t in a.threads.split(",")):
        sys.exit(f"error: --threads takes thread counts ≥ 1, comma-separated, got {a.threads!r}")
    if len(set(a.threads.split(","))) < len(a.threads.split(",")):
        sys.exit(f"error: --threads names a thread count twice: {a.threads}")
    if a.ceiling and 1 not in {int(t) for t in a.threads.split(",")}:
        sys.exit(f"error: --ceiling compares against one thread; --threads {a.threads} has no 1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["bench", "hash", "_round"],
                    help="bench: games/s A/B; hash: fingerprints of what each build returns (_round: internal)")
    ap.add_argument("engines", nargs="+", help="engine builds (.so files): PAWN's or the public reference's")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; each runs every variant once in a fresh process")
    ap.add_argument("--passes", type=int, default=1,
                    help="timed passes over the files in each process (the median pass counts)")
    ap.add_argument("--threads", default="1", help="thread counts, comma-separated (each is a variant)")
    ap.add_argument("--files", default=DEFAULT_FILES, help="a folder; every *.pgn directly in it is parsed")
    ap.add_argument("--ceiling", action="store_true",
                    help="also run two 1-thread processes of each build at once: the machine's 2-core ceiling")
    ap.add_argument("--start-delay", type=float, default=5.0,
                    help="seconds from launch to the shared start of the --ceiling pairs (longer than their warm-up)")
    ap.add_argument("--call", choices=["path", "bytes"], default="path",
                    help="path: parse_pgn_path / the reference's parse_pgn_file (reads the file in the call); "
                         "bytes: PAWN's parse_pgn_bytes on bytes read beforehand (what pawn data does per piece)")
    ap.add_argument("--start-at", type=float, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.mode == "_round":
        _one_round(a.engines[0], a.files, a.passes, a.start_at, a.call)
        return
    _check(a)
    if a.mode == "hash":
        for so in a.engines:
            eng = load_engine(so)
            if not hasattr(eng, "parse_pgn_path"):
                sys.exit(f"error: hash needs a PAWN engine build; {so} has no parse_pgn_path")
            if len(a.engines) > 1:
                print(f"# {so}")
            for f in _files(a.files):
                rec = eng.parse_pgn_path(f, 512, 0)
                print(f"{fingerprint(rec)}  {int(rec.counts['read']):5d} read  {len(rec):5d} kept  {Path(f).name}")
        return
    base_names = [Path(so).name for so in a.engines]
    for so, name in zip(a.engines, base_names):  # the file name, or the path where two builds share it
        _NAMES[so] = name if base_names.count(name) == 1 else so
    variants = [(so, int(t), 1) for so in a.engines for t in a.threads.split(",")]
    if a.ceiling:
        variants += [(so, 1, 2) for so in a.engines]
    rates: dict[tuple[str, int, int], list[float]] = {v: [] for v in variants}
    for r in range(a.rounds):
        for v in variants:
            games, rate = _run_variant(v, a)
            rates[v].append(rate)
            n = f"{games}" if v[2] == 1 else f"{v[2]}×{games}"
            print(f"round {r + 1} {_label(v)} {n} games  {rate:10,.0f} games/s", flush=True)
    med = {v: statistics.median(x) for v, x in rates.items()}
    base = variants[0]
    for v in variants:
        if v[2] > 1:
            continue  # compared with its own build below
        lo, hi = min(rates[v]), max(rates[v])
        print(f"median {_label(v)} {med[v]:10,.0f} games/s (rounds {lo:,.0f}–{hi:,.0f})  ×{med[v] / med[base]:.2f} vs "
              f"{_label(base, pad=False)} (same files, median of rounds)")
    if a.ceiling:
        for so in a.engines:
            one, two, ceil = med[(so, 1, 1)], med.get((so, 2, 1)), med[(so, 1, 2)]
            line = (f"machine ceiling {_NAMES[so]}: 2 processes × 1 thread {ceil:,.0f} games/s (rounds "
                    f"{min(rates[(so, 1, 2)]):,.0f}–{max(rates[(so, 1, 2)]):,.0f}) = ×{ceil / one:.2f} one process × 1 thread")
            if two is not None:
                line += f"; 2 threads ×{two / one:.2f}, {two / ceil:.0%} of the ceiling"
            print(line)


_NAMES: dict[str, str] = {}


def _label(v: tuple[str, int, int], pad: bool = True) -> str:
    so, t, procs = v
    what = f"{t} thr" if procs == 1 else f"{procs} proc × {t} thr"
    name = _NAMES.get(so, Path(so).name)
    return f"{name:24s} {what:14s}" if pad else f"{name} {what}"


def _run_variant(v: tuple[str, int, int], a) -> tuple[int, float]:
    """Run one variant's fresh process(es); (games read per process, games/s of all together).
    Several processes are released at one instant (a shared start time after their warm-up)."""
    so, t, procs = v
    # numpy's OpenBLAS threads spin after import and would take a core from the parser
    env = {**os.environ, "RAYON_NUM_THREADS": str(t), "OPENBLAS_NUM_THREADS": "1"}
    cmd = [sys.executable, __file__, "_round", so, "--files", a.files, "--passes", str(a.passes), "--call", a.call]
    if procs > 1:
        cmd += ["--start-at", str(time.time() + a.start_delay)]
    kids = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(procs)]
    outs = [k.communicate() + (k.returncode,) for k in kids]
    rate, games = 0.0, 0
    for out, err, rc in outs:
        if rc:
            sys.exit(f"error: {_label(v).strip()} failed:\n{err[-2000:]}")
        d = json.loads(out.strip().splitlines()[-1])
        if d.get("late"):
            sys.exit(f"error: {_label(v, pad=False)}: a process finished its warm-up after the shared start time, "
                     f"so the processes did not race; raise --start-delay (now {a.start_delay:g} s)")
        games, rate = d["games"], rate + d["games"] / d["seconds"]
    return games, rate

if __name__ == "__main__":
    main()
