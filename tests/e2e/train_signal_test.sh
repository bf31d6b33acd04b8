#!/usr/bin/env bash
# SIGTERM to one rank of `mpirun -np 2 ms-train`, then SIGUSR1 to mpirun itself (which forwards
# it to every rank, as under a batch system's `--signal=USR1@...`): each time both ranks agree
# on a stop step, finish it, flush telemetry and exit 0, and their telemetry ends at the same
# step.
# Usage: train_signal_test.sh <mpirun> <bin dir> <source dir>
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib.sh"

shakespeare_plan 16 512 16

stop_with() {  # stop_with TERM|USR1: the signal, to one rank (TERM) or to mpirun (USR1)
  local signal=$1
  # The previous case's output must not satisfy the progress check below before the new
  # launch's redirection (in the background job) truncates it.
  rm -rf "$work/run" "$work/out.txt"
  "$MPIRUN" --oversubscribe -np 2 "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" \
    --set data.plan="$work/s16.plan" --set run.dir="$work/run" --set model.d_model=16 \
    --set model.n_layers=1 --set model.n_heads=2 --set model.n_kv_heads=1 --set model.d_ff=32 \
    --set model.max_seq_len=16 --set train.seq_len=16 --set train.steps=1000000 \
    --set train.global_batch=4 --set train.micro_batch=2 --set train.eval_every=0 \
    --set train.log_every=1 --set train.mfu_peak_gflops=1 > "$work/out.txt" 2>&1 &
  launcher=$!
  for _ in $(seq 1 600); do
    grep -q "step 2/" "$work/out.txt" 2>/dev/null && break
    sleep 0.1
  done
  grep -q "step 2/" "$work/out.txt" || { cat "$work/out.txt"; kill "$launcher"; fail "no progress"; }
  ranks=$(pgrep -P "$launcher" || true)
  target=$(head -n 1 <<<"$ranks")
  [ -n "$target" ] || { kill "$launcher"; fail "cannot find the rank processes of mpirun $launcher"; }
  if [ "$signal" = TERM ]; then kill -TERM "$target"; else kill -USR1 "$launcher"; fi
  status=0
  wait "$launcher" || status=$?
  [ "$status" -eq 0 ] || { cat "$work/out.txt"; fail "mpirun exited $status after SIG$signal"; }
  grep -q "stop signal received" "$work/out.txt" || { cat "$work/out.txt"; fail "no stop line"; }
  last() { grep '"kind":"step"' "$1" | tail -n 1 | grep -oE '"step":[0-9]+'; }
  a=$(last "$work/run/telemetry/rank-00000.jsonl")
  b=$(last "$work/run/telemetry/rank-00001.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "SIG$signal: ranks stopped at different steps: $a vs $b"
}

stop_with TERM
stop_with USR1
echo "ms-train stop on SIGTERM to a rank and SIGUSR1 to mpirun: 2 passed, 0 failed"
