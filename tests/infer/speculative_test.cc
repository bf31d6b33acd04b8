// Speculative decoding in the engine (infer/engine.h with a draft model): greedy output is the
// target's own, token for token, with a different (smaller, differently seeded) draft, for
// dense, MoE and windowed/parallel/tied targets, k in {1, 3, 5}, more requests than batch
// slots, stop tokens and the context end inside accepted runs; a draft equal to the target has
// every proposal accepted; sampled output is reproducible per seed whatever the batch, and
// the tokens the rule decides follow the target's distribution (a chi-square test against the
// exact marginal, and against the target alone one position further); drafts verified through
// a StepForward (the disaggregated engine's seam); the refusals; and both
// KV caches get every block back once the requests are done, however many proposals were
// rolled back. The same guarantees for a model-free drafter (EngineOptions::drafter), whose
// proposals are point masses: greedy output unchanged, sampled tokens on the target's
// distribution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <span>

#include "core/philox.h"
#include "infer/engine.h"
#include "infer/sampler.h"
#include "tests/infer/test_models.h"

namespace ms::infer {
namespace {

std::unique_ptr<model::Transformer> make_model(const config::ModelConfig& c, uint64_t seed) {
  Result<std::unique_ptr<model::Transformer>> m = model::Transformer::create(c, seed);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return std::move(*m);
}

// A smaller model over the same vocabulary: what a draft is.
config::ModelConfig small_draft(const config::ModelConfig& target) {
  config::ModelConfig c = testing::tiny_dense();
  c.vocab_size = target.vocab_size;
  c.max_seq_len = target.max_seq_len;
  c.d_model = 16;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 24;
  return c;
}

std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    p[i] = static_cast<int32_t>(uniform(seed, 7, static_cast<uint64_t>(i)) *
                                static_cast<float>(vocab));
  }
  return p;
}

// Seven prompts of mixed lengths, max_tokens of mixed sizes (so sequences leave at different
// steps while others are mid-round).
std::vector<Request> mixed_requests(int64_t vocab) {
  std::vector<Request> reqs;
  const int64_t lengths[] = {3, 11, 1, 17, 6, 9, 2};
  const int64_t max_tokens[] = {12, 7, 15, 4, 10, 1, 9};
  for (size_t i = 0; i < std::size(lengths); ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    r.prompt = random_prompt(lengths[i], vocab, 100 + i);
    r.max_tokens = max_tokens[i];
    reqs.push_back(r);
  }
  return reqs;
}

struct Served {
  std::vector<Completion> out;
  EngineStats stats;
  int64_t free_blocks = 0, draft_free_blocks = 0;
};

Served run(model::Transformer& target, model::Transformer* draft, const std::vector<Request>& reqs,
        EngineOptions options) {
  Result<std::unique_ptr<Engine>> engine = Engine::create(target, nullptr, options, nullptr, draft);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  Served r;
  Result<std::vector<Completion>> out = (*engine)->generate(reqs);
  EXPECT_TRUE(out.ok()) << out.status().message();
  r.out = std::move(*out);
  r.stats = (*engine)->stats();
  r.free_blocks = (*engine)->cache().allocator().num_free();
  if ((*engine)->draft_cache() != nullptr) {
    r.draft_free_blocks = (*engine)->draft_cache()->allocator().num_free();
  }
  return r;
}

EngineOptions batch_of(int64_t max_batch, int64_t k) {
  EngineOptions o;
  o.max_batch = max_batch;
  o.draft_tokens = k;
  o.kv_blocks = 64;
  o.block_size = 4;
  return o;
}

