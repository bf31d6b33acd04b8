// Element loops behind the bf16/f16 reductions; see half_reduce.h.
#include "comm/half_reduce.h"

#include <cmath>

#include "core/half.h"

namespace ms::comm {
namespace {

// One loop for both formats: ToFloat/FromFloat convert a 16-bit pattern to and from fp32.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void reduce_half(ReduceOp op, const uint16_t* in, uint16_t* inout, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float a = ToFloat(in[i]);
    const float b = ToFloat(inout[i]);
    switch (op) {
      case ReduceOp::kSum: inout[i] = FromFloat(a + b); break;
      case ReduceOp::kMax:
        if (std::isnan(a) || (!std::isnan(b) && a > b)) inout[i] = in[i];
        break;
      case ReduceOp::kMin:
        if (std::isnan(a) || (!std::isnan(b) && a < b)) inout[i] = in[i];
        break;
    }
  }
}

}  // namespace

void reduce_bf16(ReduceOp op, const uint16_t* in, uint16_t* inout, size_t n) {
  reduce_half<bf16_to_float, float_to_bf16>(op, in, inout, n);
}

void reduce_f16(ReduceOp op, const uint16_t* in, uint16_t* inout, size_t n) {
  reduce_half<f16_to_float, float_to_f16>(op, in, inout, n);
}

}  // namespace ms::comm
