#!/usr/bin/env bash
# Tensor parallelism against data parallelism on the matmul-bound shape of issue 12 (d_model 512,
# 8 layers, sequence 256; docs/bench/train.md, "Tensor parallelism"), in one run on the same
# machine: one rank with 2 BLAS threads, dp = 2, tp = 2 with the chunked overlap and tp = 2
# without it (every rank 1 BLAS thread). Each runs the same steps of 4 x 256 tokens on the
# Shakespeare plan. Prints the mean tokens/s of the steps after the first, each rank's peak RSS
# (/usr/bin/time), the trainer's memory plan (weights and optimizer state per rank) and, for
# tp, the tensor-parallel bytes per step and the share hidden behind compute.
# Usage: scripts/bench/train_tp_bench.sh [build dir] [work dir] [steps]
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/ms-train-tp-bench}
STEPS=${3:-6}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$BUILD/bin
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$WORK"
if [ ! -f "$WORK/s256.plan" ]; then
  "$BIN/ms-data" build -i "$SRC/data/corpus/tinyshakespeare.txt" --doc-separator blank-line \
    -t "$SRC/data/tokenizers/gpt2/tokenizer.json" -o "$WORK/shakespeare" --threads 2 \
    --no-progress > /dev/null
  cat > "$WORK/mix.yaml" <<YAML
seq_len: 256
total_samples: 4000
validation: {fraction: 0.02, samples: 16}
sources:
  - {name: shakespeare, prefix: $WORK/shakespeare, weight: 1.0}
YAML
  "$BIN/ms-data" plan --config "$WORK/mix.yaml" --output "$WORK/s256.plan" > /dev/null
fi

shape=(--set model.d_model=512 --set model.n_layers=8 --set model.n_heads=8
       --set model.n_kv_heads=8 --set model.d_ff=1408 --set model.max_seq_len=256
       --set train.seq_len=256 --set train.global_batch=4 --set train.micro_batch=2)

run() {  # run <label> <ranks> <blas threads> [extra --set args...]
  local label=$1 np=$2 threads=$3
  shift 3
  rm -rf "$WORK/$label" "$WORK/$label".rss.*
  OPENBLAS_NUM_THREADS=$threads mpirun --oversubscribe -x OPENBLAS_NUM_THREADS -np "$np" \
    bash -c '/usr/bin/time -o "$0.rss.$OMPI_COMM_WORLD_RANK" \
    -f "peak_rss rank $OMPI_COMM_WORLD_RANK %M KB" "$@"' "$WORK/$label" \
    "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" --set data.plan="$WORK/s256.plan" \
    --set run.dir="$WORK/$label" --set train.steps="$STEPS" --set train.eval_every=0 \
    --set checkpoint.every=0 --set telemetry.trace=false --set train.mfu_peak_gflops=1 \
    --set train.log_every=1 --set optim.warmup_steps=1 "${shape[@]}" "$@" > "$WORK/$label.out" 2>&1
  echo "== $label (mpirun -np $np, $threads BLAS thread(s) per rank, $*)"
  cat "$WORK/$label".rss.*
  grep -o 'memory per model rank.*' "$WORK/$label.out" | sed 's/; expected.*//'
  grep -o 'tensor-parallel communication: .*' "$WORK/$label.out" || true
  awk '/ step [0-9]+\/[0-9]+ \| loss / { split($0, a, "tok/s "); split(a[2], b, " ");
         if (++n > 1) { sum += b[1]; m++ } } END { if (m) printf "tokens/s (mean of steps 2..%d): %.0f\n", n, sum / m }' \
    "$WORK/$label/log.txt" | tee "$WORK/$label.tps"
}
tps() { sed -n 's/.*: \([0-9]*\)$/\1/p' "$WORK/$1.tps"; }

echo "# $(uname -n), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg), $STEPS steps"
run one 1 2
run dp2 2 1
run tp2 2 1 --set parallel.tp=2
run tp2-serial 2 1 --set parallel.tp=2 --set parallel.tp_overlap=false
awk -v tp="$(tps tp2)" -v serial="$(tps tp2-serial)" -v dp="$(tps dp2)" -v one="$(tps one)" 'BEGIN {
  printf "tp2 / dp2 tokens/s: %.2f (aim >= 0.85); tp2 without overlap / dp2: %.2f; tp2 / one rank x 2 threads: %.2f\n",
         tp / dp, serial / dp, tp / one }'
