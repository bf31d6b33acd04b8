#!/usr/bin/env bash
# The main job on bundled data, as far as each tool exists today:
#   health/info of the ranks -> resolve and validate the training config on 2 ranks' layout.
# The dataset -> train -> checkpoint -> reshard -> generate -> diagnose chain grows here as the
# tools land. Environment: BUILD_DIR (default build/release), JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

BUILD_DIR=${BUILD_DIR:-build/release}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DMS_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
BIN="$BUILD_DIR/bin"

# OpenMPI refuses root without these; ranks on a small machine must yield and share cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OPENBLAS_NUM_THREADS=1

step() { printf '\n== %s\n' "$*"; }

step "toolkit version"
"$BIN/ms-train" --version

step "ranks, hosts, devices and clock offsets (2 ranks)"
mpirun --oversubscribe -np 2 "$BIN/ms-diagnose" info

step "resolve and validate the tiny training config for 2 data-parallel ranks"
"$BIN/ms-train" --config configs/tiny-cpu.yaml --dry-run

step "demo finished"
