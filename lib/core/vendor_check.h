// One error shape for failed vendor calls (MPI, CUDA, NCCL, cuBLAS). The checking macros of
// each backend (MS_MPI_CHECK in comm/, MS_CUDA_CHECK in kernels/, ...) turn a vendor error code
// into a detail string and call vendor_error(), so every such failure names the call text, the
// source location, the host and the rank in the same words.
#pragma once

#include <string_view>

#include "core/status.h"

namespace ms {

// Builds the Status for a failed vendor call:
//   "MPI call 'MPI_Allreduce(...)' failed at lib/comm/mpi.cc:42 on host node07 rank 3: <detail>"
// `library` is the vendor's name as users know it ("MPI", "CUDA", "NCCL", "cuBLASLt"); `call` is
// the call's source text; `file` and `line` come from __FILE__/__LINE__ (the path is shortened to
// start at the project's top-level folder: lib/, cmd/, kernels/ or tests/). Host and rank come
// from ms::log::host()/rank(). The code is kCommError by default; pass kUnavailable when the
// failure means a device or driver is absent (for example cudaErrorNoDevice), or any other code
// that describes the failure better (kOk, which would hide the failure, becomes kInternal).
Status vendor_error(std::string_view library, std::string_view call, std::string_view detail,
                    const char* file, int line, StatusCode code = StatusCode::kCommError);

// "lib/comm/mpi.cc" from "/home/me/src/lib/comm/mpi.cc"; a path under none of the project's
// top-level folders is returned unchanged.
std::string_view project_relative_path(std::string_view path);

}  // namespace ms

// MS_VENDOR_ERROR("MPI", "MPI_Barrier(comm)", detail): vendor_error() at the current location.
#define MS_VENDOR_ERROR(library, call, detail) \
  ::ms::vendor_error((library), (call), (detail), __FILE__, __LINE__)
