// See layer_shape.h.
#include "plan/layer_shape.h"

#include <algorithm>

#include "parallel/tp_layout.h"

namespace ms::plan {

LayerShape layer_shape(const config::RunConfig& c, const Layout& l) {
  const config::ModelConfig& m = c.model;
  LayerShape s;
  s.B = l.micro_batch;
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


}  // namespace ms::plan
