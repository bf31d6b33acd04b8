#!/usr/bin/env bash
# Context parallelism (issue 15), in one run on the same machine: configs/long-context.yaml's
# model (4 layers, d_model 128, the 1024-token BPE learned from the corpus) on 8192-token
# sequences at cp = 1 (1 rank), cp = 2 (2 ranks) and cp = 4 (4 ranks, oversubscribed on a
# 2-core machine, so its times are not comparable; its memory is), STEPS steps each:
#  - the attention's time (forward and backward; with cp its ring) against the step time, the
#    ring's transfers and the share of them hidden behind the attention (ms-train's summary);
#  - each rank's peak resident memory (VmHWM), and the activations' part of it: the peak minus
#    that of the same run at 256-token sequences (weights, optimizer state and the process
#    itself, which cp does not divide), against cp = 1's.
# Every rank 1 BLAS thread. Usage: scripts/bench/train_cp_bench.sh [build dir] [work dir] [steps]
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/ms-train-cp-bench}
STEPS=${3:-3}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$BUILD/bin
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$WORK"
[ -f "$WORK/bpe.json" ] || "$BIN/ms-data" tokenizer train --input "$SRC/data/corpus/tinyshakespeare.txt" \
  --vocab-size 1024 --output "$WORK/bpe.json" > /dev/null
[ -f "$WORK/shakespeare.idx" ] || "$BIN/ms-data" build -i "$SRC/data/corpus/tinyshakespeare.txt" \
  --doc-separator blank-line -t "$WORK/bpe.json" -o "$WORK/shakespeare" --threads 2 --no-progress > /dev/null
plan() {  # plan <seq_len>
  [ -f "$WORK/s$1.plan" ] && return
  sed -e "s|^seq_len: .*|seq_len: $1|" -e "s|prefix: data/shakespeare|prefix: $WORK/shakespeare|" \
    "$SRC/configs/plan-long.yaml" > "$WORK/s$1.yaml"
  "$BIN/ms-data" plan --config "$WORK/s$1.yaml" --output "$WORK/s$1.plan" > /dev/null
}
plan 8192
plan 256

run() {  # run <label> <ranks> <seq_len> [extra --set args...]
  local label=$1 np=$2 seq=$3
  shift 3
  rm -rf "${WORK:?}/$label"
  mpirun --oversubscribe -x OPENBLAS_NUM_THREADS -np "$np" "$BIN/ms-train" \
    --config "$SRC/configs/long-context.yaml" --set data.plan="$WORK/s$seq.plan" \
    --set train.seq_len="$seq" --set run.dir="$WORK/$label" --set train.steps="$STEPS" \
    --set train.mfu_peak_gflops=1 --set telemetry.trace=false "$@" > "$WORK/$label.out" 2>&1 ||
    { cat "$WORK/$label.out"; exit 1; }
}
peak_mib() { sed -n 's/.*peak resident memory \([0-9]*\) MiB.*/\1/p' "$WORK/$1.out"; }
attention() { sed -n 's/.*\] attention \([0-9.]*\)s of \([0-9.]*\)s of steps.*/\1 \2/p' "$WORK/$1.out"; }

echo "# $(uname -n), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
run base 1 256 --set parallel.cp=1
for cp in 1 2 4; do run "cp$cp" "$cp" 8192 --set parallel.cp="$cp"; done
base=$(peak_mib base)
act1=$(( $(peak_mib cp1) - base ))
for cp in 1 2 4; do
  read -r att total <<<"$(attention "cp$cp")"
  peak=$(peak_mib "cp$cp")
  act=$((peak - base))
  ring=$(grep -o 'context-parallel ring attention: .*' "$WORK/cp$cp.out" || echo "no ring (cp 1)")
  awk -v cp="$cp" -v att="$att" -v total="$total" -v peak="$peak" -v act="$act" -v act1="$act1" \
      -v steps="$STEPS" 'BEGIN {
    printf "cp %d: attention %.2fs per step of %.2fs (%.0f%%); peak memory %d MiB per rank, activations %d MiB = %.2f of cp 1 (1/cp = %.2f)\n",
           cp, att / steps, total / steps, 100 * att / total, peak, act, act / act1, 1 / cp }'
  echo "    $ring"
done
awk -v a="$(attention cp1 | cut -d' ' -f1)" -v b="$(attention cp2 | cut -d' ' -f1)" 'BEGIN {
  printf "attention time per rank, cp 2 against cp 1: %.2f\n", b / a }'
