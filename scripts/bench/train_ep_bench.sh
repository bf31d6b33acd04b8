#!/usr/bin/env bash
# Expert parallelism (issue 14), in one run on the same machine:
#  1. an 8-expert top-2 model (d_model 256, 4 layers, expert d_ff 512, sequence 128, the
#     1024-token BPE learned from the corpus), ep = 2 against dp = 2 on 2 ranks, f32 and bf16
#     dispatch: tokens/s (mean of the steps after the first), the all-to-all bytes per step,
#     the share of the all-to-all time hidden behind compute and the exposed all-to-all time
#     against the step time, with the round trips in 1 (no overlap, the default), 2 and 4
#     chunks (parallel.ep_overlap_chunks);
#  2. configs/tiny-moe.yaml for 100 steps at ep = 2 with f32 and with bf16 dispatch on the
#     GPT-2 Shakespeare plan: the largest loss difference over the 100 steps and at the end.
# Every rank 1 BLAS thread. SKIP_LOSS=1 runs part 1 only.
# Usage: scripts/bench/train_ep_bench.sh [build dir] [work dir] [steps of part 1]
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/ms-train-ep-bench}
STEPS=${3:-6}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$BUILD/bin
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$WORK"
plan() {  # plan <name> <tokenizer> <seq>
  [ -f "$WORK/$1.plan" ] && return
  "$BIN/ms-data" build -i "$SRC/data/corpus/tinyshakespeare.txt" --doc-separator blank-line \
    -t "$2" -o "$WORK/$1" --threads 2 --no-progress > /dev/null
  cat > "$WORK/$1.yaml" <<YAML
seq_len: $3
total_samples: 8000
validation: {fraction: 0.02, samples: 16}
sources:
  - {name: shakespeare, prefix: $WORK/$1, weight: 1.0}
YAML
  "$BIN/ms-data" plan --config "$WORK/$1.yaml" --output "$WORK/$1.plan" > /dev/null
}
[ -f "$WORK/bpe.json" ] || "$BIN/ms-data" tokenizer train --input "$SRC/data/corpus/tinyshakespeare.txt" \
  --vocab-size 1024 --output "$WORK/bpe.json" > /dev/null
plan bpe "$WORK/bpe.json" 128
plan gpt2 "$SRC/data/tokenizers/gpt2/tokenizer.json" 128

run() {  # run <label> <config> <plan> [extra --set args...]
  local label=$1 config=$2 plan=$3
  shift 3
  rm -rf "${WORK:?}/$label"
  mpirun --oversubscribe -x OPENBLAS_NUM_THREADS -np 2 "$BIN/ms-train" --config "$config" \
    --set data.plan="$WORK/$plan.plan" --set run.dir="$WORK/$label" --set train.eval_every=0 \
    --set checkpoint.every=0 --set telemetry.trace=false --set train.mfu_peak_gflops=1 \
    --set train.log_every=1 --set parallel.dp=2 "$@" > "$WORK/$label.out" 2>&1 ||
    { cat "$WORK/$label.out"; exit 1; }
}
tps() {
  awk '/ step [0-9]+\/[0-9]+ \| loss / { split($0, a, "tok/s "); split(a[2], b, " ");
         if (++n > 1) { sum += b[1]; m++ } } END { if (m) printf "%.0f", sum / m }' "$WORK/$1/log.txt"
}
step_time() {  # the summed step times of the whole run, seconds
  awk '/ step [0-9]+\/[0-9]+ \| loss / { i = index($0, "| step "); split(substr($0, i + 7), b, "s");
         sum += b[1] } END { printf "%.3f", sum }' "$WORK/$1/log.txt"
}

echo "# $(uname -n), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
shape=(--set model.vocab_size=1024 --set model.d_model=256 --set model.n_layers=4
       --set model.n_heads=8 --set model.n_kv_heads=8 --set model.d_ff=512
       --set model.moe.num_experts=8 --set model.moe.top_k=2 --set model.max_seq_len=128
       --set train.seq_len=128 --set train.global_batch=8 --set train.micro_batch=2
       --set train.steps="$STEPS" --set optim.warmup_steps=1)
for v in "dp2" "ep2-c1 --set parallel.ep=2 --set parallel.ep_overlap_chunks=1" \
         "ep2-c2 --set parallel.ep=2 --set parallel.ep_overlap_chunks=2" \
         "ep2-c4 --set parallel.ep=2 --set parallel.ep_overlap_chunks=4" \
         "ep2-bf16 --set parallel.ep=2 --set parallel.ep_comm_dtype=bf16"; do
  read -r label args <<<"$v"
  # shellcheck disable=SC2086
  run "$label" "$SRC/configs/tiny-moe.yaml" bpe "${shape[@]}" $args
  line=$(grep -o 'expert-parallel all-to-all: .*' "$WORK/$label.out" || true)
  # The all-to-alls' exposed time (waited) against the summed step times.
  share=$(sed -n 's/.*(waited \([0-9.]*\)s of \([0-9.]*\)s in flight.*/\1 \2/p' <<<"$line" |
          awk -v t="$(step_time "$label")" '{ printf "; all-to-alls exposed %.1f%% of the %.2fs of steps (%.1f%% in flight)", 100 * $1 / t, t, 100 * $2 / t }')
  printf "%-9s tokens/s %6s%s\n    %s\n" "$label" "$(tps "$label")" "$share" "$line"
done
awk -v c1="$(tps ep2-c1)" -v c2="$(tps ep2-c2)" -v c4="$(tps ep2-c4)" -v b="$(tps ep2-bf16)" \
    -v d="$(tps dp2)" 'BEGIN {
  printf "tokens/s against dp 2: ep 2 f32 chunks 1 %.2f, chunks 2 %.2f, chunks 4 %.2f; bf16 (chunks 2) %.2f\n",
         c1 / d, c2 / d, c4 / d, b / d }'

[ "${SKIP_LOSS:-0}" = 1 ] && exit 0
losses() { sed -n 's/.*"kind":"step".*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$WORK/$1/telemetry/rank-00000.jsonl"; }
run moe-f32 "$SRC/configs/tiny-moe.yaml" gpt2 --set train.steps=100 --set parallel.ep=2
run moe-bf16 "$SRC/configs/tiny-moe.yaml" gpt2 --set train.steps=100 --set parallel.ep=2 \
  --set parallel.ep_comm_dtype=bf16
paste <(losses moe-f32) <(losses moe-bf16) | awk '
  { d = $4 - $2; if (d < 0) d = -d; if (d > m) { m = d; at = $1 } last = $2; lastb = $4 }
  END { printf "configs/tiny-moe.yaml, 100 steps at ep 2: loss f32 %.4f, bf16 %.4f at step 100; largest difference %.2e (step %d)\n",
        last, lastb, m, at }'
