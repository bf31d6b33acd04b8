#!/usr/bin/env bash
# ms-train with dedicated data-loader ranks (parallel.loaders), as a new user tries it:
# `mpirun -np 3 ms-train --set parallel.loaders=1` trains on 2 ranks with bitwise the same
# training and validation losses as `mpirun -np 2` loading locally; a checkpoint saved in one
# mode resumes in the other and continues bitwise identically; SIGTERM to the loader rank stops
# the trainers after the same step; a loader rank that fails ends every rank with its error.
# Losses are compared through the telemetry records, whose JSON numbers round-trip the doubles.
# Usage: train_loaders_test.sh <mpirun> <bin dir> <source dir>
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib.sh"

shakespeare_plan 32 256 16

# Two micro-batches per rank and step, so each step takes several batches from the loader.
shrink=(--set data.plan="$work/s32.plan" "${TINY_MODEL[@]}"
        --set model.max_seq_len=32 --set train.seq_len=32 --set train.steps=4
        --set train.global_batch=8 --set train.micro_batch=2 --set train.eval_every=2
        --set train.eval_batches=1 --set train.log_every=1 --set train.mfu_peak_gflops=1
        --set checkpoint.every=2 --set checkpoint.async=false --set telemetry.trace=false)

train() {  # train <ranks> <run dir> [extra args...]
  local np=$1 dir=$2
  shift 2
  # The timeout only keeps a hung job from holding the test; the checks below ask for exit 1.
  timeout 100 "$MPIRUN" --oversubscribe -np "$np" "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" \
    "${shrink[@]}" --set run.dir="$dir" "$@" 2>&1
}

# "step loss" lines of rank 0's telemetry, the loss printed with every digit it has.
losses() { grep -o '"step":[0-9]*\|"loss":[^,}]*' "$1/telemetry/rank-00000.jsonl" | paste -d' ' - -; }

passed=0
out=$(train 2 "$work/local") || { echo "$out"; fail "2 ranks, local loaders"; }
out=$(train 3 "$work/loaders" --set parallel.loaders=1) ||
  { echo "$out"; fail "3 ranks, 1 loader rank"; }
grep -q "1 loader rank(s) serve 2 trainer rank(s)" <<<"$out" || { echo "$out"; fail "no loader line"; }
grep -qE "data wait: [0-9.]+s over 4 steps .*batches from the loader ranks" <<<"$out" ||
  { echo "$out"; fail "no data-wait line"; }
grep -q '"data_s":' "$work/loaders/telemetry/rank-00001.jsonl" || fail "no data_s phase"
[ ! -e "$work/loaders/telemetry/rank-00002.jsonl" ] || fail "the loader rank wrote step telemetry"
[ "$(losses "$work/local" | wc -l)" -eq 4 ] || fail "expected 4 step records"
diff <(losses "$work/local") <(losses "$work/loaders") || fail "losses differ with a loader rank"
diff <(grep -o 'val_loss .*' "$work/local/log.txt") <(grep -o 'val_loss .*' "$work/loaders/log.txt") ||
  fail "validation losses differ with a loader rank"
passed=$((passed + 1))

# Resume across modes from step 2: the steps after it are those of the uninterrupted run.
after_two() { losses "$1" | grep -v '^"step":[12] '; }
out=$(train 2 "$work/to-local" --set checkpoint.resume="$work/loaders/checkpoints/step-00000002") ||
  { echo "$out"; fail "resuming a loader-rank checkpoint with local loading"; }
diff <(after_two "$work/local") <(losses "$work/to-local") ||
  fail "resumed with local loading, the losses differ"
out=$(train 3 "$work/to-loaders" --set parallel.loaders=1 \
        --set checkpoint.resume="$work/local/checkpoints/step-00000002") ||
  { echo "$out"; fail "resuming a local-loading checkpoint with a loader rank"; }
diff <(after_two "$work/local") <(losses "$work/to-loaders") ||
  fail "resumed with a loader rank, the losses differ"
