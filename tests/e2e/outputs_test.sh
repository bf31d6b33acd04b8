#!/usr/bin/env bash
# Nothing lost, nothing shared by accident (docs/io.md, "Outputs"): every tool that writes a
# directory or a file beside what it read refuses an output that is, contains or is inside one
# of its inputs, refuses an existing output unless --replace is given, and with --replace swaps
# the whole output (no old file survives beside the new ones). Deletion never follows a link:
# `ms-ckpt prune` leaves a step directory that is a link (and the other run it points into)
# alone. Every input and the other run's files are hashed before and after: nothing changes.
# Usage: outputs_test.sh <bin dir> <source dir> <make_tiny_model binary>
set -euo pipefail
BIN=$1
SRC=$2
MAKE=$3
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export OPENBLAS_NUM_THREADS=1

# refused <name> <exit code> <pattern> -- <command...>: the exit code, an "error:" line naming
# the pattern, under 60 s and 1.5 GB.
refused() {
  local name=$1 want=$2 pattern=$3 rc=0
  shift 4
  ( ulimit -v 1500000; timeout 60 "$@" ) > "$work/$name.out" 2> "$work/$name.err" || rc=$?
  [ "$rc" = "$want" ] || { cat "$work/$name.err"; fail "$name exited $rc, wanted $want"; }
  grep -q ": error: " "$work/$name.err" || fail "$name: no error line: $(cat "$work/$name.err")"
  grep -qF -- "$pattern" "$work/$name.err" || fail "$name: no '$pattern': $(cat "$work/$name.err")"
}
# hashes <dir>...: one line per file below the directories, links not followed.
hashes() { find "$@" -type f -print0 | sort -z | xargs -0 sha256sum; }

tok="$SRC/data/tokenizers/gpt2/tokenizer.json"
"$MAKE" --dir "$work/model" --tokenizer "$tok" --d-model 32 --layers 1 --heads 2 --kv-heads 1 \
  --d-ff 64 --max-seq-len 32 > /dev/null
"$BIN/ms-ckpt" import "$work/model" -o "$work/run/checkpoints" > /dev/null 2>&1 ||
  fail "import"
ckpt="$work/run/checkpoints/step-00000000"
printf 'ROMEO: what light through yonder window breaks\n\nJULIET: it is the east\n' > "$work/a.txt"
hashes "$work/model" "$work/run" "$work/a.txt" "$tok" > "$work/before.sha"

# --- ms-infer quantize ---
refused quantize-onto-model 1 "--output $work/model is the input $work/model" -- \
  "$BIN/ms-infer" quantize --model "$work/model" -o "$work/model" --weights int8
refused quantize-into-model 1 "is inside the input $work/model" -- \
  "$BIN/ms-infer" quantize --model "$work/model" -o "$work/model/q" --weights int8
refused quantize-around-model 1 "contains the input" -- \
  "$BIN/ms-infer" quantize --model "$work/model" -o "$work" --weights int8
refused quantize-into-checkpoint 1 "is inside the input" -- \
  "$BIN/ms-infer" quantize --checkpoint "$work/run/checkpoints/latest" -o "$ckpt/q" --weights int8
ln -s "$work/model" "$work/model-link"
refused quantize-onto-link 1 "is the input" -- \
  "$BIN/ms-infer" quantize --model "$work/model" -o "$work/model-link" --weights int8
mkdir -p "$work/q"
echo stale > "$work/q/stale.txt"
refused quantize-non-empty 1 "exists and is not empty" -- \
  "$BIN/ms-infer" quantize --model "$work/model" -o "$work/q" --weights int8
[ "$(cat "$work/q/stale.txt")" = stale ] || fail "a refused quantize touched the old output"
"$BIN/ms-infer" quantize --model "$work/model" -o "$work/q" --weights int8 --replace 2> /dev/null ||
  fail "quantize --replace"
[ ! -e "$work/q/stale.txt" ] || fail "--replace kept a file of the old output beside the new"
[ -f "$work/q/tokenizer.json" ] && [ -f "$work/q/config.json" ] || fail "quantized directory incomplete"
"$BIN/ms-infer" quantize --model "$work/model" -o "$work/q-fresh/" --weights int4 --group-size 32 2> /dev/null ||
  fail "quantize into a new directory named with a trailing slash"
ls "$work" | grep -q '\.tmp\.' && fail "a temporary was left: $(ls "$work")"

# --- ms-ckpt export / import / reshard ---
refused export-into-checkpoint 1 "is inside the input" -- \
  "$BIN/ms-ckpt" export "$ckpt" -o "$ckpt/hf"
refused export-non-empty 1 "exists and is not empty" -- "$BIN/ms-ckpt" export "$ckpt" -o "$work/q"
echo stale > "$work/q/stale.txt"
"$BIN/ms-ckpt" export "$ckpt" -o "$work/q" --replace > /dev/null || fail "export --replace"
[ -f "$work/q/config.json" ] && [ ! -e "$work/q/stale.txt" ] || fail "export --replace output"
refused import-into-model 1 "is inside the input" -- \
  "$BIN/ms-ckpt" import "$work/model" -o "$work/model/checkpoints"
refused import-existing-step 1 "step-00000000 exists and is not empty" -- \
  "$BIN/ms-ckpt" import "$work/model" -o "$work/run/checkpoints"
refused reshard-onto-source 1 "contains the input" -- \
  "$BIN/ms-ckpt" reshard "$ckpt" --to dp=2 -o "$work/run/checkpoints"
