#!/usr/bin/env bash
# Disaggregated MoE serving from the shell: on a tiny random MoE model, `mpirun -np 4 ms-infer
# generate --attention-ranks 2` writes the same greedy tokens as one process (also with
# --weights int4, the expert ranks then holding int4 experts, from a quantized directory of the
# MoE model, and as 4 colocated replicas); with a smaller draft model (--draft-model, dense
# and MoE) on the attention ranks, greedy tokens are still the one-process target's, sampled
# tokens those of one-process speculative decoding with the same seeds, and the acceptance
# line is printed (by bench too); `ms-infer bench` under mpirun prints the
# throughput line, the latency percentiles and each rank's role; `ms-infer plan` prints plans
# and its best choice; layouts that cannot serve are refused with the reason.
# Usage: infer_disaggregated_test.sh <mpirun> <bin dir> <source dir> <make_tiny_model binary>
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
MAKE=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
run() { "$MPIRUN" --oversubscribe -np "$@"; }

tok="$SRC/data/tokenizers/gpt2/tokenizer.json"
common=(--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --max-seq-len 64)
"$MAKE" --dir "$work/moe" --tokenizer "$tok" "${common[@]}" --experts 4 --top-k 2
"$MAKE" --dir "$work/dense" --tokenizer "$tok" "${common[@]}"
small=(--d-model 16 --layers 1 --heads 2 --kv-heads 1 --d-ff 32 --max-seq-len 64)
"$MAKE" --dir "$work/draft" --tokenizer "$tok" "${small[@]}" --seed 2
"$MAKE" --dir "$work/moe_draft" --tokenizer "$tok" "${small[@]}" --experts 2 --top-k 1 --seed 3
cat > "$work/prompts.jsonl" <<'JSONL'
{"id": "a", "prompt": "ROMEO: what light", "max_tokens": 6}
{"id": "b", "prompt": "First Citizen:", "max_tokens": 5}
{"id": "c", "prompt": "To be", "max_tokens": 7}
{"id": "d", "prompt": "KING HENRY: once more unto the breach", "max_tokens": 4}
{"id": "e", "prompt": "O", "max_tokens": 6}
JSONL

tokens() { python3 -c 'import json,sys; print([json.loads(l)["tokens"] for l in open(sys.argv[1])])' "$1"; }
"$BIN/ms-infer" generate --model "$work/moe" --prompts "$work/prompts.jsonl" -o "$work/one.jsonl" \
  --no-progress
run 4 "$BIN/ms-infer" generate --model "$work/moe" --prompts "$work/prompts.jsonl" \
  -o "$work/disagg.jsonl" --attention-ranks 2 --micro-batches 2 --max-batch 2 --no-progress \
  2> "$work/disagg.err" || fail "disaggregated generate: $(cat "$work/disagg.err")"
[ "$(tokens "$work/one.jsonl")" = "$(tokens "$work/disagg.jsonl")" ] ||
  fail "disaggregated tokens differ from one process"
grep -q 'serving: 4 ranks, 2 attention + 2 expert ranks' "$work/disagg.err" || fail "no layout line"
grep -q 'rank 3 experts' "$work/disagg.err" || fail "no expert rank report"
# With int4 attention and lm_head weights on the attention ranks, too.
"$BIN/ms-infer" generate --model "$work/moe" --prompts "$work/prompts.jsonl" \
  -o "$work/one4.jsonl" --no-progress --weights int4 --group-size 32 2> /dev/null
run 4 "$BIN/ms-infer" generate --model "$work/moe" --prompts "$work/prompts.jsonl" \
  -o "$work/disagg4.jsonl" --attention-ranks 2 --micro-batches 2 --max-batch 2 --no-progress \
  --weights int4 --group-size 32 2> "$work/disagg4.err" ||
  fail "disaggregated int4 generate: $(cat "$work/disagg4.err")"
[ "$(tokens "$work/one4.jsonl")" = "$(tokens "$work/disagg4.jsonl")" ] ||
  fail "disaggregated int4 tokens differ from one process"
# The expert ranks hold their experts in int4: 0.5 + 4/32 bytes a weight instead of 4 (x6.4;
# the report's two decimals round 0.098 MB and 0.015 MB to 0.10 and 0.02).
expert_mb() { sed -n 's/^  rank 3 experts: \([0-9.]*\) MB of weights.*/\1/p' "$1"; }
python3 -c 'import sys; f, q = map(float, sys.argv[1:]); assert q > 0 and f / q >= 4, (f, q)' \
  "$(expert_mb "$work/disagg.err")" "$(expert_mb "$work/disagg4.err")" ||
  fail "expert rank weights not quantized: $(grep 'rank 3' "$work/disagg.err" "$work/disagg4.err")"
# A quantized directory of the MoE model (experts included) serves disaggregated like
# --weights int4 at load in one process.
"$BIN/ms-infer" quantize --model "$work/moe" -o "$work/moe-int4" --weights int4 --group-size 32 \
  > "$work/quantize.log" 2>&1 || fail "quantize the MoE model: $(cat "$work/quantize.log")"
grep -q "33 linear weights quantized" "$work/quantize.log" ||
  fail "quantize did not count the experts: $(cat "$work/quantize.log")"
