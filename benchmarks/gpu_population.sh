#!/usr/bin/env bash
# GPU figure for issue 15: trials/hour of a vmapped population against the same P trials run one after
# another (`pawn bench --only population`), pretraining and LoRA adapter trials, at a size where a single
# small trial leaves an accelerator idle. NVIDIA GPU only; never part of CI. Results: $OUT/population.json.
#   benchmarks/gpu_population.sh [extra pawn bench flags, e.g. --population-size 8]
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.95}"
OUT="${OUT:-.}"
exec timeout 540 python3 -m pawn.cli bench --only population --supernet tiny --batch-size 64 --seq-len 256 \
  --steps-per-chunk 10 --population-size 4 --population-steps 40 --json "$OUT/population.json" "$@"
