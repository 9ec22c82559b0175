#!/usr/bin/env bash
# GPU check of the published recipe (large supernet, B 256, T 512, bf16): compiled memory per remat
# mode, then a short timed run with MFU. NVIDIA GPU only; never part of CI. Results: $OUT/gpu_check.json.
#   benchmarks/gpu_check.sh [--batch-size N --seq-len T --accumulation-steps A --chunks C ...]
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
# JAX preallocates 75 % of the GPU by default; let the step use what it needs.
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.95}"
exec timeout 280 python3 benchmarks/gpu_check.py "$@"