// The verify pass: a chunk after cached positions with all_logits gets a logits row per token,
// each that of the full forward at its position, beside an ordinary chunk in the same call.
TEST(Speculation, AnAllLogitsChunkScoresEveryPosition) {
  auto m = make_model(testing::tiny_moe(), 1234);
  const int64_t V = m->config().vocab_size;
  const std::vector<int32_t> a = random_prompt(12, V, 1), b = random_prompt(7, V, 2);
  KvCache cache(m->config(), 8, 4);
  const std::vector<int32_t> blocks_a = *cache.allocator().allocate(3);
  const std::vector<int32_t> blocks_b = *cache.allocator().allocate(2);
  const std::span<const int32_t> sa(a), sb(b);
  const model::CachedChunk prefill{sa.first(7), 0, blocks_a};
  ASSERT_TRUE(m->forward_cached(std::span(&prefill, 1), cache.view()).ok());
  const model::CachedChunk chunks[] = {{sa.subspan(7), 7, blocks_a, 0, true}, {sb, 0, blocks_b}};
  Result<Tensor> rows = m->forward_cached(chunks, cache.view());
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->shape()[0], 6);  // 5 rows for the verify chunk, 1 for the other
  Result<Tensor> full_a = m->forward_logits(a.data(), 1, 12);
  Result<Tensor> full_b = m->forward_logits(b.data(), 1, 7);
  ASSERT_TRUE(full_a.ok() && full_b.ok());
  const auto close = [V](const float* x, const float* y) {
    double diff = 0, scale = 0;
    for (int64_t v = 0; v < V; ++v) {
      diff = std::max(diff, std::fabs(static_cast<double>(x[v]) - y[v]));
      scale = std::max(scale, std::fabs(static_cast<double>(y[v])));
    }
    return diff / scale;
  };
  for (int64_t r = 0; r < 5; ++r) {
    EXPECT_LE(close(rows->data<float>() + r * V, full_a->data<float>() + (7 + r) * V), 1e-4) << r;
  }
  EXPECT_LE(close(rows->data<float>() + 5 * V, full_b->data<float>() + 6 * V), 1e-4);
}

class GreedySpeculation : public ::testing::TestWithParam<std::tuple<int, int64_t>> {
 protected:
  config::ModelConfig target_config() const {
    switch (std::get<0>(GetParam())) {
      case 0:
        return testing::tiny_dense();
      case 1:
        return testing::tiny_moe();
      default:
        return testing::tiny_window_parallel_tied();
    }
  }
  int64_t k() const { return std::get<1>(GetParam()); }
};

TEST_P(GreedySpeculation, OutputIsTheTargetsOwnTokenForToken) {
  auto target = make_model(target_config(), 1234);
  auto draft = make_model(small_draft(target_config()), 99);
  const std::vector<Request> reqs = mixed_requests(target->config().vocab_size);
  const Served alone = run(*target, nullptr, reqs, batch_of(3, k()));
  const Served spec = run(*target, draft.get(), reqs, batch_of(3, k()));
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(spec.out[i].tokens, alone.out[i].tokens) << reqs[i].id;
    EXPECT_EQ(spec.out[i].finish_reason, "length") << reqs[i].id;
  }
  EXPECT_GT(spec.stats.admitted_at_step.back(), 0);  // requests joined mid-run
  EXPECT_EQ(spec.stats.max_active, 3);
  EXPECT_GT(spec.stats.draft_proposed, 0);
  EXPECT_LE(spec.stats.draft_accepted, spec.stats.draft_proposed);
  // Every round emits the accepted proposals plus one token.
  EXPECT_EQ(spec.stats.decode_generated, spec.stats.decode_rounds + spec.stats.draft_accepted);
  EXPECT_LT(spec.stats.steps, alone.stats.steps + 1);
  // No block leaks, whatever was rolled back.
  EXPECT_EQ(spec.free_blocks, 64);
  EXPECT_EQ(spec.draft_free_blocks, 64);
}

