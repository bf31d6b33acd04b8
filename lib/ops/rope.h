// Rotary position embeddings (Su et al., RoFormer) in Hugging Face Llama's half-split
// ("rotate_half") convention: within a head of size hd, element i < hd/2 pairs with i + hd/2,
//   out[i]        = x[i] * cos(p * f_i) - x[i + hd/2] * sin(p * f_i)
//   out[i + hd/2] = x[i + hd/2] * cos(p * f_i) + x[i] * sin(p * f_i)
// with f_i = theta^(-2i/hd) and p the position in the sequence (or, for packed documents
// with per-document positions, the position given per token). Q/K weights exported to
// Hugging Face therefore need no permutation. The backward is the inverse rotation.
#pragma once

#include <cstdint>
#include <vector>

namespace ms::ops {

// cos/sin of p * f_i for positions p < seq_len and i < head_dim / 2, each (seq_len, head_dim/2),
// computed in double and rounded once.
struct RopeTable {
  int64_t seq_len = 0;
  int64_t half = 0;
  std::vector<float> cos;
  std::vector<float> sin;
};
RopeTable make_rope_table(int64_t seq_len, int64_t head_dim, double theta);

// x: (b, t, heads, head_dim), rotated in place by position t; t <= table.seq_len and
// head_dim == 2 * table.half.
void rope_forward(float* x, const RopeTable& table, int64_t b, int64_t t, int64_t heads);

// dx: (b, t, heads, head_dim): the gradient of rope_forward's output, turned in place into the
// gradient of its input (rotation by the opposite angle).
void rope_backward(float* dx, const RopeTable& table, int64_t b, int64_t t, int64_t heads);

// x: (n, heads, head_dim), token i rotated in place by positions[i] (each < table.seq_len):
// rope_forward with positions restarting where the caller says (documents packed in one
// sample, context-parallel chunks at their global positions).
void rope_forward_at(float* x, const RopeTable& table, const int64_t* positions, int64_t n,
                     int64_t heads);
// The gradient of rope_forward_at's output turned in place into that of its input.
void rope_backward_at(float* dx, const RopeTable& table, const int64_t* positions, int64_t n,
                      int64_t heads);

}  // namespace ms::ops
