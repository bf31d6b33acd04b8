// The engine against the training model: greedy generation through the paged KV cache must
// pick, at every step, the argmax of Transformer::forward_logits over the whole sequence so far,
// with logits within 1e-4 relative, for dense, MoE and windowed/parallel/tied models, batched
// or not, with prompts of mixed lengths. Also: sampling is reproducible per seed whatever the
// batch, continuous batching admits waiting requests as slots and blocks free up, and requests
// that cannot be served are refused with a reason while the others finish.
#include "infer/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/philox.h"
#include "tests/infer/test_models.h"

namespace ms::infer {
namespace {

std::unique_ptr<model::Transformer> make_model(const config::ModelConfig& c) {
  Result<std::unique_ptr<model::Transformer>> m = model::Transformer::create(c, 1234);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return std::move(*m);
}

std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    p[i] = static_cast<int32_t>(uniform(seed, 7, static_cast<uint64_t>(i)) *
                                static_cast<float>(vocab));
  }
  return p;
}

// Prompts of mixed lengths, greedy, max_tokens each.
std::vector<Request> mixed_requests(int64_t vocab, int64_t max_tokens) {
  std::vector<Request> reqs;
  const int64_t lengths[] = {3, 11, 1, 17, 6};
  for (size_t i = 0; i < std::size(lengths); ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    r.prompt = random_prompt(lengths[i], vocab, 100 + i);
    r.max_tokens = max_tokens;
    reqs.push_back(r);
  }
  return reqs;
}

std::vector<Completion> run(model::Transformer& m, const std::vector<Request>& reqs,
                            EngineOptions options) {
  Result<std::unique_ptr<Engine>> engine = Engine::create(m, nullptr, options);
  EXPECT_TRUE(engine.ok());
  Result<std::vector<Completion>> out = (*engine)->generate(reqs);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return *out;
}

// Largest |a - b| over the row, relative to the largest |b|.
double relative_error(const std::vector<float>& a, const float* b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// Replays the completion with the full forward: at every step the cached logits match and the
// chosen token is the argmax.
void expect_matches_full_forward(model::Transformer& m, const Request& r, const Completion& c) {
  const int64_t V = m.config().vocab_size;
  std::vector<int32_t> seq = r.prompt;
  ASSERT_EQ(c.logits.size(), c.tokens.size());
  for (size_t t = 0; t < c.tokens.size(); ++t) {
    const int64_t T = static_cast<int64_t>(seq.size());
    Result<Tensor> full = m.forward_logits(seq.data(), 1, T);
    ASSERT_TRUE(full.ok());
    const float* last = full->data<float>() + (T - 1) * V;
    EXPECT_LE(relative_error(c.logits[t], last, V), 1e-4) << r.id << " step " << t;
    EXPECT_EQ(c.tokens[t], argmax(last, V)) << r.id << " step " << t;
    seq.push_back(c.tokens[t]);
  }
}

class GreedyEquivalence : public ::testing::TestWithParam<int> {
 protected:
  config::ModelConfig config() const {
    switch (GetParam()) {
      case 0:
        return testing::tiny_dense();
      case 1:
        return testing::tiny_moe();
      case 2:
        return testing::tiny_window_parallel_tied();
      default: {
        // One kv head for every query head: a decode token is one attention task, which
        // several threads split by query heads.
        config::ModelConfig c = testing::tiny_dense();
        c.n_kv_heads = 1;
        return c;
      }
    }
  }
};

TEST_P(GreedyEquivalence, BatchedGreedyEqualsStepwiseArgmaxOfTheFullForward) {
  auto m = make_model(config());
  const std::vector<Request> reqs = mixed_requests(m->config().vocab_size, 8);
  EngineOptions options;
  options.keep_logits = true;
  options.max_batch = 4;
  const std::vector<Completion> out = run(*m, reqs, options);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(out[i].tokens.size(), 8u);
    EXPECT_EQ(out[i].finish_reason, "length");
    expect_matches_full_forward(*m, reqs[i], out[i]);
  }
}

TEST_P(GreedyEquivalence, OneAtATimeGivesTheSameTokensAsBatched) {
  auto m = make_model(config());
  const std::vector<Request> reqs = mixed_requests(m->config().vocab_size, 8);
  EngineOptions one;
  one.max_batch = 1;
  one.keep_logits = true;
  EngineOptions many;
  many.max_batch = 8;
  const std::vector<Completion> a = run(*m, reqs, one);
  const std::vector<Completion> b = run(*m, reqs, many);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << reqs[i].id;
    expect_matches_full_forward(*m, reqs[i], a[i]);
  }
}