TEST_P(GreedySpeculation, ADraftEqualToTheTargetHasEveryProposalAccepted) {
  auto target = make_model(target_config(), 1234);
  auto twin = make_model(target_config(), 1234);
  const std::vector<Request> reqs = mixed_requests(target->config().vocab_size);
  const Served alone = run(*target, nullptr, reqs, batch_of(3, k()));
  const Served spec = run(*target, twin.get(), reqs, batch_of(3, k()));
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(spec.out[i].tokens, alone.out[i].tokens);
  EXPECT_GT(spec.stats.draft_proposed, 0);
  EXPECT_EQ(spec.stats.acceptance_rate(), 1.0);
  const double least = 1.0 + 0.5 * static_cast<double>(std::min<int64_t>(k(), 2));
  EXPECT_GT(spec.stats.tokens_per_round(), least);
  EXPECT_LT(spec.stats.steps, alone.stats.steps);
}

INSTANTIATE_TEST_SUITE_P(TargetsAndK, GreedySpeculation,
                         ::testing::Combine(::testing::Values(0, 1, 2),
                                            ::testing::Values<int64_t>(1, 3, 5)));

// Every emitted token's logits are those of the full forward over the text so far, so the
// positions rolled back after a rejection left nothing behind in the target's cache.
TEST(Speculation, LogitsOfEveryTokenMatchTheFullForward) {
  auto target = make_model(testing::tiny_dense(), 1234);
  auto draft = make_model(small_draft(testing::tiny_dense()), 5);
  std::vector<Request> reqs = mixed_requests(target->config().vocab_size);
  reqs.resize(3);
  EngineOptions options = batch_of(2, 3);
  options.keep_logits = true;
  const Served spec = run(*target, draft.get(), reqs, options);
  const int64_t V = target->config().vocab_size;
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::vector<int32_t> seq = reqs[i].prompt;
    ASSERT_EQ(spec.out[i].logits.size(), spec.out[i].tokens.size());
    for (size_t t = 0; t < spec.out[i].tokens.size(); ++t) {
      const int64_t T = static_cast<int64_t>(seq.size());
      Result<Tensor> full = target->forward_logits(seq.data(), 1, T);
      ASSERT_TRUE(full.ok());
      const float* last = full->data<float>() + (T - 1) * V;
      double diff = 0, scale = 0;
      for (int64_t v = 0; v < V; ++v) {
        diff = std::max(diff, std::fabs(static_cast<double>(spec.out[i].logits[t][v]) - last[v]));
        scale = std::max(scale, std::fabs(static_cast<double>(last[v])));
      }
      EXPECT_LE(diff / scale, 1e-4) << reqs[i].id << " token " << t;
      seq.push_back(spec.out[i].tokens[t]);
    }
  }
}

TEST(Speculation, StopTokensAndTheContextEndCutAcceptedRuns) {
  auto target = make_model(testing::tiny_dense(), 1234);
  auto twin = make_model(testing::tiny_dense(), 1234);  // accepts everything: long runs
  std::vector<Request> reqs = mixed_requests(target->config().vocab_size);
  const Served free_run = run(*target, nullptr, reqs, batch_of(4, 5));
  reqs[0].stop_tokens = {free_run.out[0].tokens[4]};
  reqs[2].stop_tokens = {free_run.out[2].tokens[7]};
  reqs[1].prompt = random_prompt(60, target->config().vocab_size, 8);  // 4 positions left
  reqs[1].max_tokens = 20;
  const Served alone = run(*target, nullptr, reqs, batch_of(4, 5));
  const Served spec = run(*target, twin.get(), reqs, batch_of(4, 5));
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(spec.out[i].tokens, alone.out[i].tokens) << reqs[i].id;
    EXPECT_EQ(spec.out[i].finish_reason, alone.out[i].finish_reason) << reqs[i].id;
  }
  EXPECT_EQ(spec.out[0].finish_reason, "stop");
  EXPECT_EQ(spec.out[1].finish_reason, "length");
  EXPECT_EQ(spec.out[1].tokens.size(), 5u);
  EXPECT_EQ(spec.free_blocks, 64);
  EXPECT_EQ(spec.draft_free_blocks, 64);
}

