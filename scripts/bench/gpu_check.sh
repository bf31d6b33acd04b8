#!/usr/bin/env bash
# The GPU checks, in one pass for a short lease on a GPU machine: the kernel tests (every CUDA
# kernel against its CPU twin, the CUDA backend through the seam's table), a subset under
# compute-sanitizer's memcheck where it works, training parity against the CPU
# (gpu_train_check.sh, when the bundle has ms-train), the training benchmark beside PyTorch
# (train_gpu_bench.sh) and the kernel benchmark beside PyTorch on the same shapes
# (docs/bench/kernels.md).
#
# Usage: gpu_check.sh DIR OUT_DIR
#   DIR: a folder made by scripts/bench/gpu_bundle.sh (binaries, lib/, these scripts).
#   OUT_DIR: receives kernels_tests.log/.xml, memcheck.log, train/ (train_parity.md),
#            train_bench/ (train_gpu_bench.md), kernel_bench.md, kernel_bench_torch.md.
# Environment: GPU_CHECK_REPS (GEMV calls per measurement, default 200).
set -uo pipefail
dir=$(cd "${1:?usage: gpu_check.sh DIR OUT_DIR}" && pwd)
out=${2:?usage: gpu_check.sh DIR OUT_DIR}
mkdir -p "$out"
reps=${GPU_CHECK_REPS:-200}

# The bundle's library path, CUDA's libraries included.
# shellcheck source=scripts/bench/gpu_env.sh
source "$dir/gpu_env.sh" "$dir"

status=0
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$dir/ms_kernels_tests" | grep -E "not found|cublas|cudart" || true
} 2>&1 | tee "$out/machine.txt"

echo "== kernel tests"
"$dir/ms_kernels_tests" --gtest_output="xml:$out/kernels_tests.xml" > "$out/kernels_tests.log" 2>&1
rc=$?
tail -n 25 "$out/kernels_tests.log"
grep -c "SKIPPED \]" "$out/kernels_tests.log" | sed 's/^/skipped lines: /'
[[ $rc -eq 0 ]] || { echo "kernel tests failed (rc $rc)"; status=1; }

echo "== kernel tests under compute-sanitizer memcheck"
if command -v compute-sanitizer > /dev/null; then
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$dir/ms_kernels_tests" \
    --gtest_filter='Kernels/*:KernelEdgeTest.*:CudaBackend.*:*PagedTwinTest*' \
    > "$out/memcheck.log" 2>&1
  rc=$?
  tail -n 6 "$out/memcheck.log"
  [[ $rc -eq 0 ]] || { echo "memcheck: rc $rc"; status=1; }
else
  echo "compute-sanitizer not found" | tee "$out/memcheck.log"
fi

echo "== training parity against the CPU"
if [[ -x $dir/ms-train ]]; then
  timeout 300 "$dir/gpu_train_check.sh" "$dir" "$out/train" || { echo "training parity failed"; status=1; }
else
  echo "ms-train is not in the bundle" | tee "$out/train_parity_missing.txt"
fi

echo "== training benchmark beside PyTorch"
if [[ -x $dir/ms-train ]]; then
  GPU_BENCH_COMPILE=${GPU_BENCH_COMPILE:-0} timeout 300 "$dir/train_gpu_bench.sh" "$dir" "$out/train_bench" || { echo "training benchmark failed"; status=1; }
fi

echo "== kernel_bench"
"$dir/kernel_bench" --reps "$reps" 2>&1 | tee "$out/kernel_bench.md" || status=1
echo "== PyTorch on the same shapes"
python3 "$dir/kernel_bench_torch.py" --reps "$reps" 2>&1 | tee "$out/kernel_bench_torch.md" || status=1
exit $status
