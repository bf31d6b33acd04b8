#!/usr/bin/env bash
# Tokenizer encoding speed, ours against js-tiktoken on the same text in the same run.
#   scripts/bench/tokenizer_bench.sh [build dir] [text file]
# Builds ms_tokenizer_bench in the build dir (configured with -DMS_BUILD_BENCH=ON), runs it for
# 1 and 2 threads, then js-tiktoken when node is installed: JS_TIKTOKEN_DIR names a directory
# with node_modules/js-tiktoken, or one is installed into a temporary directory with npm.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
text=${2:-/work/shared/data/tinyshakespeare.txt}
cmake --build "$build" --target ms_tokenizer_bench -j2 >/dev/null
(cd "$root" && "$build/bin/ms_tokenizer_bench" data/tokenizers/gpt2/tokenizer.json "$text" 5 1 2)
if ! command -v node >/dev/null; then
  echo "# node not found: js-tiktoken peer skipped"
  exit 0
fi
js_dir=${JS_TIKTOKEN_DIR:-}
if [[ -z "$js_dir" ]]; then
  js_dir=$(mktemp -d)
  trap 'rm -rf "$js_dir"' EXIT
  (cd "$js_dir" && npm init -y >/dev/null && npm install --silent js-tiktoken >/dev/null)
fi
(cd "$js_dir" && node "$root/scripts/bench/tokenizer_bench_js.mjs" "$text" 5)
