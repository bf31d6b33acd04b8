#!/usr/bin/env bash
# Context parallelism in ms-train, specified by equivalence with the single-process run (issue
# 15): a 4-layer grouped-query model on 32-token sequences trained 5 steps at cp = 2 and 4,
# cp 2 x tp 2, cp 2 x dp 2, cp 2 x pp 2, with a sliding window shorter than a chunk and one
# spanning chunks, with the document mask (with per-document positions, and with a window), and
# for MoE at cp 2 x ep 2, logs losses and gradient norms within 1e-5 relative of the one-rank
# run at every step, and the same validation loss; the same layout twice is bitwise identical;
# a run saved at cp 2 resumes at cp 1 and cp 4 within 1e-5 of the uninterrupted run (the
# weights are laid out as without cp, the data position survives); a sequence length cp cannot
# split is refused; a rank failing mid-run ends every rank with its message.
# Usage: train_cp_test.sh <mpirun> <bin dir> <source dir>
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/layouts.sh"

shakespeare_plan 32 256 16

base=(--set data.plan="$work/s32.plan" --set model.d_model=32 --set model.n_layers=4
      --set model.n_heads=8 --set model.n_kv_heads=4 --set model.d_ff=64
      --set model.max_seq_len=32 --set train.seq_len=32 --set train.steps=5
      --set train.global_batch=4 --set train.micro_batch=2 --set train.eval_every=5
      --set train.eval_batches=1 --set train.log_every=1 --set train.mfu_peak_gflops=1
      --set optim.warmup_steps=1)
docs=(--set train.document_mask=true)
moe=(--set model.moe.num_experts=4 --set model.moe.top_k=2 --set model.moe.shared_expert_d_ff=32)

passed=0
train 1 "$work/ref"
train 1 "$work/ref-w3" --set model.sliding_window=3
train 1 "$work/ref-w11" --set model.sliding_window=11
train 1 "$work/ref-doc" "${docs[@]}" --set train.document_positions=true
train 1 "$work/ref-docw" "${docs[@]}" --set model.sliding_window=6
train 1 "$work/ref-moe" "${moe[@]}"
for layout in "2 cp2 ref --set parallel.cp=2" \
              "4 cp4 ref --set parallel.cp=4" \
              "4 cp2tp2 ref --set parallel.cp=2 --set parallel.tp=2" \
              "4 cp2dp2 ref --set parallel.cp=2" \
              "4 cp2pp2 ref --set parallel.cp=2 --set parallel.pp=2" \
              "2 cp2w3 ref-w3 --set parallel.cp=2 --set model.sliding_window=3" \
              "4 cp4w11 ref-w11 --set parallel.cp=4 --set model.sliding_window=11" \
              "2 cp2doc ref-doc --set parallel.cp=2 ${docs[*]} --set train.document_positions=true" \
              "4 cp4docw ref-docw --set parallel.cp=4 ${docs[*]} --set model.sliding_window=6" \
              "4 cp2ep2 ref-moe --set parallel.cp=2 --set parallel.ep=2 ${moe[*]}"; do
  read -r np name ref args <<<"$layout"
  # shellcheck disable=SC2086
  train "$np" "$work/$name" $args
  close "$work/$name" "$work/$ref" 1
  passed=$((passed + 1))
done
grep -qE "context-parallel ring attention: [0-9]+ transfers, [0-9.]+ MiB sent per step; up to [0-9]+% hidden" \
  "$work/cp2.log" || fail "no ring summary"
grep -q "memory per model rank (cp 2, " "$work/cp2.log" || fail "the memory line lacks cp"

# The same layout twice: bitwise the same losses and gradient norms.
train 4 "$work/cp2tp2-again" --set parallel.cp=2 --set parallel.tp=2
bitwise "$work/cp2tp2" "$work/cp2tp2-again" "cp 2 x tp 2 twice differs"
passed=$((passed + 1))

# Saved at cp 2, resumed at cp 1 and cp 4 from step 2: steps 3..5 as the uninterrupted run.
train 2 "$work/save-cp2" --set parallel.cp=2 --set checkpoint.every=2 --set checkpoint.async=false
for resume in "1 --set parallel.cp=1" "4 --set parallel.cp=4" "4 --set parallel.cp=2 --set parallel.tp=2"; do
  read -r np args <<<"$resume"
  dir="$work/resume-$passed"
  # shellcheck disable=SC2086
  train "$np" "$dir" --set checkpoint.resume="$work/save-cp2/checkpoints/step-00000002" $args
  grep -q "resuming from" "$dir.log" || fail "$dir did not resume"
  close "$dir" "$work/save-cp2" 3
  passed=$((passed + 1))
done
"$BIN/ms-ckpt" verify "$work/save-cp2/checkpoints/step-00000005" > /dev/null 2>&1 ||
  fail "the cp 2 checkpoint does not verify"

# --dry-run shows which rank holds which cp rank (rank = (dp_rank * cp + cp_rank) * tp + tp_rank).
out=$("$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" "${base[@]}" --set parallel.cp=2 \
  --set parallel.tp=2 --dry-run --ranks 4 2>&1) || { echo "$out"; fail "dry run at cp 2 x tp 2"; }
grep -q "rank 3: dp 0, cp 1, tp 1" <<<"$out" || { echo "$out"; fail "the dry run lacks the cp coordinates"; }
passed=$((passed + 1))

# Refused before any step, naming the key and the rule.
refused 2 "train.seq_len (32) must be divisible by 2 * parallel.cp (6)" --set parallel.cp=3
refused 3 "parallel.cp * parallel.tp = 2 * 1 must divide the 3 trainer rank(s)" --set parallel.cp=2
refused 4 "model.moe.capacity_factor caps each expert per micro-batch" --set parallel.cp=2 \
  "${moe[@]}" --set model.moe.capacity_factor=1.0
passed=$((passed + 3))

# One rank failing mid-run (an exception in a cp 2 x dp 2 step) ends every rank with its
# message within seconds; nobody is left in the ring.
fails_together 4 3 --set parallel.cp=2
passed=$((passed + 1))
echo "ms-train context parallelism end to end: $passed passed, 0 failed"
