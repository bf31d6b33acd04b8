#!/usr/bin/env bash
# ms-data build / inspect / verify / dump as a user runs them: the bundled Tiny Shakespeare
# (blank-line separated speeches) plus the bundled arithmetic.jsonl.zst, with GPT-2's tokenizer;
# then damaged inputs, and (mode "mpi") a 2-rank build that must equal the 1-rank build byte for
# byte.
#   usage: data_build_test.sh <bin dir> <source dir> [mpi <mpiexec>]
set -euo pipefail
BIN="$1"; SRC="$2"; MODE="${3:-single}"; MPIEXEC="${4:-mpirun}"
MS_DATA="$BIN/ms-data"
TOK="$SRC/data/tokenizers/gpt2/tokenizer.json"
[ -f "$TOK" ] || TOK="$SRC/../shared/data/gpt2/tokenizer.json"
if [ ! -f "$TOK" ]; then echo "SKIP: no GPT-2 tokenizer.json in data/tokenizers/gpt2 or ../shared"; exit 77; fi
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
TEXT="$SRC/data/corpus/tinyshakespeare.txt"
JSONL="$SRC/data/corpus/arithmetic.jsonl.zst"

fail() { echo "FAIL: $*" >&2; exit 1; }
expect_exit() {  # expect_exit <code> <pattern> <command...>
  local want="$1" pattern="$2"; shift 2
  set +e; "$@" >"$WORK/out" 2>&1; local got=$?; set -e
  [ "$got" = "$want" ] || { cat "$WORK/out" >&2; fail "'$*' exited $got, expected $want"; }
  grep -q -- "$pattern" "$WORK/out" || { cat "$WORK/out" >&2; fail "'$*' output lacks '$pattern'"; }
}

if [ "$MODE" = mpi ]; then
  "$MS_DATA" build -i "$JSONL" -t "$TOK" -o "$WORK/one" --threads 1 --batch-docs 64 --no-progress
  "$MPIEXEC" --oversubscribe -np 2 "$MS_DATA" build -i "$JSONL" -t "$TOK" -o "$WORK/two" \
      --threads 1 --batch-docs 64 --no-progress
  cmp "$WORK/one.bin" "$WORK/two.bin" || fail "2-rank .bin differs from 1-rank"
  cmp "$WORK/one.idx" "$WORK/two.idx" || fail "2-rank .idx differs from 1-rank"
  ls "$WORK" | grep -q part && fail "part files left behind"
  # Empty documents (no sequence, no end-of-document token) split across ranks the same way.
  for i in $(seq 1 40); do printf '{"text": "doc %d"}\n{"text": ""}\n' "$i"; done > "$WORK/gaps.jsonl"
  "$MS_DATA" build -i "$WORK/gaps.jsonl" -t "$TOK" -o "$WORK/gaps1" --batch-docs 7 --no-progress
  "$MPIEXEC" --oversubscribe -np 2 "$MS_DATA" build -i "$WORK/gaps.jsonl" -t "$TOK" -o "$WORK/gaps2" \
      --batch-docs 7 --no-progress
  cmp "$WORK/gaps1.idx" "$WORK/gaps2.idx" || fail "2-rank .idx with empty documents differs"
  cmp "$WORK/gaps1.bin" "$WORK/gaps2.bin" || fail "2-rank .bin with empty documents differs"
  "$MS_DATA" inspect "$WORK/gaps2" | grep -q "^sequences   40$" || fail "2-rank build gave empty documents a sequence"
  echo "PASS: 2-rank build is byte-identical"; exit 0
fi

"$MS_DATA" build --input "$TEXT" "$JSONL" --tokenizer "$TOK" --output "$WORK/mix" \
    --doc-separator blank-line --threads 2 > "$WORK/build.txt"
grep -q "wrote $WORK/mix" "$WORK/build.txt" || fail "build summary missing"
for f in mix.bin mix.idx mix.meta.json; do [ -s "$WORK/$f" ] || fail "$f not written"; done

"$MS_DATA" inspect "$WORK/mix" > "$WORK/inspect.txt"
grep -q "^dtype       u16" "$WORK/inspect.txt" || fail "inspect: dtype"
grep -q "arithmetic.jsonl.zst: 3000 documents" "$WORK/inspect.txt" || fail "inspect: second source"
"$MS_DATA" inspect "$WORK/mix" --json > "$WORK/inspect.json"
grep -q '"vocab_size": 50257' "$WORK/inspect.json" || fail "inspect --json: tokenizer"

expect_exit 0 "every id below vocab 50257" "$MS_DATA" verify "$WORK/mix"
expect_exit 0 "OK" "$MS_DATA" verify "$WORK/mix" --tokenizer "$TOK"
expect_exit 0 "=== document 0 (" "$MS_DATA" dump "$WORK/mix" --docs 0:2
grep -q "First Citizen:" "$WORK/out" || fail "dump: first speech"
expect_exit 0 '"ids":\[' "$MS_DATA" dump "$WORK/mix" --docs 3 --format ids
[ "$(wc -l < "$WORK/out")" = 1 ] || fail "dump --docs 3 printed more than one line"

