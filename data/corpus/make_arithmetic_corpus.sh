#!/usr/bin/env bash
# Writes arithmetic.jsonl: a small synthetic corpus of short arithmetic stories, one JSON object
# per line ({"id": n, "text": "..."}), as the toolkit's second bundled source next to Tiny
# Shakespeare. Generated text (no copyright), deterministic (a fixed linear congruential
# generator), so re-running it reproduces the committed file byte for byte.
#   usage: data/corpus/make_arithmetic_corpus.sh [documents] [seed] [form] [rng] [ops] [start] > out.jsonl
# seed defaults to 12345 (the committed corpus). rng "legacy" (the default) is the committed
# corpus's generator: awk computes seed * 1103515245 in doubles, which round past 2^53, and the
# stream falls into a short cycle (3000 documents hold 1148 distinct stories); "exact" keeps the
# product exact (split in two halves), so draws stay distinct for far longer. Held-out prompts
# use it. form is "text" (the default: whole stories) or
# "prompts": the same stories cut at the question, for RL post-training (docs/rl.md):
# {"id": n, "prompt": "... How many plums does Mia have now?", "answer": "34"}; the model is to
# continue with " Mia has 34 plums.". make_arithmetic_prompts.sh builds the train and held-out
# prompt files from this form. ops is the range of operations per story, "MIN-MAX" (default
# "2-5", the committed corpus); "1-2" gives easier stories. start is the range of the number a
# story starts from, "MIN-MAX" (default "10-99", the committed corpus); a narrower range means
# fewer distinct sums (scripts/bench/rl_arithmetic.sh).
# The default arguments write the committed corpus byte for byte.
set -euo pipefail
form="${3:-text}"
rng="${4:-legacy}"
if [[ "$rng" != legacy && "$rng" != exact ]]; then
  echo "make_arithmetic_corpus.sh: rng must be 'legacy' or 'exact', got '$rng'" >&2
  exit 2
fi
ops="${5:-2-5}"
if [[ ! "$ops" =~ ^([1-9])-([1-9])$ ]] || (( BASH_REMATCH[1] > BASH_REMATCH[2] )); then
  echo "make_arithmetic_corpus.sh: ops must be MIN-MAX with 1 <= MIN <= MAX <= 9, got '$ops'" >&2
  exit 2
fi
ops_min="${BASH_REMATCH[1]}"
ops_max="${BASH_REMATCH[2]}"
start="${6:-10-99}"
if [[ ! "$start" =~ ^([0-9]+)-([0-9]+)$ ]] || (( BASH_REMATCH[1] < 10 || BASH_REMATCH[1] > BASH_REMATCH[2] )); then
  echo "make_arithmetic_corpus.sh: start must be MIN-MAX with 10 <= MIN <= MAX, got '$start'" >&2
  exit 2
fi
start_min="${BASH_REMATCH[1]}"
start_max="${BASH_REMATCH[2]}"
if [[ "$form" != text && "$form" != prompts ]]; then
  echo "make_arithmetic_corpus.sh: form must be 'text' or 'prompts', got '$form'" >&2
  exit 2
fi
awk -v n="${1:-3000}" -v seed="${2:-12345}" -v form="$form" -v exact="$([[ $rng == exact ]] && echo 1 || echo 0)" \
    -v ops_min="$ops_min" -v ops_max="$ops_max" -v start_min="$start_min" -v start_max="$start_max" 'BEGIN {
  split("Anna Ben Chloe David Emma Felix Grace Hugo Iris Jonas Kira Liam Mia Noah Olga Pavel", names, " ");
  split("apples pears coins books stones shells cards marbles plums buttons", things, " ");
  split("gives away|loses|sells|eats|hides", verbs_sub, "|");
  split("finds|buys|receives|picks up|wins", verbs_add, "|");
  for (d = 0; d < n; d++) {
    who = names[rnd(16) + 1]; what = things[rnd(10) + 1];
    have = rnd(start_max - start_min + 1) + start_min;
    text = who " has " have " " what ".";
    steps = rnd(ops_max - ops_min + 1) + ops_min;
    for (s = 0; s < steps; s++) {
      k = rnd(9) + 1;
      if (rnd(2) == 0 && have > k) { have -= k; text = text " Then " who " " verbs_sub[rnd(5) + 1] " " k "."; }
      else { have += k; text = text " Then " who " " verbs_add[rnd(5) + 1] " " k " more."; }
    }
    question = text " How many " what " does " who " have now?";
    if (form == "prompts") printf("{\"id\": %d, \"prompt\": \"%s\", \"answer\": \"%d\"}\n", d, question, have);
    else printf("{\"id\": %d, \"text\": \"%s\"}\n", d, question " " who " has " have " " what ".");
  }
}
function rnd(m) {
  if (exact) seed = ((seed * 16838) % 32768 * 65536 + seed * 20077 + 12345) % 2147483648;  # 1103515245 = 16838 * 65536 + 20077
  else seed = (seed * 1103515245 + 12345) % 2147483648;
  return int(seed / 65536) % m;
}'
