// Maps CUDA runtime error codes onto the toolkit's Status codes through ms::vendor_error.
#include "kernels/cuda_check.h"

#include <string>

#include "core/vendor_check.h"

namespace ms::kernels {

bool cuda_error_means_no_device(cudaError_t err) {
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

Status cuda_error(cudaError_t err, std::string_view call, const char* file, int line) {
  std::string detail = cudaGetErrorName(err);
  detail += ": ";
  detail += cudaGetErrorString(err);
  const StatusCode code =
      cuda_error_means_no_device(err) ? StatusCode::kUnavailable : StatusCode::kInternal;
  return vendor_error("CUDA", call, detail, file, line, code);
}

}  // namespace ms::kernels
