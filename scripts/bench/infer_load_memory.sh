#!/usr/bin/env bash
# Peak memory and time of loading a model to serve it, per way of getting quantized weights:
# the f32 model as stored, the f32 model with --weights int8 / int4 converted at load, and a
# directory `ms-infer quantize` wrote (int4). Each row is one `ms-infer generate` of a single
# 8-token completion under /usr/bin/time -v (peak RSS, wall time), beside the bytes of the
# model file, so the peak reads against what the weights need. The KV cache is cut to 16 blocks
# (--kv-blocks 16, 34 MB on the 1b model) so the peak is the weights' and the load's: the
# default 1024 blocks preallocate 2.1 GB there. The same random dense model as
# infer_decode_bound.sh (MODEL=1b: about 960 M parameters, 3.8 GB in f32; MODEL=290m).
# Usage: [MODEL=1b|290m] scripts/bench/infer_load_memory.sh <build dir> [model writer's bin dir]
#   Results go in docs/bench/infer.md ("Memory while loading").
set -euo pipefail
BUILD=${1:-build}
TOOLS=${2:-$BUILD/bin}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2} MS_NUM_THREADS=${MS_NUM_THREADS:-2}
[ -x "$BUILD/bin/ms-infer" ] || { echo "no $BUILD/bin/ms-infer" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), MemTotal $(awk '/MemTotal/ {print $2 / 1e6 " GB"}' /proc/meminfo)"
source "$SRC/scripts/bench/bench_model.sh"
write_bench_model "${MODEL:-1b}" "$TOOLS" "$work/f32"
"$BUILD/bin/ms-infer" quantize --model "$work/f32" -o "$work/q4" --weights int4 --group-size 64 \
  2> /dev/null

mb() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1e6 }'; }
echo
echo "| load | model file MB | peak RSS MB | peak / file | wall s | weights held MB |"
echo "|---|---:|---:|---:|---:|---:|"
row() {
  local label=$1 dir=$2
  shift 2
  /usr/bin/time -v "$BUILD/bin/ms-infer" generate --model "$dir" --prompt "The king" \
    --max-tokens 8 --kv-blocks 16 --max-batch 1 "$@" > "$work/out.txt" 2> "$work/err.txt" || { cat "$work/err.txt" >&2; exit 1; }
  local file rss wall held
  file=$(stat -c %s "$dir/model.safetensors")
  rss=$(awk '/Maximum resident set size/ {print $NF * 1024}' "$work/err.txt")
  wall=$(awk '/Elapsed \(wall clock\)/ {n = split($NF, t, ":"); s = 0; for (i = 1; i <= n; ++i) s = s * 60 + t[i]; print s}' "$work/err.txt")
  held=$(grep -o '[0-9.]* MB of weights held' "$work/err.txt" | head -1 | cut -d' ' -f1)
  printf "| %s | %s | %s | %.2f | %.1f | %s |\n" "$label" "$(mb "$file")" "$(mb "$rss")" \
    "$(awk -v r="$rss" -v f="$file" 'BEGIN { print r / f }')" "$wall" "${held:-?}"
}
row "f32 as stored" "$work/f32"
row "f32 file, --weights int8" "$work/f32" --weights int8
row "f32 file, --weights int4 (g64)" "$work/f32" --weights int4 --group-size 64
row "int4 (g64) directory from ms-infer quantize" "$work/q4"