[ "$(losses "$work/to-loaders" | wc -l)" -eq 2 ] || fail "expected steps 3 and 4 after resuming"
# Two loader ranks, one per trainer, resuming the one-loader run: the same steps again.
out=$(train 4 "$work/two-loaders" --set parallel.loaders=2 \
        --set checkpoint.resume="$work/loaders/checkpoints/step-00000002") ||
  { echo "$out"; fail "resuming with 2 loader ranks"; }
grep -q "2 loader rank(s) serve 2 trainer rank(s)" <<<"$out" || { echo "$out"; fail "no 2-loader line"; }
diff <(after_two "$work/local") <(losses "$work/two-loaders") ||
  fail "resumed with 2 loader ranks, the losses differ"
passed=$((passed + 1))

# SIGTERM to the loader rank alone: the trainers learn it from its replies, all stop after the
# same step and exit 0.
train 3 "$work/signal" --set parallel.loaders=1 --set train.steps=1000000 \
  --set checkpoint.every=0 --set train.eval_every=0 > "$work/signal.txt" &
launcher=$!
for _ in $(seq 1 600); do
  grep -q "step 2/" "$work/signal.txt" 2>/dev/null && break
  sleep 0.1
done
grep -q "step 2/" "$work/signal.txt" || { cat "$work/signal.txt"; kill "$launcher"; fail "no progress"; }
loader_pid=""
for pid in $(pgrep -f "$BIN/ms-train" || true); do
  # -z: both files are NUL-separated (and no pipe, whose early close pipefail would count).
  if grep -qxz "OMPI_COMM_WORLD_RANK=2" "/proc/$pid/environ" 2>/dev/null &&
     grep -qz "run.dir=$work/signal" "/proc/$pid/cmdline" 2>/dev/null; then
    loader_pid=$pid
  fi
done
[ -n "$loader_pid" ] || { kill "$launcher"; fail "cannot find the loader rank's process"; }
kill -TERM "$loader_pid"
status=0
wait "$launcher" || status=$?
[ "$status" -eq 0 ] || { cat "$work/signal.txt"; fail "exit $status after SIGTERM to the loader rank"; }
grep -q "loader rank 2 received a stop signal" "$work/signal.txt" ||
  { cat "$work/signal.txt"; fail "the trainers did not hear of the loader's signal"; }
grep -q "stop signal received" "$work/signal.txt" || { cat "$work/signal.txt"; fail "no stop line"; }
last() { grep '"kind":"step"' "$1" | tail -n 1 | grep -oE '"step":[0-9]+'; }
a=$(last "$work/signal/telemetry/rank-00000.jsonl")
b=$(last "$work/signal/telemetry/rank-00001.jsonl")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "trainers stopped at different steps: $a vs $b"
passed=$((passed + 1))

failed() {  # failed <expected text> <ranks> <run dir> [extra args...]: the job exits 1, not hung
  local want=$1
  shift
  local got status=0
  got=$(train "$@") || status=$?
  [ "$status" -eq 1 ] || { echo "$got"; fail "expected exit 1 for $*, got $status"; }
  grep -q -- "$want" <<<"$got" || { echo "$got"; fail "message does not name '$want'"; }
  ! grep -q "step 1/" <<<"$got" || { echo "$got"; fail "a step ran ($*)"; }
}

# A plan the loader rank cannot read: the trainers report the loader rank's error.
head -c 100 /dev/urandom > "$work/bad.plan"
failed "loader rank 2: " 3 "$work/bad" --set parallel.loaders=1 --set data.plan="$work/bad.plan"
passed=$((passed + 1))
# A loader rank that fails before serving: the job ends with its error instead of waiting.
MS_TEST_FAIL_RANK=2:start failed "failure injected by MS_TEST_FAIL_RANK on rank 2" 3 "$work/dead" \
  --set parallel.loaders=1
passed=$((passed + 1))
# Too many loaders for the world: refused with the key.
failed "parallel.loaders (2) must leave at least one trainer rank" 2 "$work/many" \
  --set parallel.loaders=2
passed=$((passed + 1))
echo "ms-train with loader ranks: $passed passed, 0 failed"
