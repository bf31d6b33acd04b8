#!/usr/bin/env bash
# Dataset build throughput: `ms-data build` over Tiny Shakespeare (blank-line documents, GPT-2
# tokenizer) with 1 and 2 threads, against the raw sequential write bandwidth of the same disk
# (dd conv=fsync) measured in the same run. Prints a table; nonzero exit if a build fails.
#   usage: scripts/bench/dataset_build.sh [build dir] [repeat]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${1:-$ROOT/build}"; REPEAT="${2:-3}"
MS_DATA="$BUILD/bin/ms-data"
TOK="$ROOT/data/tokenizers/gpt2/tokenizer.json"
[ -f "$TOK" ] || TOK="$ROOT/../shared/data/gpt2/tokenizer.json"
TEXT="$ROOT/data/corpus/tinyshakespeare.txt"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ms_bench_XXXXXX")"; trap 'rm -rf "$WORK"' EXIT

dd_mb_s() {  # sequential write of 512 MiB, fsynced, in MB/s
  local t0 t1
  t0=$(date +%s.%N)
  dd if=/dev/zero of="$WORK/dd.bin" bs=4M count=128 conv=fsync status=none
  t1=$(date +%s.%N)
  rm -f "$WORK/dd.bin"
  echo "512*1048576/($t1-$t0)/1000000" | bc -l
}

echo "# ms-data build benchmark: $(nproc) cores, $(uname -sr), input $(wc -c < "$TEXT") bytes"
printf "%-8s %8s %12s %10s %10s %10s\n" threads run tokens seconds "tokens/s" "MB/s"
best1=0; best2=0
for threads in 1 2; do
  for run in $(seq "$REPEAT"); do
    out=$("$MS_DATA" build -i "$TEXT" -t "$TOK" -o "$WORK/ts" --doc-separator blank-line \
          --threads "$threads" --no-progress --json --replace)
    tokens=$(echo "$out" | sed -n 's/.*"tokens": \([0-9]*\).*/\1/p')
    secs=$(echo "$out" | sed -n 's/.*"seconds": \([0-9.e-]*\).*/\1/p')
    tps=$(echo "$out" | sed -n 's/.*"tokens_per_s": \([0-9.e+-]*\).*/\1/p')
    mbs=$(echo "$out" | sed -n 's/.*"mb_per_s": \([0-9.e+-]*\).*/\1/p')
    printf "%-8s %8s %12s %10.3f %10.0f %10.2f\n" "$threads" "$run" "$tokens" "$secs" "$tps" "$mbs"
    if [ "$threads" = 1 ] && (( $(echo "$mbs > $best1" | bc -l) )); then best1=$mbs; fi
    if [ "$threads" = 2 ] && (( $(echo "$mbs > $best2" | bc -l) )); then best2=$mbs; fi
  done
done
out_mb=$(( $(wc -c < "$WORK/ts.bin") + $(wc -c < "$WORK/ts.idx") ))
disk=$(dd_mb_s)
printf "# best text MB/s: 1 thread %.2f, 2 threads %.2f (scaling %.2fx)\n" "$best1" "$best2" \
  "$(echo "$best2/$best1" | bc -l)"
printf "# output %.2f MB per build; raw disk write (dd 512 MiB conv=fsync) %.0f MB/s;\n" \
  "$(echo "$out_mb/1000000" | bc -l)" "$disk"
printf "# the build writes %.4f%% of what the disk could in the same time: tokenizing is the limit\n" \
  "$(echo "100*($out_mb/1000000)/($(wc -c < "$TEXT")/1000000/$best2)/$disk" | bc -l)"
