#!/usr/bin/env bash
# Every point of the cost measurement (measured.tsv), AT_ONCE side by side (one thread each;
# 1 where other work holds a core), the Table 1 queue paused meanwhile. From the repository root, after the queue
# has made the a9e4c60 worktree (python archive/paper_walks/run_queue.py start):
#
#   bash archive/paper_walks/cost/measure_all.sh [BATCHES] [AT_ONCE]   (defaults 100, 2)
#
# Points: fresh weights (each model's epoch 1) at b = 0.5 and 1; the INN from states kept late
# in training: b = 0.5 after epochs 5, 8, 12 and 23 (tests/fixtures), b = 1 after epoch 19 (its
# seed 2's state, kept in git at 231d5d2).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
batches=${1:-100}
at_once=${2:-2}
tree=out/pinned/a9e4c60
out=archive/paper_walks/cost/measured.tsv
state=out/cost && mkdir -p "$state"
git show 231d5d2:docs/benchmark/paper_walks/unfinished/train/walks/b1.0/inn/seed2/last.pt > "$state/b1_inn_seed2_epoch19.pt"
for b in 0.5 1.0; do  # the walks, regenerated with the archive's fingerprints
  (cd "$tree" && PATH="$PWD/.venv/bin:$PATH" snakemake --nolock --cores 1 --configfile config/paper_walks.yaml \
     out/paper_walks/local_t1.yaml --directory out/paper_walks -s Snakefile "results/data/walks/b$b/summary.tsv" -q)
done
measure() {  # b model [--state FILE] [--point NAME]
  local b=$1 model=$2; shift 2
  PYTHONPATH=$tree/src OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$tree/.venv/bin/python" archive/paper_walks/cost/measure.py \
    --data "$tree/out/paper_walks/results/data/walks/b$b" --model "$model" --batches "$batches" \
    --settings-from "$state/b1_inn_seed2_epoch19.pt" --out "$state/measured_${b}_${model}_${RANDOM}${RANDOM}.tsv" "$@"
}
python archive/paper_walks/run_queue.py pause
trap 'python archive/paper_walks/run_queue.py resume' EXIT
rm -f "$state"/measured_*.tsv
jobs_=(
  "1.0 inn --state $state/b1_inn_seed2_epoch19.pt --point seed2_epoch19"
  "1.0 inn"
  "0.5 inn --state tests/fixtures/walks_b05_inn_seed3_epoch23.pt --point seed3_epoch23"
  "0.5 inn --state tests/fixtures/walks_b05_inn_seed3_epoch12.pt --point seed3_epoch12"
  "0.5 inn --state tests/fixtures/walks_b05_inn_seed2_epoch8.pt --point seed2_epoch8"
  "0.5 inn --state tests/fixtures/walks_b05_inn_epoch5.pt --point seed1_epoch5"
  "0.5 inn"
  "1.0 bilstm-h1500" "0.5 bilstm-h1500" "1.0 bilstm-h1000" "0.5 bilstm-h1000"
  "1.0 bilstm-h500" "0.5 bilstm-h500" "1.0 bilstm-h300" "0.5 bilstm-h300" "1.0 bilstm-h100" "0.5 bilstm-h100"
)
for spec in "${jobs_[@]}"; do
  # shellcheck disable=SC2086
  measure $spec &
  while [ "$(jobs -rp | wc -l)" -ge "$at_once" ]; do sleep 1; done
done
wait
python - "$state" "$out" <<'EOF'
import sys, pathlib, pandas as pd
parts = sorted(pathlib.Path(sys.argv[1]).glob("measured_*.tsv"))
table = pd.concat([pd.read_csv(p, sep="\t") for p in parts]).sort_values(["model", "b", "point", "pass"])
table.to_csv(sys.argv[2], sep="\t", index=False, float_format="%.6g")
EOF
echo "wrote $out"
