#!/usr/bin/env bash
# ms-infer serving what ms-train wrote: a tiny model trained for two steps on 2 ranks (ZeRO-1,
# so each rank saved its share of the optimizer state) is served by `ms-infer generate
# --checkpoint`, and gives the same greedy tokens as the same checkpoint exported to Hugging Face
# safetensors with `ms-ckpt export` and served with --model; the stdin mode prints that text.
# Usage: infer_checkpoint_test.sh <mpirun> <bin dir> <source dir>
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib.sh"

shakespeare_plan 16 64 8

"$MPIRUN" --oversubscribe -np 2 "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" \
  --set data.plan="$work/s16.plan" --set run.dir="$work/run" --set model.d_model=16 \
  --set model.n_layers=1 --set model.n_heads=2 --set model.n_kv_heads=1 --set model.d_ff=32 \
  --set model.max_seq_len=32 --set train.seq_len=16 --set train.steps=2 \
  --set train.global_batch=4 --set train.micro_batch=2 --set train.eval_every=0 \
  --set train.log_every=1 --set train.mfu_peak_gflops=1 --set parallel.zero=1 \
  --set checkpoint.every=2 --set checkpoint.async=false > "$work/train.txt" 2>&1 ||
  { cat "$work/train.txt"; fail "ms-train exited non-zero"; }
[ -f "$work/run/checkpoints/latest" ] || { cat "$work/train.txt"; fail "no checkpoint written"; }
python3 - "$work/run/checkpoints" <<'PY' || fail "the checkpoint is not a 2-rank ZeRO-1 layout"
import json, sys
step = open(sys.argv[1] + "/latest").read().strip()
layout = json.load(open(sys.argv[1] + "/" + step + "/manifest.json"))["layout"]
assert layout["world"] == 2 and layout["dp"] == 2 and layout["zero"] == 1, layout
PY

cat > "$work/prompts.jsonl" <<'JSONL'
{"id": "a", "prompt": "ROMEO: what light", "max_tokens": 6}
{"id": "b", "prompt": "First Citizen:\nBefore we proceed", "max_tokens": 6}
JSONL
"$BIN/ms-infer" generate --checkpoint "$work/run/checkpoints" --prompts "$work/prompts.jsonl" \
  -o "$work/from_ckpt.jsonl" --no-progress || fail "generate --checkpoint exited $?"

"$BIN/ms-ckpt" export "$work/run/checkpoints" --format safetensors -o "$work/hf" > /dev/null ||
  fail "ms-ckpt export exited $?"
"$BIN/ms-infer" generate --model "$work/hf" --prompts "$work/prompts.jsonl" \
  -o "$work/from_hf.jsonl" --no-progress || fail "generate --model exited $?"

python3 - "$work/from_ckpt.jsonl" "$work/from_hf.jsonl" <<'PY' || fail "completions differ"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert [r["id"] for r in a] == ["a", "b"], a
for x, y in zip(a, b):
    assert x["finish_reason"] in ("length", "stop") and x["tokens"], x
    assert x["tokens"] == y["tokens"] and x["text"] == y["text"], (x, y)
PY

text=$(echo "ROMEO: what light" | "$BIN/ms-infer" generate --checkpoint "$work/run/checkpoints" \
  --max-tokens 6)
first=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["text"])' \
  "$work/from_ckpt.jsonl")
[ "$text" = "$first" ] || fail "stdin mode printed '$text', expected '$first'"
echo PASS
