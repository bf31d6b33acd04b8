# Sourced by the device scripts (gpu_check.sh, gpu_diagnose.sh, gpu_train_check.sh) from a
# gpu_bundle.sh folder: the library path of the bundle's binaries (CUDA's libraries come from the
# toolkit, else from the ones PyTorch's wheels carry) and the carried Open MPI.
# Usage: source "$dir/gpu_env.sh" "$dir"
gpu_env_dir=${1:?usage: source gpu_env.sh BUNDLE_DIR}
cuda_libs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  [[ -e $d/libcublasLt.so.13 ]] && cuda_libs+="$d:"
done
export LD_LIBRARY_PATH="$gpu_env_dir/lib:${cuda_libs}${LD_LIBRARY_PATH:-}"
export OPENBLAS_NUM_THREADS=4
# The carried Open MPI (gpu_bundle.sh): found through OPAL_PREFIX; a singleton that starts no
# daemon, with shared memory and self transports only.
if [[ -d $gpu_env_dir/ompi ]]; then
  export OPAL_PREFIX="$gpu_env_dir/ompi" OMPI_MCA_ess_singleton_isolated=1 \
         OMPI_MCA_pmix=isolated OMPI_MCA_mca_base_component_show_load_errors=0 \
         OMPI_MCA_btl=self,vader
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