TEST_P(GreedyEquivalence, TokenByTokenPrefillMatchesEveryPositionOfTheFullForward) {
  auto m = make_model(config());
  const int64_t V = m->config().vocab_size;
  const std::vector<int32_t> seq = random_prompt(20, V, 9);
  KvCache cache(m->config(), 4, 8);
  std::optional<std::vector<int32_t>> blocks = cache.allocator().allocate(3);
  ASSERT_TRUE(blocks.has_value());
  std::reverse(blocks->begin(), blocks->end());  // blocks need not be in order
  Result<Tensor> full = m->forward_logits(seq.data(), 1, 20);
  ASSERT_TRUE(full.ok());
  for (int64_t p = 0; p < 20; ++p) {
    const model::CachedChunk chunk{std::span<const int32_t>(&seq[p], 1), p, *blocks};
    Result<Tensor> step = m->forward_cached(std::span(&chunk, 1), cache.view());
    ASSERT_TRUE(step.ok()) << step.status().message();
    const std::vector<float> row(step->data<float>(), step->data<float>() + V);
    EXPECT_LE(relative_error(row, full->data<float>() + p * V, V), 1e-4) << "position " << p;
  }
}

std::string model_name(const ::testing::TestParamInfo<int>& info) {
  const char* names[] = {"Dense", "Moe", "WindowParallelTied", "OneKvHead"};
  return names[info.param];
}

INSTANTIATE_TEST_SUITE_P(Models, GreedyEquivalence, ::testing::Values(0, 1, 2, 3), model_name);

std::vector<Request> sampled_requests(int64_t vocab) {
  std::vector<Request> reqs = mixed_requests(vocab, 10);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].sampling = SamplingParams{0.9, 20, 0.95, 1000 + i};
  }
  return reqs;
}

TEST(Sampling, ReproduciblePerSeedWhateverTheBatch) {
  auto m = make_model(testing::tiny_moe());
  const std::vector<Request> reqs = sampled_requests(m->config().vocab_size);
  EngineOptions one;
  one.max_batch = 1;
  const std::vector<Completion> alone = run(*m, reqs, one);
  std::vector<Request> shuffled(reqs.rbegin(), reqs.rend());
  EngineOptions many;
  many.max_batch = 3;
  const std::vector<Completion> batched = run(*m, shuffled, many);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(alone[i].tokens, batched[reqs.size() - 1 - i].tokens) << reqs[i].id;
  }
}

TEST(Sampling, DifferentSeedsGiveDifferentText) {
  auto m = make_model(testing::tiny_dense());
  std::vector<Request> reqs = sampled_requests(m->config().vocab_size);
  reqs.resize(2);
  reqs[1].prompt = reqs[0].prompt;
  reqs[1].sampling.seed = reqs[0].sampling.seed + 1;
  const std::vector<Completion> out = run(*m, reqs, EngineOptions{});
  EXPECT_NE(out[0].tokens, out[1].tokens);
}

// --kv-blocks is the user's; a cache too large to allocate (2^40 blocks: 2^50 floats, beyond
// any address space) or to count is refused naming the sizes, not thrown as std::bad_alloc.
TEST(Engine, AKvCacheTooLargeIsRefusedNamingItsSizes) {
  auto m = make_model(testing::tiny_dense());
  EngineOptions options;
  options.kv_blocks = int64_t{1} << 40;
  Result<std::unique_ptr<Engine>> engine = Engine::create(*m, nullptr, options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(engine.status().message().find("kv_blocks 1099511627776"), std::string::npos)
      << engine.status().message();
  options.kv_blocks = int64_t{1} << 60;
  engine = Engine::create(*m, nullptr, options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("overflows"), std::string::npos)
      << engine.status().message();
}

TEST(ContinuousBatching, WaitingRequestsJoinAsSlotsFreeUp) {
  auto m = make_model(testing::tiny_dense());
  std::vector<Request> reqs = mixed_requests(m->config().vocab_size, 3);
  reqs[0].max_tokens = 9;  // stays while others come and go
  EngineOptions options;
  options.max_batch = 2;
  Result<std::unique_ptr<Engine>> engine = Engine::create(*m, nullptr, options);
  ASSERT_TRUE(engine.ok());
  std::vector<std::string> finished;
  Result<std::vector<Completion>> out =
      (*engine)->generate(reqs, [&](const Completion& c) { finished.push_back(c.id); });
  ASSERT_TRUE(out.ok());
  const EngineStats& s = (*engine)->stats();
  EXPECT_EQ(s.max_active, 2);
  EXPECT_EQ(s.admitted_at_step[0], 0);
  EXPECT_EQ(s.admitted_at_step[1], 0);
  EXPECT_EQ(s.admitted_at_step[2], 3);  // r1 finished after 3 steps
  EXPECT_EQ(s.admitted_at_step[3], 6);
  EXPECT_EQ(finished.back(), "r4");
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ((*out)[i].id, reqs[i].id);  // input order
    EXPECT_EQ(static_cast<int64_t>((*out)[i].tokens.size()), reqs[i].max_tokens);
  }
  EXPECT_EQ((*engine)->cache().view().num_blocks, options.kv_blocks);
}

