// See layer_shape.h.
#include "train/layer_shape.h"

#include <algorithm>

#include "parallel/tp_layout.h"

namespace ms::train {

LayerShape layer_shape(const config::RunConfig& c) {
  const config::ModelConfig& m = c.model;
  const config::ParallelConfig& l = c.parallel;
  LayerShape s;
  s.B = c.train.micro_batch;
  s.full_T = c.train.seq_len;
  s.T = s.full_T / l.cp;
  s.N = s.B * s.T;
  s.sp = l.tp > 1 && l.sequence_parallel;
  s.Nr = s.sp ? s.N / l.tp : s.N;
  s.D = m.d_model;
  s.hd = m.d_model / m.n_heads;
  s.heads = m.n_heads / l.tp;
  s.kv_heads = m.n_kv_heads / l.tp;
  s.d_ff = m.d_ff / l.tp;
  s.shared_d_ff = m.moe.shared_expert_d_ff / l.tp;
  s.experts = m.moe.num_experts;
  s.top_k = m.moe.top_k;
  if (s.experts > 0) {
    s.local_experts = s.experts / l.ep;
    // Balanced routing: the N * top_k assignments of each of the ep ranks spread evenly.
    s.expert_rows = std::max<int64_t>(1, s.N * s.top_k * l.ep / s.experts);
  }
  s.vocab = parallel::padded_vocab(m.vocab_size, l.tp) / l.tp;
  s.window = m.sliding_window;
  return s;
}

std::vector<std::array<int64_t, 3>> layer_gemms(const LayerShape& s) {
  std::vector<std::array<int64_t, 3>> g = {{s.N, s.heads * s.hd, s.D},
                                           {s.N, s.kv_heads * s.hd, s.D},
                                           {s.N, s.kv_heads * s.hd, s.D},
                                           {s.N, s.D, s.heads * s.hd}};
  auto mlp = [&](int64_t rows, int64_t f) {
    g.push_back({rows, f, s.D});
    g.push_back({rows, f, s.D});
    g.push_back({rows, s.D, f});
  };
  if (s.experts == 0) {
    mlp(s.N, s.d_ff);
  } else {
    g.push_back({s.N, s.experts, s.D});
    for (int64_t e = 0; e < s.local_experts; ++e) mlp(s.expert_rows, s.d_ff);
    if (s.shared_d_ff > 0) mlp(s.N, s.shared_d_ff);
  }
  return g;
}

double bf16_scratch_bytes(const config::RunConfig& c, bool on_device, bool lm_head) {
  if (c.train.precision != config::Precision::kBf16) return 0;
  const LayerShape s = layer_shape(c);
  std::vector<std::array<int64_t, 3>> gemms = layer_gemms(s);
  if (lm_head) gemms.push_back({s.N, s.vocab, s.D});
  double x = 0, w = 0, dy = 0;  // the largest call's elements, per operand
  for (const auto& [m, n, k] : gemms) {
    x = std::max(x, static_cast<double>(m) * static_cast<double>(k));
    w = std::max(w, static_cast<double>(n) * static_cast<double>(k));
    dy = std::max(dy, static_cast<double>(m) * static_cast<double>(n));
  }
  const double q = static_cast<double>(s.N) * static_cast<double>(s.heads * s.hd);
  const double kv = static_cast<double>(s.N) * static_cast<double>(s.kv_heads * s.hd);
  if (on_device) return 2.0 * (2.0 * (x + w + dy) + 4.0 * (q + kv + kv + q));
  return 4.0 * (std::max(x, q) + std::max(w, kv) + std::max(dy, kv) + q);
}

}  // namespace ms::train
