// Tensor-parallel MLP and attention: the local ops/ kernels on each rank's head or d_ff slice,
// with the sequence gather done once per column-parallel group and the group's input gradients
// summed locally before one reduction. The row-parallel projection is tp_linear.h's.
#include "parallel/tp_block.h"

#include <string>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/linear.h"
#include "parallel/tp_layout.h"
#include "parallel/tp_linear.h"

namespace ms::parallel {

namespace {

// The (n, width) input of a column-parallel group: x itself without SP, else x's (n/tp, width)
// shards gathered into `gathered`.
Result<const float*> group_input(comm::Communicator& tp, bool sequence_parallel, const float* x,
                                 int64_t rows, int64_t width, std::vector<float>& gathered) {
  if (!sequence_parallel) return x;
  MS_ASSIGN_OR_RETURN(gathered, gather_sequence(tp, x, rows, width));
  return static_cast<const float*>(gathered.data());
}

std::vector<float> zeros(int64_t n) { return std::vector<float>(static_cast<size_t>(n), 0.0f); }

TpLinearShape down_shape(const TpMlpShape& s) {
  return {s.rows, s.d_ff, s.d_model, s.sequence_parallel};
}

TpLinearShape o_shape(const TpAttentionShape& s) {
  return {s.batch * s.seq, s.n_heads * s.head_dim, s.d_model, s.sequence_parallel};
}

// The local attention: H/tp query heads over KV/tp kv heads (the group size H/KV is kept).
ops::AttentionShape local_attention(const TpAttentionShape& s, int tp) {
  ops::AttentionShape a;
  a.batch = s.batch;
  a.seq = s.seq;
  a.heads = s.n_heads / tp;
  a.kv_heads = s.n_kv_heads / tp;
  a.head_dim = s.head_dim;
  a.window = s.window;
  return a;
}

}  // namespace

Status check_tp_mlp(const TpMlpShape& shape, int tp) {
  if (shape.rows < 0 || shape.d_model < 1) {
    return InvalidArgument("tensor-parallel MLP needs rows >= 0 and d_model >= 1, got rows " +
                           std::to_string(shape.rows) + ", d_model " +
                           std::to_string(shape.d_model));
  }
  MS_RETURN_IF_ERROR(check_tp_d_ff(shape.d_ff, "model.d_ff", tp));
  MS_RETURN_IF_ERROR(check_column_parallel({shape.rows, shape.d_model, shape.d_ff,
                                            shape.sequence_parallel}, tp));
  return check_row_parallel(down_shape(shape), tp);
}

Status tp_mlp_forward(comm::Communicator& tp, const TpMlpShape& shape, const TpMlpWeights& w,
                      const float* x, TpMlpActs& acts, float* y) {
  MS_RETURN_IF_ERROR(check_tp_mlp(shape, tp.size()));
  const int64_t n = shape.rows, D = shape.d_model, f = shape.d_ff / tp.size();
  std::vector<float> gathered;
  MS_ASSIGN_OR_RETURN(const float* input,
                      group_input(tp, shape.sequence_parallel, x, n, D, gathered));
  acts.gate.resize(static_cast<size_t>(n * f));
  acts.up.resize(static_cast<size_t>(n * f));
  ops::linear_forward(input, w.gate, acts.gate.data(), n, D, f);
  ops::linear_forward(input, w.up, acts.up.data(), n, D, f);
  std::vector<float> act(static_cast<size_t>(n * f));
  ops::swiglu_forward(acts.gate.data(), acts.up.data(), act.data(), n * f);
  return row_parallel_forward(tp, down_shape(shape), act.data(), w.down, y);
}

Status tp_mlp_backward(comm::Communicator& tp, const TpMlpShape& shape, const TpMlpWeights& w,
                       const float* x, const TpMlpActs& acts, const float* dy, float* dx,
                       const TpMlpGrads& grads) {
  MS_RETURN_IF_ERROR(check_tp_mlp(shape, tp.size()));
  const int64_t n = shape.rows, D = shape.d_model, f = shape.d_ff / tp.size();
  std::vector<float> act(static_cast<size_t>(n * f));
  ops::swiglu_forward(acts.gate.data(), acts.up.data(), act.data(), n * f);
  std::vector<float> dact = zeros(n * f);
  MS_RETURN_IF_ERROR(row_parallel_backward(tp, down_shape(shape), act.data(), w.down, dy,
                                           dact.data(), grads.down));
  std::vector<float> dgate = zeros(n * f), dup = zeros(n * f);
  ops::swiglu_backward(acts.gate.data(), acts.up.data(), dact.data(), dgate.data(), dup.data(),
                       n * f);
  std::vector<float> gathered;
  MS_ASSIGN_OR_RETURN(const float* input,
                      group_input(tp, shape.sequence_parallel, x, n, D, gathered));
  // gate's and up's partial input gradients meet in one buffer before the one reduction.
  std::vector<float> partial = zeros(dx == nullptr ? 0 : n * D);
  float* pdx = dx == nullptr ? nullptr : partial.data();
  ops::linear_backward(input, w.gate, dgate.data(), pdx, grads.gate, n, D, f);
  ops::linear_backward(input, w.up, dup.data(), pdx, grads.up, n, D, f);
  if (dx == nullptr) return Status::OK();
  return reduce_column_input_grad(tp, shape.sequence_parallel, partial, dx);
}

Status check_tp_attention(const TpAttentionShape& shape, const ops::RopeTable& rope, int tp) {
  const TpAttentionShape& s = shape;
  if (s.batch < 1 || s.seq < 1 || s.d_model < 1 || s.head_dim < 2 || s.head_dim % 2 != 0 ||
      s.window < 0) {
    return InvalidArgument(
        "tensor-parallel attention needs batch, seq, d_model >= 1, an even head_dim >= 2 and "
        "window >= 0, got batch " + std::to_string(s.batch) + ", seq " + std::to_string(s.seq) +
        ", d_model " + std::to_string(s.d_model) + ", head_dim " + std::to_string(s.head_dim) +
        ", window " + std::to_string(s.window));
  }
  if (rope.seq_len < s.seq || 2 * rope.half != s.head_dim) {
    return InvalidArgument("the rotary table covers " + std::to_string(rope.seq_len) +
                           " positions of head_dim " + std::to_string(2 * rope.half) +
                           ", the attention needs " + std::to_string(s.seq) + " of " +
                           std::to_string(s.head_dim));
  }
  MS_RETURN_IF_ERROR(check_tp_heads(s.n_heads, s.n_kv_heads, tp));
  const int64_t n = s.batch * s.seq;
  MS_RETURN_IF_ERROR(check_column_parallel({n, s.d_model, s.n_heads * s.head_dim,
                                            s.sequence_parallel}, tp));
  return check_row_parallel(o_shape(s), tp);
}

Status tp_attention_forward(comm::Communicator& tp, const TpAttentionShape& shape,
                            const ops::RopeTable& rope, const TpAttentionWeights& w,
                            const float* x, TpAttentionActs& acts, float* y) {
  MS_RETURN_IF_ERROR(check_tp_attention(shape, rope, tp.size()));
  const ops::AttentionShape a = local_attention(shape, tp.size());
  const int64_t n = shape.batch * shape.seq, D = shape.d_model;
  const int64_t qd = a.heads * a.head_dim, kvd = a.kv_heads * a.head_dim;
  std::vector<float> gathered;
  MS_ASSIGN_OR_RETURN(const float* input,
                      group_input(tp, shape.sequence_parallel, x, n, D, gathered));
  acts.q.resize(static_cast<size_t>(n * qd));
  acts.k.resize(static_cast<size_t>(n * kvd));
  acts.v.resize(static_cast<size_t>(n * kvd));
  ops::linear_forward(input, w.q, acts.q.data(), n, D, qd);
  ops::linear_forward(input, w.k, acts.k.data(), n, D, kvd);
  ops::linear_forward(input, w.v, acts.v.data(), n, D, kvd);
  // Rotation depends only on the position and the element within a head, so rotating the
  // local heads is the global rotation restricted to them.
  ops::rope_forward(acts.q.data(), rope, a.batch, a.seq, a.heads);
  ops::rope_forward(acts.k.data(), rope, a.batch, a.seq, a.kv_heads);
  acts.attn.resize(static_cast<size_t>(n * qd));
  acts.lse.resize(static_cast<size_t>(a.batch * a.heads * a.seq));
  ops::attention_forward(a, acts.q.data(), acts.k.data(), acts.v.data(), acts.attn.data(),
                         acts.lse.data());
  return row_parallel_forward(tp, o_shape(shape), acts.attn.data(), w.o, y);
}

Status tp_attention_backward(comm::Communicator& tp, const TpAttentionShape& shape,
                             const ops::RopeTable& rope, const TpAttentionWeights& w,
                             const float* x, const TpAttentionActs& acts, const float* dy,
                             float* dx, const TpAttentionGrads& grads) {
  MS_RETURN_IF_ERROR(check_tp_attention(shape, rope, tp.size()));
  const ops::AttentionShape a = local_attention(shape, tp.size());
  const int64_t n = shape.batch * shape.seq, D = shape.d_model;
  const int64_t qd = a.heads * a.head_dim, kvd = a.kv_heads * a.head_dim;
  std::vector<float> dattn = zeros(n * qd);
  MS_RETURN_IF_ERROR(row_parallel_backward(tp, o_shape(shape), acts.attn.data(), w.o, dy,
                                           dattn.data(), grads.o));
  std::vector<float> dq = zeros(n * qd), dk = zeros(n * kvd), dv = zeros(n * kvd);
  ops::attention_backward(a, acts.q.data(), acts.k.data(), acts.v.data(), acts.attn.data(),
                          acts.lse.data(), dattn.data(), dq.data(), dk.data(), dv.data());
  ops::rope_backward(dq.data(), rope, a.batch, a.seq, a.heads);
  ops::rope_backward(dk.data(), rope, a.batch, a.seq, a.kv_heads);
  std::vector<float> gathered;
  MS_ASSIGN_OR_RETURN(const float* input,
                      group_input(tp, shape.sequence_parallel, x, n, D, gathered));
  // q's, k's and v's partial input gradients meet in one buffer before the one reduction.
  std::vector<float> partial = zeros(dx == nullptr ? 0 : n * D);
  float* pdx = dx == nullptr ? nullptr : partial.data();
  ops::linear_backward(input, w.q, dq.data(), pdx, grads.q, n, D, qd);
  ops::linear_backward(input, w.k, dk.data(), pdx, grads.k, n, D, kvd);
  ops::linear_backward(input, w.v, dv.data(), pdx, grads.v, n, D, kvd);
  if (dx == nullptr) return Status::OK();
  return reduce_column_input_grad(tp, shape.sequence_parallel, partial, dx);
}

}  // namespace ms::parallel
