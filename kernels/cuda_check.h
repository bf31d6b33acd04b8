// MS_CUDA_CHECK: the one checking macro for CUDA runtime calls, for kernels/ and for any other
// CUDA-aware code (the NCCL backend in comm/). A failed call becomes an ms::Status built by
// ms::vendor_error, so it names the call text, file, line, host and rank. Include only from
// code that links CUDA::cudart; headers meant for CPU-only code must not include this one.
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

#include "core/status.h"

namespace ms::kernels {

// True for the errors that mean "there is no usable GPU here" (no device, no or too old a
// driver, a stub driver library, devices busy or unavailable) as opposed to a failure on a GPU
// that is present.
bool cuda_error_means_no_device(cudaError_t err);

// The Status for a failed CUDA runtime call `call` at file:line: kUnavailable when
// cuda_error_means_no_device(err), kInternal otherwise. The detail reads
// "cudaErrorNoDevice: no CUDA-capable device is detected".
Status cuda_error(cudaError_t err, std::string_view call, const char* file, int line);

}  // namespace ms::kernels

// Evaluates a cudaError_t-returning call; on failure returns its Status from the enclosing
// function (which returns ms::Status or ms::Result<T>).
#define MS_CUDA_CHECK(call)                                                      \
  do {                                                                           \
    const cudaError_t ms_cuda_err_ = (call);                                     \
    if (ms_cuda_err_ != cudaSuccess) {                                           \
      return ::ms::kernels::cuda_error(ms_cuda_err_, #call, __FILE__, __LINE__); \
    }                                                                            \
  } while (0)
