#!/usr/bin/env bash
# ms-infer speculative decoding as a user runs it: a tiny random MoE target and a smaller,
# differently seeded dense draft written as Hugging Face directories with the GPT-2 tokenizer;
# `ms-infer generate --draft-model` with more requests than batch slots must print exactly the
# target-alone greedy completions for k = 1 and 4 and report its acceptance; the target as its
# own draft must have every proposal accepted; the quick stdin mode agrees; `ms-infer bench
# --draft-model` reports both runs and the speedup; and a draft with another vocabulary or
# tokenizer, k = 0 and --draft-tokens without a draft are refused by name. (Speculative
# decoding under disaggregated serving: infer_disaggregated_test.sh.)
# Usage: infer_speculative_test.sh <bin dir> <source dir> <make_tiny_model binary>
set -euo pipefail
BIN=$1
SRC=$2
MAKE=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
TOK="$SRC/data/tokenizers/gpt2/tokenizer.json"

"$MAKE" --dir "$work/target" --tokenizer "$TOK" --d-model 64 --layers 2 --heads 4 --kv-heads 2 \
  --d-ff 128 --max-seq-len 128 --experts 4 --seed 1
"$MAKE" --dir "$work/draft" --tokenizer "$TOK" --d-model 32 --layers 1 --heads 2 --kv-heads 1 \
  --d-ff 64 --max-seq-len 128 --seed 2
"$MAKE" --dir "$work/other_vocab" --tokenizer "$TOK" --vocab-size 50432 --d-model 32 --layers 1 \
  --heads 2 --kv-heads 1 --d-ff 64 --max-seq-len 128 --seed 3
cat > "$work/prompts.jsonl" <<'JSONL'
{"id": "a", "prompt": "ROMEO: what light", "max_tokens": 12}
{"id": "b", "prompt": "First Citizen:", "max_tokens": 9}
{"id": "c", "prompt": "To be", "max_tokens": 7, "stop": ["zzzz"]}
{"id": "d", "prompt": "Now is the winter of our discontent", "max_tokens": 15}
{"id": "e", "prompt": "O", "max_tokens": 5}
JSONL

gen() {  # gen <output> <extra flags...>
  local out=$1
  shift
  "$BIN/ms-infer" generate --model "$work/target" --prompts "$work/prompts.jsonl" -o "$out" \
    --max-batch 2 --no-progress "$@"
}
tokens() { python3 -c 'import json,sys; print([json.loads(l)["tokens"] for l in open(sys.argv[1])])' "$1"; }

gen "$work/alone.jsonl" 2> "$work/alone.err" || fail "generate without a draft: $(cat "$work/alone.err")"
! grep -q 'speculative decoding' "$work/alone.err" || fail "a speculation line without a draft"
for k in 1 4; do
  gen "$work/spec$k.jsonl" --draft-model "$work/draft" --draft-tokens "$k" 2> "$work/spec$k.err" ||
    fail "generate --draft-tokens $k: $(cat "$work/spec$k.err")"
  [ "$(tokens "$work/spec$k.jsonl")" = "$(tokens "$work/alone.jsonl")" ] ||
    fail "k $k: greedy output differs from the target alone"
  grep -Eq "^speculative decoding: k $k, acceptance [0-9.]+ \([0-9]+ of [0-9]+ draft tokens\), [0-9.]+ tokens per target forward per sequence, [0-9]+ draft passes$" \
    "$work/spec$k.err" || fail "no acceptance line for k $k: $(cat "$work/spec$k.err")"
done

gen "$work/self.jsonl" --draft-model "$work/target" --draft-tokens 4 2> "$work/self.err"
[ "$(tokens "$work/self.jsonl")" = "$(tokens "$work/alone.jsonl")" ] || fail "self-draft output differs"
grep -q 'speculative decoding: k 4, acceptance 1.000' "$work/self.err" ||
  fail "the target as its own draft: $(cat "$work/self.err")"

alone=$(echo "ROMEO: what light" | "$BIN/ms-infer" generate --model "$work/target" --max-tokens 10 2>/dev/null)
spec=$(echo "ROMEO: what light" | "$BIN/ms-infer" generate --model "$work/target" --max-tokens 10 \
  --draft-model "$work/draft" 2>/dev/null)
[ "$alone" = "$spec" ] || fail "stdin mode: '$spec' with the draft, '$alone' without"

"$BIN/ms-infer" bench --model "$work/target" --draft-model "$work/draft" --draft-tokens 3 \
  --num-prompts 4 --input-len 8 --output-len 8 --batch-sizes 1 --stream-mib 8 \
  > "$work/bench.txt" 2> /dev/null || fail "bench --draft-model"
[ "$(grep -c '^Throughput: ' "$work/bench.txt")" = 2 ] || fail "bench: $(cat "$work/bench.txt")"
grep -q '^without the draft:$' "$work/bench.txt" || fail "bench: no run without the draft"
grep -q '^with the draft (--draft-tokens 3):$' "$work/bench.txt" || fail "bench: no run with it"
grep -q '^speculative decoding: k 3, acceptance ' "$work/bench.txt" || fail "bench: no acceptance"
grep -Eq '^speculative speedup: [0-9.]+x output tokens/s' "$work/bench.txt" || fail "bench: no speedup"

refused() {  # refused <expected message> <generate flags...>
  local want=$1
  shift
  if "$BIN/ms-infer" generate --model "$work/target" --prompt hi --max-tokens 2 "$@" \
    > /dev/null 2> "$work/refused.txt"; then
    fail "accepted: $*"
  fi
  grep -q -- "$want" "$work/refused.txt" || fail "$*: $(cat "$work/refused.txt")"
}
refused 'vocab_size 50432 differs from the target.s 50304' --draft-model "$work/other_vocab"
# The same vocabulary size under another tokenizer: two tokens' ids swapped.
cp -r "$work/draft" "$work/other_tokenizer"
python3 - "$work/other_tokenizer/tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
v = t["model"]["vocab"]
v["the"], v["and"] = v["and"], v["the"]
json.dump(t, open(sys.argv[1], "w"))
PY
refused 'its tokenizer.json differs from the target.s' --draft-model "$work/other_tokenizer"
refused '\-\-draft-tokens requires --draft-model' --draft-tokens 3
refused '\-\-draft-tokens (0) must be at least 1' --draft-model "$work/draft" --draft-tokens 0
echo PASS
