#!/usr/bin/env bash
# ms-diagnose on a GPU machine, in one pass for a short lease (docs/bench/diagnose-gpu.md):
#   1. nvidia-smi -q, kept as the driver's own account;
#   2. `ms-diagnose gpu-health --record` (NVML through dlopen) and its readings compared field by
#      field with nvidia-smi --query-gpu (diagnose_compare.py smi);
#   3. `ms-diagnose info` (the per-host GPU table) as an MPI singleton;
#   4. ms_diag_gpu_tests (check's GPU probes);
#   5. `ms-diagnose check --nccl` on one rank with the GPU probes at full size (and the NCCL
#      sweep, whose #wrong must be 0), then PyTorch's peers in the same run (diagnose_torch.py),
#      compared within 10% (diagnose_compare.py rates).
# Every step runs even when an earlier one fails; the exit status is 1 if any failed.
#
# Usage: gpu_diagnose.sh DIR OUT_DIR
#   DIR: a folder made by scripts/bench/gpu_bundle.sh (binaries, lib/, ompi/, these scripts).
# Environment: DIAG_REPS (repetitions of each probe, default 10), DIAG_BYTES (probe buffer,
# default 1 GiB).
set -uo pipefail
dir=$(cd "${1:?usage: gpu_diagnose.sh DIR OUT_DIR}" && pwd)
out=${2:?usage: gpu_diagnose.sh DIR OUT_DIR}
mkdir -p "$out"
reps=${DIAG_REPS:-10}
bytes=${DIAG_BYTES:-1073741824}

# The bundle's library path, CUDA's libraries included.
# shellcheck source=scripts/bench/gpu_env.sh
source "$dir/gpu_env.sh" "$dir"
diag="$dir/ms-diagnose"
status=0
step() { echo; echo "== $*"; }

step "machine"
{
  date -u
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total --format=csv
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$diag" | grep -E "not found|cublas|cudart|libmpi" || true
} 2>&1 | tee "$out/machine.txt"
nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1 || { echo "nvidia-smi -q failed"; status=1; }

step "gpu-health (live NVML) and nvidia-smi"
"$diag" gpu-health --record "$out/gpu-readings.json" 2>&1 | tee "$out/gpu-health.txt"
rc=${PIPESTATUS[0]}
echo "gpu-health exit $rc (0 all ok, 3 a suspect or bad GPU)"
[[ $rc -eq 0 || $rc -eq 3 ]] || status=1
"$diag" gpu-health --replay "$out/gpu-readings.json" --json > "$out/gpu-health.json" 2>&1
if [[ -s $out/gpu-readings.json ]]; then
  python3 "$dir/diagnose_compare.py" smi "$out/gpu-readings.json" 2>&1 | tee "$out/nvml-vs-smi.md"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
else
  echo "no readings recorded"; status=1
fi

step "info"
timeout 120 "$diag" info 2>&1 | tee "$out/info.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "info failed"; status=1; }
timeout 120 "$diag" info --json > "$out/info.json" 2>&1 || status=1

step "GPU probe tests"
"$dir/ms_diag_gpu_tests" --gtest_output="xml:$out/diag_gpu_tests.xml" 2>&1 | tee "$out/diag_gpu_tests.log" | tail -n 8
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "ms_diag_gpu_tests failed"; status=1; }

step "check on one rank: GPU probes (reps $reps, $bytes bytes)"
timeout 300 "$diag" check --json --nccl --rounds 1 --reps "$reps" --gpu-sgemm-n 8192 --gpu-bf16-n 8192 \
  --gpu-bytes "$bytes" --sgemm-n 256 --triad-elements 1048576 --max-bytes 65536 \
  > "$out/check.json" 2> "$out/check.err"
rc=$?
echo "check exit $rc"; tail -n 5 "$out/check.err"
[[ $rc -eq 0 || $rc -eq 3 ]] || status=1
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d["ranks"][0]["metrics"], indent=1)); print("nccl:", d.get("nccl_skipped") or "%d collectives, %d wrong elements in all" % (len(d.get("nccl_collectives", [])), d["wrong"]))' \
  "$out/check.json" 2>&1 | tee "$out/check-metrics.json"

step "PyTorch peers in the same run"
python3 "$dir/diagnose_torch.py" --reps "$reps" --bytes "$bytes" > "$out/torch.json" 2> "$out/torch.err"
rc=$?
cat "$out/torch.json"; tail -n 3 "$out/torch.err"
if [[ $rc -eq 0 ]]; then
  python3 "$dir/diagnose_compare.py" rates "$out/check.json" "$out/torch.json" 2>&1 | tee "$out/rates.md"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
else
  echo "PyTorch peers not measured (rc $rc)"; status=1
fi
exit $status
