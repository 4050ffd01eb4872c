#!/usr/bin/env bash
# Table 1's runs on a lent GPU machine, side by side, for one stretch: the workflow's own
# `inn train` and `inn evaluate` commands for each run, from the pinned checkout's source, with
# every run's state brought back at the end. Two steps:
#
#   here:  bash archive/paper_walks/gpu_stretch.sh prepare PINNED RUN...
#          PINNED is the pinned checkout with its workflow results (e.g. /work/runs-a9e4c60, its
#          out/paper_walks/ holding local.yaml, or the queue's local_t1.yaml, and results/); RUN is b:model:seed (0.5:inn:2,
#          1.0:bilstm-h1000:1). Writes .gpu/ in this checkout (ignored through .git/info/exclude):
#          the pinned src/, the wheels the device lacks, each run's resume state (without warm
#          starts) and its two commands, printed by `snakemake -n -p` with `device: cuda` and the
#          CUDA graphs on (they replay the same steps; resuming across them is allowed).
#   there: run(command="bash archive/paper_walks/gpu_stretch.sh run SECONDS [RUN...]", carry=[".gpu"])
#          trains every prepared run (or only the RUNs named) for at most SECONDS (SIGINT then: the last finished epoch is kept),
#          evaluates the ones that finish, and writes one tar per run under $OUT: the run's
#          train folder (last.pt without warm starts, best.pt, history.tsv, its log) and, when
#          finished, its eval folder. A finished run's checkpoint.pt stays behind (a b-LSTM 1,000
#          is 32 MB, 1,500 73 MB: more than $OUT takes); its metrics, predictions and history come.
#          Called again while the machine is still held (it stays 30 s after a call), `run` goes
#          on with every unfinished run from its state on the device's disk (large b-LSTMs
#          included) and brings each back again; runs finished in an earlier call are skipped.
#          Prepare every run the lease may reach before its first call and name the ones for each
#          call: the machine goes back 30 s after a call, sooner than a new `prepare` is shipped.
#   here:  bash archive/paper_walks/gpu_stretch.sh unpack PINNED FILES_AT
#          puts each tar's folders into PINNED/out/paper_walks/results/, the stretch's log into
#          the run's logs/ (train_<began>_gpu.log, which --keep-states carries), and removes
#          stale locks.
set -euo pipefail
step=${1:?usage: gpu_stretch.sh prepare PINNED RUN... | run SECONDS [RUN...] | unpack PINNED FILES_AT}
shift
root=$(git rev-parse --show-toplevel)
cd "$root"

case "$step" in
prepare)
  pinned=$(cd "${1:?PINNED}" && pwd); shift
  exclude="$(git rev-parse --git-common-dir)/info/exclude" && mkdir -p "$(dirname "$exclude")"
  grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude"
  rm -rf .gpu && mkdir -p .gpu/runs .gpu/whl
  git -C "$pinned" archive HEAD src | tar -x -C .gpu
  git -C "$pinned" rev-parse --short=7 HEAD > .gpu/commit
  # what the device's Python lacks (its image has torch, numpy, pandas, yaml, tqdm, attrs)
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .gpu/whl conllu jsonschema jsonschema-specifications referencing rpds-py
  work="$pinned/out/paper_walks"
  printf 'device: cuda\nsolver: {options: {cuda_graph: auto}}\n' > "$work/gpu.yaml"
  local=local.yaml && [ -f "$work/local_t1.yaml" ] && local=local_t1.yaml  # the queue's
  for run in "$@"; do
    IFS=: read -r b model seed <<< "$run"
    folder="walks/b$b/$model/seed$seed"
    mkdir -p ".gpu/runs/$run"
    (cd "$pinned" && . .venv/bin/activate && snakemake -n -p --forceall --cores 1 \
        --configfile config/paper_walks.yaml "out/paper_walks/$local" out/paper_walks/gpu.yaml \
        --directory out/paper_walks -s Snakefile "results/eval/$folder/metrics.json" 2>/dev/null) \
      | sed -n -E 's/^(Shell command: )?(python -m inn (generate-walks|train|evaluate) .*)/\2/p' > ".gpu/runs/$run/commands"
    if [ -f "$work/results/train/$folder/last.pt" ]; then
      (cd "$root" && inn runs "$work/results" --keep-states ".gpu/runs/$run/keep" > /dev/null)
      find ".gpu/runs/$run/keep/train" -mindepth 4 -maxdepth 4 -type d ! -path "*/$folder" -exec rm -rf {} +
    fi
  done
  du -sh .gpu
  ;;
