#!/usr/bin/env bash
# Document masking as a user turns it on: ms-train on the Shakespeare dataset (ms-data build
# appends <|endoftext|> after every speech and records its id in the meta sidecar) with
# --set train.document_mask=true on 1 and 2 ranks, with per-document positions, and with the
# id given as data.eod_id. Checks that the log names the id, that every step logs a finite
# loss different from the unmasked run's, that train.document_positions without the mask and a
# dataset without end-of-document tokens are refused with the reason before any step, and that
# ms-infer serving the masked checkpoint continues "speech A<|endoftext|>speech B" exactly as
# it continues "speech B" alone, and that tp 2, pp 2 and dp 2 train as one rank does.
# Usage: train_docmask_test.sh <mpirun> <bin dir> <source dir>
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib.sh"

shakespeare_plan 32 256 16

shrink=(--set data.plan="$work/s32.plan" "${TINY_MODEL[@]}"
        --set model.max_seq_len=64 --set train.seq_len=32 --set train.steps=3
        --set train.global_batch=4 --set train.micro_batch=2 --set train.eval_every=3
        --set train.eval_batches=1 --set train.log_every=1 --set train.mfu_peak_gflops=1)

train() {  # train <ranks> <run dir> [extra args...]
  local np=$1 dir=$2
  shift 2
  "$MPIRUN" --oversubscribe -np "$np" "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" \
    "${shrink[@]}" --set run.dir="$dir" "$@" 2>&1
}

# The losses of the step lines, one per line; fails unless there are `steps` finite ones.
losses() {  # losses <log text> <steps>
  local got
  got=$(grep -oE 'step [0-9]+/[0-9]+ \| loss [^ ]+' <<<"$1" | awk '{print $5}')
  [ "$(wc -l <<<"$got")" -eq "$2" ] || { echo "$1"; fail "expected $2 step lines"; }
  python3 - "$got" <<'PY' || { echo "$1"; fail "a loss is not finite"; }
import math, sys
for v in sys.argv[1].split():
    assert math.isfinite(float(v)), v
PY
  echo "$got"
}

eod=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokenizer"]["eos_id"])' \
  "$work/shakespeare.meta.json")
[ "$eod" -ge 0 ] || fail "the dataset's meta records no end-of-document id"

plain=$(train 1 "$work/plain") || { echo "$plain"; fail "the unmasked run"; }
masked=$(train 1 "$work/masked" --set train.document_mask=true) ||
  { echo "$masked"; fail "train.document_mask=true on 1 rank"; }
grep -q "document masking: attention stops at end-of-document id $eod (the datasets' meta)" \
  <<<"$masked" || { echo "$masked"; fail "the log does not name the id from the meta"; }
grep -q "val_loss" <<<"$masked" || { echo "$masked"; fail "no evaluation under the mask"; }
plain_losses=$(losses "$plain" 3)
masked_losses=$(losses "$masked" 3)
[ "$plain_losses" != "$masked_losses" ] ||
  fail "the mask changed no loss (samples span several speeches, so it must)"

out=$(train 2 "$work/masked2" --set train.document_mask=true --set train.document_positions=true \
  --set checkpoint.every=3 --set checkpoint.async=false) ||
  { echo "$out"; fail "document_mask with document_positions on 2 ranks"; }
grep -q "positions restart at each document" <<<"$out" || { echo "$out"; fail "positions not logged"; }
losses "$out" 3 > /dev/null

out=$(train 1 "$work/given" --set train.document_mask=true --set data.eod_id="$eod") ||
  { echo "$out"; fail "data.eod_id given"; }
grep -q "end-of-document id $eod (data.eod_id)" <<<"$out" || { echo "$out"; fail "data.eod_id not used"; }
[ "$(losses "$out" 3)" = "$masked_losses" ] || fail "data.eod_id=$eod differs from the meta's id"

refused() {  # refused <expected text> <extra args...>: exit 1, names it, no step ran
  local want=$1
  shift
  local got status=0
  got=$(train 1 "$work/bad" "$@") || status=$?
  [ "$status" -eq 1 ] || { echo "$got"; fail "expected exit 1 for $*, got $status"; }
  grep -qF -- "$want" <<<"$got" || { echo "$got"; fail "message does not say '$want'"; }
  ! grep -q "step 1/" <<<"$got" || fail "a step ran despite bad input ($*)"
}
refused "train.document_positions restarts rotary positions at each document, which needs train.document_mask: true" \
  --set train.document_positions=true

# A dataset without end-of-document tokens cannot say where documents end.
"$BIN/ms-data" build -i "$SRC/data/corpus/tinyshakespeare.txt" --doc-separator blank-line \
  -t "$SRC/data/tokenizers/gpt2/tokenizer.json" -o "$work/noeos" --threads 2 --no-progress \
  --no-append-eos > /dev/null
cat > "$work/mix-noeos.yaml" <<YAML
seq_len: 32
total_samples: 64
validation: {fraction: 0.02, samples: 4}
sources:
  - {name: noeos, prefix: $work/noeos, weight: 1.0}
YAML
"$BIN/ms-data" plan --config "$work/mix-noeos.yaml" --output "$work/noeos.plan" > /dev/null
refused "was built without end-of-document tokens" --set train.document_mask=true \
  --set data.plan="$work/noeos.plan"

# Serving the masked checkpoint: what follows an <|endoftext|> does not see what came before.
cat > "$work/prompts.jsonl" <<'JSONL'
{"id": "after", "prompt": "ROMEO: what light through yonder window<|endoftext|>First Citizen:\nBefore we proceed", "max_tokens": 8}
{"id": "alone", "prompt": "First Citizen:\nBefore we proceed", "max_tokens": 8}
JSONL
"$BIN/ms-infer" generate --checkpoint "$work/masked2/checkpoints" --prompts "$work/prompts.jsonl" \
  -o "$work/out.jsonl" --no-progress || fail "ms-infer generate exited $?"
python3 - "$work/out.jsonl" <<'PY' || fail "the continuation after <|endoftext|> differs"
import json, sys
after, alone = [json.loads(l) for l in open(sys.argv[1])]
assert after["tokens"] and after["tokens"] == alone["tokens"], (after, alone)
PY
# Parallel layouts under the mask (with per-document positions and a sliding window): losses
# and gradient norms of tp 2, pp 2 and dp 2 within 1e-5 of the one-rank run (layouts.sh).
base=(--set data.plan="$work/s32.plan" "${TINY_MODEL[@]}" --set model.n_layers=2
      --set model.n_kv_heads=2 --set model.sliding_window=8 --set model.max_seq_len=64
      --set train.seq_len=32 --set train.steps=3 --set train.global_batch=4
      --set train.micro_batch=2 --set train.eval_every=3 --set train.eval_batches=1
      --set train.log_every=1 --set train.mfu_peak_gflops=1 --set checkpoint.every=0
      --set train.document_mask=true --set train.document_positions=true)
source "$(dirname "$0")/layouts.sh"
train 1 "$work/ref" || fail "the one-rank masked run"
train 2 "$work/tp2" --set parallel.tp=2 || fail "tp 2 under the mask"
close "$work/tp2" "$work/ref" 1
train 2 "$work/pp2" --set parallel.pp=2 || fail "pp 2 under the mask"
close "$work/pp2" "$work/ref" 1
train 2 "$work/dp2" || fail "dp 2 under the mask"
close "$work/dp2" "$work/ref" 1
echo "train_docmask: OK"
