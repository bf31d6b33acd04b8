#!/usr/bin/env bash
# ms-infer bench on a random dense and a random MoE model (GPT-2 vocabulary) written by
# ms_infer_make_tiny_model: vLLM-style throughput and latency percentiles, and the batch sweep
# with decode speed against the memory-bandwidth bound measured in the same run.
# Usage: scripts/bench/infer_bench.sh <build dir>   (results go in docs/bench/infer.md)
set -euo pipefail
BUILD=${1:-build}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--d-model 256 --layers 4 --heads 8 --kv-heads 4 --d-ff 704 --max-seq-len 512)
"$BUILD/bin/ms_infer_make_tiny_model" --dir "$work/dense" \
  --tokenizer "$SRC/data/tokenizers/gpt2/tokenizer.json" "${common[@]}"
"$BUILD/bin/ms_infer_make_tiny_model" --dir "$work/moe" \
  --tokenizer "$SRC/data/tokenizers/gpt2/tokenizer.json" "${common[@]}" --experts 8 --top-k 2
for m in dense moe; do
  echo "== $m"
  "$BUILD/bin/ms-infer" bench --model "$work/$m" --num-prompts 32 --input-len 64 \
    --output-len 32 --max-batch 16 --batch-sizes 1,4,16
done