run)
  seconds=${1:?SECONDS}; shift
  dirs=() && for run in "$@"; do dirs+=(".gpu/runs/$run/"); done
  [ ${#dirs[@]} -gt 0 ] || dirs=(.gpu/runs/*/)
  for dir in "${dirs[@]}"; do [ -f "$dir/commands" ] || { echo "$dir: not prepared (gpu_stretch.sh prepare)" >&2; exit 2; }; done
  python3 -c "import conllu, jsonschema" 2>/dev/null \
    || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/whl/*.whl
  export PYTHONPATH="$root/.gpu/src:/tmp/site" OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
  out=${OUT:?OUT is where the states go back}
  for dir in "${dirs[@]}"; do
    run=$(basename "$dir")
    (
      work="/tmp/work/$run"
      if [ -d "$work/logs" ]; then  # a second call on the same warm machine: on from the state on its disk
        ls "$work"/results/eval/*/*/*/seed*/metrics.json > /dev/null 2>&1 && exit 0  # finished and brought back
      else
        mkdir -p "$work/logs" && cd "$work"
        [ -d "$root/$dir/keep/train" ] && mkdir -p results && cp -r "$root/$dir/keep/train" results/
        grep '^python -m inn generate-walks ' "$root/$dir/commands" | sed 's/ 2> .*//; s/^python /python3 /' | bash > logs/data.log 2>&1
      fi
      cd "$work"
      train=$(grep '^python -m inn train ' "$root/$dir/commands" | sed 's/ 2> .*//; s/^python /python3 /')
      timeout -s INT "$seconds" bash -c "$train" > logs/train.log 2>&1 || true
      grep '^python -m inn evaluate ' "$root/$dir/commands" | sed 's/ 2> .*//; s/^python /python3 /' > evaluate.sh
      checkpoint=$(sed -n 's/.*--checkpoint \([^ ]*\).*/\1/p' evaluate.sh)
      [ -f "$checkpoint" ] && bash evaluate.sh > logs/evaluate.log 2>&1
      # last.pt without its warm starts; and the source commit, which a shipped src/ older than
      # inn/COMMIT (no git checkout: a9e4c60 is one) records as "inn <version>", named as the
      # pinned commit it was archived from
      COMMIT=$(cat "$root/.gpu/commit") python3 - <<'EOF'
import json, os, pathlib, torch
import inn
shipped, commit = f"inn {inn.__version__}", os.environ["COMMIT"]
def named(value):
    if isinstance(value, dict):
        return {k: named(v) for k, v in value.items()}
    if isinstance(value, list):
        return [named(v) for v in value]
    return commit if value == shipped else value
for path in pathlib.Path("results").glob("train/*/*/*/seed*/*.pt"):
    state = torch.load(path, map_location="cpu", weights_only=True)
    state = {k: v for k, v in state.items() if k not in ("warm_starts", "warm_adjoints")}
    torch.save({**state, **{k: named(state[k]) for k in ("meta", "train_state") if k in state}}, path)
for path in pathlib.Path("results").glob("train/*/*/*/seed*/history.tsv"):
    path.write_text(path.read_text().replace(f"\t{shipped}\n", f"\t{commit}\n"))
for path in pathlib.Path("results").glob("eval/*/*/*/seed*/metrics.json"):
    path.write_text(json.dumps(named(json.loads(path.read_text())), indent=2) + "\n")
EOF
      big=$(find results -name '*.pt' -size +15M -printf '--exclude=%p ')  # over what $OUT takes
      tar -cf "$out/${run//:/_}.tar" $big --exclude=.lock logs $(ls -d results/train results/eval 2>/dev/null)
    ) &
  done
  wait
  ls -la "$out"
  ;;
unpack)
  pinned=$(cd "${1:?PINNED}" && pwd); files=${2:?FILES_AT}
  for tar in "$files"/*.tar; do
    tmp=$(mktemp -d) && tar -xf "$tar" -C "$tmp"
    run=$(cd "$tmp/results" && ls -d train/*/*/*/seed*)
    cp -r "$tmp/results/." "$pinned/out/paper_walks/results/"
    # the stretch's log beside the run, named by when it began (`inn runs --keep-states` keeps
    # it), unless the run logged the stretch itself (a pinned commit with inn train's stretch logs)
    began=$(head -c 19 "$tmp/logs/train.log" | tr -dc 0-9)
    mkdir -p "$pinned/out/paper_walks/results/$run/logs"
    first=$(head -n 1 "$tmp/logs/train.log")
    grep -qxF -- "$first" <(head -qn 1 "$tmp/results/$run"/logs/*.log 2>/dev/null) \
      || cp "$tmp/logs/train.log" "$pinned/out/paper_walks/results/$run/logs/train_${began:-unknown}_gpu.log"
    find "$pinned/out/paper_walks/results/train" -name .lock -delete
    rm -rf "$tmp"
  done
  ;;
*)
  echo "usage: gpu_stretch.sh prepare PINNED RUN... | run SECONDS [RUN...] | unpack PINNED FILES_AT" >&2; exit 2 ;;
esac
