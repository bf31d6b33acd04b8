#!/usr/bin/env bash
# ms-diagnose gpu-health and info's GPU listing from a shell, without a GPU: recorded readings
# are judged with the exit codes a script sees (0 ok, 3 suspect or bad), a machine without NVML
# gets a named skip line and exit 0, and a fake libnvidia-ml (MS_NVML_LIBRARY) stands in for a
# driver with a failing GPU and a lost one; --record then --replay gives the same verdicts.
# Usage: diagnose_gpu_health_test.sh <bin dir> <source dir> <fake libnvidia-ml>
set -u
BIN="$1/ms-diagnose"
DATA="$2/tests/diag/data/gpu"
FAKE="$3"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
passed=0

# expect <rc> <fixture> <text>: replaying the fixture exits rc and prints text.
expect() {
  out=$("$BIN" gpu-health --replay "$DATA/$2"); rc=$?
  [ $rc -eq "$1" ] || fail "$2: exit $rc, expected $1: $out"
  grep -qF -- "$3" <<<"$out" || fail "$2: no \"$3\" in: $out"
  passed=$((passed + 1))
}
expect 0 healthy_idle.json "# GPU health: 0 bad, 0 suspect, 1 ok"
expect 0 healthy_busy.json "# GPU health: 0 bad, 0 suspect, 1 ok"
expect 3 throttled_hw_thermal.json "bad: hw_thermal_slowdown"
expect 3 throttled_power_brake.json "bad: hw_power_brake_slowdown"
expect 3 throttled_sw_thermal.json "suspect: sw_thermal_slowdown"
expect 3 ecc_uncorrectable_remap_pending.json "bad: volatile_uncorrectable_ecc: 2 uncorrectable"
expect 3 ecc_remap_failed.json "bad: row_remap_failed"
expect 3 ecc_retired_pages_pending.json "bad: retired_pages_pending"
expect 3 degraded_pcie.json "suspect: pcie_width: PCIe link x8, below its maximum x16"
expect 3 nvlink_down.json "bad: nvlink_down: NVLink 3 is down"
# A threshold from the command line: a wider temperature margin makes an idle 31 C GPU with a
# slowdown threshold of 87 C suspect only from a margin of 56 C.
out=$("$BIN" gpu-health --replay "$DATA/healthy_idle.json" --temperature-margin 56); rc=$?
[ $rc -eq 3 ] && grep -q "within 56 C of the slowdown threshold 87 C" <<<"$out" \
  || fail "--temperature-margin 56: exit $rc: $out"
passed=$((passed + 1))

# JSON carries the level and the reading.
out=$("$BIN" gpu-health --replay "$DATA/degraded_pcie.json" --json)
python3 - "$out" <<'PY' || fail "gpu-health --json: $out"
import json, sys
doc = json.loads(sys.argv[1])
assert doc["level"] == "suspect", doc["level"]
g = doc["gpus"][0]
assert [f["rule"] for f in g["findings"]] == ["pcie_width", "pcie_gen"], g["findings"]
assert g["reading"]["pcie_width"] == 8
PY
passed=$((passed + 1))

# Bad input is named.
echo '{"gpus": [{"index": 0, "temprature_c": 50}]}' > "$WORK/typo.json"
out=$("$BIN" gpu-health --replay "$WORK/typo.json" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q 'typo.json gpus\[0\]: unknown key "temprature_c"' <<<"$out" \
  || fail "typo: exit $rc: $out"
passed=$((passed + 1))

# No NVML: a named skip, exit 0, in text and in JSON.
out=$(MS_NVML_LIBRARY=libnvidia-ml-absent.so.1 "$BIN" gpu-health); rc=$?
[ $rc -eq 0 ] && grep -q "^# gpu-health skipped: NVML not available: libnvidia-ml-absent.so.1" <<<"$out" \
  || fail "no NVML: exit $rc: $out"
out=$(MS_NVML_LIBRARY=libnvidia-ml-absent.so.1 "$BIN" gpu-health --json); rc=$?
[ $rc -eq 0 ] && grep -q '"skipped": "NVML not available' <<<"$out" || fail "no NVML --json: $out"
passed=$((passed + 1))

# The fake driver: GPU 0 fails several rules, GPU 1 is lost; both named, exit 3.
out=$(MS_NVML_LIBRARY="$FAKE" "$BIN" gpu-health --record "$WORK/rec.json"); rc=$?
[ $rc -eq 3 ] || fail "fake NVML: exit $rc: $out"
grep -q "bad: gpu_lost: NVML cannot reach the GPU: GPU 1" <<<"$out" || fail "lost GPU: $out"
grep -q "# GPU health: 2 bad, 0 suspect, 0 ok" <<<"$out" || fail "fake summary: $out"
replayed=$("$BIN" gpu-health --replay "$WORK/rec.json"); rc=$?
[ $rc -eq 3 ] || fail "replay of the recording: exit $rc"
[ "$(tail -n +2 <<<"$out")" = "$(tail -n +2 <<<"$replayed")" ] \
  || fail "replayed verdicts differ: $out --- $replayed"
passed=$((passed + 1))

# info lists the machine's GPUs from NVML, or says why it cannot.
out=$(MS_NVML_LIBRARY="$FAKE" "$BIN" info); rc=$?
[ $rc -eq 0 ] || fail "info with fake NVML: exit $rc: $out"
grep -q "# GPUs of .* (NVML): 2" <<<"$out" || fail "info GPU header: $out"
grep -qE "^ +0  00000000:18:00.0  Fake GPU .* gen5x8 \(gen5x16\) +3/4 up" <<<"$out" \
  || fail "info GPU row: $out"
grep -q "^ *1  lost: GPU 1" <<<"$out" || fail "info lost GPU: $out"
out=$(MS_NVML_LIBRARY=libnvidia-ml-absent.so.1 "$BIN" info); rc=$?
[ $rc -eq 0 ] && grep -q "# GPUs of .*: skipped: NVML not available" <<<"$out" \
  || fail "info without NVML: exit $rc: $out"
out=$(MS_NVML_LIBRARY="$FAKE" "$BIN" info --json)
python3 - "$out" <<'PY' || fail "info --json: $out"
import json, sys
nvml = json.loads(sys.argv[1])["ranks"][0]["nvml"]
assert nvml["gpus"][0]["pcie_width_max"] == 16 and "lost" in nvml["gpus"][1], nvml
PY
passed=$((passed + 1))
echo "diagnose gpu-health: $passed passed, 0 failed"