// Under document masking the document starts carried between rounds follow the accepted
// tokens only. The end-of-document id is the target's most frequent greedy token, so
// generated text crosses documents inside accepted runs (a twin draft) and around rejections
// (a small draft); the output is the target's alone in both cases.
TEST(Speculation, DocumentMaskingFollowsTheAcceptedTokens) {
  auto target = make_model(testing::tiny_dense(), 1234);
  auto twin = make_model(testing::tiny_dense(), 1234);
  auto draft = make_model(small_draft(testing::tiny_dense()), 99);
  std::vector<Request> reqs = mixed_requests(target->config().vocab_size);
  for (Request& r : reqs) r.max_tokens = 16;
  std::map<int32_t, int64_t> frequency;
  for (const Completion& c : run(*target, nullptr, reqs, batch_of(3, 3)).out) {
    for (int32_t t : c.tokens) ++frequency[t];
  }
  const int32_t eod = std::max_element(frequency.begin(), frequency.end(), [](auto a, auto b) {
                        return a.second < b.second;
                      })->first;
  const model::DocumentMask mask{true, true, eod};
  for (model::Transformer* m : {target.get(), twin.get(), draft.get()}) {
    ASSERT_TRUE(m->set_document_mask(mask).ok());
  }
  const Served alone = run(*target, nullptr, reqs, batch_of(3, 3));
  int64_t crossings = 0;
  for (const Completion& c : alone.out) {
    crossings += std::count(c.tokens.begin(), c.tokens.end(), eod);
  }
  ASSERT_GT(crossings, 2) << "the test needs generated end-of-document tokens";
  for (model::Transformer* d : {twin.get(), draft.get()}) {
    const Served spec = run(*target, d, reqs, batch_of(3, 3));
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(spec.out[i].tokens, alone.out[i].tokens);
  }
}

// A draft whose context ends before the target's stops proposing there; the output stays the
// target's.
TEST(Speculation, ADraftWithAShorterContextFallsBackToPlainDecoding) {
  auto target = make_model(testing::tiny_dense(), 1234);
  config::ModelConfig short_config = small_draft(testing::tiny_dense());
  short_config.max_seq_len = 24;
  auto draft = make_model(short_config, 3);
  std::vector<Request> reqs = mixed_requests(target->config().vocab_size);
  for (Request& r : reqs) r.max_tokens = 20;
  const Served alone = run(*target, nullptr, reqs, batch_of(3, 4));
  const Served spec = run(*target, draft.get(), reqs, batch_of(3, 4));
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(spec.out[i].tokens, alone.out[i].tokens);
  EXPECT_GT(spec.stats.draft_proposed, 0);
  // A prompt already at the draft's context: no proposal at all, one token per round.
  reqs.resize(1);
  reqs[0].prompt = random_prompt(24, target->config().vocab_size, 4);
  const Served past = run(*target, draft.get(), reqs, batch_of(3, 4));
  EXPECT_EQ(past.out[0].tokens, run(*target, nullptr, reqs, batch_of(3, 4)).out[0].tokens);
  EXPECT_EQ(past.stats.draft_proposed, 0);
  EXPECT_EQ(past.stats.decode_rounds, 19);
}

// A cache that holds two requests at a time: requests wait for blocks, and every block of both
// caches is back once all are done, with sampled and greedy requests and many rejections.
TEST(Speculation, BothCachesGetEveryBlockBack) {
  auto target = make_model(testing::tiny_moe(), 1234);
  auto draft = make_model(small_draft(testing::tiny_moe()), 17);
  std::vector<Request> reqs = mixed_requests(target->config().vocab_size);
  for (size_t i = 0; i < reqs.size(); i += 2) reqs[i].sampling = {0.8, 0, 1.0, 40 + i};
  EngineOptions options = batch_of(8, 3);
  options.kv_blocks = 10;
  const Served spec = run(*target, draft.get(), reqs, options);
  EXPECT_LT(spec.stats.max_active, 7);
  EXPECT_GT(spec.stats.draft_proposed - spec.stats.draft_accepted, 0);  // some rolled back
  for (const Completion& c : spec.out) {
    EXPECT_EQ(c.finish_reason, "length");
  }
  EXPECT_EQ(spec.free_blocks, 10);
  EXPECT_EQ(spec.draft_free_blocks, 10);
}

