#!/usr/bin/env bash
# ms-data plan and dump-plan as a new user runs them: build two datasets from the bundled
# corpora, plan the demo mixture (configs/mix-shakespeare.yaml), dump samples as text and ids,
# and check that config typos, damaged plans and datasets changed after planning are refused.
# Usage: data_plan_test.sh <bin dir> <source dir>
set -euo pipefail
BIN=$1
SRC=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_error() {  # expect_error <substring> <command...>: exits 1 with <substring> on stderr
  local want=$1; shift
  if "$@" >out.txt 2>err.txt; then fail "'$*' succeeded"; fi
  grep -q -- "$want" err.txt || { cat err.txt >&2; fail "'$*' did not say '$want'"; }
}

TOK=$SRC/data/tokenizers/gpt2/tokenizer.json
mkdir -p data corpus
head -c 120000 "$SRC/data/corpus/tinyshakespeare.txt" > corpus/shakespeare.txt
"$BIN/ms-data" build -i corpus/shakespeare.txt --doc-separator blank-line -t "$TOK" \
  -o data/shakespeare --no-progress >/dev/null
"$BIN/ms-data" build -i "$SRC/data/corpus/arithmetic.jsonl.zst" -t "$TOK" -o data/arithmetic \
  --no-progress >/dev/null

"$BIN/ms-data" plan --config "$SRC/configs/mix-shakespeare.yaml" --output data/shakespeare.plan \
  > plan.txt
grep -q "shakespeare" plan.txt || fail "plan summary lists no shakespeare source"
test -f data/shakespeare.plan.yaml || fail "resolved mixture not written beside the plan"
"$BIN/ms-data" plan --config data/shakespeare.plan.yaml --output again.plan --json > again.json
cmp data/shakespeare.plan again.plan || fail "planning twice gave different bytes"

"$BIN/ms-data" dump-plan data/shakespeare.plan --samples 0:3 > samples.txt
test "$(grep -c '^=== train sample' samples.txt)" -eq 3 || fail "expected 3 text samples"
"$BIN/ms-data" dump-plan data/shakespeare.plan --split validation --samples 0:2 --format ids > ids.jsonl
test "$(wc -l < ids.jsonl)" -eq 2 || fail "expected 2 JSON lines"
SEQ_LEN=$(sed -n 's/^seq_len: *\([0-9]*\).*/\1/p' "$SRC/configs/mix-shakespeare.yaml")
python3 - "$SEQ_LEN" <<'PY' || fail "ids lines are not seq_len + 1 token ids"
import json, sys
for line in open("ids.jsonl"):
    j = json.loads(line)
    assert len(j["ids"]) == int(sys.argv[1]) + 1 and j["source"] in ("shakespeare", "arithmetic"), j
PY

sed 's/seq_len:/seq_lne:/' "$SRC/configs/mix-shakespeare.yaml" > typo.yaml
expect_error "did you mean 'seq_len'" "$BIN/ms-data" plan --config typo.yaml --output x.plan
expect_error "unknown source 'arithmetc'" "$BIN/ms-data" plan --config "$SRC/configs/mix-shakespeare.yaml" \
  --output x.plan --set 'schedule=[{at_sample: 10, weights: {arithmetc: 1}}]'
test ! -e x.plan || fail "a refused plan left a file behind"

head -c 1000 data/shakespeare.plan > truncated.plan
expect_error "truncated" "$BIN/ms-data" dump-plan truncated.plan --format ids
printf 'garbage-garbage-garbage-garbage-garbage-garbage-garbage-garbage-' > garbage.plan
expect_error "bad magic" "$BIN/ms-data" dump-plan garbage.plan --format ids
# A plan claiming seq_len 2^40 (loaders would size buffers by it) is refused naming the field.
expect_error "huge_seq_len.plan': seq_len 1099511627776 is outside" \
  "$BIN/ms-data" dump-plan "$SRC/tests/fuzz/corpus/plan_reader/huge_seq_len.plan" --format ids

zstd -q -dc "$SRC/data/corpus/arithmetic.jsonl.zst" > full.jsonl
head -n 100 full.jsonl > small.jsonl
"$BIN/ms-data" build -i small.jsonl -t "$TOK" -o data/arithmetic --no-progress --replace >/dev/null
expect_error "source 'arithmetic'" "$BIN/ms-data" dump-plan data/shakespeare.plan --format ids
grep -q "changed since the plan was made" err.txt || fail "changed dataset not explained"
echo "data_plan_test: OK"
