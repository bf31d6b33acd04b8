// Reductions for bf16 and f16 buffers. MPI has no 16-bit float arithmetic, so the MPI backend
// registers one user-defined (commutative) MPI_Op per (format, operation) built on these loops.
// Each pairwise combine widens both operands to fp32, combines, and rounds back to nearest even,
// so a bf16 sum over many ranks is rounded once per step and depends on the order MPI combines
// contributions in (which may differ between rank counts and algorithms). Max and min return one
// of the operands bit for bit; a NaN operand wins, so a NaN anywhere shows in the result.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/communicator.h"

namespace ms::comm {

// inout[i] = in[i] (op) inout[i] for i < n; both buffers hold bf16 bit patterns.
void reduce_bf16(ReduceOp op, const uint16_t* in, uint16_t* inout, size_t n);
// The same for IEEE f16 bit patterns.
void reduce_f16(ReduceOp op, const uint16_t* in, uint16_t* inout, size_t n);

}  // namespace ms::comm
