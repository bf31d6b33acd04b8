#!/usr/bin/env bash
# Packs the GPU test and benchmark programs of a CUDA build into one folder that runs on a GPU
# machine without this project's build dependencies: the stripped binaries, their shared
# libraries other than the C/C++ runtime and CUDA's own (found on the GPU machine), and the
# scripts that run them. Then, on the GPU machine: DIR/gpu_check.sh DIR OUT_DIR.
#
# Usage: scripts/bench/gpu_bundle.sh BUILD_DIR DIR
#   BUILD_DIR: configured with -DMS_CUDA=ON -DMS_BUILD_TESTS=ON -DMS_BUILD_BENCH=ON, with the
#              targets ms_kernels_tests and kernel_bench built.
set -euo pipefail
build=${1:?usage: gpu_bundle.sh BUILD_DIR DIR}
dir=${2:?usage: gpu_bundle.sh BUILD_DIR DIR}
here=$(cd "$(dirname "$0")" && pwd)
bins=("$build/tests/ops/ms_kernels_tests" "$build/bin/kernel_bench")
for b in "${bins[@]}"; do
  [[ -x $b ]] || { echo "gpu_bundle: $b is missing; build ms_kernels_tests and kernel_bench" >&2; exit 1; }
done
rm -rf "$dir"
mkdir -p "$dir/lib"
for b in "${bins[@]}"; do
  strip -o "$dir/$(basename "$b")" "$b"
  # Every resolved library except glibc's, the C++ runtime and CUDA's (the GPU machine's driver
  # and toolkit must match each other, so those come from there).
  ldd "$b" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case $(basename "$lib") in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
      libcuda*|libcublas*|libnccl*|libnvidia*) ;;
      *) cp -L "$lib" "$dir/lib/" ;;
    esac
  done
done
cp "$here/gpu_check.sh" "$here/kernel_bench_torch.py" "$dir/"
du -sh "$dir"
