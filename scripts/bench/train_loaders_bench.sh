#!/usr/bin/env bash
# ms-train with one dedicated data-loader rank against local loading (docs/bench/train.md,
# "Loader ranks"): an 8-source mixture (Tiny Shakespeare cut into 8 datasets), the same run on
# `mpirun -np 2` (local Loaders) and `mpirun -np 3 --set parallel.loaders=1` (2 trainers, 1
# loader rank). Prints each rank's peak RSS (/usr/bin/time), the slowest trainer's data wait,
# the mean tokens/s of the steps after the first, and whether the losses are bitwise equal.
# Usage: scripts/bench/train_loaders_bench.sh [build dir] [work dir] [steps]
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/ms-train-loaders-bench}
STEPS=${3:-30}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$BUILD/bin
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
mkdir -p "$WORK"

# Eight sources: consecutive eighths of the corpus, each its own dataset and mixture weight.
if [ ! -f "$WORK/mix.plan" ]; then
  corpus=$SRC/data/corpus/tinyshakespeare.txt
  lines=$(wc -l < "$corpus")
  split -d -l $(((lines + 7) / 8)) --additional-suffix=.txt "$corpus" "$WORK/part-"
  {
    echo "seq_len: 128"
    echo "total_samples: 20000"
    echo "validation: {fraction: 0.02, samples: 64}"
    echo "sources:"
  } > "$WORK/mix.yaml"
  for i in 0 1 2 3 4 5 6 7; do
    "$BIN/ms-data" build -i "$WORK/part-0$i.txt" --doc-separator blank-line \
      -t "$SRC/data/tokenizers/gpt2/tokenizer.json" -o "$WORK/src$i" --threads 2 --no-progress \
      > /dev/null
    echo "  - {name: src$i, prefix: $WORK/src$i, weight: 1.0}" >> "$WORK/mix.yaml"
  done
  "$BIN/ms-data" plan --config "$WORK/mix.yaml" --output "$WORK/mix.plan" > /dev/null
fi

run() {  # run <label> <ranks> [extra --set args...]
  local label=$1 np=$2
  shift 2
  rm -rf "$WORK/$label" "$WORK/$label".rss.*
  # One file per rank: the ranks' stderr lines interleave.
  mpirun --oversubscribe -np "$np" bash -c '/usr/bin/time -o "$0.rss.$OMPI_COMM_WORLD_RANK" \
    -f "peak_rss rank $OMPI_COMM_WORLD_RANK %M KB" "$@"' "$WORK/$label" "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" --set data.plan="$WORK/mix.plan" \
    --set run.dir="$WORK/$label" --set train.steps="$STEPS" --set train.eval_every=0 \
    --set checkpoint.every=0 --set telemetry.trace=false --set train.mfu_peak_gflops=1 \
    --set train.log_every=1 \
    "$@" > "$WORK/$label.out" 2>&1
  echo "== $label (mpirun -np $np $*)"
  cat "$WORK/$label".rss.*
  grep -o 'data wait: .*' "$WORK/$label.out"
  awk '/ step [0-9]+\/[0-9]+ \| loss / { split($0, a, "tok/s "); split(a[2], b, " ");
         if (++n > 1) { sum += b[1]; m++ } } END { if (m) printf "tokens/s (mean of steps 2..%d): %.0f\n", n, sum / m }' \
    "$WORK/$label/log.txt"
}
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$WORK/$1/telemetry/rank-00000.jsonl"; }

echo "# $(uname -n), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ), $STEPS steps of configs/tiny-dense.yaml"
run local 2
run loaders 3 --set parallel.loaders=1
if diff -q <(losses local) <(losses loaders) > /dev/null; then
  echo "losses: bitwise equal"
else
  echo "losses: DIFFER"
  exit 1
fi
