#!/usr/bin/env bash
# Decode at batch 1 against the read-bandwidth bound, for every serving weight format, on a
# random Llama-shaped dense model (GPT-2 vocabulary, written by ms_infer_make_tiny_model; by
# default MODEL=1b, about 960 M parameters: d_model 2048, 16 layers, d_ff 5632; MODEL=290m the
# smaller one): `ms-infer bench --weights f32|bf16|int8|int4` gives decode steps/s, the bound
# (the read bandwidth its probe measures in the same bench with the decode's threads, over the
# bytes a step reads: the weights in that format with their scales, the KV cache at the mean
# context, the embedding row), the same over the one-thread STREAM copy figure (labelled, for
# comparison with earlier runs) and prefill GFLOP/s. PyTorch on the CPU (Debian's
# python3-torch, when present) runs the same model directory with the same thread count in the
# same run, with its weights in f32, bf16 and int8 (infer_bench_torch.py --weights), each set
# beside ms-infer's decode in that format. Each format's sweep runs REPS times (default 3):
# the table keeps the fastest decode, as the probes keep their best of 5, and the
# min/median/max follow it. The load average is printed before each format, as the machine may
# be shared.
# (Named infer_quant_decode.sh, with the copy bound, before issue 49.)
# Usage: [MODEL=290m|1b] scripts/bench/infer_decode_bound.sh <build dir> [threads] [model writer's bin dir]
#   The model writer is a test tool: pass a test build's bin dir when <build dir> is a
#   benchmark build without tests. Results go in docs/bench/infer.md.
set -euo pipefail
BUILD=${1:-build}
THREADS=${2:-${OPENBLAS_NUM_THREADS:-2}}
TOOLS=${3:-$BUILD/bin}
export OPENBLAS_NUM_THREADS=$THREADS MS_NUM_THREADS=$THREADS
SRC=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "$BUILD/bin/ms-infer" ] || { echo "no $BUILD/bin/ms-infer: build ms-infer there first" >&2; exit 1; }
PP=64
TG=64
REPS=${REPS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $THREADS threads, load $(cut -d' ' -f1-3 /proc/loadavg)"
source "$SRC/scripts/bench/bench_model.sh"
write_bench_model "${MODEL:-1b}" "$TOOLS" "$work/model"

# One bench per format; the B=1 row of its sweep and the bound line above it.
summary="$work/summary.txt"
: > "$summary"
# int8 and int4 multiply int8 activations (the default); a "/f32" spec multiplies f32 ones.
for spec in f32 bf16 int8 int8/f32 int4:32 int4:64 int4:128 int4:64/f32; do
  activations=int8
  if [ "${spec%/f32}" != "$spec" ]; then activations=f32; spec=${spec%/f32}; fi
  format=${spec%%:*}
  flags=(--weights "$format" --activations "$activations")
  label=$format
  if [ "$format" = int4 ]; then
    flags+=(--group-size "${spec#*:}")
    label="int4-g${spec#*:}"
  fi
  case $format in int8 | int4) label="$label x $activations act" ;; esac
  echo "== $label (load $(cut -d' ' -f1-3 /proc/loadavg))"
  "$BUILD/bin/ms-infer" bench --model "$work/model" "${flags[@]}" --num-prompts 1 \
    --input-len $PP --output-len $TG --batch-sizes 1 --stream-mib 256 --repetitions "$REPS" \
    > "$work/$label.txt"
  grep -E '^read bandwidth|^weight bytes|^\||runs:' "$work/$label.txt"
  awk -F'|' -v label="$label" '
    /^read bandwidth/ {
      match($0, /\): [0-9.]+ GB\/s;/); rd = substr($0, RSTART + 3, RLENGTH - 9)
      match($0, /counted\): [0-9.]+ GB\/s/); cp = substr($0, RSTART + 10, RLENGTH - 15) }
    /^weight bytes/ {
      match($0, /step: [0-9.]+ MB/); mb = substr($0, RSTART + 6, RLENGTH - 9)
      match($0, /sequence: [0-9.]+ MB/); kv = substr($0, RSTART + 10, RLENGTH - 13) }
    /^B=1: decode steps\/s over/ { spread = $0; sub(/^B=1: decode steps\/s over /, "", spread) }
    $2 + 0 > 0 && $4 + 0 == 1 { steps = $10 + 0; share = $11; gflops = $14 + 0; copy = $15 }
    END {
      gsub(/ /, "", share); gsub(/ /, "", copy)
      printf "| %s | %.1f | %.1f | %.2f | %.2f | %.1f | %s | %s | %s | %.1f |\n", label, mb, kv,
        rd, cp, steps, share, copy, spread, gflops }
  ' "$work/$label.txt" >> "$summary"
done

echo
echo "| weights | weight MB per step | KV cache MB per step | read GB/s (${THREADS} threads) | copy GB/s (1 thread) | decode steps/s, B=1 (best) | of read bound | of copy bound | spread | prefill GFLOP/s, B=1 |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"
cat "$summary"

# Column $2 (| separated, as numbered by awk -F'|') of the summary row labelled $1.
row_field() {
  awk -F'|' -v label="$1" -v col="$2" '{ l = $2; gsub(/^ +| +$/, "", l) } l == label { print $col + 0 }' "$summary"
}

