#!/usr/bin/env bash
# Benchmark: allreduce busbw of `ms-diagnose check` beside a plain MPI_Allreduce loop
# (plain_allreduce.cc) at the same size, timed the same way (warm-up, --rounds passes of
# --iters, best pass), in the same run: the two programs alternate RUNS times so that drift
# of the machine's load hits both alike. Prints each run's busbw and ratio, out of place and
# in place, then the spread (min / median / max) of the ratios, for docs/bench/diagnose-check.md.
# Usage: scripts/bench/check_vs_mpi.sh <build dir> [ranks=2] [bytes=67108864] [runs=5]
set -euo pipefail
BUILD=${1:?usage: check_vs_mpi.sh <build dir> [ranks] [bytes] [runs]}
NP=${2:-2}
BYTES=${3:-67108864}
RUNS=${4:-5}
ITERS=20 WARMUP=5 ROUNDS=3
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1
mpicxx -O2 -std=c++17 -DOMPI_SKIP_MPICXX=1 -o "$TMP/plain_allreduce" "$HERE/plain_allreduce.cc"
# Only the allreduce table matters here: the per-rank and point-to-point parts are kept small.
CHECK=(check --min-bytes "$BYTES" --max-bytes "$BYTES" --iters $ITERS --warmup $WARMUP
       --rounds $ROUNDS --collectives allreduce --sgemm-n 64 --triad-elements 4096
       --p2p-bytes 4096 --gpu-sgemm-n 0 --gpu-bf16-n 0 --gpu-bytes 0 --json)
for run in $(seq "$RUNS"); do
  mpirun --oversubscribe -np "$NP" "$TMP/plain_allreduce" "$BYTES" "$BYTES" 2 $ITERS $WARMUP \
    $ROUNDS > "$TMP/plain$run.txt"
  mpirun --oversubscribe -np "$NP" "$BUILD/bin/ms-diagnose" "${CHECK[@]}" 2>/dev/null \
    > "$TMP/check$run.json" || [ $? -eq 3 ]
done
echo "# $(uname -n): $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $NP ranks, $BYTES bytes"
python3 - "$TMP" "$RUNS" <<'PY'
import json, statistics, sys
tmp, runs = sys.argv[1], int(sys.argv[2])
ratios = {"out_of_place": [], "in_place": []}
print("| run | check busbw out / in (GB/s) | plain MPI_Allreduce busbw out / in (GB/s) | ratio out / in |")
print("|---:|---:|---:|---:|")
for r in range(1, runs + 1):
    row = json.load(open(f"{tmp}/check{r}.json"))["collectives"][0]["rows"][0]
    check = [row["out_of_place"]["busbw_gbs"], row["in_place"]["busbw_gbs"]]
    plain = [float(x) for x in open(f"{tmp}/plain{r}.txt").read().split()[1:3]]
    ratio = [c / p for c, p in zip(check, plain)]
    ratios["out_of_place"].append(ratio[0])
    ratios["in_place"].append(ratio[1])
    print(f"| {r} | {check[0]:.3f} / {check[1]:.3f} | {plain[0]:.3f} / {plain[1]:.3f} | "
          f"{ratio[0]:.2f} / {ratio[1]:.2f} |")
for name, values in ratios.items():
    print(f"# ratio {name}: min {min(values):.2f}  median {statistics.median(values):.2f}  "
          f"max {max(values):.2f}")
PY