# Damage: an index one byte short, a .bin cut short, ids above a smaller vocabulary.
cp "$WORK/mix.bin" "$WORK/cut.bin"; head -c -1 "$WORK/mix.idx" > "$WORK/cut.idx"
expect_exit 1 "cut.idx: header counts" "$MS_DATA" verify "$WORK/cut"
cp "$WORK/mix.idx" "$WORK/short.idx"; head -c 1000 "$WORK/mix.bin" > "$WORK/short.bin"
expect_exit 1 "short.bin: is 1000 bytes" "$MS_DATA" inspect "$WORK/short"
expect_exit 1 "outside the vocabulary" "$MS_DATA" verify "$WORK/mix" --vocab-size 1000

# A malformed line fails the build naming file and line, and leaves no dataset.
printf '{"text": "fine"}\n{"text": broken}\n' > "$WORK/bad.jsonl"
expect_exit 1 "bad.jsonl:2: malformed JSON" "$MS_DATA" build -i "$WORK/bad.jsonl" -t "$TOK" -o "$WORK/bad"
[ ! -e "$WORK/bad.idx" ] || fail "failed build left an index"
expect_exit 0 "wrote" "$MS_DATA" build -i "$WORK/bad.jsonl" -t "$TOK" -o "$WORK/bad" --skip-bad-lines
grep -q '"skipped_lines": 1' "$WORK/bad.meta.json" || fail "skipped line not counted"
expect_exit 2 "error" "$MS_DATA" build -i "$WORK/bad.jsonl" -t "$TOK" -o "$WORK/bad" --dtype u8
# An empty text is a document with no sequence and no end-of-document token (as Megatron's
# preprocess_data.py writes it).
printf '{"text": "To be"}\n{"text": ""}\n{"text": "or not"}\n' > "$WORK/gaps.jsonl"
"$MS_DATA" build -i "$WORK/gaps.jsonl" -t "$TOK" -o "$WORK/gaps" --no-progress > /dev/null
"$MS_DATA" inspect "$WORK/gaps" > "$WORK/gaps.txt"
grep -q "^documents   3$" "$WORK/gaps.txt" || fail "inspect: empty document not counted"
grep -q "^sequences   2$" "$WORK/gaps.txt" || fail "inspect: an empty document got a sequence"
grep -q "^doc tokens  min 0," "$WORK/gaps.txt" || fail "inspect: empty document has tokens"

# Numbers a file claims are bounded: each refusal exits 1 naming the file and the field or
# position, within 1.5 GB of memory (ulimit) and a few seconds.
limited() { (ulimit -v 1572864; timeout 60 "$@"); }
if command -v python3 > /dev/null; then
  # An i64 dataset whose id 2^32 + 5 does not fit int32 (it would read as 5): every reader refuses.
  python3 - "$WORK/wide" <<'PY'
import struct, sys
ids = [464, 2**32 + 5, 13]
with open(sys.argv[1] + ".bin", "wb") as f:
    f.write(struct.pack("<3q", *ids))
with open(sys.argv[1] + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 5, 1, 2) + struct.pack("<i", 3)
            + struct.pack("<q", 0) + struct.pack("<2q", 0, 1))
PY
  for cmd in verify inspect dump; do
    expect_exit 1 "wide.bin: sequence 0 (document 0) token 1 .* holds id 4294967301" limited "$MS_DATA" $cmd "$WORK/wide"
  done
  printf 'seq_len: 2\ntotal_samples: 1\nsources:\n  - {name: wide, prefix: %s, weight: 1}\n' "$WORK/wide" > "$WORK/wide.yaml"
  expect_exit 1 "source 'wide'.*does not fit int32" limited "$MS_DATA" plan --config "$WORK/wide.yaml" --output "$WORK/wide.plan"
  # A tokenizer.json id of 2^31 - 1 (68 GB of id tables before the bound).
  python3 - "$TOK" "$WORK/huge-id.json" <<'PY'
import json, sys
tok = json.load(open(sys.argv[1]))
tok["model"]["vocab"]["Zzzzzz"] = 2147483647
json.dump(tok, open(sys.argv[2], "w"))
PY
  expect_exit 1 "huge-id.json': key 'model.vocab\[\"Zzzzzz\"\]' is id 2147483647" limited \
    "$MS_DATA" tokenizer encode --tokenizer "$WORK/huge-id.json" --text hi
  expect_exit 1 "huge-id.json" limited "$MS_DATA" build -i "$WORK/gaps.jsonl" -t "$WORK/huge-id.json" -o "$WORK/never"
fi
printf 'seq_len: 1099511627776\ntotal_samples: 1\nsources:\n  - {name: a, prefix: %s, weight: 1}\n' "$WORK/gaps" > "$WORK/long.yaml"
expect_exit 1 "seq_len" limited "$MS_DATA" plan --config "$WORK/long.yaml" --output "$WORK/long.plan"

echo "PASS: ms-data build/inspect/verify/dump"