std::vector<Request> sampled_requests(int64_t vocab, int64_t n, int64_t max_tokens,
                                      const SamplingParams& sampling) {
  std::vector<Request> reqs;
  const std::vector<int32_t> prompt = random_prompt(5, vocab, 31);
  for (int64_t i = 0; i < n; ++i) {
    Request r;
    r.id = "s" + std::to_string(i);
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    r.sampling = sampling;
    r.sampling.seed = static_cast<uint64_t>(i);
    reqs.push_back(r);
  }
  return reqs;
}

TEST(Speculation, SampledOutputIsReproduciblePerSeedWhateverTheBatch) {
  auto target = make_model(testing::tiny_dense(), 1234);
  auto draft = make_model(small_draft(testing::tiny_dense()), 99);
  std::vector<Request> reqs =
      sampled_requests(target->config().vocab_size, 6, 9, {0.7, 20, 0.95, 0});
  for (size_t i = 0; i < reqs.size(); ++i) reqs[i].prompt = random_prompt(2 + i, 96, i);
  const Served one = run(*target, draft.get(), reqs, batch_of(1, 3));
  std::vector<Request> reversed(reqs.rbegin(), reqs.rend());
  const Served many = run(*target, draft.get(), reversed, batch_of(4, 3));
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(one.out[i].tokens, many.out[reqs.size() - 1 - i].tokens) << reqs[i].id;
  }
}

// The chi-square value a statistic with `df` degrees of freedom exceeds with probability 1e-4
// (Wilson-Hilferty).
double chi_square_bound(int64_t df) {
  const double d = static_cast<double>(df);
  return d * std::pow(1.0 - 2.0 / (9.0 * d) + 3.719 * std::sqrt(2.0 / (9.0 * d)), 3.0);
}

// Pearson's statistic of `counts` (n draws) against `expected` probabilities, cells expecting
// fewer than 5 draws pooled into one; and its degrees of freedom.
std::pair<double, int64_t> chi_square(const std::vector<int64_t>& counts,
                                      const std::vector<double>& expected, int64_t n) {
  double stat = 0, pooled_e = 0;
  int64_t pooled_c = 0, cells = 0;
  for (size_t t = 0; t < counts.size(); ++t) {
    const double e = expected[t] * static_cast<double>(n);
    if (e < 5) {
      pooled_e += e;
      pooled_c += counts[t];
      continue;
    }
    stat += (static_cast<double>(counts[t]) - e) * (static_cast<double>(counts[t]) - e) / e;
    ++cells;
  }
  if (pooled_e > 0) {
    const double diff = static_cast<double>(pooled_c) - pooled_e;
    stat += diff * diff / pooled_e;
    ++cells;
  }
  return {stat, cells - 1};
}

std::vector<int64_t> histogram_at(const std::vector<Completion>& out, size_t position,
                                  int64_t vocab) {
  std::vector<int64_t> counts(static_cast<size_t>(vocab), 0);
  for (const Completion& c : out) ++counts[static_cast<size_t>(c.tokens.at(position))];
  return counts;
}

// The exact marginal of the second generated token under `target` alone:
// sum over x of p(x | prompt) p(y | prompt, x), after the sampling transforms.
std::vector<double> second_token_marginal(model::Transformer& target,
                                          const std::vector<int32_t>& prompt,
                                          const SamplingParams& sampling) {
  const int64_t V = target.config().vocab_size, T = static_cast<int64_t>(prompt.size());
  std::vector<double> marginal(static_cast<size_t>(V), 0.0);
  Result<Tensor> first = target.forward_logits(prompt.data(), 1, T);
  EXPECT_TRUE(first.ok());
  if (!first.ok()) return marginal;
  const std::vector<double> p0 =
      token_distribution(first->data<float>() + (T - 1) * V, V, sampling);
  for (int32_t x = 0; x < V; ++x) {
    if (p0[x] < 1e-12) continue;
    std::vector<int32_t> seq = prompt;
    seq.push_back(x);
    Result<Tensor> next = target.forward_logits(seq.data(), 1, T + 1);
    EXPECT_TRUE(next.ok());
    if (!next.ok()) return marginal;
    const std::vector<double> p1 = token_distribution(next->data<float>() + T * V, V, sampling);
    for (int64_t y = 0; y < V; ++y) marginal[y] += p0[x] * p1[y];
  }
  return marginal;
}

