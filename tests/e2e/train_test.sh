#!/usr/bin/env bash
# ms-train as a new user runs it: build the Shakespeare dataset and a plan with ms-data (GPT-2
# tokenizer), then train shrunken versions of configs/tiny-dense.yaml and configs/tiny-moe.yaml
# on 1 and 2 ranks. Checks the log line, the run directory (resolved config, log, tokenizer
# copy, per-rank telemetry and traces with collectives) and that bad input is refused with the
# key and rule before any step runs.
# Usage: train_test.sh <mpirun> <bin dir> <source dir>
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib.sh"

shakespeare_plan 32 256 16

# A model small enough for CI; every other key comes from the shipped config.
shrink=(--set data.plan="$work/s32.plan" "${TINY_MODEL[@]}"
        --set model.max_seq_len=32 --set train.seq_len=32 --set train.steps=2
        --set train.global_batch=4 --set train.micro_batch=2 --set train.eval_every=1
        --set train.eval_batches=1 --set train.log_every=1 --set train.mfu_peak_gflops=1)
line_re='step 2/2 \| loss [0-9]+\.[0-9]{4} \| lr [0-9.]+e-[0-9]+ \| grad_norm [0-9.]+ \| tok/s [0-9]+ \| mfu [0-9.]+% \| step [0-9.]+s'

train() {  # train <ranks> <config> <run dir> [extra args...]
  local np=$1 config=$2 dir=$3
  shift 3
  "$MPIRUN" --oversubscribe -np "$np" "$BIN/ms-train" --config "$SRC/configs/$config" \
    "${shrink[@]}" --set run.dir="$dir" "$@" 2>&1
}

check_run_dir() {  # check_run_dir <dir> <ranks> <collective>
  local dir=$1 np=$2 collective=$3
  for f in config.resolved.yaml log.txt tokenizer.json; do
    [ -s "$dir/$f" ] || fail "$dir/$f missing"
  done
  cmp -s "$dir/tokenizer.json" "$SRC/data/tokenizers/gpt2/tokenizer.json" ||
    fail "tokenizer.json is not a copy of the dataset's tokenizer"
  grep -qE "$line_re" "$dir/log.txt" || fail "no step line in $dir/log.txt"
  for ((r = 0; r < np; r++)); do
    local name; name=$(printf 'rank-%05d.jsonl' "$r")
    grep -q '"kind":"step"' "$dir/telemetry/$name" || fail "no step record in telemetry/$name"
    grep -q '"op":"fwd"' "$dir/trace/$name" || fail "no fwd event in trace/$name"
    grep -q '"op":"bwd"' "$dir/trace/$name" || fail "no bwd event in trace/$name"
    if [ -n "$collective" ]; then
      grep -q "\"op\":\"$collective\",\"group\":\"dp\"" "$dir/trace/$name" ||
        fail "no $collective on group dp in trace/$name"
    fi
  done
}

out=$(train 1 tiny-dense.yaml "$work/dense1") || { echo "$out"; fail "tiny-dense on 1 rank"; }
grep -qE "$line_re" <<<"$out" || { echo "$out"; fail "log line format"; }
grep -q "val_loss" <<<"$out" || { echo "$out"; fail "no evaluation line"; }
grep -q "parameters" <<<"$out" || { echo "$out"; fail "no parameter count"; }
check_run_dir "$work/dense1" 1 ""

out=$(train 2 tiny-dense.yaml "$work/dense2") || { echo "$out"; fail "tiny-dense on 2 ranks"; }
check_run_dir "$work/dense2" 2 reduce_scatter
grep -q "hidden behind backward" <<<"$out" || { echo "$out"; fail "no overlap summary"; }

out=$(train 2 tiny-dense.yaml "$work/dense2z0" --set parallel.zero=0) ||
  { echo "$out"; fail "tiny-dense on 2 ranks without ZeRO"; }
check_run_dir "$work/dense2z0" 2 allreduce

out=$(train 2 tiny-moe.yaml "$work/moe2" --set model.moe.num_experts=2 --set model.moe.top_k=1) ||
  { echo "$out"; fail "tiny-moe on 2 ranks"; }
grep -qE 'aux_loss [0-9.]+' <<<"$out" || { echo "$out"; fail "no aux_loss in the MoE log line"; }

refused() {  # refused <ranks> <expected text> <extra args...>: exit 1, names it, no step ran
  local np=$1 want=$2
  shift 2
  local got status=0
  got=$(train "$np" tiny-dense.yaml "$work/bad" "$@") || status=$?
  [ "$status" -eq 1 ] || { echo "$got"; fail "expected exit 1 for $*, got $status"; }
  grep -q -- "$want" <<<"$got" || { echo "$got"; fail "message does not name '$want'"; }
  ! grep -q "step 1/" <<<"$got" || fail "a step ran despite bad input ($*)"
}
refused 1 "train.seq_len" --set train.seq_len=16
refused 1 "model.vocab_size" --set model.vocab_size=1000
refused 2 "train.global_batch" --set parallel.dp=1 --set train.global_batch=6
refused 1 "parallel.tp (2) must divide the 1 trainer" --set parallel.tp=2 --set model.n_kv_heads=2
refused 1 "data.plan" --set data.plan="$work/none.plan"

# bf16 mixed precision on the CPU: the run logs its precision and learns (the loss curve against
# f32 is checked in tests/train/fake_device_train_test.cc).
out=$(train 1 tiny-dense.yaml "$work/bf16" --set train.precision=bf16) ||
  { echo "$out"; fail "tiny-dense in bf16"; }
grep -q "device: cpu, precision bf16" <<<"$out" || { echo "$out"; fail "no bf16 precision line"; }

# A GPU that cannot be used (no CUDA build, or no device here) is refused before MPI starts:
# exit 2 naming train.device and what is missing. On a machine with a GPU the run goes ahead.
if ! nvidia-smi -L > /dev/null 2>&1; then
  status=0
  got=$("$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" "${shrink[@]}" \
        --set run.dir="$work/bad-device" --set train.device=cuda 2>&1) || status=$?
  [ "$status" -eq 2 ] || { echo "$got"; fail "train.device=cuda without a GPU: exit $status"; }
  grep -qE "train.device: cuda:0 (needs a build with CUDA|cannot be used)" <<<"$got" ||
    { echo "$got"; fail "the device refusal does not say why"; }
  [ ! -e "$work/bad-device/telemetry" ] || fail "a run started on a missing device"
fi
dry=$("$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" "${shrink[@]}" \
      --set train.device=cuda:1 --dry-run) || fail "--dry-run with train.device=cuda:1"
grep -qE "^# device: cuda:1, precision f32; expected peak memory per model rank [0-9.]+ MiB" \
  <<<"$dry" || { echo "$dry"; fail "--dry-run prints no device line"; }
dry=$("$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" "${shrink[@]}" \
      --set train.precision=bf16 --dry-run) || fail "--dry-run with train.precision=bf16"
grep -qE "^# device: cpu, precision bf16;" <<<"$dry" || { echo "$dry"; fail "no bf16 in --dry-run"; }
echo "ms-train end to end: 13 passed, 0 failed"
