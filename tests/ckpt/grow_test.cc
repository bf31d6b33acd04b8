// ms-ckpt grow (lib/ckpt/grow.h): a model grown in width, depth or both, dense and MoE, tied and
// untied, computes the same logits as the original (both loaded through the public Transformer
// API) and the same greedy tokens; copies of a neuron get different gradients; the plan's
// shares and its refusals (broken head grouping, a width that is not whole heads, shrinking,
// --insert against n_layers).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "ckpt/grow.h"
#include "core/philox.h"
#include "model/transformer.h"

namespace ms::ckpt {
namespace {

config::ModelConfig dense(bool tied) {
  config::ModelConfig c;
  c.vocab_size = 48;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 24;
  c.max_seq_len = 32;
  c.tie_embeddings = tied;
  c.norm_eps = 1e-5;
  return c;
}

config::ModelConfig moe(bool tied) {
  config::ModelConfig c = dense(tied);
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.shared_expert_d_ff = 8;
  c.moe.expert_bias = true;
  return c;
}

bool is_norm(const std::string& name) {
  return name.ends_with("layernorm.weight") || name == "model.norm.weight";
}

// A randomly initialized model whose norm weights and routing biases are not the ones and zeros
// of a fresh model, as a trained one's are not, so their treatment by grow is tested too.
std::unique_ptr<model::Transformer> original(const config::ModelConfig& c) {
  std::unique_ptr<model::Transformer> m = model::Transformer::create(c, 11).value();
  for (model::Parameter& p : m->parameters()) {
    const bool bias = p.name.ends_with("e_score_correction_bias");
    if (!is_norm(p.name) && !bias) continue;
    std::span<float> v = p.value.span<float>();
    for (size_t i = 0; i < v.size(); ++i) {
      const float noise = normal(5, stream_id(p.name), i);
      v[i] = bias ? 0.05f * noise : 1.0f + 0.3f * noise;
    }
  }
  return m;
}

TensorCatalog catalog_of(model::Transformer& m) {
  TensorCatalog catalog;
  for (const model::Parameter& p : m.parameters()) {
    catalog.tensors.push_back(TensorInfo{p.name, DType::kF32, p.global_shape});
  }
  catalog.read = [&m](const std::string& name) -> Result<Tensor> {
    MS_ASSIGN_OR_RETURN(size_t i, m.parameter_index(name));
    return m.parameters()[i].value.clone();
  };
  return catalog;
}

// The grown parameters in a Transformer of the grown config (every parameter filled by name).
std::unique_ptr<model::Transformer> load(const config::ModelConfig& c,
                                         const std::vector<GrownParameter>& grown) {
  std::unique_ptr<model::Transformer> m = model::Transformer::create(c, 99).value();
  EXPECT_EQ(m->parameters().size(), grown.size());
  for (const GrownParameter& g : grown) {
    const size_t i = m->parameter_index(g.name).value();
    Tensor& v = m->parameters()[i].value;
    EXPECT_EQ(v.shape(), g.value.shape()) << g.name;
    std::copy_n(g.value.data<float>(), g.value.numel(), v.data<float>());
  }
  return m;
}

std::vector<int32_t> tokens(int64_t n, int64_t vocab) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) {
    t.push_back(static_cast<int32_t>(uniform(3, 7, static_cast<uint64_t>(i)) * vocab));
  }
  return t;
}

// max |a - b| / max |a| over the logits of two batches of held-out tokens.
double relative_logit_error(model::Transformer& a, model::Transformer& b, int64_t vocab) {
  const int64_t B = 2, T = 16;
  const std::vector<int32_t> in = tokens(B * T, vocab);
  const Tensor la = a.forward_logits(in.data(), B, T).value();
  const Tensor lb = b.forward_logits(in.data(), B, T).value();
  EXPECT_EQ(la.shape(), lb.shape());
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < la.numel(); ++i) {
    diff = std::max(diff, double{std::fabs(la.data<float>()[i] - lb.data<float>()[i])});
    scale = std::max(scale, double{std::fabs(la.data<float>()[i])});
  }
  EXPECT_GT(scale, 0);
  return diff / scale;
}

// Greedy decoding by full forwards: the argmax of the last position, appended, 8 times.
std::vector<int32_t> greedy(model::Transformer& m, int64_t vocab) {
  std::vector<int32_t> seq = tokens(5, vocab);
  for (int step = 0; step < 8; ++step) {
    const int64_t T = static_cast<int64_t>(seq.size());
    const Tensor logits = m.forward_logits(seq.data(), 1, T).value();
    const float* last = logits.data<float>() + (T - 1) * vocab;
    seq.push_back(static_cast<int32_t>(std::max_element(last, last + vocab) - last));
  }
  return seq;
}

struct GrowCase {
  std::string name;
  config::ModelConfig from;
  std::string to;
  std::string insert;
};

void PrintTo(const GrowCase& c, std::ostream* os) { *os << c.name << " --to " << c.to; }

class GrowLossless : public ::testing::TestWithParam<GrowCase> {};

