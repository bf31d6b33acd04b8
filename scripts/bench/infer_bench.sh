#!/usr/bin/env bash
# ms-infer bench on a random dense and a random MoE model (GPT-2 vocabulary) written by
# ms_infer_make_tiny_model: vLLM-style throughput and latency percentiles, and the batch sweep
# with decode speed against the read-bandwidth bound measured in the same run. When Debian's
# python3-torch is present, the same model directory is also run in PyTorch on the CPU with the
# same thread count (scripts/bench/infer_bench_torch.py): its greedy tokens for corpus prompts
# are checked against `ms-infer generate`, and the same batch sweep gives the ratios
# ms-infer / PyTorch of prefill and decode tokens/s.
# Usage: scripts/bench/infer_bench.sh <build dir> [threads]   (results go in docs/bench/infer.md)
set -euo pipefail
BUILD=${1:-build}
THREADS=${2:-${OPENBLAS_NUM_THREADS:-2}}
export OPENBLAS_NUM_THREADS=$THREADS
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PP=64
TG=32
BATCHES=1,4,16
GEN_TOKENS=24
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--d-model 256 --layers 4 --heads 8 --kv-heads 4 --d-ff 704 --max-seq-len 512)
"$BUILD/bin/ms_infer_make_tiny_model" --dir "$work/dense" \
  --tokenizer "$SRC/data/tokenizers/gpt2/tokenizer.json" "${common[@]}"
"$BUILD/bin/ms_infer_make_tiny_model" --dir "$work/moe" \
  --tokenizer "$SRC/data/tokenizers/gpt2/tokenizer.json" "${common[@]}" --experts 8 --top-k 2

have_torch=0
if /usr/bin/python3 -c 'import torch' 2> /dev/null; then have_torch=1; fi

# Eight distinct corpus lines as ms-infer prompts (JSON lines) and as the token ids the
# toolkit's tokenizer gives them (one JSON array per line) for PyTorch.
write_prompts() {
  grep -v '^[[:space:]]*$' "$SRC/data/corpus/tinyshakespeare.txt" | awk '!seen[$0]++' |
    sed -n '2p;9p;20p;33p;47p;80p;101p;150p' > "$work/lines.txt"
  /usr/bin/python3 -c 'import json, sys
for i, line in enumerate(open(sys.argv[1])):
    print(json.dumps({"id": i, "prompt": line.rstrip("\n")}))' "$work/lines.txt" \
    > "$work/prompts.jsonl"
  : > "$work/prompt_ids.txt"
  while IFS= read -r line; do
    "$BUILD/bin/ms-data" tokenizer encode --tokenizer "$work/dense/tokenizer.json" \
      --text "$line" --format json >> "$work/prompt_ids.txt"
  done < "$work/lines.txt"
}

# Prints ms-infer / PyTorch for one column of the sweep: $1 bench output, $2 torch output,
# $3 the ms-infer table column (| separated), $4 the torch_sweep field, $5 the label.
print_ratios() {
  local line="ratio ms-infer / pytorch, $5:" b ours theirs
  for b in ${BATCHES//,/ }; do
    ours=$(awk -F'|' -v b="$b" -v c="$3" '$2 + 0 > 0 && $4 + 0 == b {print $c + 0}' "$1")
    theirs=$(awk -v b="$b" -v c="$4" '$1 == "torch_sweep" && $3 == b {print $c}' "$2")
    line+=$(awk -v b="$b" -v x="$ours" -v y="$theirs" \
      'BEGIN {printf "  B=%d %.1f/%.1f = %.2f", b, x, y, x / y}')
  done
  echo "$line"
}

check_failed=0
if [ "$have_torch" = 1 ]; then write_prompts; fi
for m in dense moe; do
  echo "== $m"
  "$BUILD/bin/ms-infer" bench --model "$work/$m" --num-prompts 32 --input-len $PP \
    --output-len $TG --max-batch 16 --batch-sizes $BATCHES | tee "$work/$m.bench.txt"
  if [ "$have_torch" = 0 ]; then
    echo "pytorch: python3-torch not installed; no comparison"
    continue
  fi
  "$BUILD/bin/ms-infer" generate --model "$work/$m" --prompts "$work/prompts.jsonl" \
    -o "$work/$m.generated.jsonl" --max-tokens $GEN_TOKENS --temperature 0 --no-progress
  version=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')
  echo "-- pytorch $version, $THREADS threads"
  if ! /usr/bin/python3 "$SRC/scripts/bench/infer_bench_torch.py" --model "$work/$m" \
    --threads "$THREADS" --prompt-ids "$work/prompt_ids.txt" --max-tokens $GEN_TOKENS \
    --out "$work/$m.torch_tokens.txt" --check "$work/$m.generated.jsonl" --input-len $PP \
    --output-len $TG --batch-sizes $BATCHES > "$work/$m.torch.txt"; then
    check_failed=1
  fi
  cat "$work/$m.torch.txt"
  print_ratios "$work/$m.bench.txt" "$work/$m.torch.txt" 7 11 "prefill tok/s"
  print_ratios "$work/$m.bench.txt" "$work/$m.torch.txt" 9 15 "decode tok/s"
done
if [ "$check_failed" = 1 ]; then
  echo "FAILED: PyTorch's greedy tokens differ from ms-infer's (see the mismatch lines above)"
  exit 1
fi
