// The arithmetic of disaggregated serving that needs no second rank: which expert rank holds
// which experts, which layouts are refused, how a step's chunks become micro-batches, and the
// staged forward (begin_cached .. cached_logits) with experts run elsewhere equal to
// forward_cached.
#include "infer/disaggregated.h"

#include <gtest/gtest.h>

#include "infer/kv_cache.h"
#include "tests/infer/test_models.h"

namespace ms::infer {
namespace {

TEST(ServingLayout, ExpertBlocksAreContiguousAndBalanced) {
  Result<ServingLayout> l = ServingLayout::create(5, 2, 8);  // 3 expert ranks, 8 experts
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(l->expert_ranks(), 3);
  EXPECT_EQ(l->first_expert(0), 0);
  EXPECT_EQ(l->first_expert(1), 2);
  EXPECT_EQ(l->first_expert(2), 5);
  EXPECT_EQ(l->first_expert(3), 8);
  for (int64_t e = 0; e < 8; ++e) {
    const int r = l->owner(e);
    EXPECT_LE(l->first_expert(r), e);
    EXPECT_LT(e, l->first_expert(r + 1));
  }
  EXPECT_TRUE(l->is_attention(1));
  EXPECT_FALSE(l->is_attention(2));
}

TEST(ServingLayout, RefusesLayoutsThatCannotServe) {
  EXPECT_NE(ServingLayout::create(4, 2, 0).status().message().find("MoE model"),
            std::string::npos);
  EXPECT_NE(ServingLayout::create(4, 4, 8).status().message().find("at least one expert rank"),
            std::string::npos);
  EXPECT_FALSE(ServingLayout::create(4, 0, 8).ok());
  EXPECT_NE(ServingLayout::create(6, 1, 4).status().message().find("without experts"),
            std::string::npos);
}

std::vector<model::CachedChunk> chunks_of(const std::vector<std::vector<int32_t>>& tokens) {
  std::vector<model::CachedChunk> chunks;
  for (const auto& t : tokens) chunks.push_back({t, 0, {}});
  return chunks;
}

TEST(SplitMicroBatches, BalancesTokensKeepsOrderAndNeverLeavesAGroupEmpty) {
  const std::vector<std::vector<int32_t>> tokens = {{1, 2, 3, 4, 5, 6}, {1}, {1}, {1}, {1}, {1}};
  const std::vector<model::CachedChunk> chunks = chunks_of(tokens);
  const auto two = split_micro_batches(chunks, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].size(), 1u);  // the 6-token prefill alone, 5 decode tokens in the other
  EXPECT_EQ(two[1].size(), 5u);
  EXPECT_EQ(two[1].data(), chunks.data() + 1);
  const auto many = split_micro_batches(chunks, 10);  // more groups than chunks
  ASSERT_EQ(many.size(), chunks.size());
  for (const auto& g : many) EXPECT_EQ(g.size(), 1u);
  const auto one = split_micro_batches(chunks, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].size(), chunks.size());
  const auto three = split_micro_batches(chunks_of({{1}, {1}, {1}, {1}, {1}, {1}}), 3);
  for (const auto& g : three) EXPECT_EQ(g.size(), 2u);
}

// The stages with the experts run by a second model that holds only the experts give the
// logits of forward_cached on the whole model.
TEST(StagedForward, ExpertsOnAnotherModelMatchForwardCached) {
  const config::ModelConfig c = testing::tiny_moe();
  auto whole = testing::take(model::Transformer::create(c, 1234));
  auto front = testing::take(model::Transformer::create(c, 1234));
  auto experts = testing::take(model::Transformer::create(c, 1234));
  front->release_for_serving([&](size_t i) { return !front->routed_expert(i).has_value(); });
  experts->release_for_serving([&](size_t i) { return experts->routed_expert(i).has_value(); });
  EXPECT_TRUE(experts->holds_expert(1, 3));
  EXPECT_FALSE(front->holds_expert(1, 3));

  KvCache a(c, 8, 4), b(c, 8, 4);
  const std::vector<int32_t> prompt = {5, 17, 3, 90, 41}, blocks = {0, 1};
  const model::CachedChunk chunk{prompt, 0, blocks};
  Tensor want = testing::take(whole->forward_cached({&chunk, 1}, a.view()));

  Result<model::CachedPass> pass = front->begin_cached({&chunk, 1}, b.view());
  ASSERT_TRUE(pass.ok()) << pass.status().message();
  size_t layers = 0;
  for (front->run_to_experts(*pass); !pass->finished(); front->run_to_experts(*pass)) {
    ASSERT_TRUE(pass->awaiting_experts());
    EXPECT_EQ(pass->layer(), layers++);
    std::vector<float> out(pass->dispatch_rows().size());
    ASSERT_TRUE(experts
                    ->run_experts(pass->layer(), pass->dispatch_offsets(),
                                  pass->dispatch_rows().data(), out.data())
                    .ok());
    ASSERT_TRUE(front->apply_experts(*pass, out).ok());
  }
  EXPECT_EQ(layers, static_cast<size_t>(c.n_layers));
  Tensor got = testing::take(front->cached_logits(*pass));
  ASSERT_EQ(got.numel(), want.numel());
  for (int64_t i = 0; i < got.numel(); ++i) {
    EXPECT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
  }
}

TEST(StagedForward, RefusesMisuse) {
  const config::ModelConfig c = testing::tiny_moe();
  auto front = testing::take(model::Transformer::create(c, 1234));
  front->release_for_serving([&](size_t i) { return !front->routed_expert(i).has_value(); });
  KvCache cache(c, 4, 4);
  const std::vector<int32_t> prompt = {1, 2}, blocks = {0};
  const model::CachedChunk chunk{prompt, 0, blocks};
  model::CachedPass pass = testing::take(front->begin_cached({&chunk, 1}, cache.view()));
  EXPECT_EQ(front->cached_logits(pass).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(front->apply_experts(pass, {}).ok());  // not yet dispatched
  front->run_to_experts(pass);
  std::vector<float> wrong(3);
  EXPECT_NE(front->apply_experts(pass, wrong).message().find("expected"), std::string::npos);
  std::vector<float> out(pass.dispatch_rows().size());
  const Status s = front->run_experts(0, pass.dispatch_offsets(), pass.dispatch_rows().data(),
                                      out.data());
  EXPECT_NE(s.message().find("does not hold"), std::string::npos) << s.message();
  auto dense = testing::take(model::Transformer::create(testing::tiny_dense(), 1));
  const int64_t offsets[] = {0, 0};
  EXPECT_FALSE(dense->run_experts(0, offsets, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace ms::infer
