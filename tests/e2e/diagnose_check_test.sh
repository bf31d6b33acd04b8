#!/usr/bin/env bash
# ms-diagnose check under mpirun with N ranks (fast settings): the nccl-tests-style tables and
# footers are printed and a healthy run exits 0; with 3 or more ranks, a rank slowed by the
# test-only injection flag makes the run exit 3 and names that rank. Also checks `hang` on a
# crafted in-flight directory and `trace-export` on a crafted trace.
# Usage: diagnose_check_test.sh <mpirun> <ranks> <bin dir>
set -u
MPIRUN=$1
NP=$2
BIN=$3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

FAST=(--max-bytes 16384 --iters 3 --warmup 1 --sgemm-n 128 --triad-elements 262144
      --p2p-bytes 65536 --p2p-reps 4 --gpu-sgemm-n 0 --gpu-bf16-n 0 --gpu-bytes 0
      --group-by rank)
# This test shares 2 cores with the rest of the suite, whose load can make one rank look far
# slower than its peers; a 60% threshold keeps that noise quiet while a 5x injected slowdown
# (80% below the median) is still found.
NOISE=(--min-degradation 0.6)

# A healthy run may still meet a burst of load from other tests; one retry absorbs that without
# hiding a real problem, which would fail both times.
for attempt in 1 2; do
  "$MPIRUN" --oversubscribe -np "$NP" "$BIN/ms-diagnose" check "${FAST[@]}" "${NOISE[@]}" \
    > "$TMP/healthy.txt" 2> "$TMP/healthy.err"
  rc=$?
  [ "$rc" -eq 3 ] || break
done
cat "$TMP/healthy.txt"
[ "$rc" -eq 0 ] || { cat "$TMP/healthy.err"; fail "healthy check exited $rc"; }
for pattern in '^# Collective test: allreduce' '^# Collective test: sendrecv' \
               '^#  *out-of-place  *in-place$' \
               '^#  *size  *count  *type  *redop  *root  *time  *algbw  *busbw  *#wrong  *time  *algbw  *busbw  *#wrong$' \
               '^#  *(B)  *(elements)' '^# Avg bus bandwidth' \
               '^# Out of bounds values : 0 OK' '^# Result: HEALTHY'; do
  grep -q -- "$pattern" "$TMP/healthy.txt" || fail "missing '$pattern'"
done
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float ' "$TMP/healthy.txt")
[ "$rows" -eq 18 ] || fail "expected 18 table rows (6 collectives x 3 sizes), got $rows"
# Every row but sendrecv's has both placements measured and verified (#wrong 0 twice);
# sendrecv has no in-place form and prints N/A there.
both=$(grep -cE '^ +[0-9]+ +[0-9]+ +float +[a-z]+ +-?[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +0 +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$' "$TMP/healthy.txt")
[ "$both" -eq 15 ] || fail "expected 15 rows with out-of-place and in-place results, got $both"
na=$(grep -cE '^ +[0-9]+ +[0-9]+ +float +none +-1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +0 +N/A +N/A +N/A +N/A$' "$TMP/healthy.txt")
[ "$na" -eq 3 ] || fail "expected 3 sendrecv rows with N/A in place, got $na"

"$MPIRUN" --oversubscribe -np "$NP" "$BIN/ms-diagnose" check "${FAST[@]}" "${NOISE[@]}" --json \
  > "$TMP/report.json" 2>/dev/null
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || fail "--json run exited $rc"
for key in '"ranks"' '"collectives"' '"p2p_gbs"' '"machines"' '"healthy"'; do
  grep -q "$key" "$TMP/report.json" || fail "--json lacks $key"
done

# --min-busbw: no link here moves 1000 GB/s, so every collective with data to move (2 or more
# ranks) is named and the run exits 3; a single rank moves nothing and is not judged.
"$MPIRUN" --oversubscribe -np "$NP" "$BIN/ms-diagnose" check "${FAST[@]}" "${NOISE[@]}" \
  --collectives allreduce sendrecv --min-busbw 1000 > "$TMP/minbw.txt" 2>/dev/null
