#!/usr/bin/env bash
# A quantized model directory served under mpirun: a tiny random MoE model quantized to int4
# (its attention and lm_head; the experts stay f32) and served by 3 ranks, 1 attention + 2
# expert ranks and as 3 colocated replicas, writes the tokens one process writes with --weights
# int4 on the original. The expert ranks read only their experts from the quantized file.
# Usage: infer_quantize_mpi_test.sh <mpirun> <bin dir> <source dir> <make_tiny_model binary>
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
MAKE=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$MAKE" --dir "$work/moe" --tokenizer "$SRC/data/tokenizers/gpt2/tokenizer.json" \
  --d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --max-seq-len 64 --experts 4 --top-k 2
"$BIN/ms-infer" quantize --model "$work/moe" -o "$work/q" --weights int4 --group-size 32 \
  2> "$work/q.log" || fail "quantize: $(cat "$work/q.log")"
cat > "$work/prompts.jsonl" <<'JSONL'
{"id": "a", "prompt": "ROMEO: what light", "max_tokens": 6}
{"id": "b", "prompt": "First Citizen:", "max_tokens": 5}
{"id": "c", "prompt": "To be", "max_tokens": 7}
JSONL
tokens() { python3 -c 'import json,sys; print([json.loads(l)["tokens"] for l in open(sys.argv[1])])' "$1"; }

"$BIN/ms-infer" generate --model "$work/moe" --weights int4 --group-size 32 \
  --prompts "$work/prompts.jsonl" -o "$work/one.jsonl" --no-progress 2> /dev/null
for layout in "--attention-ranks 1" ""; do
  "$MPIRUN" --oversubscribe -np 3 "$BIN/ms-infer" generate --model "$work/q" $layout \
    --prompts "$work/prompts.jsonl" -o "$work/mpi.jsonl" --no-progress 2> "$work/mpi.err" ||
    fail "mpirun generate $layout: $(cat "$work/mpi.err")"
  [ "$(tokens "$work/mpi.jsonl")" = "$(tokens "$work/one.jsonl")" ] ||
    fail "3 ranks ($layout) on the quantized directory differ from --weights int4 on one"
  if [ -n "$layout" ]; then
    grep -q 'serving: 3 ranks, 1 attention + 2 expert ranks' "$work/mpi.err" ||
      fail "no disaggregated layout line: $(cat "$work/mpi.err")"
  fi
done
grep -q 'weights as stored' "$work/mpi.err" || fail "no stored-weights line: $(cat "$work/mpi.err")"
echo PASS
