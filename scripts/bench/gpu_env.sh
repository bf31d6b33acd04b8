# Sourced by the device scripts (gpu_check.sh, gpu_diagnose.sh) from a gpu_bundle.sh folder:
# the library path of the bundle's binaries. CUDA's libraries come from the toolkit, else from
# the ones PyTorch's wheels carry.
# Usage: source "$dir/gpu_env.sh" "$dir"
gpu_env_dir=${1:?usage: source gpu_env.sh BUNDLE_DIR}
cuda_libs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  [[ -e $d/libcublasLt.so.13 ]] && cuda_libs+="$d:"
done
export LD_LIBRARY_PATH="$gpu_env_dir/lib:${cuda_libs}${LD_LIBRARY_PATH:-}"
export OPENBLAS_NUM_THREADS=4
