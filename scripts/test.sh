#!/usr/bin/env bash
# Installs dependencies, configures the test build (warnings are errors), builds everything and
# runs the suite through ctest (all but the `slurm` label; .ci/run adds that). Usage:
# scripts/test.sh [ctest arguments, replacing the default -LE slurm]
# Environment: BUILD_DIR (default build/test), MS_CUDA (AUTO|ON|OFF, default AUTO), JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

BUILD_DIR=${BUILD_DIR:-build/test}
JOBS=${JOBS:-$(nproc)}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Paths relative to the checkout, so a fresh clone in another folder reuses the cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}

cmake -S . -B "$BUILD_DIR" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMS_WERROR=ON -DMS_BUILD_TESTS=ON \
  -DMS_CUDA="${MS_CUDA:-AUTO}" -DMS_CUDA_ARCHS=90
cmake --build "$BUILD_DIR" -j "$JOBS"

# mpirun tests hold the "mpi" resource lock, so -j only overlaps them with unit tests. The
# `slurm` test needs a running Slurm (.ci/run starts one), so a run without arguments leaves it
# out; `scripts/test.sh -L slurm` runs it alone.
[ "$#" -gt 0 ] || set -- -LE slurm
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" "$@"
