#!/usr/bin/env bash
# Tensor-parallel communication overlap (lib/parallel/tp_overlap.h) on a GEMM-bound shape:
# n = 2048 rows of width 512 over tp = 2 ranks, each consumer or producer a (rows, 512) x
# (512, 512) GEMM (a column-parallel linear under SP for the all-gather, row-parallel for the
# reduce-scatter and, without SP, the all-reduce), at 1, 2, 4 and 8 chunks. tp_overlap_bench
# (built with -DMS_BUILD_BENCH=ON) prints one markdown table (docs/bench/tp-overlap.md).
# Usage: tp_overlap_bench.sh <bin dir> [ranks, default 2] [extra tp_overlap_bench options]
set -euo pipefail
BIN=${1:?usage: tp_overlap_bench.sh <bin dir> [ranks] [options]}
NP=${2:-2}
shift $(( $# >= 2 ? 2 : 1 ))
[ -x "$BIN/tp_overlap_bench" ] || { echo "no $BIN/tp_overlap_bench: configure with -DMS_BUILD_BENCH=ON and build it"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
echo "# $(uname -srm), $(grep -c ^processor /proc/cpuinfo) cores, $(mpirun --version | head -1), load $(cut -d' ' -f1-3 /proc/loadavg)"
mpirun --oversubscribe -np "$NP" "$BIN/tp_overlap_bench" --rows 2048 --width 512 --iters 40 \
  --warmup 5 --chunks 1 2 4 8 "$@"
