#!/usr/bin/env bash
# Planning 10 million samples over 8 sources, and local loader throughput
# (docs/bench/data-plan.md). Needs a build with -DMS_BUILD_BENCH=ON.
# Usage: scripts/bench/plan_bench.sh [build dir] [work dir]
# Then the whole command as a user runs it: `ms-data plan` of the same mixture, timed from start
# to exit, beside `dd conv=fsync` writing the same bytes (a copy of the plan it wrote), alternated,
# best of REPS (default 5), with the load average of each pair.
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/ms-plan-bench}
"$BUILD/bin/plan_bench" --dir "$WORK" --sources 8 --docs 20000 --samples 10000000 --seq-len 1024 \
  --loader-steps 200 --keep

config=$WORK/bench-mixture.yaml
{
  echo "seq_len: 1024"
  echo "seed: 1234"
  echo "total_samples: 10000000"
  echo "validation: {fraction: 0.001}"
  echo "sources:"
  for s in 0 1 2 3 4 5 6 7; do echo "  - {name: src$s, prefix: $WORK/src$s, weight: $((s + 1))}"; done
} > "$config"
plan=$WORK/command.plan
echo
echo "# whole command: ms-data plan --config $config, beside dd conv=fsync of the plan's bytes," \
  "$(date -u '+%Y-%m-%d %H:%M UTC')"
echo "| run | ms-data plan wall s | dd conv=fsync wall s | ratio | load |"
echo "|---:|---:|---:|---:|---|"
rows=$(mktemp)
trap 'rm -f "$rows" "$WORK/dd-copy.plan"' EXIT
for i in $(seq 1 "${REPS:-5}"); do
  ours=$( { /usr/bin/time -f "%e" "$BUILD/bin/ms-data" plan --config "$config" --output "$plan" --replace > /dev/null; } 2>&1 | tail -1)
  peer=$( { /usr/bin/time -f "%e" dd if="$plan" of="$WORK/dd-copy.plan" bs=4M conv=fsync status=none; } 2>&1 | tail -1)
  rm -f "$WORK/dd-copy.plan"
  echo "| $i | $ours | $peer | $(awk -v a="$ours" -v b="$peer" 'BEGIN { printf "%.2f", a / b }') | $(cut -d' ' -f1-3 /proc/loadavg) |" |
    tee -a "$rows"
done
awk -F'|' '
  function best(v, c) { return (v < c || c == 0) ? v : c }
  { o = best($3 + 0, o); d = best($4 + 0, d) }
  END { printf "best: ms-data plan %.3f s, dd %.3f s: %.2fx\n", o, d, o / d }' "$rows"