// The second generated token is the first the accept/reject rule decides (the first comes
// from the target's prefill). Its exact marginal under the target alone is
// sum over x of p(x | prompt) p(y | prompt, x); the speculative histogram over 4000 seeds must
// match it. The temperature is low enough that the tiny random models' distributions are far
// from uniform and from each other, so proposals are often rejected.
TEST(Speculation, SampledTokensFollowTheTargetsDistribution) {
  auto target = make_model(testing::tiny_dense(), 1234);
  auto draft = make_model(small_draft(testing::tiny_dense()), 99);
  const int64_t V = target->config().vocab_size, n = 4000;
  const SamplingParams sampling{0.05, 0, 1.0, 0};
  const std::vector<Request> reqs = sampled_requests(V, n, 3, sampling);
  const std::vector<int32_t>& prompt = reqs[0].prompt;
  const std::vector<double> marginal = second_token_marginal(*target, prompt, sampling);
  const Served spec = run(*target, draft.get(), reqs, batch_of(16, 3));
  const double acceptance = spec.stats.acceptance_rate();
  EXPECT_GT(acceptance, 0.02);  // the rule is exercised both ways
  EXPECT_LT(acceptance, 0.9);
  const auto [stat, df] = chi_square(histogram_at(spec.out, 1, V), marginal, n);
  EXPECT_GT(df, 3);
  EXPECT_LT(stat, chi_square_bound(df)) << "chi-square " << stat << " over " << df << " dof";
  // A draft-only sampler (every proposal kept) would follow the draft instead; the same check
  // rejects the draft's own output at that position.
  const Served draft_alone = run(*draft, nullptr, reqs, batch_of(16, 3));
  const auto [draft_stat, draft_df] = chi_square(histogram_at(draft_alone.out, 1, V), marginal, n);
  EXPECT_GT(draft_stat, chi_square_bound(draft_df));
}

// One position further (a token decided after an accepted proposal, or a bonus token), against
// the target alone over as many seeds: the two histograms must be homogeneous (chi-square on
// the 2 x cells table, sparse cells pooled).
TEST(Speculation, LaterSampledTokensMatchTheTargetAlone) {
  auto target = make_model(testing::tiny_dense(), 1234);
  auto draft = make_model(small_draft(testing::tiny_dense()), 99);
  const int64_t V = target->config().vocab_size, n = 4000;
  const SamplingParams sampling{0.05, 0, 1.0, 0};
  std::vector<Request> reqs = sampled_requests(V, n, 4, sampling);
  const Served spec = run(*target, draft.get(), reqs, batch_of(16, 3));
  for (Request& r : reqs) r.sampling.seed += 1000000;  // independent of the speculative draws
  const Served alone = run(*target, nullptr, reqs, batch_of(16, 3));
  for (size_t position : {2u, 3u}) {
    const std::vector<int64_t> a = histogram_at(spec.out, position, V);
    const std::vector<int64_t> b = histogram_at(alone.out, position, V);
    double stat = 0, pooled_a = 0, pooled_b = 0;
    int64_t cells = 0;
    for (int64_t t = 0; t < V; ++t) {
      if (a[t] + b[t] < 10) {
        pooled_a += static_cast<double>(a[t]);
        pooled_b += static_cast<double>(b[t]);
        continue;
      }
      const double e = 0.5 * static_cast<double>(a[t] + b[t]);  // equal sample sizes
      stat += (a[t] - e) * (a[t] - e) / e + (b[t] - e) * (b[t] - e) / e;
      ++cells;
    }
    if (pooled_a + pooled_b > 0) {
      const double e = 0.5 * (pooled_a + pooled_b);
      stat += (pooled_a - e) * (pooled_a - e) / e + (pooled_b - e) * (pooled_b - e) / e;
      ++cells;
    }
    ASSERT_GT(cells, 4);
    EXPECT_LT(stat, chi_square_bound(cells - 1))
        << "position " << position << ": chi-square " << stat << " over " << cells - 1 << " dof";
  }
}

