#!/usr/bin/env bash
# Packs the GPU test and benchmark programs of a CUDA build into one folder that runs on a GPU
# machine without this project's build dependencies: the stripped binaries, their shared
# libraries other than the C/C++ runtime and CUDA's own (found on the GPU machine), and the
# scripts that run them. Then, on the GPU machine: DIR/gpu_check.sh DIR OUT_DIR.
# When ms-diagnose and ms_diag_gpu_tests are built too, they are packed with Open MPI's
# components (DIR/ompi, found there through OPAL_PREFIX), for DIR/gpu_diagnose.sh DIR OUT_DIR;
# when ms-train and ms-data are, with the Shakespeare corpus, the GPT-2 tokenizer and the tiny
# configs, for DIR/gpu_train_check.sh DIR OUT_DIR (which gpu_check.sh runs too). DIR.tar.gz
# (about 23 MiB with everything packed; the folder is about 67 MiB) is the folder to carry.
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
diagnose=("$build/bin/ms-diagnose" "$build/tests/diag/ms_diag_gpu_tests")
if [[ -x ${diagnose[0]} && -x ${diagnose[1]} ]]; then
  bins+=("${diagnose[@]}")
else
  echo "gpu_bundle: ms-diagnose or ms_diag_gpu_tests not built; gpu_diagnose.sh will lack them" >&2
fi
training=("$build/bin/ms-train" "$build/bin/ms-data")
if [[ -x ${training[0]} && -x ${training[1]} ]]; then
  bins+=("${training[@]}")
else
  echo "gpu_bundle: ms-train or ms-data not built; gpu_train_check.sh will lack them" >&2
fi
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
# Open MPI's components (dlopened by libmpi from OPAL_PREFIX's tree) and the libraries they
# need, so ms-diagnose runs as an MPI singleton where Open MPI is not installed.
if [[ -x $dir/ms-diagnose || -x $dir/ms-train ]] && command -v ompi_info > /dev/null; then
  pkglib=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
  prefix=$(ompi_info --path prefix --parsable | sed 's/^path:prefix://')
  target="$dir/ompi/${pkglib#"$prefix"/}"
  mkdir -p "$target"
  # A singleton needs neither network fabrics (UCX, OFI, PSM, verbs), nor OpenSHMEM, MPI-IO or
  # external PMIx: leaving those out keeps the bundle well under 60 MiB.
  for plugin in "$pkglib"/*.so; do
    case $(basename "$plugin") in
      *ucx*|*ofi*|*psm*|*openib*|*pmix_ext*|*pmix_flux*|*memheap*|*scoll*|*spml*|*sshmem*) ;;
      *atomic*|*io_*|*fbtl*|*fcoll*|*fs_*|*sharedfp*|*vprotocol*|*mtl_*|*pml_cm*|*osc_rdma*) ;;
      *) cp "$plugin" "$target/" ;;
    esac
  done
  for plugin in "$target"/*.so; do
    ldd "$plugin" | awk '$3 ~ /^\// {print $3}'
  done | sort -u | while read -r lib; do
    case $(basename "$lib") in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
      libcuda*|libcublas*|libnccl*|libnvidia*) ;;
      *) [[ -e $dir/lib/$(basename "$lib") ]] || cp -L "$lib" "$dir/lib/" ;;
    esac
  done
fi
if [[ -x $dir/ms-train ]]; then
  src=$(cd "$here/../.." && pwd)
  mkdir -p "$dir/train_data" "$dir/train_configs"
  cp "$src/data/corpus/tinyshakespeare.txt" "$src/data/tokenizers/gpt2/tokenizer.json" \
     "$dir/train_data/"
  cp "$src/configs/tiny-dense.yaml" "$src/configs/tiny-moe.yaml" "$dir/train_configs/"
fi
cp "$here/gpu_check.sh" "$here/gpu_env.sh" "$here/kernel_bench_torch.py" "$here/gpu_diagnose.sh" \
   "$here/diagnose_torch.py" "$here/diagnose_compare.py" "$here/gpu_train_check.sh" \
   "$here/train_gpu_bench.sh" "$here/train_gpu_bench_torch.py" "$here/train_bench_torch.py" \
   "$dir/"
# The folder and a gzip'd tarball of it: the tarball is what travels to a GPU machine whose
# transfer limit the folder exceeds (OpenBLAS alone is 36 MiB unpacked); unpack it there with
# `tar -xzf DIR.tar.gz` (gzip is everywhere; zstd may not be).
tar -C "$(dirname "$dir")" -czf "$dir.tar.gz" "$(basename "$dir")"
du -sh "$dir" "$dir.tar.gz"
