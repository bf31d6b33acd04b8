#!/usr/bin/env bash
# Planning 10 million samples over 8 sources, and local loader throughput
# (docs/bench/data-plan.md). Needs a build with -DMS_BUILD_BENCH=ON.
# Usage: scripts/bench/plan_bench.sh [build dir] [work dir]
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/ms-plan-bench}
"$BUILD/bin/plan_bench" --dir "$WORK" --sources 8 --docs 20000 --samples 10000000 --seq-len 1024 \
  --loader-steps 200 --keep
