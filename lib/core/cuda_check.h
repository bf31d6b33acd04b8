// MS_CUDA_CHECK: the one checking macro for CUDA runtime calls, used by kernels/ and by the
// NCCL backend in comm/. A failed call becomes an ms::Status built by ms::vendor_error, so it
// names the call text, file, line, host and rank. Header-only on purpose: ms_core links no
// CUDA, and only code that links CUDA::cudart includes this file (CPU-only code must not).
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "core/status.h"
#include "core/vendor_check.h"

namespace ms {

// True for the errors that mean "there is no usable GPU here" (no device, no or too old a
// driver, a stub driver library, devices busy or unavailable) as opposed to a failure on a GPU
// that is present.
inline bool cuda_error_means_no_device(cudaError_t err) {
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return true;
    default:
      return false;
  }
}

// "cudaErrorNoDevice: no CUDA-capable device is detected".
inline std::string cuda_error_detail(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

// The Status for a failed CUDA runtime call `call` at file:line: kUnavailable when
// cuda_error_means_no_device(err), kInternal otherwise.
inline Status cuda_error(cudaError_t err, std::string_view call, const char* file, int line) {
  const StatusCode code =
      cuda_error_means_no_device(err) ? StatusCode::kUnavailable : StatusCode::kInternal;
  return vendor_error("CUDA", call, cuda_error_detail(err), file, line, code);
}

}  // namespace ms

// Evaluates a cudaError_t-returning call; on failure returns its Status from the enclosing
// function (which returns ms::Status or ms::Result<T>).
#define MS_CUDA_CHECK(call)                                               \
  do {                                                                    \
    const cudaError_t ms_cuda_err_ = (call);                              \
    if (ms_cuda_err_ != cudaSuccess) {                                    \
      return ::ms::cuda_error(ms_cuda_err_, #call, __FILE__, __LINE__);   \
    }                                                                     \
  } while (0)
