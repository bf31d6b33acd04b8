#!/usr/bin/env bash
# Benchmark: allreduce busbw of `ms-diagnose check` beside a plain MPI_Allreduce loop
# (plain_allreduce.c) over the same sizes, measured in the same run, for docs/bench/diagnose-check.md.
# Usage: scripts/bench/check_vs_mpi.sh <build dir> [ranks] [max bytes]
set -euo pipefail
BUILD=${1:?usage: check_vs_mpi.sh <build dir> [ranks] [max bytes]}
NP=${2:-4}
MAX=${3:-16777216}
MIN=1024 FACTOR=4 ITERS=20 WARMUP=5
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1
mpicc -O2 -o "$TMP/plain_allreduce" "$HERE/plain_allreduce.c"
SWEEP=(--min-bytes $MIN --max-bytes "$MAX" --factor $FACTOR --iters $ITERS --warmup $WARMUP)
# Alternate the two programs twice so slow drift of the machine's load hits both alike.
for round in 1 2; do
  mpirun --oversubscribe -np "$NP" "$BUILD/bin/ms-diagnose" check "${SWEEP[@]}" \
    --collectives allreduce --gpu-sgemm-n 0 --json 2>/dev/null > "$TMP/check$round.json" || true
  mpirun --oversubscribe -np "$NP" "$TMP/plain_allreduce" $MIN "$MAX" $FACTOR $ITERS $WARMUP \
    > "$TMP/plain$round.txt"
done
python3 - "$TMP" <<'PY'
import json, sys
tmp = sys.argv[1]
check, plain = {}, {}
for r in (1, 2):
    for row in json.load(open(f"{tmp}/check{r}.json"))["collectives"][0]["rows"]:
        check[row["size"]] = max(check.get(row["size"], 0), row["busbw_gbs"])
    for line in open(f"{tmp}/plain{r}.txt"):
        size, busbw = line.split()
        plain[int(size)] = max(plain.get(int(size), 0), float(busbw))
print("| size (B) | ms-diagnose check busbw (GB/s) | plain MPI_Allreduce busbw (GB/s) | ratio |")
print("|---:|---:|---:|---:|")
for size in sorted(check):
    p = plain.get(size, 0)
    print(f"| {size} | {check[size]:.3f} | {p:.3f} | {check[size] / p if p else 0:.2f} |")
PY
