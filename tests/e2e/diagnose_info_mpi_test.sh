#!/usr/bin/env bash
# ms-diagnose info under mpirun: rank 0 alone prints, and reports every rank exactly once.
# Usage: diagnose_info_mpi_test.sh <mpirun> <ranks> <bin dir>
set -euo pipefail
MPIRUN=$1
NP=$2
BIN=$3
out=$("$MPIRUN" --oversubscribe -np "$NP" "$BIN/ms-diagnose" info --json)
for ((r = 0; r < NP; r++)); do
  n=$(grep -cE "\"rank\": *$r([^0-9]|$)" <<<"$out" || true)
  if [ "$n" -ne 1 ]; then
    echo "rank $r reported $n times, expected once:"; echo "$out"; exit 1
  fi
done
grep -qE "\"world_size\": *$NP" <<<"$out" || { echo "world_size is not $NP:"; echo "$out"; exit 1; }
table=$("$MPIRUN" --oversubscribe -np "$NP" "$BIN/ms-diagnose" info)
rows=$(grep -cE "^ *[0-9]+ " <<<"$table" || true)
[ "$rows" -eq "$NP" ] || { echo "table has $rows rank rows, expected $NP:"; echo "$table"; exit 1; }
echo "diagnose info on $NP ranks: 1 passed, 0 failed"
