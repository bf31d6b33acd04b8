// The CUDA backend: ops::Backend (lib/ops/backend.h) on one GPU, every op a kernels/ entry
// point or a cuBLASLt call issued on the runtime's compute stream. Float arrays are device
// memory; the small host-side arguments the seam passes (token ids, targets, positions, masks,
// row lists, routing, rotary tables, paged block tables) are copied to the device with the op,
// through one staging upload per op (stream ordered, so the host may reuse them at once).
// Results the seam returns to the host (sums, losses, routing) synchronize the stream.
//
// The seam's ops return nothing (the host's cannot fail), so a kernel that fails here throws
// std::runtime_error naming the op and the CUDA error: a step cannot go on after a device
// fault, and the tools turn the exception into a failed run on every rank.
#pragma once

#include <memory>

#include "kernels/cuda_runtime.h"
#include "ops/backend.h"

namespace ms::kernels {

// A backend on `runtime` whose matmul-class ops read `precision` (ops/backend.h); backends of
// both precisions may share one runtime and its stream.
std::unique_ptr<ops::Backend> make_cuda_backend(
    CudaRuntime& runtime, ops::MatmulPrecision precision = ops::MatmulPrecision::kF32);

// Registers the CUDA backends with ops::backend_for (ops/backend_registry.h): the first
// backend_for(cuda:N) creates device N's runtime, reserving its arena (fraction of free memory,
// MS_CUDA_ARENA_FRACTION overrides the 0.9 default), and its backends (f32 and bf16, sharing
// the runtime). Call once from main.
void register_cuda_backend();

}  // namespace ms::kernels
