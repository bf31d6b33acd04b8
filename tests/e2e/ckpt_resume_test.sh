#!/usr/bin/env bash
# ms-train checkpoints under SIGKILL: `mpirun -np 2 ms-train` (ZeRO-1, async saves every 2
# steps) is killed with SIGKILL at several moments, saves included; each time the newest
# complete checkpoint must resolve and a resumed run (on 2 ranks, then on 1) must start from it
# and finish.
# Usage: ckpt_resume_test.sh <mpirun> <bin dir> <source dir>
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib.sh"

shakespeare_plan 16 512 16

run() {  # run <ranks> <steps> <out file> [extra --set args...]
  local np=$1 steps=$2 out=$3
  shift 3
  "$MPIRUN" --oversubscribe -np "$np" "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" \
    --set data.plan="$work/s16.plan" --set run.dir="$work/run" --set model.d_model=16 \
    --set model.n_layers=1 --set model.n_heads=2 --set model.n_kv_heads=1 --set model.d_ff=32 \
    --set model.max_seq_len=16 --set train.seq_len=16 --set train.steps="$steps" \
    --set train.global_batch=4 --set train.micro_batch=2 --set train.eval_every=0 \
    --set train.log_every=1 --set train.mfu_peak_gflops=1 --set parallel.zero=1 \
    --set checkpoint.every=2 --set checkpoint.async=true --set checkpoint.keep=2 "$@" > "$out" 2>&1
}

descendants() {  # every process below pid $1
  local child
  for child in $(pgrep -P "$1" || true); do
    echo "$child"
    descendants "$child"
  done
}

latest_step() { sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p' "$work/run/checkpoints/latest"; }

passed=0
# Kill points (pattern:count): just after a commit is logged, and after the 3rd and 4th logged
# step of a run, which fall just before, inside or just after an async save.
for point in "saved:":1 "| loss":3 "| loss":4; do
  pattern=${point%:*}
  count=${point##*:}
  run 2 1000000 "$work/out.txt" &
  launcher=$!
  for _ in $(seq 1 600); do
    [ "$(grep -c -- "$pattern" "$work/out.txt" 2>/dev/null || true)" -ge "$count" ] && break
    sleep 0.05
  done
  procs=$(descendants "$launcher")
  [ -n "$procs" ] || { cat "$work/out.txt"; fail "no ranks for $point"; }
  kill -9 $procs 2>/dev/null || true  # the ranks and mpirun, all at once
  wait "$launcher" 2>/dev/null || true
  for _ in $(seq 1 100); do
    alive=0
    for p in $procs; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 0.05
  done
  [ -f "$work/run/checkpoints/latest" ] || { cat "$work/out.txt"; fail "no checkpoint before kill at '$point'"; }
  step=$(latest_step)
  [ -f "$work/run/checkpoints/step-$(printf %08d "$step")/manifest.json" ] || fail "latest names a missing step $step"
  target=$((step + 2))
  run 2 "$target" "$work/resume.txt" || { cat "$work/resume.txt"; fail "resume after kill at '$point' failed"; }
  grep -q "resuming from .*step-$(printf %08d "$step")" "$work/resume.txt" || { cat "$work/resume.txt"; fail "did not resume from step $step"; }
  grep -q "step $target/$target" "$work/resume.txt" || { cat "$work/resume.txt"; fail "resumed run did not reach step $target"; }
  passed=$((passed + 1))
done

# The ZeRO dp=2 checkpoint continues on one rank.
step=$(latest_step)
run 1 $((step + 2)) "$work/one.txt" || { cat "$work/one.txt"; fail "resume on one rank failed"; }
grep -q "resuming from" "$work/one.txt" || fail "one-rank run did not resume"
passed=$((passed + 1))
echo "ms-train checkpoints under SIGKILL: $passed passed, 0 failed"
