#!/usr/bin/env bash
# Pipeline parallelism (issue 13): the measured bubble of each schedule against its theoretical
# one at pp = 2 and 4, and tokens/s against data parallelism on the same ranks, in one run on
# the same machine. The model is balanced over the stages: 8 layers of d_model 256 on a
# 1024-token BPE learned from the corpus, so the lm_head weighs a quarter of a layer (with
# GPT-2's 50257-token vocabulary the last stage would hold 12 layers' worth of work and the
# bubble would measure the imbalance, not the schedule). 8 micro-batches of 1 x 128 tokens per
# step, every rank 1 BLAS thread. The bubble comes from `ms-diagnose stragglers` over the
# run's traces (the pipeline span minus each rank's compute, mean over ranks and the steps
# after the first); tokens/s is the mean of the steps after the first.
# 4 ranks on a 2-core machine are oversubscribed: two ranks share each core, so pp = 4 and
# dp = 4 measure the schedule under time-sharing, and the bubble fills partly with the other
# rank's work on the same core.
# Usage: scripts/bench/train_pp_bench.sh [build dir] [work dir] [steps]
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/ms-train-pp-bench}
STEPS=${3:-5}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$BUILD/bin
source "$SRC/scripts/bench/plan_models.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$WORK"
plan_bench_data "$BIN" "$WORK"  # the planner benchmark's data (plan_models.sh)

shape=(--set model.vocab_size=1024 --set model.d_model=256 --set model.n_layers=8
       --set model.n_heads=8 --set model.n_kv_heads=8 --set model.d_ff=704
       --set model.max_seq_len=128 --set train.seq_len=128 --set train.global_batch=8
       --set train.micro_batch=1)

run() {  # run <label> <ranks> [extra --set args...]
  local label=$1 np=$2
  shift 2
  rm -rf "${WORK:?}/$label"
  mpirun --oversubscribe -x OPENBLAS_NUM_THREADS -np "$np" "$BIN/ms-train" \
    --config "$SRC/configs/tiny-dense.yaml" --set data.plan="$WORK/s128.plan" \
    --set run.dir="$WORK/$label" --set train.steps="$STEPS" --set train.eval_every=0 \
    --set checkpoint.every=0 --set telemetry.trace=true --set train.mfu_peak_gflops=1 \
    --set train.log_every=1 --set optim.warmup_steps=1 "${shape[@]}" "$@" > "$WORK/$label.out" 2>&1 ||
    { cat "$WORK/$label.out"; exit 1; }
  local tps bubble
  tps=$(awk '/ step [0-9]+\/[0-9]+ \| loss / { split($0, a, "tok/s "); split(a[2], b, " ");
           if (++n > 1) { sum += b[1]; m++ } } END { if (m) printf "%.0f", sum / m }' \
        "$WORK/$label/log.txt")
  echo "$tps" > "$WORK/$label.tps"
  bubble=""
  if grep -q "parallel.pp=[24]" <<<"$*"; then
    # The first step carries start-up; keep the later ones. A pipeline transfer's seq is
    # step * 32768 + its tag (train/pipeline_step.cc), so step 1's are those below 65536.
    mkdir -p "$WORK/$label/trace-steady"
    for f in "$WORK/$label"/trace/rank-*.jsonl; do
      awk 'NR == 1 { print; next }
           /"kind":"compute"/ && /"step":1,/ { next }
           /"kind":"comm"/ { match($0, /"seq":[0-9]+/); if (substr($0, RSTART + 6, RLENGTH - 6) + 0 < 65536) next }
           { print }' "$f" > "$WORK/$label/trace-steady/$(basename "$f")"
    done
    status=0
    "$BIN/ms-diagnose" stragglers "$WORK/$label/trace-steady" > "$WORK/$label.stragglers" 2>&1 ||
      status=$?
    [ "$status" -eq 0 ] || [ "$status" -eq 3 ] || { cat "$WORK/$label.stragglers"; exit 1; }
    bubble=$(grep -o 'bubble: measured.*' "$WORK/$label.stragglers")
  fi
  printf "%-14s np %d  tokens/s %6s  %s\n" "$label" "$np" "$tps" "$bubble"
}
tps() { cat "$WORK/$1.tps"; }

echo "# $(uname -n), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg), $STEPS steps"
run dp2 2
run pp2-1f1b 2 --set parallel.pp=2
run pp2-interleaved 2 --set parallel.pp=2 --set parallel.vpp=2 --set parallel.schedule=interleaved
run pp2-zb 2 --set parallel.pp=2 --set parallel.schedule=zero-bubble
run dp4 4
run pp4-1f1b 4 --set parallel.pp=4
run pp4-interleaved 4 --set parallel.pp=4 --set parallel.vpp=2 --set parallel.schedule=interleaved
run pp4-zb 4 --set parallel.pp=4 --set parallel.schedule=zero-bubble
awk -v a="$(tps pp2-1f1b)" -v b="$(tps pp2-zb)" -v c="$(tps pp2-interleaved)" -v d="$(tps dp2)" \
    -v e="$(tps pp4-1f1b)" -v f="$(tps pp4-zb)" -v g="$(tps pp4-interleaved)" -v h="$(tps dp4)" 'BEGIN {
  printf "tokens/s against dp on the same ranks: pp2 1f1b %.2f, interleaved %.2f, zero-bubble %.2f; pp4 1f1b %.2f, interleaved %.2f, zero-bubble %.2f\n",
         a / d, c / d, b / d, e / h, g / h, f / h }'
