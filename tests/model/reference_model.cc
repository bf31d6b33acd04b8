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
  if (docs_.enabled) {
    // index: the position in the row; doc: documents ended before; pos: position in the doc.
    std::vector<int64_t> index, doc, pos;
    for (int64_t b = 0; b < B; ++b) {
      int64_t ended = 0, last_end = -1;
      for (int64_t t = 0; t < T; ++t) {
        index.push_back(t);
        doc.push_back(ended);
        pos.push_back(t - last_end - 1);
        if ((*inputs_)[b * T + t] == docs_.eod_id) {
          ++ended;
          last_end = t;
        }
      }
    }
    const std::vector<int64_t>& at = docs_.positions ? pos : index;
    q = ref::rope_at(q, at, c_.n_heads, hd, c_.rope_theta);
    k = ref::rope_at(k, at, c_.n_kv_heads, hd, c_.rope_theta);
    const ref::Vec o = ref::masked_attention(
        q, k, v, {B, T, T, c_.n_heads, c_.n_kv_heads, hd, c_.sliding_window}, index, index, doc,
        doc);
    return ref::linear(o, weight(a + "o_proj.weight"), n, c_.n_heads * hd, D);
  }
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
  const ref::Vec logits = ref::linear(x, weight(m + "gate.weight"), n, D, E);
  const ref::Vec probs = ref::softmax(logits, n, E);
  if (!freeze) {
    routing_[layer] = ref::top_k(probs, n, E, k);
    // The capacity: ceil(f n k / E) per expert (at least 1), earliest assignments first.
    std::vector<bool>& kept = kept_[layer];
    kept.assign(static_cast<size_t>(n * k), true);
    const double f = c_.moe.capacity_factor;
    if (f > 0) {
      const int64_t cap = std::max<int64_t>(
          1, static_cast<int64_t>(std::ceil(f * static_cast<double>(n * k) / static_cast<double>(E))));
      std::vector<int64_t> taken(static_cast<size_t>(E), 0);
      for (int64_t a = 0; a < n * k; ++a) kept[a] = taken[routing_[layer][a]]++ < cap;
    }
  }
  const std::vector<int32_t>& chosen = routing_[layer];
  const std::vector<bool>& kept = kept_[layer];
  double z = 0;
  for (int64_t i = 0; i < n; ++i) {
    double mx = logits[i * E], sum = 0;
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, logits[i * E + e]);
    for (int64_t e = 0; e < E; ++e) sum += std::exp(logits[i * E + e] - mx);
    const double lse = mx + std::log(sum);
    z += lse * lse;
  }
  z_ += z / static_cast<double>(n) / static_cast<double>(c_.n_layers);
  const ref::Vec w = ref::routing_weights(probs, chosen, E, k);
  ref::Vec y(n * D, 0.0);
  for (int64_t e = 0; e < E; ++e) {
    const ref::Vec out = mlp(m + "experts." + std::to_string(e) + ".", "w1", "w3", "w2", x, n,
                             c_.d_ff);
    for (int64_t a = 0; a < n * k; ++a) {
      if (chosen[a] != e || !kept[a]) continue;
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
  inputs_ = &inputs;
  routing_.resize(c_.n_layers);
  kept_.resize(c_.n_layers);
  aux_ = 0;
  z_ = 0;
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
  return sum / static_cast<double>(n) + c_.moe.aux_loss_coef * aux_ + c_.moe.z_loss_coef * z_;
}

}  // namespace ms::test
