#!/usr/bin/env bash
# Writes arithmetic.jsonl: a small synthetic corpus of short arithmetic stories, one JSON object
# per line ({"id": n, "text": "..."}), as the toolkit's second bundled source next to Tiny
# Shakespeare. Generated text (no copyright), deterministic (a fixed linear congruential
# generator), so re-running it reproduces the committed file byte for byte.
#   usage: data/corpus/make_arithmetic_corpus.sh [documents] > data/corpus/arithmetic.jsonl
set -euo pipefail
awk -v n="${1:-3000}" 'BEGIN {
  split("Anna Ben Chloe David Emma Felix Grace Hugo Iris Jonas Kira Liam Mia Noah Olga Pavel", names, " ");
  split("apples pears coins books stones shells cards marbles plums buttons", things, " ");
  split("gives away|loses|sells|eats|hides", verbs_sub, "|");
  split("finds|buys|receives|picks up|wins", verbs_add, "|");
  seed = 12345;
  for (d = 0; d < n; d++) {
    who = names[rnd(16) + 1]; what = things[rnd(10) + 1];
    have = rnd(90) + 10;
    text = who " has " have " " what ".";
    steps = rnd(4) + 2;
    for (s = 0; s < steps; s++) {
      k = rnd(9) + 1;
      if (rnd(2) == 0 && have > k) { have -= k; text = text " Then " who " " verbs_sub[rnd(5) + 1] " " k "."; }
      else { have += k; text = text " Then " who " " verbs_add[rnd(5) + 1] " " k " more."; }
    }
    text = text " How many " what " does " who " have now? " who " has " have " " what ".";
    printf("{\"id\": %d, \"text\": \"%s\"}\n", d, text);
  }
}
function rnd(m) { seed = (seed * 1103515245 + 12345) % 2147483648; return int(seed / 65536) % m; }'
