#!/usr/bin/env bash
# ms-diagnose simulate -> detect / stragglers from a shell, as a user runs them: a job with a
# slow machine is found (exit 3, machine named), a healthy job is not (exit 0), and a trace with
# a slowed worker is attributed to it.
# Usage: diagnose_detect_test.sh <bin dir>
set -u
BIN="$1/ms-diagnose"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
QUICK=(--window-s 30 --hop-s 5 --period-s 60)

"$BIN" simulate --out "$WORK/bad" --machines 6 --duration-s 600 --fault slow-cpu \
  --fault-machine 2 --fault-start-s 200 --seed 5 >/dev/null || fail "simulate (fault)"
out=$("$BIN" detect "$WORK/bad" "${QUICK[@]}"); rc=$?
[ $rc -eq 3 ] || fail "detect on a faulty job exited $rc, expected 3: $out"
echo "$out" | grep -q "FAULT: machine node02" || fail "detect did not name node02: $out"
"$BIN" detect "$WORK/bad/telemetry" "${QUICK[@]}" --json | grep -q '"machine": "node02"' \
  || fail "detect --json did not name node02"

"$BIN" simulate --out "$WORK/good" --machines 6 --duration-s 600 --seed 6 >/dev/null \
  || fail "simulate (healthy)"
out=$("$BIN" detect "$WORK/good" "${QUICK[@]}"); rc=$?
[ $rc -eq 0 ] || fail "detect on a healthy job exited $rc, expected 0: $out"

"$BIN" simulate --out "$WORK/tr" --traces --dp 2 --pp 2 --slow-rank 1 --slow-factor 1.6 \
  --seed 3 >/dev/null || fail "simulate --traces"
out=$("$BIN" stragglers "$WORK/tr" --svg "$WORK/h.svg" --html "$WORK/h.html"); rc=$?
[ $rc -eq 3 ] || fail "stragglers exited $rc, expected 3: $out"
echo "$out" | grep -A1 "^workers" | tail -1 | grep -q "rank 1 " \
  || fail "stragglers did not put rank 1 first: $out"
grep -q "</svg>" "$WORK/h.svg" || fail "no SVG written"
grep -q "<svg" "$WORK/h.html" || fail "no HTML written"

"$BIN" detect "$WORK/missing" >/dev/null 2>&1; rc=$?
[ $rc -eq 1 ] || fail "detect on a missing directory exited $rc, expected 1"
echo "PASS"
