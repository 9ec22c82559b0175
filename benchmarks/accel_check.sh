#!/usr/bin/env bash
# One accelerator check of the published recipe (large supernet, B 256 × T 512, bf16, pawn pretrain's
# defaults) on a GPU or a TPU, all sections in one call (see benchmarks/accel_check.py): pawn doctor, the
# --remat auto search table, ≥ 60 s of `pawn pretrain --supernet large --total-steps 200000` (tokens/s,
# MFU, host peak RSS), engine games/s against what the step consumes, a jax.profiler top-ops summary and
# the adapter step against the public v2 code. Never part of CI; `--smoke` runs it on a CPU with a toy
# model (tests/test_accel_check.py). Results: $OUT/accel_check.json and a log per section.
#   benchmarks/accel_check.sh [--smoke] [--ref-src DIR --ref-path DIR] [--sections a,b] [--train-s N ...]
set -euo pipefail
cd "$(dirname "$0")/.."
# The checkout's src/ when its engine is built there (a development tree); else the installed pawn.
if compgen -G "src/pawn/_engine*.so" >/dev/null; then export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"; fi
# JAX preallocates 75 % of a GPU by default; let the step use what it needs (TPUs ignore it).
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.95}"
exec timeout --foreground -s INT 590 python3 benchmarks/accel_check.py "$@"
