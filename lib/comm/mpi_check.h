// MS_MPI_CHECK: the one way this library calls MPI. Communicators are set to MPI_ERRORS_RETURN,
// so a failing call returns its error code; the macro turns it into a kCommError Status naming
// the call text, file, line, host and rank (see core/vendor_check.h) and returns it from the
// enclosing function (which returns Status or Result<T>).
#pragma once

#include <mpi.h>

#include <string>

#include "core/status.h"
#include "core/vendor_check.h"

namespace ms::comm {

// "MPI_ERR_ROOT: invalid root" style text for an MPI error code.
std::string mpi_error_text(int code);

}  // namespace ms::comm

#define MS_MPI_CHECK(call)                                                                      \
  do {                                                                                          \
    const int ms_mpi_rc_ = (call);                                                              \
    if (ms_mpi_rc_ != MPI_SUCCESS) {                                                            \
      return ::ms::vendor_error("MPI", #call, ::ms::comm::mpi_error_text(ms_mpi_rc_), __FILE__, \
                                __LINE__);                                                      \
    }                                                                                           \
  } while (0)
