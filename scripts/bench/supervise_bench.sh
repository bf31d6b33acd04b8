#!/usr/bin/env bash
# ETTR and time to recover per fault kind under `ms-diagnose supervise` (issue 18), in one run
# on the same machine: a 4-rank run of configs/tiny-dense.yaml shrunk to the e2e tests' model
# (d_model 16, 1 layer, the GPT-2 vocabulary; seq 64, global batch 12, a checkpoint every CKPT
# steps) for STEPS steps, once without
# a fault and once with each fault kind injected half-way (a crash, a hang, a slow machine from
# a quarter of the way, a transient NaN), with the supervisor's production defaults except the
# timeouts, which are scaled to the run's ~0.1 s steps (--hang-timeout 10, detection window and
# period 5 s). Prints one line per run: wall time, time in kept steps, ETTR, and per fault the
# time to detect it, to train again (first step of the restarted job) and the steps redone.
# Every rank 1 BLAS thread. Usage: scripts/bench/supervise_bench.sh [build dir] [work dir] [steps]
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/ms-supervise-bench}
STEPS=${3:-200}
CKPT=${CKPT:-20}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$BUILD/bin
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
mkdir -p "$WORK"
[ -f "$WORK/shakespeare.idx" ] || "$BIN/ms-data" build -i "$SRC/data/corpus/tinyshakespeare.txt" \
  --doc-separator blank-line -t "$SRC/data/tokenizers/gpt2/tokenizer.json" -o "$WORK/shakespeare" \
  --threads 2 --no-progress > /dev/null
cat > "$WORK/mix.yaml" <<YAML
seq_len: 64
total_samples: $((STEPS * 12 + 64))
validation: {fraction: 0.02, samples: 16}
sources:
  - {name: shakespeare, prefix: $WORK/shakespeare, weight: 1.0}
YAML
[ -f "$WORK/s64.plan" ] || "$BIN/ms-data" plan --config "$WORK/mix.yaml" --output "$WORK/s64.plan" > /dev/null

half=$((STEPS / 2))
run() {  # run <label> [--set values...]
  local label=$1
  shift
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  rm -rf "${WORK:?}/$label"
  "$BIN/ms-diagnose" supervise --ranks 4 --hang-timeout 10 --detect-window 5 --detect-period 5 \
    --detect-every 2 --quiet -- mpirun --oversubscribe -x OPENBLAS_NUM_THREADS -np '{np}' \
    "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" --set data.plan="$WORK/s64.plan" \
    --set model.d_model=16 --set model.n_layers=1 --set model.n_heads=2 --set model.n_kv_heads=1 \
    --set model.d_ff=32 --set model.max_seq_len=64 --set train.seq_len=64 \
    --set train.steps="$STEPS" --set train.global_batch=12 --set train.micro_batch=1 \
    --set train.eval_every=0 --set train.log_every=50 --set train.mfu_peak_gflops=1 \
    --set checkpoint.every="$CKPT" --set telemetry.every_s=0.5 --set telemetry.trace=false \
    --set run.dir="$WORK/$label" "${sets[@]}" > "$WORK/$label.out" 2>&1 || true
  local end
  end=$(grep '"event":"end"' "$WORK/$label/supervise/events.jsonl" | tail -n 1)
  awk -v label="$label" -v end="$end" 'BEGIN {
    n = split(end, parts, /[{},]/)
    for (i = 1; i <= n; ++i) {
      split(parts[i], kv, ":"); gsub(/"/, "", kv[1]); gsub(/"/, "", kv[2])
      if (kv[1] == "outcome") outcome = kv[2]
      if (kv[1] == "wall_s") wall = kv[2]
      if (kv[1] == "productive_s") kept = kv[2]
      if (kv[1] == "ettr") ettr = kv[2]
      if (kv[1] == "kind") kinds = kinds (kinds ? "," : "") kv[2]
      if (kv[1] == "detect_s") detect = detect (detect ? "," : "") sprintf("%.1f", kv[2])
      if (kv[1] == "recover_s") recover = recover (recover ? "," : "") sprintf("%.1f", kv[2])
      if (kv[1] == "lost_steps") lost = lost (lost ? "," : "") kv[2]
    }
    printf "%-8s %-9s wall %6.1fs  kept %6.1fs  ETTR %.3f", label, outcome, wall, kept, ettr
    if (kinds) printf "  | %s: detect %ss, training again %ss, redone %s", kinds, detect, recover, lost
    printf "\n"
  }'
}

echo "# ms-diagnose supervise, $STEPS steps, checkpoint every $CKPT, fault at step $half; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
run none
run crash debug.kill_rank=2 debug.kill_step=$half
run hang debug.hang_rank=1 debug.hang_step=$half
run slow debug.slow_rank=3 debug.slow_ms=300 debug.slow_from_step=$((STEPS / 4))
run nan debug.nan_rank=0 debug.nan_step=$half
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
