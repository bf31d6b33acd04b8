// Layer kernels on the GPU, twins of lib/ops/activation.h, lib/ops/rmsnorm.h and
// lib/ops/rope.h: the same names and argument order on device pointers, plus the stream to
// enqueue on. Plain C++ declarations, so CPU-only code can include this header.
//
// Every pointer is a device pointer. Each entry point checks its arguments first (null with
// work to do, misalignment, negative or inconsistent shapes) and returns InvalidArgument
// naming the op and the argument before any CUDA call; empty work launches nothing. Entry
// points only enqueue: results are ready after synchronize(stream).
//
// Determinism: no atomics. Every output element is written by one thread, and every row sum is
// a fixed tree over a fixed per-thread order, so a second run gives the same bits. Row sums are
// taken in double where the CPU twin takes them in double, and products are rounded as the CPU
// rounds them (no FMA contraction), so results agree with the twin within a few fp32 ulps.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "kernels/device.h"

namespace ms::kernels {

// ---- Activations (ops/activation.h) ----

// gate, up, out: (n). out = silu(gate) * up. out may alias neither input.
Status swiglu_forward(const float* gate, const float* up, float* out, int64_t n,
                      Stream stream = nullptr);
// Accumulates dgate += dout * up * silu'(gate) and dup += dout * silu(gate); dgate and dup
// must be disjoint.
Status swiglu_backward(const float* gate, const float* up, const float* dout, float* dgate,
                       float* dup, int64_t n, Stream stream = nullptr);
// x: (n, e) -> p: (n, e), each row softmax(x row) with the row maximum subtracted; the row sum
// is taken in double as on the CPU. One warp per row (e is the expert count: small).
Status softmax_forward(const float* x, float* p, int64_t n, int64_t e, Stream stream = nullptr);
// p, dp: (n, e). Accumulates dx += p * (dp - sum_j(dp_j * p_j)), the dot product in double.
Status softmax_backward(const float* p, const float* dp, float* dx, int64_t n, int64_t e,
                        Stream stream = nullptr);

// ---- RMSNorm (ops/rmsnorm.h) ----

// x: (n, d), weight: (d) -> out: (n, d), rstd: (n). out must not overlap x. The sum of squares
// is taken in double and rstd rounded once, as on the CPU.
Status rmsnorm_forward(const float* x, const float* weight, float* out, float* rstd, int64_t n,
                       int64_t d, float eps, Stream stream = nullptr);

// Floats of device scratch rmsnorm_backward needs for n rows of width d: one partial column sum
// of dweight per chunk of rows (the chunk count depends on n only).
size_t rmsnorm_backward_scratch(int64_t n, int64_t d);

// x, dout: (n, d), weight: (d), rstd: (n). Accumulates dx: (n, d) and dweight: (d). dweight is
// summed without atomics: each chunk of rows writes its column sums (in row order) to
// `scratch` (rmsnorm_backward_scratch(n, d) floats, contents ignored and overwritten), and a
// second pass adds the chunks' sums to dweight in chunk order. The CPU twin sums all rows in
// one sequence, so dweight agrees with it within fp32 summation-order rounding, not bitwise.
Status rmsnorm_backward(const float* x, const float* weight, const float* rstd,
                        const float* dout, float* dx, float* dweight, int64_t n, int64_t d,
                        float* scratch, Stream stream = nullptr);

// ---- Rotary embeddings (ops/rope.h) ----

// ops::RopeTable on the device: cos and sin each (seq_len, half) row-major, exactly the
// RopeTable's vectors uploaded.
struct RopeTableView {
  const float* cos = nullptr;  // device (seq_len * half): cos(p * f_i) at [p * half + i]
  const float* sin = nullptr;  // device (seq_len * half): sin(p * f_i) at [p * half + i]
  int64_t seq_len = 0;         // positions the table covers: [0, seq_len)
  int64_t half = 0;            // head_dim / 2
};

// x: (b, t_len, heads, 2 * t.half), rotated in place by position (index within t_len);
// InvalidArgument unless t_len <= t.seq_len.
Status rope_forward(float* x, const RopeTableView& t, int64_t b, int64_t t_len, int64_t heads,
                    Stream stream = nullptr);
// The gradient of rope_forward's output turned in place into that of its input.
Status rope_backward(float* dx, const RopeTableView& t, int64_t b, int64_t t_len,
                     int64_t heads, Stream stream = nullptr);
// x: (n, heads, 2 * t.half), token i rotated in place by positions[i] (device, n values).
// Positions are device data, so they cannot be validated before the launch: a token whose
// position lies outside [0, t.seq_len) is left unrotated (the kernel never reads outside the
// table). The CPU twin requires valid positions and reads out of bounds otherwise; callers
// validate (model/ does, from the packed documents' lengths).
Status rope_forward_at(float* x, const RopeTableView& t, const int64_t* positions, int64_t n,
                       int64_t heads, Stream stream = nullptr);
Status rope_backward_at(float* dx, const RopeTableView& t, const int64_t* positions, int64_t n,
                        int64_t heads, Stream stream = nullptr);

}  // namespace ms::kernels
