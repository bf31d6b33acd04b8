// The reference transformer: the same architecture as lib/model written directly from the
// description in docs/model.md, in double.
#include "tests/model/reference_model.h"

namespace ms::test {
namespace {

ref::Vec add(ref::Vec a, const ref::Vec& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

}  // namespace

ref::Vec ReferenceModel::attention(const std::string& p, const ref::Vec& x, int64_t B,
                                   int64_t T) {
  const int64_t D = c_.d_model, hd = D / c_.n_heads, n = B * T;
  const std::string a = p + "self_attn.";
  ref::Vec q = ref::linear(x, weight(a + "q_proj.weight"), n, D, c_.n_heads * hd);
  ref::Vec k = ref::linear(x, weight(a + "k_proj.weight"), n, D, c_.n_kv_heads * hd);
  const ref::Vec v = ref::linear(x, weight(a + "v_proj.weight"), n, D, c_.n_kv_heads * hd);
  q = ref::rope(q, B, T, c_.n_heads, hd, c_.rope_theta);
  k = ref::rope(k, B, T, c_.n_kv_heads, hd, c_.rope_theta);
  const ref::Vec o = ref::attention(
      q, k, v, ref::AttentionDims{B, T, c_.n_heads, c_.n_kv_heads, hd, c_.sliding_window});
  return ref::linear(o, weight(a + "o_proj.weight"), n, c_.n_heads * hd, D);
}

ref::Vec ReferenceModel::mlp(const std::string& p, const char* gate, const char* up,
                             const char* down, const ref::Vec& x, int64_t n, int64_t f) {
  const int64_t D = c_.d_model;
  const ref::Vec g = ref::linear(x, weight(p + gate + ".weight"), n, D, f);
  const ref::Vec u = ref::linear(x, weight(p + up + ".weight"), n, D, f);
  return ref::linear(ref::swiglu(g, u), weight(p + down + ".weight"), n, f, D);
}

ref::Vec ReferenceModel::moe(const std::string& p, size_t layer, const ref::Vec& x, int64_t n,
                             bool freeze) {
  const int64_t D = c_.d_model, E = c_.moe.num_experts, k = c_.moe.top_k;
  const std::string m = p + "block_sparse_moe.";
  const ref::Vec probs = ref::softmax(ref::linear(x, weight(m + "gate.weight"), n, D, E), n, E);
  if (!freeze) routing_[layer] = ref::top_k(probs, n, E, k);
  const std::vector<int32_t>& chosen = routing_[layer];
  const ref::Vec w = ref::routing_weights(probs, chosen, E, k);
  ref::Vec y(n * D, 0.0);
  for (int64_t e = 0; e < E; ++e) {
    const ref::Vec out = mlp(m + "experts." + std::to_string(e) + ".", "w1", "w3", "w2", x, n,
                             c_.d_ff);
    for (int64_t a = 0; a < n * k; ++a) {
      if (chosen[a] != e) continue;
      for (int64_t c = 0; c < D; ++c) y[(a / k) * D + c] += w[a] * out[(a / k) * D + c];
    }
  }
  if (c_.moe.shared_expert_d_ff > 0) {
    y = add(std::move(y), mlp(p + "mlp.shared_expert.", "gate_proj", "up_proj", "down_proj", x, n,
                              c_.moe.shared_expert_d_ff));
  }
  aux_ += ref::aux_loss(probs, chosen, E) / static_cast<double>(c_.n_layers);
  return y;
}

ref::Vec ReferenceModel::ffn(const std::string& p, size_t layer, const ref::Vec& x, int64_t n,
                             bool freeze) {
  if (c_.moe.num_experts > 0) return moe(p, layer, x, n, freeze);
  return mlp(p + "mlp.", "gate_proj", "up_proj", "down_proj", x, n, c_.d_ff);
}

double ReferenceModel::loss(const std::vector<int32_t>& inputs,
                            const std::vector<int32_t>& targets, int64_t B, int64_t T,
                            bool freeze) {
  const int64_t D = c_.d_model, n = B * T;
  routing_.resize(c_.n_layers);
  aux_ = 0;
  ref::Vec x = ref::embedding(inputs, weight("model.embed_tokens.weight"), D);
  for (int64_t l = 0; l < c_.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const ref::Vec xn = ref::rmsnorm(x, weight(p + "input_layernorm.weight"), n, D, c_.norm_eps);
    if (c_.parallel_block) {
      x = add(add(x, attention(p, xn, B, T)), ffn(p, l, xn, n, freeze));
      continue;
    }
    const ref::Vec h = add(x, attention(p, xn, B, T));
    const ref::Vec hn =
        ref::rmsnorm(h, weight(p + "post_attention_layernorm.weight"), n, D, c_.norm_eps);
    x = add(h, ffn(p, l, hn, n, freeze));
  }
  const ref::Vec xf = ref::rmsnorm(x, weight("model.norm.weight"), n, D, c_.norm_eps);
  const std::string head = c_.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  logits_ = ref::linear(xf, weight(head), n, D, c_.vocab_size);
  const ref::Vec token_loss = ref::cross_entropy(logits_, targets, c_.vocab_size);
  double sum = 0;
  for (double t : token_loss) sum += t;
  return sum / static_cast<double>(n) + c_.moe.aux_loss_coef * aux_;
}

}  // namespace ms::test
