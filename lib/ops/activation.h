// Pointwise and row-wise activations: SwiGLU (Shazeer 2020) for the MLP and experts, and a
// row softmax for the MoE router. Backward functions accumulate into their input gradients.
#pragma once

#include <cstdint>

namespace ms::ops {

// gate, up, out: (n). out = silu(gate) * up with silu(g) = g / (1 + exp(-g)). out may alias
// neither input.
void swiglu_forward(const float* gate, const float* up, float* out, int64_t n);

// dout: (n). Accumulates dgate += dout * up * silu'(gate) and dup += dout * silu(gate).
void swiglu_backward(const float* gate, const float* up, const float* dout, float* dgate,
                     float* dup, int64_t n);

// x: (n, e) -> p: (n, e), each row softmax(x row), computed with the row maximum subtracted.
void softmax_forward(const float* x, float* p, int64_t n, int64_t e);

// p, dp: (n, e). Accumulates dx += p * (dp - sum_j(dp_j * p_j)) row by row.
void softmax_backward(const float* p, const float* dp, float* dx, int64_t n, int64_t e);

}  // namespace ms::ops
