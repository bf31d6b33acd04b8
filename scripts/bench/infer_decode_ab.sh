#!/usr/bin/env bash
# A/B of decode speed between two ms-infer binaries on one model directory, alternating A and B
# so that a shared VM's drift hits both alike: `ms-infer bench` at batch 1 (PP 64, TG 64), its
# decode steps/s and share of the read bound per run, then each binary's best and median.
# Usage: scripts/bench/infer_decode_ab.sh A_BIN B_BIN MODEL_DIR [runs] [extra bench flags...]
#   e.g. build the old tree's ms-infer into /tmp/a, the new one into /tmp/b, and a model with
#   scripts/bench/bench_model.sh (ms-infer quantize it for a quantized format).
set -euo pipefail
a=${1:?usage: infer_decode_ab.sh A_BIN B_BIN MODEL_DIR [runs] [flags...]}
b=${2:?}
model=${3:?}
runs=${4:-5}
shift $(($# < 4 ? $# : 4))
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2} MS_NUM_THREADS=${MS_NUM_THREADS:-2}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $MS_NUM_THREADS threads, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# A: $a"
echo "# B: $b"
echo "# model: $model $*"
declare -A all
echo "| run | A steps/s | A of read bound | B steps/s | B of read bound |"
echo "|---:|---:|---:|---:|---:|"
for i in $(seq 1 "$runs"); do
  row="| $i"
  for side in A B; do
    bin=$a
    [ $side = B ] && bin=$b
    line=$("$bin" bench --model "$model" --num-prompts 1 --input-len 64 --output-len 64 \
      --batch-sizes 1 --kv-blocks 64 --stream-mib 256 "$@" 2>/dev/null | grep -E '^\| +64 ')
    steps=$(echo "$line" | awk -F'|' '{print $10 + 0}')
    share=$(echo "$line" | awk -F'|' '{gsub(/ /, "", $11); print $11}')
    all[$side]+="$steps "
    row+=" | $steps | $share"
  done
  echo "$row |"
done
for side in A B; do
  echo "$side: best $(echo ${all[$side]} | tr ' ' '\n' | sort -g | tail -1), median $(echo ${all[$side]} | tr ' ' '\n' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}') steps/s"
done
