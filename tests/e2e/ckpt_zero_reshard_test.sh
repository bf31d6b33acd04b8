#!/usr/bin/env bash
# An offline ZeRO reshard resumes as the uninterrupted run (issue 41): a small model trained 7
# steps on 2 ranks (dp=2, ZeRO-1) with a checkpoint at step 2; that checkpoint is resharded with
# `ms-ckpt reshard --to dp=4,zero=1` (the ZeRO ownership rule the trainer uses,
# ckpt/zero_ownership.h), which inspect shows as dp=4 zero=1 with the Adam moments split over
# the four dp ranks; `mpirun -np 4 ms-train` resumed from the resharded directory at that layout
# logs losses and gradient norms within 1e-5 relative of the uninterrupted run at steps 3..7.
# Usage: ckpt_zero_reshard_test.sh <mpirun> <bin dir> <source dir>   (KEEP_WORK=1 keeps its files)
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
work=$(mktemp -d)
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/layouts.sh"

shakespeare_plan 32 256 16

# micro_batch 1, so the same global batch of 4 splits over 2 and over 4 dp ranks.
base=(--set data.plan="$work/s32.plan" --set model.d_model=32 --set model.n_layers=2
      --set model.n_heads=4 --set model.n_kv_heads=2 --set model.d_ff=64
      --set model.max_seq_len=32 --set train.seq_len=32 --set train.steps=7
      --set train.global_batch=4 --set train.micro_batch=1 --set train.eval_every=0
      --set train.log_every=1 --set train.mfu_peak_gflops=1 --set optim.warmup_steps=1
      --set parallel.zero=1)

train 2 "$work/ref" --set checkpoint.every=2 --set checkpoint.async=false \
  --set checkpoint.keep=10
saved="$work/ref/checkpoints/step-00000002"
[ -f "$saved/manifest.json" ] || fail "the dp=2 run saved no checkpoint at step 2"

"$BIN/ms-ckpt" reshard "$saved" --to dp=4,zero=1 --output "$work/dp4" \
  > "$work/reshard.txt" 2>&1 || { cat "$work/reshard.txt"; fail "reshard to dp=4,zero=1"; }
resharded="$work/dp4/step-00000002"
"$BIN/ms-ckpt" inspect "$resharded" > "$work/inspect.txt"
grep -q "^layout  *tp=1 dp=4 pp=1 ep=1 zero=1 (world 4)" "$work/inspect.txt" ||
  fail "inspect does not show dp=4 zero=1: $(grep ^layout "$work/inspect.txt")"
"$BIN/ms-ckpt" inspect "$resharded" --json > "$work/inspect.json"
python3 - "$work/inspect.json" <<'PY' || fail "the Adam moments are not split over 4 dp ranks"
import json, sys
d = json.load(open(sys.argv[1]))
shards = {t["name"]: t["shards"] for t in d["tensors"]}
assert shards["optimizer.exp_avg.model.layers.0.mlp.gate_proj.weight"] >= 4, shards
assert shards["optimizer.exp_avg_sq.model.layers.1.self_attn.q_proj.weight"] >= 4, shards
PY
"$BIN/ms-ckpt" verify "$resharded" > /dev/null || fail "verify of the dp=4 checkpoint"

train 4 "$work/resumed" --set checkpoint.resume="$resharded"
grep -q "resuming from .*dp4/step-00000002" "$work/resumed.log" ||
  { cat "$work/resumed.log"; fail "the dp=4 run did not resume from the resharded checkpoint"; }
grep -q "step 7/7" "$work/resumed.log" || fail "the resumed run did not reach step 7"
close "$work/resumed" "$work/ref" 3
[ "$(losses "$work/resumed" | awk '$1 >= 3' | wc -l)" -eq 10 ] ||
  fail "the resumed run logged other than 5 steps after the checkpoint"
echo "PASS"
