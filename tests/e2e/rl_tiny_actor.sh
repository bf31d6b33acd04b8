#!/usr/bin/env bash
# The RL end-to-end tests' setup: the arithmetic prompt split (20 held-out prompts) in
# <work>/prompts, and a tiny random actor in <work>/model (a Hugging Face directory) whose
# tokenizer, <work>/tokenizer.json, is a 512-entry BPE learned from the training prompts and
# their answers. GPT-2's 50257 entries would make every logit row 100 times wider, for nothing
# the tests check.
# Usage: rl_tiny_actor.sh <work dir> <bin dir> <source dir> <make_tiny_model> <kv heads>
set -euo pipefail
work=$1 BIN=$2 SRC=$3 MAKE=$4 KV_HEADS=$5
bash "$SRC/data/corpus/make_arithmetic_prompts.sh" "$work/prompts" 20 2> /dev/null
python3 -c 'import json, sys
for line in open(sys.argv[1]):
    q = json.loads(line)
    print(q["prompt"], q["answer"] + ".")' "$work/prompts/arithmetic_prompts_train.jsonl" > "$work/text.txt"
"$BIN/ms-data" tokenizer train --input "$work/text.txt" --vocab-size 512 \
  --output "$work/tokenizer.json" > /dev/null 2>&1 || { echo "FAIL: training the tokenizer"; exit 1; }
"$MAKE" --dir "$work/model" --tokenizer "$work/tokenizer.json" --vocab-size 512 --d-model 16 \
  --layers 1 --heads 2 --kv-heads "$KV_HEADS" --d-ff 32 --max-seq-len 128 > /dev/null