run 4 "$BIN/ms-infer" generate --model "$work/moe-int4" --prompts "$work/prompts.jsonl" \
  -o "$work/disagg4q.jsonl" --attention-ranks 2 --micro-batches 2 --max-batch 2 --no-progress \
  2> "$work/disagg4q.err" || fail "disaggregated generate from the quantized directory: $(cat "$work/disagg4q.err")"
[ "$(tokens "$work/one4.jsonl")" = "$(tokens "$work/disagg4q.jsonl")" ] ||
  fail "disaggregated tokens from the quantized directory differ from --weights int4"
[ "$(expert_mb "$work/disagg4q.err")" = "$(expert_mb "$work/disagg4.err")" ] ||
  fail "expert rank holds other bytes from the quantized directory"
# Speculative decoding: the drafts run whole on the attention ranks, the target's verify passes
# go through the expert ranks. 3 ranks (1 attention + 2 expert ranks) and 4 (2 + 2).
for np in 3 4; do
  for d in draft moe_draft; do
    run "$np" "$BIN/ms-infer" generate --model "$work/moe" --prompts "$work/prompts.jsonl" \
      -o "$work/spec.jsonl" --attention-ranks $((np - 2)) --micro-batches 2 --max-batch 2 \
      --no-progress --draft-model "$work/$d" --draft-tokens 3 2> "$work/spec.err" ||
      fail "disaggregated generate --draft-model $d on $np ranks: $(cat "$work/spec.err")"
    [ "$(tokens "$work/one.jsonl")" = "$(tokens "$work/spec.jsonl")" ] ||
      fail "disaggregated speculative tokens ($d, $np ranks) differ from the target alone"
    grep -Eq '^speculative decoding: k 3, acceptance [0-9.]+ \([0-9]+ of [1-9][0-9]* draft tokens\)' \
      "$work/spec.err" || fail "no acceptance line ($d, $np ranks): $(cat "$work/spec.err")"
  done
done
sampled=(--temperature 0.8 --seed 5 --draft-model "$work/draft" --draft-tokens 3 --max-batch 2
  --no-progress)
"$BIN/ms-infer" generate --model "$work/moe" --prompts "$work/prompts.jsonl" \
  -o "$work/spec_one.jsonl" "${sampled[@]}" 2> /dev/null
run 4 "$BIN/ms-infer" generate --model "$work/moe" --prompts "$work/prompts.jsonl" \
  -o "$work/spec_disagg.jsonl" --attention-ranks 2 "${sampled[@]}" 2> "$work/spec.err" ||
  fail "disaggregated sampled generate --draft-model: $(cat "$work/spec.err")"
[ "$(tokens "$work/spec_one.jsonl")" = "$(tokens "$work/spec_disagg.jsonl")" ] ||
  fail "disaggregated sampled speculative tokens differ from one process"
run 3 "$BIN/ms-infer" generate --model "$work/moe" --prompts "$work/prompts.jsonl" \
  -o "$work/colo.jsonl" --no-progress 2> /dev/null
[ "$(tokens "$work/one.jsonl")" = "$(tokens "$work/colo.jsonl")" ] ||
  fail "colocated replicas' tokens differ from one process"

run 4 "$BIN/ms-infer" bench --model "$work/moe" --num-prompts 8 --input-len 8 --output-len 4 \
  --attention-ranks 2 > "$work/bench.txt"
grep -Eq '^Throughput: [0-9.]+ requests/s, [0-9.]+ total tokens/s, [0-9.]+ output tokens/s$' \
  "$work/bench.txt" || fail "bench throughput line: $(cat "$work/bench.txt")"
grep -q 'TTFT ms: p50' "$work/bench.txt" || fail "bench TTFT percentiles"
grep -q 'token traffic:' "$work/bench.txt" || fail "bench traffic line"
run 4 "$BIN/ms-infer" bench --model "$work/moe" --num-prompts 8 --input-len 8 --output-len 4 \
  --attention-ranks 2 --draft-model "$work/draft" --draft-tokens 2 > "$work/bench_spec.txt" \
  2> /dev/null || fail "bench --draft-model --attention-ranks"
grep -q '^speculative decoding: k 2, acceptance ' "$work/bench_spec.txt" ||
  fail "bench with a draft: $(cat "$work/bench_spec.txt")"
grep -Eq '^speculative speedup: [0-9.]+x output tokens/s' "$work/bench_spec.txt" ||
  fail "bench with a draft: no speedup line"

run 2 "$BIN/ms-infer" plan --model "$work/moe" --ranks 6 --tpot-ms 1000 --context 16 \
  --micro-batch-sizes 1,4 --repeats 1 > "$work/plan.txt"
grep -q '^best: ' "$work/plan.txt" || fail "plan printed no best plan: $(cat "$work/plan.txt")"
grep -q 'measured between ranks 0 and 1' "$work/plan.txt" || fail "plan did not measure the link"

if run 2 "$BIN/ms-infer" generate --model "$work/dense" --prompt hi --attention-ranks 1 \
  2> "$work/err.txt" > /dev/null; then
  fail "a dense model was served disaggregated"
fi
grep -q 'needs a MoE model' "$work/err.txt" || fail "dense refusal: $(cat "$work/err.txt")"
if run 2 "$BIN/ms-infer" generate --model "$work/moe" --prompt hi --attention-ranks 2 \
  2> "$work/err.txt" > /dev/null; then
  fail "a layout without expert ranks was accepted"
fi
grep -q 'at least one expert rank' "$work/err.txt" || fail "layout refusal: $(cat "$work/err.txt")"
echo PASS
