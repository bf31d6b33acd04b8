// Disaggregated MoE serving under mpirun equals colocated serving: with the attention ranks
// holding everything but the routed experts and the expert ranks a block of experts each,
// greedy generation over prompts of mixed lengths (continuous batching, micro-batches
// ping-ponging with the experts) produces the same tokens as the single-process engine, and
// logits within 1e-5 relative at every step. Also: colocated serving over every rank equals it,
// each rank holds only its part, and the M-to-N traffic is accounted for. With a draft model on
// the attention ranks (speculative decoding, the target's verify passes going through the
// expert ranks): greedy tokens are the target's alone, sampled tokens those of colocated
// speculative decoding with the same seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "comm/mpi_communicator.h"
#include "core/philox.h"
#include "infer/serving.h"
#include "infer/serving_weights.h"
#include "tests/infer/test_models.h"

namespace ms::infer {
namespace {

std::vector<Request> mixed_requests(int64_t vocab) {
  std::vector<Request> reqs;
  const int64_t lengths[] = {3, 11, 1, 17, 6, 9, 2};
  for (size_t i = 0; i < std::size(lengths); ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    for (int64_t t = 0; t < lengths[i]; ++t) {
      r.prompt.push_back(static_cast<int32_t>(uniform(300 + i, 7, static_cast<uint64_t>(t)) *
                                              static_cast<float>(vocab)));
    }
    r.max_tokens = 6 + static_cast<int64_t>(i % 3);
    reqs.push_back(r);
  }
  return reqs;
}

LoadedModel make_model(const ServeOptions& o, int rank, int world) {
  LoadedModel m;
  m.model = testing::take(model::Transformer::create(testing::tiny_moe(), 1234));
  const ParameterFilter keep = serving_filter(o, rank, world);
  m.model->release_for_serving([&](size_t i) { return !keep || keep(*m.model, i); });
  return m;
}

ServeOptions options(int attention_ranks, int micro_batches) {
  ServeOptions o;
  o.engine.max_batch = 4;  // fewer slots than requests: requests join as others finish
  o.engine.kv_blocks = 64;
  o.engine.block_size = 4;
  o.engine.keep_logits = true;
  o.attention_ranks = attention_ranks;
  o.micro_batches = micro_batches;
  return o;
}

// The single-process engine on the whole model, computed on every rank.
std::vector<Completion> reference(const std::vector<Request>& reqs) {
  auto m = testing::take(model::Transformer::create(testing::tiny_moe(), 1234));
  auto engine = testing::take(Engine::create(*m, nullptr, options(0, 1).engine));
  return testing::take(engine->generate(reqs));
}

void expect_same(const std::vector<Completion>& got, const std::vector<Completion>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    ASSERT_EQ(got[i].logits.size(), want[i].logits.size()) << "request " << i;
    for (size_t s = 0; s < got[i].logits.size(); ++s) {
      const std::vector<float>& a = got[i].logits[s];
      const std::vector<float>& b = want[i].logits[s];
      double diff = 0, scale = 0;
      for (size_t v = 0; v < a.size(); ++v) {
        diff = std::max(diff, std::fabs(static_cast<double>(a[v]) - b[v]));
        scale = std::max(scale, std::fabs(static_cast<double>(b[v])));
      }
      EXPECT_LE(diff, 1e-5 * scale) << "request " << i << " step " << s;
    }
  }
}

class Serving : public ::testing::Test {
 protected:
  void SetUp() override {
    auto world = comm::MpiCommunicator::world();
    ASSERT_TRUE(world.ok()) << world.status().to_string();
    comm_ = std::move(world).value();
  }
  std::unique_ptr<comm::MpiCommunicator> comm_;
};

TEST_F(Serving, DisaggregatedEqualsColocated) {
  if (comm_->size() < 2) GTEST_SKIP() << "needs an attention rank and an expert rank";
  const int world = comm_->size(), attention = std::max(1, world / 2);
  const std::vector<Request> reqs = mixed_requests(testing::tiny_moe().vocab_size);
  for (int m : {1, 2, 3}) {
    const ServeOptions o = options(attention, m);
    LoadedModel part = make_model(o, comm_->rank(), world);
    Result<ServeResult> r = serve(part, reqs, o, *comm_);
    ASSERT_TRUE(r.ok()) << r.status().message();
    if (comm_->rank() != 0) continue;
    expect_same(r->completions, reference(reqs));
    const config::ModelConfig c = testing::tiny_moe();
    int64_t routed_rows = 0, received = 0, sent = 0;
    for (int rank = 0; rank < world; ++rank) {
      const RankReport& rep = r->ranks[static_cast<size_t>(rank)];
      EXPECT_EQ(rep.role, rank < attention ? "attention" : "experts");
      const PipelineStats& p = rep.pipeline;
      if (rank < attention) {
        EXPECT_GT(p.micro_batches, 0);
        EXPECT_LE(p.micro_batches, p.steps * m);
        routed_rows += p.rows;
        sent += p.bytes_sent;
      } else {
        received += p.bytes_received;
      }
    }
    // Every routed row went to an expert rank (top_k per token per layer) and came back.
    int64_t tokens = 0;
    for (int rank = 0; rank < attention; ++rank) {
      const RankReport& rep = r->ranks[static_cast<size_t>(rank)];
      tokens += rep.prefill_tokens + rep.decode_tokens;
    }
    EXPECT_EQ(routed_rows, tokens * c.moe.top_k * c.n_layers);
    EXPECT_EQ(sent, received);
  }
}

// With int8 weights: every expert rank converts only its experts, the attention ranks every
// other linear weight, and greedy tokens equal the single-process engine on the whole model
// converted the same way. Each expert rank's report counts its experts' int8 bytes.
TEST_F(Serving, QuantizedExpertsOnExpertRanksEqualColocated) {
  if (comm_->size() < 2) GTEST_SKIP() << "needs an attention rank and an expert rank";
  const int world = comm_->size(), attention = std::max(1, world / 2);
  const config::ModelConfig c = testing::tiny_moe();
  const WeightOptions int8{ops::WeightFormat::kInt8, 64};
  const std::vector<Request> reqs = mixed_requests(c.vocab_size);
  const ServeOptions o = options(attention, 2);
  LoadedModel part = make_model(o, comm_->rank(), world);
  part.serving_weights = testing::take(quantize_for_serving(*part.model, int8));
  const ServingLayout layout =
      testing::take(ServingLayout::create(world, attention, c.moe.num_experts));
  const int rank = comm_->rank();
  const int64_t mine = layout.is_attention(rank)
                           ? 0
                           : layout.first_expert(rank - attention + 1) -
                                 layout.first_expert(rank - attention);
  const int64_t linear = static_cast<int64_t>(part.model->cached_linear_parameters().size());
  const int64_t routed = c.n_layers * 3 * c.moe.num_experts;
  EXPECT_EQ(part.serving_weights.matrices,
            layout.is_attention(rank) ? linear - routed : c.n_layers * 3 * mine);
  Result<ServeResult> r = serve(part, reqs, o, *comm_);
  ASSERT_TRUE(r.ok()) << r.status().message();
  if (rank != 0) return;
  auto whole = testing::take(model::Transformer::create(c, 1234));
  testing::take(quantize_for_serving(*whole, int8));
  auto engine = testing::take(Engine::create(*whole, nullptr, o.engine));
  const std::vector<Completion> want = testing::take(engine->generate(reqs));
  ASSERT_EQ(r->completions.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(r->completions[i].tokens, want[i].tokens) << "request " << i;
  }
  // An expert's three int8 matrices: (F, D) twice and (D, F), a scale per row.
  const int64_t D = c.d_model, F = c.d_ff;
  const int64_t expert_bytes = 3 * D * F + 4 * (2 * F + D);
  for (int e = attention; e < world; ++e) {
    const int64_t count =
        layout.first_expert(e - attention + 1) - layout.first_expert(e - attention);
    EXPECT_EQ(r->ranks[static_cast<size_t>(e)].weight_bytes, c.n_layers * count * expert_bytes)
        << "rank " << e;
  }
}

TEST_F(Serving, EachRankHoldsOnlyItsPart) {
  if (comm_->size() < 2) GTEST_SKIP() << "needs an attention rank and an expert rank";
  const int world = comm_->size(), attention = std::max(1, world / 2);
  const ServeOptions o = options(attention, 2);
  LoadedModel part = make_model(o, comm_->rank(), world);
  const config::ModelConfig c = testing::tiny_moe();
  const ServingLayout layout = testing::take(ServingLayout::create(world, attention, c.moe.num_experts));
  for (size_t l = 0; l < static_cast<size_t>(c.n_layers); ++l) {
    for (int64_t e = 0; e < c.moe.num_experts; ++e) {
      const bool mine = !layout.is_attention(comm_->rank()) &&
                        layout.owner(e) == comm_->rank() - attention;
      EXPECT_EQ(part.model->holds_expert(l, e), mine) << "layer " << l << " expert " << e;
    }
  }
  const model::Parameter& embed = part.model->parameters()[0];
  EXPECT_EQ(embed.value.raw_data() != nullptr, layout.is_attention(comm_->rank()));
  for (const model::Parameter& p : part.model->parameters()) EXPECT_EQ(p.grad.raw_data(), nullptr);
}

// A smaller model over the target's vocabulary, dense or MoE: a draft.
config::ModelConfig small_draft(bool moe) {
  config::ModelConfig c = moe ? testing::tiny_moe() : testing::tiny_dense();
  c.d_model = 16;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 24;
  c.moe.shared_expert_d_ff = moe ? 8 : 0;
  return c;
}

enum class Draft { kDense, kMoe, kTarget };

const char* draft_name(Draft d) {
  return d == Draft::kDense ? "dense" : d == Draft::kMoe ? "MoE" : "the target as";
}

// The draft as load_draft_for_serving leaves it: whole on the attention ranks, absent on the
// expert ranks. Draft::kTarget is a whole copy of the target (every proposal accepted).
LoadedModel make_draft(Draft kind, const ServeOptions& o, int rank) {
  LoadedModel d;
  if (o.attention_ranks > 0 && rank >= o.attention_ranks) return d;
  d.model = testing::take(kind == Draft::kTarget
                              ? model::Transformer::create(testing::tiny_moe(), 1234)
                              : model::Transformer::create(small_draft(kind == Draft::kMoe), 99));
  return d;
}

// Speculative serving with `o` on every rank; rank 0 gets the result.
ServeResult serve_speculatively(const ServeOptions& o, Draft kind,
                                const std::vector<Request>& reqs, comm::Communicator& comm) {
  LoadedModel part = make_model(o, comm.rank(), comm.size());
  LoadedModel draft = make_draft(kind, o, comm.rank());
  Result<ServeResult> r = serve(part, reqs, o, comm, {}, &draft);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(*r) : ServeResult{};
}

ServeOptions speculative(int attention_ranks, int micro_batches) {
  ServeOptions o = options(attention_ranks, micro_batches);
  o.engine.draft_tokens = 3;
  return o;
}

// Greedy: every completion is the single-process target's without a draft, token for token
// (and its logits within 1e-5), with a dense and a MoE draft and the target as its own draft
// (every proposal accepted, so every verify row is emitted), 1 and 3 micro-batches. The
// expert ranks served every fed position of the verify passes: the routed rows are top_k per
// fed token per layer, proposals included.
TEST_F(Serving, DisaggregatedSpeculationEqualsTheTargetAlone) {
  if (comm_->size() < 2) GTEST_SKIP() << "needs an attention rank and an expert rank";
  const int world = comm_->size(), attention = std::max(1, world / 2);
  const config::ModelConfig c = testing::tiny_moe();
  const std::vector<Request> reqs = mixed_requests(c.vocab_size);
  for (const Draft kind : {Draft::kDense, Draft::kMoe, Draft::kTarget}) {
    for (int m : {1, 3}) {
      const ServeResult r = serve_speculatively(speculative(attention, m), kind, reqs, *comm_);
      if (comm_->rank() != 0) continue;
      SCOPED_TRACE(std::string(draft_name(kind)) + " draft, m " + std::to_string(m));
      expect_same(r.completions, reference(reqs));
      int64_t tokens = 0, decoded = 0, routed_rows = 0, proposed = 0, accepted = 0, rounds = 0,
              emitted = 0;
      for (int rank = 0; rank < attention; ++rank) {
        const RankReport& rep = r.ranks[static_cast<size_t>(rank)];
        tokens += rep.prefill_tokens + rep.decode_tokens;
        decoded += rep.decode_tokens;
        routed_rows += rep.pipeline.rows;
        proposed += rep.draft_proposed;
        accepted += rep.draft_accepted;
        rounds += rep.decode_rounds;
        emitted += rep.decode_generated;
      }
      EXPECT_GT(proposed, 0);
      EXPECT_LE(accepted, proposed);
      if (kind == Draft::kTarget) {
        EXPECT_EQ(accepted, proposed);
      }
      EXPECT_EQ(emitted, rounds + accepted);  // each round: the accepted proposals plus one
      EXPECT_EQ(decoded, rounds + proposed);  // a round feeds its last token and the proposals
      EXPECT_EQ(routed_rows, tokens * c.moe.top_k * c.n_layers);
      for (int rank = attention; rank < world; ++rank) {
        EXPECT_EQ(r.ranks[static_cast<size_t>(rank)].draft_passes, 0) << "rank " << rank;
      }
    }
  }
}

// Sampled: the uniforms are functions of (seed, completion index, purpose) only, so
// disaggregated speculative decoding emits what the single-process engine with the same
// target, draft and k emits, whichever attention rank serves a request.
TEST_F(Serving, DisaggregatedSampledSpeculationEqualsColocated) {
  if (comm_->size() < 2) GTEST_SKIP() << "needs an attention rank and an expert rank";
  const int attention = std::max(1, comm_->size() / 2);
  std::vector<Request> reqs = mixed_requests(testing::tiny_moe().vocab_size);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].sampling = {0.8, 0, 1.0, 40 + i};
    reqs[i].max_tokens = 10;
  }
  const ServeOptions o = speculative(attention, 2);
  const ServeResult r = serve_speculatively(o, Draft::kDense, reqs, *comm_);
  if (comm_->rank() != 0) return;
  auto target = testing::take(model::Transformer::create(testing::tiny_moe(), 1234));
  auto draft = testing::take(model::Transformer::create(small_draft(false), 99));
  auto engine = testing::take(Engine::create(*target, nullptr, o.engine, nullptr, draft.get()));
  const std::vector<Completion> want = testing::take(engine->generate(reqs));
  EXPECT_GT(engine->stats().draft_accepted, 0);  // both branches of the rule ran
  EXPECT_GT(engine->stats().draft_proposed - engine->stats().draft_accepted, 0);
  ASSERT_EQ(r.completions.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(r.completions[i].tokens, want[i].tokens) << "request " << i;
  }
}

TEST_F(Serving, ColocatedAcrossRanksEqualsOneProcess) {
  const std::vector<Request> reqs = mixed_requests(testing::tiny_moe().vocab_size);
  const ServeOptions o = options(0, 1);
  LoadedModel whole = make_model(o, comm_->rank(), comm_->size());
  Result<ServeResult> r = serve(whole, reqs, o, *comm_);
  ASSERT_TRUE(r.ok()) << r.status().message();
  if (comm_->rank() != 0) return;
  expect_same(r->completions, reference(reqs));
  int64_t served = 0;
  for (const RankReport& rep : r->ranks) {
    EXPECT_EQ(rep.role, "colocated");
    served += rep.requests;
  }
  EXPECT_EQ(served, static_cast<int64_t>(reqs.size()));
}

}  // namespace
}  // namespace ms::infer