TEST(ContinuousBatching, ExhaustedCacheMakesRequestsWaitAndOversizedOnesAreRefused) {
  auto m = make_model(testing::tiny_dense());
  std::vector<Request> reqs = mixed_requests(m->config().vocab_size, 4);
  reqs[3].max_tokens = 40;  // 17 + 40 positions: 8 blocks of 8, more than the cache holds
  EngineOptions options;
  options.block_size = 8;
  options.kv_blocks = 3;  // room for one request at a time
  options.max_batch = 8;
  Result<std::unique_ptr<Engine>> engine = Engine::create(*m, nullptr, options);
  ASSERT_TRUE(engine.ok());
  Result<std::vector<Completion>> out = (*engine)->generate(reqs);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[3].finish_reason, "error");
  EXPECT_NE((*out)[3].error.find("KV blocks"), std::string::npos) << (*out)[3].error;
  EXPECT_EQ((*engine)->stats().admitted_at_step[3], -1);
  for (size_t i : {0u, 1u, 2u, 4u}) EXPECT_EQ((*out)[i].tokens.size(), 4u) << i;
  EXPECT_LT((*engine)->stats().max_active, 4);
  EXPECT_GT((*engine)->stats().admitted_at_step[4], 0);
  EXPECT_EQ((*engine)->cache().view().num_blocks, 3);
}

TEST(Requests, PromptLongerThanTheContextIsRefusedWithAReason) {
  auto m = make_model(testing::tiny_dense());
  std::vector<Request> reqs = mixed_requests(m->config().vocab_size, 2);
  reqs[1].prompt = random_prompt(64, m->config().vocab_size, 5);
  reqs[2].prompt.clear();
  const std::vector<Completion> out = run(*m, reqs, EngineOptions{});
  EXPECT_EQ(out[1].finish_reason, "error");
  EXPECT_NE(out[1].error.find("context of 64 tokens"), std::string::npos) << out[1].error;
  EXPECT_EQ(out[2].error, "empty prompt");
  EXPECT_EQ(out[0].tokens.size(), 2u);
}

TEST(Requests, GenerationStopsAtTheContextLength) {
  auto m = make_model(testing::tiny_dense());
  std::vector<Request> reqs = mixed_requests(m->config().vocab_size, 100);
  reqs.resize(1);
  reqs[0].prompt = random_prompt(60, m->config().vocab_size, 5);
  const std::vector<Completion> out = run(*m, reqs, EngineOptions{});
  EXPECT_EQ(out[0].finish_reason, "length");
  EXPECT_EQ(out[0].tokens.size(), 5u);  // positions 60..63 are fed; the 5th token is not
}

TEST(Requests, StopTokenEndsTheSequenceAndIsNotReturned) {
  auto m = make_model(testing::tiny_dense());
  std::vector<Request> reqs = mixed_requests(m->config().vocab_size, 8);
  reqs.resize(1);
  const std::vector<Completion> free_run = run(*m, reqs, EngineOptions{});
  const int32_t stop = free_run[0].tokens[2];
  reqs[0].stop_tokens = {stop};
  const std::vector<Completion> out = run(*m, reqs, EngineOptions{});
  EXPECT_EQ(out[0].finish_reason, "stop");
  const auto first = std::find(free_run[0].tokens.begin(), free_run[0].tokens.end(), stop);
  EXPECT_EQ(out[0].tokens, std::vector<int32_t>(free_run[0].tokens.begin(), first));
}

TEST(Engine, RefusesNonPositiveOptions) {
  auto m = make_model(testing::tiny_dense());
  EngineOptions options;
  options.kv_blocks = 0;
  Result<std::unique_ptr<Engine>> engine = Engine::create(*m, nullptr, options);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("kv_blocks (0)"), std::string::npos);
}

// Logits that are not finite end generation with an error naming the request, the position
// and the step, instead of sampling token 0 from them and exiting 0.
TEST(Engine, NonFiniteLogitsAreAnErrorNotATokenZero) {
  auto m = make_model(testing::tiny_dense());
  testing::overflow_lm_head(*m);
  Request r;
  r.id = "huge";
  r.prompt = {5, 6, 7};
  r.max_tokens = 4;
  Result<std::unique_ptr<Engine>> engine = Engine::create(*m, nullptr, EngineOptions{});
  ASSERT_TRUE(engine.ok());
  Result<std::vector<Completion>> out = (*engine)->generate({r});
  ASSERT_FALSE(out.ok());
  const std::string& message = out.status().message();
  EXPECT_NE(message.find("request 'huge'"), std::string::npos) << message;
  EXPECT_NE(message.find("logits at position 2 (step 1"), std::string::npos) << message;
  EXPECT_NE(message.find("not finite"), std::string::npos) << message;
}

}  // namespace
}  // namespace ms::infer
