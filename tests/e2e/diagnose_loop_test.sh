#!/usr/bin/env bash
# Closing the diagnosis loop on real training output: a 4-rank ms-train run in which rank 2 is
# slowed on purpose (debug.slow_rank, a test-only fault injection) must be named both by
# `ms-diagnose stragglers` (from the run's traces) and by `ms-diagnose detect` (from the run's
# telemetry, ranks as machines since the test runs on one host).
# Usage: diagnose_loop_test.sh <mpirun> <bin dir> <source dir>
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib.sh"
SLOW_RANK=2

shakespeare_plan 32 512 16

"$MPIRUN" --oversubscribe -np 4 "$BIN/ms-train" --config "$SRC/configs/tiny-cpu.yaml" \
  --set run.dir="$work/run" --set data.plan="$work/s32.plan" --set model.vocab_size=50257 \
  --set model.d_model=16 \
  --set model.n_layers=1 --set model.n_heads=2 --set model.n_kv_heads=1 --set model.d_ff=32 \
  --set model.max_seq_len=32 --set train.seq_len=32 --set train.steps=24 \
  --set train.global_batch=8 --set train.micro_batch=2 --set train.eval_every=0 \
  --set train.mfu_peak_gflops=1 --set telemetry.every_s=0.25 \
  --set debug.slow_rank=$SLOW_RANK --set debug.slow_ms=300 > "$work/train.log" 2>&1 ||
  { cat "$work/train.log"; fail "training failed"; }

# Stragglers: the slowed rank heads the workers' shares of the waste.
"$BIN/ms-diagnose" stragglers "$work/run" > "$work/stragglers.txt" || [ $? -eq 3 ] ||
  fail "stragglers failed"
top=$(grep -A1 '^workers' "$work/stragglers.txt" | tail -1 | awk '{print $2}')
[ "$top" = "$SLOW_RANK" ] || { cat "$work/stragglers.txt"; fail "stragglers blamed rank $top"; }

# Detect, ranks as machines: the slowed rank waits in collectives far less than its peers,
# which wait for it. (Host counters cannot tell ranks of one host apart.)
set +e
"$BIN/ms-diagnose" detect "$work/run" --group-by rank --metrics step_comm_wait_s \
  --window-s 2 --hop-s 0.5 --period-s 2 > "$work/detect.txt" 2>&1
rc=$?
set -e
[ $rc -eq 3 ] || { cat "$work/detect.txt"; fail "detect exit $rc, expected 3"; }
grep -q "FAULT: machine rank$SLOW_RANK," "$work/detect.txt" ||
  { cat "$work/detect.txt"; fail "detect did not name rank $SLOW_RANK"; }
echo "diagnose loop: 2 passed, 0 failed"