rc=$?
if [ "$NP" -ge 2 ]; then
  [ "$rc" -eq 3 ] || { cat "$TMP/minbw.txt"; fail "--min-busbw 1000: expected exit 3, got $rc"; }
  for c in allreduce sendrecv; do
    grep -qE "^# $c: peak busbw [0-9.]+ GB/s is below --min-busbw 1000.000$" "$TMP/minbw.txt" \
      || fail "--min-busbw: $c not named"
  done
else
  grep -q "is below --min-busbw" "$TMP/minbw.txt" && fail "--min-busbw judged a single rank"
fi

# --nccl: without a GPU (or NCCL) a named skip line and the MPI results stand; on a GPU
# machine with one rank the NCCL tables follow the MPI ones.
if [ "$NP" -eq 1 ]; then
  "$MPIRUN" --oversubscribe -np 1 "$BIN/ms-diagnose" check "${FAST[@]}" "${NOISE[@]}" \
    --collectives allreduce --nccl > "$TMP/nccl.txt" 2>/dev/null
  rc=$?
  if grep -q '^# NCCL collectives skipped: .*' "$TMP/nccl.txt"; then
    [ "$rc" -eq 0 ] || fail "--nccl skipped but exit $rc"
  else
    grep -q '^# NCCL on GPU buffers' "$TMP/nccl.txt" || { cat "$TMP/nccl.txt"; fail "--nccl: neither tables nor a skip line"; }
  fi
fi

if [ "$NP" -ge 3 ]; then
  "$MPIRUN" --oversubscribe -np "$NP" "$BIN/ms-diagnose" check "${FAST[@]}" "${NOISE[@]}" \
    --inject-slow-rank 1 --inject-factor 5 > "$TMP/slow.txt" 2>/dev/null
  rc=$?
  cat "$TMP/slow.txt"
  [ "$rc" -eq 3 ] || fail "injected slow rank: expected exit 3, got $rc"
  grep -q '^  rank1 (ranks 1): SUSPECT' "$TMP/slow.txt" || fail "rank 1 not named suspect"
  if grep -qE '^  rank[02] .*SUSPECT' "$TMP/slow.txt"; then fail "a healthy rank was blamed"; fi
fi

# hang: ranks 0, 1 and 3 wait in the world allreduce #12, rank 2 wrote nothing.
mkdir -p "$TMP/run/inflight"
for r in 0 1 3; do
  printf '{"rank":%d,"host":"node%d","pid":1,"t":1.0,"op":"allreduce","group":"world",
"group_ranks":[0,1,2,3],"seq":12,"bytes":64,"waiting_s":61.0,"stack":["frame-a","frame-b"]}\n' \
    "$r" "$r" > "$TMP/run/inflight/rank-0000$r.json"
done
"$BIN/ms-diagnose" hang "$TMP/run" --mesh pp=1,dp=2,tp=2 > "$TMP/hang.txt"
rc=$?
cat "$TMP/hang.txt"
[ "$rc" -eq 3 ] || fail "hang: expected exit 3, got $rc"
grep -q 'rank 2 (pp=0 dp=1 tp=0) \[not-waiting\]' "$TMP/hang.txt" || fail "hang: rank 2 not named"
mkdir -p "$TMP/quiet"
"$BIN/ms-diagnose" hang "$TMP/quiet" > /dev/null || fail "hang without reports must exit 0"

# trace-export on a two-rank trace.
mkdir -p "$TMP/trace"
printf '{"kind":"clock","offset_s":0,"rank":0,"format_version":1}\n{"kind":"compute","rank":0,"op":"fwd","stage":0,"mb":0,"step":1,"t0":10,"t1":11}\n' \
  > "$TMP/trace/rank-00000.jsonl"
printf '{"kind":"clock","offset_s":1,"rank":1,"format_version":1}\n{"kind":"comm","rank":1,"op":"allreduce","group":"dp","seq":1,"bytes":8,"t0":12,"t1":13}\n' \
  > "$TMP/trace/rank-00001.jsonl"
"$BIN/ms-diagnose" trace-export "$TMP/trace" -o "$TMP/trace.json" || fail "trace-export failed"
grep -q '"traceEvents"' "$TMP/trace.json" || fail "trace-export wrote no traceEvents"
echo "PASS"