TEST_P(GrowLossless, LogitsAndGreedyTokensMatchTheOriginal) {
  const GrowCase& gc = GetParam();
  std::unique_ptr<model::Transformer> small = original(gc.from);
  Result<GrowPlan> planned =
      plan_grow(gc.from, parse_grow_target(gc.to).value(), parse_grow_insert(gc.insert).value());
  ASSERT_TRUE(planned.ok()) << planned.status().to_string();
  const GrowPlan& plan = *planned;
  Result<std::vector<GrownParameter>> grown = grow_parameters(plan, catalog_of(*small), 17);
  ASSERT_TRUE(grown.ok()) << grown.status().to_string();
  std::unique_ptr<model::Transformer> big = load(plan.to, *grown);
  EXPECT_LE(relative_logit_error(*small, *big, gc.from.vocab_size), 1e-5) << gc.name;
  EXPECT_EQ(greedy(*small, gc.from.vocab_size), greedy(*big, gc.from.vocab_size)) << gc.name;
}

std::vector<GrowCase> cases() {
  std::vector<GrowCase> out;
  for (bool tied : {false, true}) {
    const std::string t = tied ? "Tied" : "Untied";
    for (bool is_moe : {false, true}) {
      const config::ModelConfig c = is_moe ? moe(tied) : dense(tied);
      const std::string m = (is_moe ? "Moe" : "Dense") + t;
      out.push_back({m + "Width", c, "d_model=32,d_ff=40", ""});
      out.push_back({m + "Depth", c, "n_layers=4", ""});
      out.push_back({m + "Both", c, "d_model=24,n_layers=5,d_ff=48", "0,1,1"});
    }
  }
  config::ModelConfig shared = moe(false);
  out.push_back({"SharedExpertWider", shared, "shared_expert_d_ff=12,d_model=32", ""});
  // The query groups grow while the key/value heads stay: 2 kv heads serving 4 queries each.
  out.push_back({"QueryGroupsGrow", dense(false), "d_model=32,n_kv_heads=2", ""});
  // One key/value head becomes two, its 4 query heads split between the copies (G 4 -> 2).
  config::ModelConfig mqa = dense(false);
  mqa.n_kv_heads = 1;
  out.push_back({"KeyValueHeadsSplitTheirGroup", mqa, "n_kv_heads=2", ""});
  out.push_back({"EverySecondLayer", dense(false), "n_layers=3,d_model=24", "every-2"});
  config::ModelConfig parallel = dense(false);
  parallel.parallel_block = true;
  out.push_back({"ParallelBlock", parallel, "d_model=32,n_layers=3,d_ff=30", ""});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Grow, GrowLossless, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(GrowPlan, SharesOfEveryUnitSumToOneAndCopiesDiffer) {
  const GrowPlan plan = plan_grow(dense(false), parse_grow_target("d_model=32,d_ff=60").value(),
                                  GrowInsert{})
                            .value();
  ASSERT_EQ(plan.ffn.size(), 60u);
  std::map<int64_t, std::vector<float>> shares;
  for (const UnitCopy& u : plan.ffn) shares[u.source].push_back(u.share);
  ASSERT_EQ(shares.size(), 24u);
  for (const auto& [source, s] : shares) {
    double sum = 0;
    for (float x : s) sum += x;
    EXPECT_NEAR(sum, 1.0, 1e-6) << "neuron " << source;
    EXPECT_GE(s.size(), 2u);
    for (size_t i = 1; i < s.size(); ++i) EXPECT_NE(s[i], s[0]) << "neuron " << source;
  }
  // The originals keep their places; 60 = 2 * 24 + 12: the first 12 neurons have 3 copies.
  EXPECT_EQ(plan.ffn[5].source, 5);
  EXPECT_EQ(shares[11].size(), 3u);
  EXPECT_EQ(shares[12].size(), 2u);
  // Query heads: 4 -> 8 over kv heads 2 -> 4, each query head in a copy of its own group.
  ASSERT_EQ(plan.query_heads.size(), 8u);
  for (size_t h = 0; h < 8; ++h) {
    const int64_t kv = static_cast<int64_t>(h) / 2;
    EXPECT_EQ(plan.kv_heads[static_cast<size_t>(kv)].source,
              plan.query_heads[h].source / 2) << "query head " << h;
  }
  EXPECT_DOUBLE_EQ(plan.to.norm_eps, 1e-5 * 16 / 32);
  EXPECT_EQ(grow_target_string(plan.to), "d_model=32,n_layers=2,d_ff=60,n_heads=8,n_kv_heads=4");
}

TEST(GrowPlan, LayersGoWhereAsked) {
  const auto layers = [](const std::string& to, const std::string& insert) {
    config::ModelConfig c = dense(false);
    c.n_layers = 4;
    const GrowPlan plan =
        plan_grow(c, parse_grow_target(to).value(), parse_grow_insert(insert).value()).value();
    std::string s;
    for (const GrownLayer& l : plan.layers) s += std::to_string(l.source) + (l.inserted ? "+" : "") + " ";
    return s;
  };
  EXPECT_EQ(layers("n_layers=8", ""), "0 0+ 1 1+ 2 2+ 3 3+ ");
  EXPECT_EQ(layers("n_layers=6", ""), "0 1 1+ 2 3 3+ ");
  EXPECT_EQ(layers("d_ff=24", "every-2"), "0 1 1+ 2 3 3+ ");
  EXPECT_EQ(layers("n_layers=7", "0,2,2"), "0 0+ 1 2 2+ 2+ 3 ");
}

// Copies of a neuron carry different shares of its output, so training gives their gate rows
// different gradients (in the shares' proportion): the copies drift apart.
TEST(GrowTraining, CopiesOfANeuronGetDifferentGradients) {
  const config::ModelConfig c = dense(false);
  std::unique_ptr<model::Transformer> small = original(c);
  const GrowPlan plan =
      plan_grow(c, parse_grow_target("d_ff=48").value(), GrowInsert{}).value();
  std::unique_ptr<model::Transformer> big =
      load(plan.to, grow_parameters(plan, catalog_of(*small), 1).value());
  const std::vector<int32_t> in = tokens(32, c.vocab_size), target = tokens(33, c.vocab_size);
  ASSERT_TRUE(big->forward_backward(in.data(), target.data() + 1, 2, 16, 1.0f).ok());
  const model::Parameter& gate =
      big->parameters()[big->parameter_index("model.layers.0.mlp.gate_proj.weight").value()];
  const int64_t D = c.d_model;
  // Neuron 3 and its copy 27: same weights, gradients in the ratio of their shares (1 : 2).
  const float* w = gate.value.data<float>();
  const float* g = gate.grad.data<float>();
  double differ = 0;
  for (int64_t k = 0; k < D; ++k) {
    EXPECT_EQ(w[3 * D + k], w[27 * D + k]);
    EXPECT_NEAR(g[27 * D + k], 2 * g[3 * D + k], 1e-6 + 1e-4 * std::fabs(g[27 * D + k]));
    differ = std::max(differ, double{std::fabs(g[27 * D + k] - g[3 * D + k])});
  }
  EXPECT_GT(differ, 0);
}

TEST(GrowRefusals, NameTheRule) {
  const auto refused = [](const config::ModelConfig& c, const std::string& to,
                          const std::string& insert = "") {
    Result<GrowTarget> t = parse_grow_target(to);
    if (!t.ok()) return t.status().message();
    Result<GrowInsert> i = parse_grow_insert(insert);
    if (!i.ok()) return i.status().message();
    Result<GrowPlan> plan = plan_grow(c, *t, *i);
    EXPECT_FALSE(plan.ok()) << to;
    EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument) << to;
    return plan.ok() ? std::string() : plan.status().message();
  };
  using ::testing::HasSubstr;
  const config::ModelConfig c = dense(false);  // head size 4, 4 heads in groups of 2
  config::ModelConfig wide_groups = c;         // 8 heads in groups of 4
  wide_groups.d_model = 32;
  wide_groups.n_heads = 8;
  // 3 kv heads: one original kv head gets a single copy with 3 query slots for its 4 heads.
  EXPECT_THAT(refused(wide_groups, "d_model=36,n_kv_heads=3"),
              HasSubstr("breaks the query grouping"));
  EXPECT_THAT(refused(c, "d_model=20"), HasSubstr("not a multiple of the query group size 2"));
  EXPECT_THAT(refused(c, "d_model=32,n_kv_heads=3"), HasSubstr("does not divide n_heads=8"));
  EXPECT_THAT(refused(c, "d_model=18"), HasSubstr("not a multiple of the head size 4"));
  EXPECT_THAT(refused(c, "d_model=32,n_heads=4"), HasSubstr("changes the head size from 4"));
  EXPECT_THAT(refused(c, "d_ff=16"), HasSubstr("grow never shrinks"));
  EXPECT_THAT(refused(c, "n_layers=1"), HasSubstr("grow never shrinks"));
  EXPECT_THAT(refused(c, "n_kv_heads=1,n_heads=4"), HasSubstr("grow never shrinks"));
  EXPECT_THAT(refused(c, "n_layers=4", "0"), HasSubstr("--to n_layers=4 needs 2"));
  EXPECT_THAT(refused(c, "d_ff=30", "5"), HasSubstr("--insert 5: no such layer"));
  EXPECT_THAT(refused(c, "d_ff=30", "every-3"), HasSubstr("inserts no layer"));
  EXPECT_THAT(refused(c, "shared_expert_d_ff=8"), HasSubstr("no shared expert"));
  EXPECT_THAT(refused(c, "width=3"), HasSubstr("unknown key 'width'"));
  EXPECT_THAT(refused(c, "d_ff=30,d_ff=40"), HasSubstr("given twice"));
  EXPECT_THAT(refused(c, "d_ff=-3"), HasSubstr("positive integer"));
  EXPECT_THAT(refused(c, "d_ff=30", "every-x"), HasSubstr("every-K needs a positive K"));
}

}  // namespace
}  // namespace ms::ckpt