refused reshard-into-source 1 "is inside the input" -- \
  "$BIN/ms-ckpt" reshard "$ckpt" --to dp=2 -o "$ckpt/out"
"$BIN/ms-ckpt" reshard "$ckpt" --to dp=2 -o "$work/resharded" > /dev/null || fail "reshard"
refused reshard-existing 1 "exists and is not empty" -- \
  "$BIN/ms-ckpt" reshard "$ckpt" --to dp=2 -o "$work/resharded"
"$BIN/ms-ckpt" reshard "$ckpt" --to tp=1,dp=1 -o "$work/resharded" --replace > /dev/null ||
  fail "reshard --replace"
grep -q '"dp": *1' "$work/resharded/step-00000000/manifest.json" || fail "reshard --replace layout"
ls "$work/resharded" | grep -q '\.old\.\|\.tmp\.' && fail "reshard left: $(ls "$work/resharded")"

# --- ms-data build / plan ---
cp "$tok" "$work/t.meta.json"
refused build-over-tokenizer 1 "is the input $work/t.meta.json" -- \
  "$BIN/ms-data" build -i "$work/a.txt" -t "$work/t.meta.json" -o "$work/t" --threads 1 \
  --no-progress
mkdir -p "$work/corpus"
cp "$work/a.txt" "$work/corpus/"
refused build-into-corpus 1 "is inside the input $work/corpus" -- \
  "$BIN/ms-data" build -i "$work/corpus" -t "$tok" -o "$work/corpus/ds" --threads 1 --no-progress
"$BIN/ms-data" build -i "$work/a.txt" -t "$tok" -o "$work/ds" --threads 1 --no-progress \
  --doc-separator blank-line > /dev/null || fail "build"
refused build-existing 1 "already exists" -- \
  "$BIN/ms-data" build -i "$work/a.txt" -t "$tok" -o "$work/ds" --threads 1 --no-progress
"$BIN/ms-data" build -i "$work/a.txt" -t "$tok" -o "$work/ds" --threads 1 --no-progress \
  --doc-separator blank-line --replace > /dev/null || fail "build --replace"
printf 'seq_len: 4\ntotal_samples: 4\nvalidation: {fraction: 0, samples: 0}\nsources:\n  - {name: a, prefix: %s, weight: 1}\n' \
  "$work/ds" > "$work/mix.yaml"
refused plan-onto-dataset 1 "is the input $work/ds.bin" -- \
  "$BIN/ms-data" plan --config "$work/mix.yaml" -o "$work/ds.bin"
refused plan-onto-config 1 "is the input" -- \
  "$BIN/ms-data" plan --config "$work/mix.yaml" -o "$work/mix.yaml"
"$BIN/ms-data" plan --config "$work/mix.yaml" -o "$work/mix.plan" > /dev/null || fail "plan"
refused plan-existing 1 "already exists" -- \
  "$BIN/ms-data" plan --config "$work/mix.yaml" -o "$work/mix.plan"
"$BIN/ms-data" plan --config "$work/mix.yaml" -o "$work/mix.plan" --replace > /dev/null ||
  fail "plan --replace"

# --- ms-infer generate: completions never overwrite the prompts ---
echo '{"prompt": "ROMEO:", "max_tokens": 2}' > "$work/prompts.jsonl"
refused generate-onto-prompts 1 "is the input" -- \
  "$BIN/ms-infer" generate --model "$work/model" --prompts "$work/prompts.jsonl" \
  -o "$work/prompts.jsonl" --no-progress
grep -q ROMEO "$work/prompts.jsonl" || fail "generate touched its prompts"

# --- deletion never follows a link ---
# runs/other holds another run's checkpoint; a link to it is planted as an old step of this
# run, and a temporary name links to another of its directories. prune keeps the link (it
# reports it) and unlinks the temporary without entering it.
mkdir -p "$work/other/checkpoints"
cp -r "$ckpt" "$work/other/checkpoints/step-00000003"
echo keep > "$work/other/notes.txt"
for s in 7 9; do "$BIN/ms-ckpt" import "$work/model" -o "$work/run/checkpoints" --step $s \
  > /dev/null 2>&1 || fail "import step $s"; done
ln -s "$work/other/checkpoints/step-00000003" "$work/run/checkpoints/step-00000001"
ln -s "$work/other" "$work/run/checkpoints/.tmp-step-00000004-1"
hashes "$work/other" > "$work/other.sha"
"$BIN/ms-ckpt" prune "$work/run/checkpoints" --keep 1 --temporaries > "$work/prune.out" ||
  fail "prune: $(cat "$work/prune.out")"
grep -q "left alone: $work/run/checkpoints/step-00000001 is a symbolic link" "$work/prune.out" ||
  fail "prune did not report the link: $(cat "$work/prune.out")"
[ -L "$work/run/checkpoints/step-00000001" ] || fail "prune removed the linked step"
[ ! -e "$work/run/checkpoints/.tmp-step-00000004-1" ] || fail "prune kept the linked temporary"
[ ! -e "$work/run/checkpoints/step-00000000" ] && [ ! -e "$work/run/checkpoints/step-00000007" ] ||
  fail "prune kept an old checkpoint"
hashes "$work/other" | diff - "$work/other.sha" > /dev/null || fail "prune changed the other run"

# Nothing any refusal read was changed (the prune above removed steps 0 and 7 by design, so the
# model and the plain text are compared, and the other run).
hashes "$work/model" "$work/a.txt" "$tok" | diff - <(grep -v "$work/run/" "$work/before.sha") > /dev/null ||
  fail "an input changed"
echo "PASS"
