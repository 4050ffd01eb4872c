#!/usr/bin/env bash
# The layer's GPU measurements in one call of a lent GPU machine (at most 9 of its 10 minutes: six steps of at most 90 s):
# the trained walks fixtures eager and through CUDA graphs, each with the Anderson and the GMRES
# adjoint (`gpu_profile.py`: wall ms a batch,
# forward and adjoint iterations, kernel and graph launches, host syncs, the GPU's busy share,
# beside a BiLSTM and a BiGRU of the same k), then the low-rank preconditioner's adjoint there
# (`low_rank.py adjoint`), the lead a CPU could not pay for. From the repository root:
#
#   run(command="bash archive/hard_systems/gpu_check.sh", timeout_s=600)
#
# Needs only torch, numpy and pandas beside this checkout's src/ (the device image has them).
# Every step appends to $OUT/gpu_check.txt as it goes and has its own time limit, so a step that
# fails or runs long costs its own lines, not the call's. DEVICE=cpu BATCHES=2 LENGTHS=20 runs
# the same steps on a CPU, one thread (a check of the script, without the CUDA columns; minutes,
# and the epoch-23 fixture's homotopy batches run past a step's limit there).
set -uo pipefail
cd "$(dirname "$0")/../../.."
device=${DEVICE:-cuda} batches=${BATCHES:-10} lengths=${LENGTHS:-"20 40"} limit=${STEP_SECONDS:-90}
out=${OUT:-/tmp}/gpu_check.txt
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
here=archive/hard_systems
step() {
  echo "\$ $*" >> "$out"
  timeout "$limit" "$@" >> "$out" 2>&1 || echo "(ended with status $?)" >> "$out"
}
{ date -u; git rev-parse --short HEAD 2>/dev/null || cat src/inn/COMMIT 2>/dev/null
  [ "$device" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__)"; } >> "$out" 2>&1
for fixture in tests/fixtures/walks_b05_inn_seed3_epoch23.pt tests/fixtures/walks_b05_inn_epoch5.pt; do
  for n in $lengths; do
    step python3 "$here/gpu_profile.py" "$fixture" "$n" "$batches" "$device"
  done
done
for n in $lengths; do
  DEVICE=$device step python3 "$here/low_rank.py" tests/fixtures/walks_b05_inn_seed3_epoch23.pt adjoint "$n" "$batches" 3
done
cat "$out"