if /usr/bin/python3 -c 'import torch' 2> /dev/null; then
  version=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')
  # PyTorch with its weights in f32, bf16 and int8 (its oneDNN dynamic quantized linear, int8
  # activations per call), each beside ms-infer's row of that format from the table above.
  for format in f32 bf16 int8; do
    label=$format
    [ "$format" = int8 ] && label="int8 x int8 act"
    echo
    echo "-- pytorch $version, $format weights, $THREADS threads, the same model directory (load $(cut -d' ' -f1-3 /proc/loadavg))"
    /usr/bin/python3 "$SRC/scripts/bench/infer_bench_torch.py" --model "$work/model" --weights "$format" \
      --threads "$THREADS" --input-len $PP --output-len $TG --batch-sizes 1 | tee "$work/torch.txt"
    ours=$(row_field "$label" 7)
    awk -v format="$format" -v ours="$ours" '$1 == "torch_sweep" {
      theirs = ($7 - 1) / $13
      printf "pytorch %s: decode %.1f steps/s (B=1); ms-infer %.1f, %.2fx pytorch\n", format, theirs, ours, ours / theirs }' \
      "$work/torch.txt"
  done
else
  echo "pytorch: python3-torch not installed; no comparison"
fi

# llama.cpp (node-llama-cpp's prebuilt CPU binaries from the npm registry, installed once into
# a cache) on the same weights written as GGUF (llamacpp_gguf.py) in f32, q8_0 and q4_0, each
# beside ms-infer's row of the nearest format: q8_0 is 8.5 bits a weight against int8's 8, q4_0
# 4.5 against int4-g64's 4.5. Its share is of the read bandwidth ms-infer's row measured, over
# its own bytes a step: its weights as written, plus its KV cache in f16 (llama.cpp's default,
# half of ms-infer's f32 cache bytes). LLAMACPP=0 skips it.
if [ "${LLAMACPP:-1}" = 1 ] && command -v node > /dev/null && command -v npm > /dev/null &&
  /usr/bin/python3 -c 'import numpy, torch' 2> /dev/null; then
  nlc=${XDG_CACHE_HOME:-$HOME/.cache}/ms-bench/node-llama-cpp-3.22.1
  if [ ! -f "$nlc/node_modules/node-llama-cpp/dist/index.js" ]; then
    mkdir -p "$nlc"
    npm install --prefix "$nlc" --no-audit --no-fund --ignore-scripts node-llama-cpp@3.22.1 > "$work/npm.log" 2>&1 ||
      { echo "llama.cpp: npm install of node-llama-cpp failed (see below); no comparison"; tail -5 "$work/npm.log"; }
  fi
  if [ -f "$nlc/node_modules/node-llama-cpp/dist/index.js" ]; then
    for pair in f32:f32 q8_0:"int8 x int8 act" q4_0:"int4-g64 x int8 act"; do
      type=${pair%%:*}
      label=${pair#*:}
      echo
      echo "-- llama.cpp (node-llama-cpp 3.22.1), $type, $THREADS threads, the same weights as GGUF (load $(cut -d' ' -f1-3 /proc/loadavg))"
      : > "$work/llamacpp.txt"
      if /usr/bin/python3 "$SRC/scripts/bench/llamacpp_gguf.py" --model "$work/model" --type "$type" \
        --out "$work/model.gguf" | tee "$work/gguf.txt"; then
        node "$SRC/scripts/bench/llamacpp_decode.mjs" --node-modules "$nlc/node_modules" \
          --gguf "$work/model.gguf" --threads "$THREADS" --input-len $PP --output-len $TG \
          --runs "$REPS" 2>&1 | tee "$work/llamacpp.txt" || true
      fi
      rm -f "$work/model.gguf"
      mb=$(awk '$1 == "gguf" { for (i = 1; i < NF; ++i) if ($(i + 1) == "MB") print $i }' "$work/gguf.txt")
      # ms-infer's row: steps/s, the read bandwidth, and its f32 KV cache bytes (llama.cpp's are f16).
      awk -v label="$label" -v type="$type" -v mb="$mb" -v ours="$(row_field "$label" 7)" \
        -v rd="$(row_field "$label" 5)" -v kv="$(row_field "$label" 4)" '
        $1 == "llamacpp_sweep" && $NF + 0 > best { best = $NF + 0; median = $(NF - 2) + 0 }
        END {
          if (best == 0) { printf "llama.cpp %s: no timed run (see above)\n", type; exit }
          kv /= 2
          printf "llama.cpp %s: decode %.1f steps/s (B=1, best of its runs; %.1f at its median step), %.1f%% of the read bound (%.1f MB a step at %.2f GB/s); ms-infer %s %.1f steps/s, %.2fx llama.cpp\n",
            type, best, 1000 / median, 100 * best * (mb + kv) / (rd * 1000), mb + kv, rd, label, ours, ours / best
        }' "$work/llamacpp.txt"
    done
  fi
else
  echo "llama.cpp: skipped (LLAMACPP=0, or no node/npm, or no python3-torch for the GGUF writer)"
fi
