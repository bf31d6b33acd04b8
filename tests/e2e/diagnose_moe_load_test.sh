#!/usr/bin/env bash
# ms-diagnose moe-load from a shell on crafted telemetry, as a user runs it: a balanced layer and
# a hot one are told apart, drops are reported, --json carries the same, rank 0's file alone is
# read, and a dense run or a malformed count is an error (exit 1) that says why.
# Usage: diagnose_moe_load_test.sh <bin dir>
set -u
BIN="$1/ms-diagnose"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

META='{"kind":"meta","format":"ms-telemetry","format_version":1,"rank":0,"host":"a"}'
# step_line <step> <extra keys>: a step record of rank 0 with the given MoE keys.
step_line() {
  echo "{\"kind\":\"step\",\"t\":$((1764480000 + $1)),\"host\":\"a\",\"rank\":0,\"mesh\":{\"dp\":0,\"tp\":0,\"pp\":0,\"cp\":0},\"step\":$1,\"loss\":2.0,\"step_s\":0.5$2}"
}

# Layer 0 balanced; layer 1 sends 70% of its tokens to expert 2 and drops some in step 2.
mkdir -p "$WORK/run/telemetry"
{
  echo "$META"
  step_line 1 ',"expert_tokens":[[25,25,25,25],[10,20,70,0]],"dropped_tokens":[0,0]'
  step_line 2 ',"expert_tokens":[[25,25,25,25],[10,20,70,0]],"dropped_tokens":[0,25]'
} > "$WORK/run/telemetry/rank-00000.jsonl"
# Another rank's file is not read: its malformed line would fail the run otherwise.
echo '{"kind":"step","rank":1,"expert_tokens":"broken"}' > "$WORK/run/telemetry/rank-00001.jsonl"

out=$("$BIN" moe-load "$WORK/run"); rc=$?
[ $rc -eq 0 ] || fail "moe-load exited $rc, expected 0: $out"
echo "$out" | grep -q "2 steps (1..2), 2 MoE layers x 4 experts" || fail "no header: $out"
echo "$out" | grep -q "rank 0's records are read alone" || fail "does not say rank 0 alone: $out"
echo "$out" | grep -Eq "^ +0 +1\.00 +1\.00 +1 +0  balanced$" || fail "layer 0 not balanced: $out"
echo "$out" | grep -Eq "^ +1 +2\.80 .* expert 2 is hot: 70\.0% of the tokens, 2\.80x the mean; 1 experts got none; 11\.11% of the tokens dropped in 1 steps$" \
  || fail "layer 1's hot expert or drops not reported: $out"

json=$("$BIN" moe-load "$WORK/run/telemetry" --json) || fail "moe-load --json failed"
echo "$json" | grep -q '"hot_expert": 2' || fail "--json lacks hot_expert 2: $json"
echo "$json" | grep -q '"dropped": 25' || fail "--json lacks the 25 dropped tokens: $json"

"$BIN" moe-load "$WORK/run" --balanced-below 3 | grep -Eq "^ +1 +2\.80 .*  balanced; " \
  || fail "--balanced-below 3 did not make layer 1 balanced"

mkdir -p "$WORK/dense/telemetry"
{ echo "$META"; step_line 1 ''; } > "$WORK/dense/telemetry/rank-00000.jsonl"
err=$("$BIN" moe-load "$WORK/dense" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "moe-load on a dense run exited $rc, expected 1"
echo "$err" | grep -q "no expert_tokens in the step records: not a MoE run, or written before this version" \
  || fail "dense run's error does not say why: $err"

{ echo "$META"; step_line 1 ',"expert_tokens":[[1,2],[3]]'; } > "$WORK/dense/telemetry/rank-00000.jsonl"
err=$("$BIN" moe-load "$WORK/dense" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "moe-load on ragged counts exited $rc, expected 1"
echo "$err" | grep -q "rank-00000.jsonl:2: key 'expert_tokens'.*layer 1 has 1 experts, layer 0 has 2" \
  || fail "ragged counts' error does not name file:line and key: $err"

"$BIN" moe-load "$WORK/missing" >/dev/null 2>&1; rc=$?
[ $rc -eq 1 ] || fail "moe-load on a missing directory exited $rc, expected 1"
echo "PASS"
