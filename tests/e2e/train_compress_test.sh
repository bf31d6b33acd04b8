#!/usr/bin/env bash
# Compressed data-parallel communication in ms-train (issue 47), at 4 ranks posing as 2 nodes x 2
# (comm.ranks_per_node=2), on the small grouped-query model of the layout tests:
#   - int8 gradients and weights, and two-level gradients (Hadamard smoothing, error feedback)
#     with int4 weight differences, every step with every replica's CRC-32C compared
#     (check_replicas), stay within 2% of the full-precision loss over 6 steps;
#   - the same compressed layout twice is bitwise identical (seeded stochastic rounding);
#   - resumed from a checkpoint, a compressed run continues bitwise as the uninterrupted one
#     (checkpoint steps go in full precision, and the error reset H does the same);
#   - tp 2 x dp 2, pp 2 x dp 2 and MoE at ep 2 train with compression on, near full precision;
#   - the end-of-run report gives the bytes against full precision, and the simulated link its
#     inter-node bytes and time;
#   - bad keys are refused by name before any step.
# Usage: train_compress_test.sh <mpirun> <bin dir> <source dir>
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

base=(--set data.plan="$work/s32.plan" --set model.d_model=32 --set model.n_layers=2
      --set model.n_heads=8 --set model.n_kv_heads=4 --set model.d_ff=64
      --set model.max_seq_len=32 --set train.seq_len=32 --set train.steps=6
      --set train.global_batch=8 --set train.micro_batch=2 --set train.eval_every=0
      --set train.log_every=1 --set train.mfu_peak_gflops=1 --set optim.warmup_steps=1
      --set checkpoint.every=0 --set comm.ranks_per_node=2
      --set parallel.compress.min_numel=256 --set parallel.compress.check_replicas=true)

# near <run dir> <reference run dir> <relative tolerance>: every step's loss within it.
near() {
  paste <(losses "$1" | awk 'NR % 2 == 1') <(losses "$2" | awk 'NR % 2 == 1') |
    awk -v tol="$3" -v what="$1" '
      { d = $2 - $4; if (d < 0) d = -d
        if (d > tol * $4) { printf "%s step %d: loss %.6f vs %.6f\n", what, $1, $2, $4; bad = 1 } }
      END { exit bad }' || fail "$1 is not within $3 of $2"
}

int8=(--set parallel.compress.grads=int8 --set parallel.compress.weights=int8)
two=(--set parallel.compress.grads=two-level --set parallel.compress.weights=int4
     --set parallel.compress.hadamard=true --set parallel.compress.error_feedback=true
     --set parallel.compress.group_size=256 --set parallel.compress.inter_group_size=64)

train 4 "$work/full"
train 4 "$work/int8" "${int8[@]}"
near "$work/int8" "$work/full" 0.02
train 4 "$work/two" "${two[@]}"
near "$work/two" "$work/full" 0.02
grep -q "grads two-level (int8 within 2 ranks, int4 across 2 nodes), weights int4" "$work/two.log" ||
  fail "the compression choice is not logged"
grep -qE "dp compression: sent [0-9.]+ MiB per step .* [0-9.]+x fewer bytes" "$work/int8.log" ||
  fail "no compression byte report"
ratio=$(sed -n 's/.*: \([0-9.]*\)x fewer bytes.*/\1/p' "$work/two.log" | head -1)
awk -v r="$ratio" 'BEGIN { exit !(r > 4) }' || fail "two-level + int4 weights saved only ${ratio}x"

# Bitwise twice.
train 4 "$work/two-again" "${two[@]}"
bitwise "$work/two" "$work/two-again" "the same compressed layout twice differs"

# Resume: saved at step 3 (a full-precision step), continued bitwise as the uninterrupted run.
train 4 "$work/save" "${two[@]}" --set checkpoint.every=3 --set checkpoint.async=false
train 4 "$work/resumed" "${two[@]}" --set checkpoint.every=3 --set checkpoint.async=false \
  --set checkpoint.resume="$work/save/checkpoints/step-00000003"
grep -q "resuming from" "$work/resumed.log" || fail "did not resume"
cmp <(grep '"kind":"step"' "$work/save/telemetry/rank-00000.jsonl" | sed 's/.*"step"/"step"/; s/,"lr".*//' | tail -3) \
    <(grep '"kind":"step"' "$work/resumed/telemetry/rank-00000.jsonl" | sed 's/.*"step"/"step"/; s/,"lr".*//') ||
  fail "the resumed compressed run differs from the uninterrupted one"

# With the error reset every 2 steps, and with the naive 4-bit scheme: still identical replicas.
train 4 "$work/reset" "${two[@]}" --set parallel.compress.reset_every=2
train 4 "$work/naive" --set parallel.compress.grads=int4 --set parallel.compress.weights=int4 \
  --set parallel.compress.weight_diff=false --set parallel.compress.rounding=nearest

# Other layouts with dp compression on.
train 4 "$work/tp2dp2" --set parallel.tp=2 "${int8[@]}"
near "$work/tp2dp2" "$work/full" 0.02
train 4 "$work/pp2dp2" --set parallel.pp=2 "${two[@]}"
near "$work/pp2dp2" "$work/full" 0.02
# MoE at ep 2: the experts' optimizer compresses over its expert-data-parallel group.
moe=(--set model.moe.num_experts=4 --set model.moe.top_k=2)
train 4 "$work/moe" "${moe[@]}"
train 4 "$work/moe-ep2" "${moe[@]}" --set parallel.ep=2 "${int8[@]}"
near "$work/moe-ep2" "$work/moe" 0.02

# The simulated link: bytes across the two nodes and the time they took.
train 4 "$work/link" "${two[@]}" --set comm.simulate_link.gbps=1 --set comm.simulate_link.latency_us=50
grep -qE "simulated link \(1.0 Gb/s, 50 us\): dp sent [0-9.]+ MiB per step to other nodes" "$work/link.log" ||
  fail "no simulated-link report"

refused 4 "parallel.compress.grads" --set parallel.compress.grads=int2
refused 4 "parallel.zero: 1" --set parallel.zero=0 --set parallel.compress.grads=int8
echo "train_compress: all checks passed"
