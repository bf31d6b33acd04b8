#!/usr/bin/env bash
# Builds the arithmetic task's RL prompt files (docs/rl.md) in OUT_DIR:
#   arithmetic_prompts_train.jsonl    the bundled corpus's 3000 stories as prompts (seed 12345):
#                                     what a model pretrained on arithmetic.jsonl.zst has seen
#   arithmetic_prompts_heldout.jsonl  HELDOUT prompts from another seed and the exact generator
#                                     (make_arithmetic_corpus.sh's rng "exact"), with every prompt
#                                     that also occurs in the training file removed, so held-out
#                                     accuracy is measured on problems never seen in training
#   usage: data/corpus/make_arithmetic_prompts.sh OUT_DIR [heldout_count] [heldout_seed]
#                 [train_count 3000] [train_seed 12345] [train_rng legacy] [ops 2-5] [start 10-99]
#                 [exclude]
# The optional last five choose another training set: train_count stories from train_seed with
# make_arithmetic_corpus.sh's rng train_rng, ops operations per story and starting numbers in
# start (the held-out prompts then use the same ops and start ranges). scripts/bench/rl_arithmetic.sh pretrains on the same stories
# (make_arithmetic_corpus.sh with the same arguments, form text), so "removed from the held-out
# file" covers both pretraining and RL. Left out, they give the bundled corpus as above.
# exclude, a JSON-lines prompt file, drops its prompts from the held-out file too: the benchmark
# draws its fresh RL prompts this way, apart from both the training stories and its held-out set.
# Deterministic: the same arguments write the same files.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 OUT_DIR [heldout_count] [heldout_seed]" >&2
  exit 2
fi
out="$1"
count="${2:-500}"
heldout_seed="${3:-20261206}"
train_count="${4:-3000}"
train_seed="${5:-12345}"
train_rng="${6:-legacy}"
ops="${7:-2-5}"
start="${8:-10-99}"
exclude="${9:-}"
if [[ -n "$exclude" && ! -r "$exclude" ]]; then
  echo "$0: the exclude file '$exclude' cannot be read" >&2
  exit 2
fi
if [[ "$heldout_seed" == "$train_seed" ]]; then
  echo "$0: the held-out seed must differ from the training corpus's ($train_seed)" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$out"
train="$out/arithmetic_prompts_train.jsonl"
heldout="$out/arithmetic_prompts_heldout.jsonl"
bash "$here/make_arithmetic_corpus.sh" "$train_count" "$train_seed" prompts "$train_rng" "$ops" "$start" > "$train"
# Draw twice what is asked so that removing the few prompts shared with training still leaves
# enough; the prompt is the text between "prompt": " and ", "answer".
bash "$here/make_arithmetic_corpus.sh" $((count * 2)) "$heldout_seed" prompts exact "$ops" "$start" |
  awk -v want="$count" -v train="$train" -v exclude="$exclude" '
    function prompt_of(line) { sub(/^.*"prompt": "/, "", line); sub(/", "answer".*$/, "", line); return line }
    BEGIN {
      while ((getline line < train) > 0) seen[prompt_of(line)] = 1
      if (exclude != "") while ((getline line < exclude) > 0) seen[prompt_of(line)] = 1
    }
    {
      p = prompt_of($0)
      if (p in seen) { dropped++; next }
      seen[p] = 1  # a prompt drawn twice counts once
      if (kept < want) { kept++; print }
    }
    END {
      if (kept < want) { printf("held-out split: only %d of %d prompts are new\n", kept, want) > "/dev/stderr"; exit 1 }
      printf("held-out split: %d prompts, %d dropped as seen in training%s\n", kept, dropped + 0,
             exclude != "" ? " or in " exclude : "") > "/dev/stderr"
    }' > "$heldout"
