#!/usr/bin/env bash
# ms-infer as a new user runs it: a tiny random model written as a Hugging Face directory
# (config.json, model.safetensors, GPT-2 tokenizer.json), then `ms-infer generate` on a prompts
# file with greedy and sampled requests, a malformed line and an over-long prompt; the quick
# stdin mode; and `ms-infer bench`. Checks output order and fields, per-line errors, that greedy
# output does not depend on --max-batch, that --weights converts the weights (logged, counted
# by bench, refused by tensor name), and that a config missing a key is refused by name.
# Usage: infer_generate_test.sh <bin dir> <source dir> <make_tiny_model binary>
set -euo pipefail
BIN=$1
SRC=$2
MAKE=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$MAKE" --dir "$work/model" --tokenizer "$SRC/data/tokenizers/gpt2/tokenizer.json" \
  --d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --max-seq-len 64 --experts 4
long=$(printf 'word %.0s' $(seq 1 80))
cat > "$work/prompts.jsonl" <<JSONL
{"id": "greedy", "prompt": "ROMEO: what light", "max_tokens": 6}
{"id": "sampled", "prompt": "First Citizen:", "max_tokens": 5, "temperature": 0.8, "top_p": 0.9, "top_k": 40, "seed": 3}
{"id": "broken", "prompt": 
{"id": "long", "prompt": "$long", "max_tokens": 4}
{"id": "short", "prompt": "To be", "max_tokens": 3, "stop": ["zzzz"]}
JSONL

"$BIN/ms-infer" generate --model "$work/model" --prompts "$work/prompts.jsonl" \
  -o "$work/out.jsonl" --max-batch 4 2> "$work/err.txt" || fail "generate exited $?"
grep -q 'prompts.jsonl:3: not a JSON object' "$work/err.txt" || fail "malformed line not reported"
grep -q 'generate: 4/4 requests' "$work/err.txt" || fail "no progress line"
[ "$(wc -l < "$work/out.jsonl")" = 5 ] || fail "expected 5 output lines"
python3 - "$work/out.jsonl" <<'PY' || fail "output lines"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["id"] for r in rows] == ["greedy", "sampled", "line-3", "long", "short"], rows
keys = ["id", "text", "tokens", "finish_reason", "prompt_tokens", "completion_tokens",
        "ttft_ms", "latency_ms"]
for r in rows:
    assert all(k in r for k in keys), r
assert rows[0]["completion_tokens"] == 6 and rows[0]["finish_reason"] == "length"
assert rows[1]["completion_tokens"] == 5
assert rows[2]["finish_reason"] == "error"
assert rows[3]["finish_reason"] == "error" and "context of 64 tokens" in rows[3]["error"], rows[3]
assert rows[4]["completion_tokens"] == 3
assert rows[0]["ttft_ms"] <= rows[0]["latency_ms"]
PY

# Greedy and seeded output is the same one request at a time.
"$BIN/ms-infer" generate --model "$work/model" --prompts "$work/prompts.jsonl" \
  -o "$work/out1.jsonl" --max-batch 1 --no-progress 2> /dev/null
python3 - "$work/out.jsonl" "$work/out1.jsonl" <<'PY' || fail "batch size changed the output"
import json, sys
a = [json.loads(l)["tokens"] for l in open(sys.argv[1])]
b = [json.loads(l)["tokens"] for l in open(sys.argv[2])]
assert a == b, (a, b)
PY

text=$(echo "ROMEO: what light" | "$BIN/ms-infer" generate --model "$work/model" --max-tokens 6)
first=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["text"])' "$work/out.jsonl")
[ "$text" = "$first" ] || fail "stdin mode printed '$text', expected '$first'"

"$BIN/ms-infer" bench --model "$work/model" --num-prompts 4 --input-len 8 --output-len 4 \
  --batch-sizes 1,2 --stream-mib 8 > "$work/bench.txt"
grep -Eq '^Throughput: [0-9.]+ requests/s, [0-9.]+ total tokens/s, [0-9.]+ output tokens/s$' \
  "$work/bench.txt" || fail "bench throughput line: $(cat "$work/bench.txt")"
grep -q 'TPOT ms: p50' "$work/bench.txt" || fail "bench percentiles"
grep -Eq '^\| +8 \| +4 \| +2 \|' "$work/bench.txt" || fail "bench sweep row"

# Converted weights: the log names the format and the bytes held, bench counts the converted
# bytes per decode step, and a group size the model's width does not divide is refused by name.
"$BIN/ms-infer" generate --model "$work/model" --prompt "To be" --max-tokens 3 --weights int4 \
  --group-size 32 > /dev/null 2> "$work/q4.txt" || fail "int4 generate: $(cat "$work/q4.txt")"
grep -Eq 'weights int4 \(group 32\) x int8 activations: [0-9]+ linear weights, [0-9.]+ MB as f32 -> [0-9.]+ MB; [0-9.]+ MB of weights held' \
  "$work/q4.txt" || fail "no int4 weights line: $(cat "$work/q4.txt")"
"$BIN/ms-infer" bench --model "$work/model" --num-prompts 2 --input-len 8 --output-len 3 \
  --batch-sizes 1 --stream-mib 8 --weights int8 > "$work/bench8.txt" 2> /dev/null
f32_bytes=$(grep -o 'weight bytes per decode step: [0-9.]*' "$work/bench.txt" | grep -o '[0-9.]*$')
int8_bytes=$(grep -o 'weight bytes per decode step: [0-9.]*' "$work/bench8.txt" | grep -o '[0-9.]*$')
python3 -c "import sys; sys.exit(0 if float('$int8_bytes') < 0.5 * float('$f32_bytes') else 1)" ||
  fail "int8 decode bytes $int8_bytes not below half of f32's $f32_bytes"
if "$BIN/ms-infer" generate --model "$work/model" --prompt hi --weights int4 --group-size 64 \
  2> "$work/q64.txt"; then
  fail "int4 groups of 64 were accepted for a width of 32"
fi
grep -q 'q_proj.weight.*group size 64' "$work/q64.txt" || fail "$(cat "$work/q64.txt")"

sed -i 's/"num_hidden_layers"/"layers"/' "$work/model/config.json"
if "$BIN/ms-infer" generate --model "$work/model" --prompt hi 2> "$work/err2.txt"; then
  fail "a config without num_hidden_layers was accepted"
fi
grep -q 'missing key "num_hidden_layers"' "$work/err2.txt" || fail "$(cat "$work/err2.txt")"
echo PASS
