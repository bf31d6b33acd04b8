#!/usr/bin/env bash
# Tokenizer encoding speed, ours against tiktoken and js-tiktoken on the same text in the same run.
#   scripts/bench/tokenizer_bench.sh [build dir] [text file]
# Builds ms_tokenizer_bench and ms-data in the build dir (configured with -DMS_BUILD_BENCH=ON),
# runs the library bench for 1 and 2 threads, then, when node is installed, the same documents
# through tiktoken 1.0.22 (npm: the WASM build of the Rust core that Python's tiktoken wraps)
# and js-tiktoken (a pure JavaScript port): JS_TIKTOKEN_DIR names a directory with both in
# node_modules, or they are installed into a temporary directory with npm. Then the whole
# command, as a user runs it: `ms-data tokenizer encode --format lines` of the text three times
# over (3.3 MB for Tiny Shakespeare) on one core (taskset), from start to exit, beside each
# peer's whole process doing the same (tokenizer_encode_js.mjs), alternated, best of REPS
# (default 5) by wall and by CPU time (user + sys, which a loaded machine inflates less), the
# load average with each, and the ids of all three compared.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
text=${2:-/work/shared/data/tinyshakespeare.txt}
cmake --build "$build" --target ms-data -j2 >/dev/null
if grep -q '^MS_BUILD_BENCH:BOOL=ON' "$build/CMakeCache.txt"; then
  cmake --build "$build" --target ms_tokenizer_bench -j2 >/dev/null
  (cd "$root" && "$build/bin/ms_tokenizer_bench" data/tokenizers/gpt2/tokenizer.json "$text" 5 1 2)
else
  echo "# library bench skipped: $build is not configured with -DMS_BUILD_BENCH=ON"
fi
if ! command -v node >/dev/null; then
  echo "# node not found: js-tiktoken peer skipped"
  exit 0
fi
js_dir=${JS_TIKTOKEN_DIR:-}
if [[ -z "$js_dir" ]]; then
  js_dir=$(mktemp -d)
  trap 'rm -rf "$js_dir"' EXIT
  (cd "$js_dir" && npm init -y >/dev/null && npm install --silent tiktoken@1.0.22 js-tiktoken >/dev/null)
fi
peers=(tiktoken js-tiktoken)
for peer in "${peers[@]}"; do
  (cd "$js_dir" && node "$root/scripts/bench/tokenizer_bench_js.mjs" "$text" 5 "$peer")
done

work=$(mktemp -d)
if [[ -z "${JS_TIKTOKEN_DIR:-}" ]]; then
  trap 'rm -rf "$work" "$js_dir"' EXIT
else
  trap 'rm -rf "$work"' EXIT
fi
cat "$text" "$text" "$text" > "$work/text.txt"
mb=$(stat -c %s "$work/text.txt" | awk '{print $1 / 1e6}')
core=$(($(nproc) - 1))
# One timed run: prints "wall | cpu" seconds; the ids go to $1.
time_run() {
  local out=$1
  shift
  /usr/bin/time -f "%e %U %S" -o "$work/time.txt" taskset -c "$core" "$@" < "$work/text.txt" > "$out"
  awk '{printf "%.3f | %.3f\n", $1, $2 + $3}' "$work/time.txt"
}
echo
echo "# whole command, $mb MB, core $core, ${REPS:-5} runs each alternated, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "| run | ms-data wall s | ms-data CPU s | tiktoken wall s | tiktoken CPU s | js-tiktoken wall s | js-tiktoken CPU s | load |"
echo "|---:|---:|---:|---:|---:|---:|---:|---|"
for i in $(seq 1 "${REPS:-5}"); do
  row="| $i | $(time_run "$work/ours.txt" "$build/bin/ms-data" tokenizer encode \
    --tokenizer "$root/data/tokenizers/gpt2/tokenizer.json" --format lines)"
  for peer in "${peers[@]}"; do
    row+=" | $(cd "$js_dir" && time_run "$work/$peer.txt" node \
      "$root/scripts/bench/tokenizer_encode_js.mjs" "$work/text.txt" "$peer")"
  done
  echo "$row | $(cut -d' ' -f1-3 /proc/loadavg) |" | tee -a "$work/rows.txt"
done
for peer in "${peers[@]}"; do
  if cmp -s "$work/ours.txt" "$work/$peer.txt"; then
    echo "ids against $peer: identical ($(wc -l < "$work/ours.txt") tokens)"
  else
    echo "ids against $peer: DIFFER ($(wc -l < "$work/ours.txt") against $(wc -l < "$work/$peer.txt") lines)"
  fi
done
awk -F'|' -v mb="$mb" '
  function best(v, c) { return (v < c || c == 0) ? v : c }
  { ow = best($3 + 0, ow); oc = best($4 + 0, oc); tw = best($5 + 0, tw); tc = best($6 + 0, tc)
    jw = best($7 + 0, jw); jc = best($8 + 0, jc) }
  END {
    printf "best: ms-data %.2f MB/s wall, %.2f MB/s CPU; ", mb / ow, mb / oc
    printf "tiktoken %.2f MB/s wall (%.2fx), %.2f MB/s CPU (%.2fx); ", mb / tw, tw / ow, mb / tc, tc / oc
    printf "js-tiktoken %.2f MB/s wall (%.2fx), %.2f MB/s CPU (%.2fx)\n", mb / jw, jw / ow, mb / jc, jc / oc }' "$work/rows.txt"
