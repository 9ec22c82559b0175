#!/usr/bin/env bash
# Accelerator check of the published recipe (large supernet, B 256, T 512, bf16) on a GPU or a TPU:
# compiled memory per remat mode (a mode XLA refuses for lack of memory is a row), then a short timed
# run with MFU. Never part of CI. Results: $OUT/accel_check.json.
#   benchmarks/accel_check.sh [--batch-size N --seq-len T --accumulation-steps A --chunks C ...]
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
# JAX preallocates 75 % of a GPU by default; let the step use what it needs (TPUs ignore it).
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.95}"
exec timeout 560 python3 benchmarks/accel_check.py "$@"