// A StepForward that runs the target here and records how many logits rows each step asked
// for: the engine's seam for disaggregated serving (infer/disaggregated.h's RemoteExperts).
class CountingForward : public StepForward {
 public:
  explicit CountingForward(model::Transformer& m) : m_(m) {}
  Result<Tensor> forward(std::span<const model::CachedChunk> chunks,
                         const model::PagedKvCache& cache) override {
    MS_ASSIGN_OR_RETURN(Tensor logits, m_.forward_cached(chunks, cache));
    for (const model::CachedChunk& c : chunks) verify_chunks += c.all_logits;
    rows += logits.shape()[0];
    return logits;
  }
  int64_t verify_chunks = 0, rows = 0;

 private:
  model::Transformer& m_;
};

// Drafts are verified through a StepForward as through forward_cached: a verify chunk gets a
// row per fed token, and the output is the target's alone.
TEST(Speculation, DraftsAreVerifiedThroughAStepForward) {
  auto target = make_model(testing::tiny_moe(), 1234);
  auto draft = make_model(small_draft(testing::tiny_moe()), 99);
  const std::vector<Request> reqs = mixed_requests(target->config().vocab_size);
  CountingForward forward(*target);
  Result<std::unique_ptr<Engine>> engine =
      Engine::create(*target, nullptr, batch_of(3, 3), &forward, draft.get());
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  Result<std::vector<Completion>> out = (*engine)->generate(reqs);
  ASSERT_TRUE(out.ok()) << out.status().message();
  const Served alone = run(*target, nullptr, reqs, batch_of(3, 3));
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ((*out)[i].tokens, alone.out[i].tokens);
  const EngineStats& stats = (*engine)->stats();
  EXPECT_GT(stats.draft_proposed, 0);
  EXPECT_GT(forward.verify_chunks, 0);
  // Rows: one per prefill chunk, one per verify chunk's fed token (its last token and the
  // proposals) and one per round without proposals.
  EXPECT_EQ(forward.rows, static_cast<int64_t>(reqs.size()) + stats.decode_rounds +
                              stats.draft_proposed);
}

TEST(Speculation, RefusesWhatItCannotServe) {
  auto target = make_model(testing::tiny_dense(), 1234);
  config::ModelConfig other = small_draft(testing::tiny_dense());
  other.vocab_size = 80;
  auto wrong_vocab = make_model(other, 1);
  Result<std::unique_ptr<Engine>> e =
      Engine::create(*target, nullptr, EngineOptions{}, nullptr, wrong_vocab.get());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("vocab_size (80) differs from the target's (96)"),
            std::string::npos)
      << e.status().message();
  EngineOptions zero;
  zero.draft_tokens = 0;
  e = Engine::create(*target, nullptr, zero, nullptr, target.get());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--draft-tokens (0) must be at least 1"), std::string::npos);
}

// A model-free drafter (EngineOptions::drafter) reading its proposals from a script: the
// tokens a request is expected to generate (by id, else `shared`), from the position it has
// reached.
class ScriptDrafter : public TokenDrafter {
 public:
  std::map<std::string, std::vector<int32_t>> by_id;
  std::vector<int32_t> shared;
  int64_t calls = 0;
  std::vector<int32_t> propose(const Request& r, std::span<const int32_t> history,
                               int64_t k) override {
    ++calls;
    const auto found = by_id.find(r.id);
    const std::vector<int32_t>& script = found != by_id.end() ? found->second : shared;
    std::vector<int32_t> out;
    for (size_t j = history.size() - r.prompt.size();
         j < script.size() && static_cast<int64_t>(out.size()) < k; ++j) {
      out.push_back(script[j]);
    }
    return out;
  }
};

