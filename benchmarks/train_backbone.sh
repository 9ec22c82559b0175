#!/usr/bin/env bash
# A backbone worth adapting in one accelerator call: `pawn pretrain --variant small` (the published
# pawn-small shape, 8.94 M parameters) on random games for at most --minutes of wall time, validated every
# --val-every steps (legal rate, and the legal-masked loss against the uniform-over-legal player's
# E[ln N_legal]: the excess in nats with a 95 % interval over games), then its best checkpoint in bfloat16
# split into parts of <= 16 MiB, its curve and a summary under the output folder (at most 8 files,
# benchmarks/train_backbone.py). The last line on stdout is the summary as one JSON object.
#
#   bash benchmarks/train_backbone.sh [--smoke] [--out DIR] [--minutes M] [--steps N] [--lr LR] [-- PRETRAIN FLAGS]
#
# Output folder: --out, else $OUT (an accelerator call's folder), else runs/train-backbone-out. The run
# itself goes to --run-dir (default: a folder beside it, runs/train-backbone). Rebuild a checkpoint from the
# parts with `python benchmarks/train_backbone.py join OUT/backbone CKPT_DIR`.
#
# Sizing (one TPU v5e chip, 15.7 GiB): pawn-small at batch 256 x 256 plies runs 59.9 M FLOPs a token;
# at the tiny supernet's measured 14.5 % MFU of the chip's 197 TFLOP/s that is about 480 k tokens/s,
# about 7 steps/s, so its 2,500 steps take about 6 minutes and the clock stop (--minutes, default 6.5,
# SIGINT: the chunk under way ends and a checkpoint is written) keeps the call inside 8 minutes
# whatever the chip's real pace. --smoke: the toy model, tiny shapes, float32, a few seconds on a CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

smoke=0; out=""; run_dir=""; minutes=6.5; steps=2500; lr=1e-3; extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --out) out=$2; shift ;;
    --run-dir) run_dir=$2; shift ;;
    --minutes) minutes=$2; shift ;;
    --steps) steps=$2; shift ;;
    --lr) lr=$2; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "train_backbone.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
out=${out:-${OUT:-runs/train-backbone-out}}
run_dir=${run_dir:-runs/train-backbone}
mkdir -p "$out"

if [ "$smoke" = 1 ]; then
  model=(--variant toy --dtype float32); shape=(--batch-size 8 --seq-len 32)
  steps=${SMOKE_STEPS:-20}; sched=(--val-every 10 --val-games 16 --checkpoint-every 10 --steps-per-chunk 10)
  part_bytes=${PART_BYTES:-200000}
else
  # remat none: the step fits the chip many times over; naming it skips auto's trial compiles
  model=(--variant small --remat none); shape=(--batch-size 256 --seq-len 256)
  sched=(--val-every 250 --val-games 512 --checkpoint-every 1000 --checkpoint-every-minutes 0)
  part_bytes=${PART_BYTES:-16777216}
fi

budget_s=$("$PY" -c "import sys; print(max(1, int(float(sys.argv[1]) * 60)))" "$minutes")
t0=$(date +%s)
set +e
# SIGINT at the budget: pawn pretrain ends the chunk under way, writes a checkpoint and exits 0; a run
# still alive 90 s later is killed (its last complete checkpoint is exported).
timeout --foreground -s INT -k 90 "$budget_s" "$PY" -m pawn.cli pretrain "${model[@]}" "${shape[@]}" \
  --total-steps "$steps" --lr "$lr" "${sched[@]}" --out "$run_dir" --overwrite "${extra[@]}" \
  > "$out/train.log" 2>&1
rc=$?
set -e
wall_s=$(( $(date +%s) - t0 ))
tail -5 "$out/train.log" >&2
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then
  echo "train_backbone.sh: pawn pretrain exited $rc (see $out/train.log); exporting what it wrote" >&2
fi
"$PY" benchmarks/train_backbone.py export "$run_dir" "$out" --part-bytes "$part_bytes" \
  --extra "{\"pretrain_exit_code\": $rc, \"wall_s\": $wall_s, \"budget_s\": $budget_s, \"smoke\": $([ "$smoke" = 1 ] && echo true || echo false)}"
