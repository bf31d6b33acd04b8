#!/usr/bin/env bash
# Trainer-side memory and throughput of local against disaggregated loading with 8 sources
# (docs/bench/data-plan.md): 2 trainers with their own Loaders, then 2 trainers served by one
# loader rank. Runs scripts/bench/plan_bench.sh first when the plan is missing.
# Usage: scripts/bench/loader_bench.sh [build dir] [work dir]
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/ms-plan-bench}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
[ -f "$WORK/bench.plan" ] || "$(dirname "$0")/plan_bench.sh" "$BUILD" "$WORK"
ARGS=(--plan "$WORK/bench.plan" --steps 200 --global-batch 64 --micro-batch 8)
mpirun --oversubscribe -np 2 "$BUILD/bin/loader_bench" --mode local "${ARGS[@]}"
mpirun --oversubscribe -np 3 "$BUILD/bin/loader_bench" --mode disaggregated "${ARGS[@]}"