// Greedy requests with the target's own continuation as the script, every third token
// corrupted: the output is the target's alone, most proposals are kept, the corrupted ones are
// rolled back, and no forward is spent on drafting.
TEST(Speculation, AModelFreeDrafterKeepsGreedyOutputTheTargets) {
  auto target = make_model(testing::tiny_dense(), 1234);
  const int64_t V = target->config().vocab_size;
  const std::vector<Request> reqs = mixed_requests(V);
  const Served alone = run(*target, nullptr, reqs, batch_of(3, 3));
  ScriptDrafter drafter;
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::vector<int32_t> script = alone.out[i].tokens;
    for (size_t j = 2; j < script.size(); j += 3) script[j] = (script[j] + 1) % static_cast<int32_t>(V);
    drafter.by_id[reqs[i].id] = script;
  }
  EngineOptions options = batch_of(3, 3);
  options.drafter = &drafter;
  const Served spec = run(*target, nullptr, reqs, options);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(spec.out[i].tokens, alone.out[i].tokens);
  EXPECT_GT(drafter.calls, 0);
  EXPECT_EQ(spec.stats.draft_passes, 0);
  EXPECT_GT(spec.stats.acceptance_rate(), 0.3);
  EXPECT_LT(spec.stats.acceptance_rate(), 1.0);
  EXPECT_EQ(spec.stats.decode_generated, spec.stats.decode_rounds + spec.stats.draft_accepted);
  EXPECT_GT(spec.stats.tokens_per_round(), 1.3);
  EXPECT_LT(spec.stats.steps, alone.stats.steps);
  EXPECT_EQ(spec.free_blocks, 64);
}

// Sampled requests: the second token (the first the rule decides) must follow the target's
// exact marginal, as with a draft model, although every proposal is a point mass (the target's
// greedy continuation), so a rejection resamples from p with the proposed token removed.
TEST(Speculation, AModelFreeDrafterKeepsSampledTokensOnTheTargetsDistribution) {
  auto target = make_model(testing::tiny_dense(), 1234);
  const int64_t V = target->config().vocab_size, n = 4000;
  const SamplingParams sampling{0.05, 0, 1.0, 0};
  const std::vector<Request> reqs = sampled_requests(V, n, 3, sampling);
  const std::vector<int32_t>& prompt = reqs[0].prompt;
  const std::vector<double> marginal = second_token_marginal(*target, prompt, sampling);
  Request greedy_request = reqs[0];
  greedy_request.sampling = {};
  ScriptDrafter drafter;
  drafter.shared = run(*target, nullptr, {greedy_request}, batch_of(1, 3)).out[0].tokens;
  EngineOptions options = batch_of(16, 3);
  options.drafter = &drafter;
  const Served spec = run(*target, nullptr, reqs, options);
  EXPECT_GT(spec.stats.acceptance_rate(), 0.02);  // the rule is exercised both ways
  EXPECT_LT(spec.stats.acceptance_rate(), 0.98);
  const auto [stat, df] = chi_square(histogram_at(spec.out, 1, V), marginal, n);
  EXPECT_GT(df, 3);
  EXPECT_LT(stat, chi_square_bound(df)) << "chi-square " << stat << " over " << df << " dof";
}

TEST(Speculation, ADrafterAndADraftModelAreRefusedTogether) {
  auto target = make_model(testing::tiny_dense(), 1234);
  ScriptDrafter drafter;
  EngineOptions options;
  options.drafter = &drafter;
  Result<std::unique_ptr<Engine>> e =
      Engine::create(*target, nullptr, options, nullptr, target.get());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("takes the place of a draft model"), std::string::npos);
}

}  // namespace
}  // namespace ms::infer
