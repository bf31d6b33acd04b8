#include "rl/step_rollouts.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>

#include "comm/agree.h"
#include "comm/variable_length.h"
#include "core/timer.h"
#include "rl/rollout_exchange.h"
#include "train/rank_sum.h"

namespace ms::rl {
namespace {

// Every rank's `local` values, rank 0's first (as raw bytes: the communicator has no f64).
// Ranks may hold different counts (none on a rank that only trains).
Result<std::vector<double>> gather_over_ranks(comm::Communicator& group,
                                              std::span<const double> local) {
  if (group.size() == 1) return std::vector<double>(local.begin(), local.end());
  MS_ASSIGN_OR_RETURN(const std::vector<std::string> parts,
                      comm::all_gather_variable(
                          group, std::string_view(reinterpret_cast<const char*>(local.data()),
                                                  local.size_bytes())));
  std::vector<double> all;
  for (const std::string& part : parts) {
    const size_t at = all.size();
    all.resize(at + part.size() / sizeof(double));
    std::memcpy(all.data() + at, part.data(), part.size());
  }
  return all;
}

}  // namespace

PromptStream PromptStream::shuffled(size_t prompts, uint64_t seed) {
  PromptStream s;
  s.order.resize(prompts);
  std::iota(s.order.begin(), s.order.end(), size_t{0});
  s.rng.seed(seed);
  std::shuffle(s.order.begin(), s.order.end(), s.rng);
  return s;
}

std::string PromptStream::encode() const {
  std::ostringstream out;
  out << cursor << ' ' << order.size();
  for (size_t i : order) out << ' ' << i;
  out << ' ' << rng;
  return out.str();
}

Result<PromptStream> PromptStream::decode(const std::string& text) {
  PromptStream s;
  std::istringstream in(text);
  size_t n = 0;
  in >> s.cursor >> n;
  if (!in || n > text.size()) return Internal("a prompt position that does not parse");
  s.order.resize(n);
  for (size_t& i : s.order) in >> i;
  in >> s.rng;
  if (!in || s.cursor > n) return Internal("a prompt position that does not parse");
  return s;
}

std::vector<size_t> PromptStream::next(int64_t n) {
  std::vector<size_t> out;
  for (int64_t i = 0; i < n; ++i) {
    if (cursor == order.size()) {
      std::shuffle(order.begin(), order.end(), rng);
      cursor = 0;
    }
    out.push_back(order[cursor++]);
  }
  return out;
}

// Data parallelism: every rank draws the same prompts for a round and generates the groups at
// its share of the round's positions, seeded by position, so the rollouts are those one rank
// would generate for the whole round. The rewards are gathered, so every rank takes the same
// dynamic-sampling decision over the whole round and keeps the same groups; each trains the
// kept groups of its dp rank's share (RolloutSide says where they come from).
Result<StepRollouts> generate_step_rollouts(RolloutSide& side, int64_t step,
                                            int64_t weight_version) {
  const RlConfig& c = side.config;
  comm::Communicator& gen = side.gen;
  const size_t G = static_cast<size_t>(c.group_size);
  const size_t P = static_cast<size_t>(c.prompts_per_step);
  const bool generates = side.generator != nullptr;
  const size_t gen_share = generates ? P / static_cast<size_t>(side.gen_count) : 0;
  const size_t gen_first = generates ? gen_share * static_cast<size_t>(side.gen_index) : 0;
  const size_t share = side.dp ? P / static_cast<size_t>(side.dp->size()) : 0;
  const size_t base = side.pool ? side.pool_first : gen_first;  // position of rounds[k][0]
  Stopwatch clock;
  StepRollouts out;
  out.step = step;
  out.weight_version = weight_version;
  StepMetrics& m = out.metrics;
  m.step = step;
  // Sums of reward, correct, length and flawed positives; responses.
  std::vector<double> generated(5, 0.0);
  // The engine's decode figures: tokens emitted, rounds, drafted and accepted tokens.
  std::vector<double> decoding(4, 0.0);
  MS_ASSIGN_OR_RETURN(
      out.batch,
      fill_batch(c.prompts_per_step, c.dynamic_sampling ? c.max_rounds : 1, c.dynamic_sampling,
                 "algorithm.max_rounds",
                 [&](int64_t round) -> Result<std::vector<std::vector<double>>> {
                   const std::vector<size_t> prompts = side.stream.next(c.prompts_per_step);
                   const uint64_t seed = c.seed * 0x9e3779b97f4a7c15ULL +
                                         static_cast<uint64_t>(step) * 1000 +
                                         static_cast<uint64_t>(round);
                   Result<std::vector<RolloutGroup>> groups = std::vector<RolloutGroup>{};
                   if (generates) {
                     groups = side.generator->sample_groups(
                         std::span(prompts).subspan(gen_first, gen_share), seed, gen_first);
                   }
                   MS_RETURN_IF_ERROR(comm::agree(gen, groups.status(), "generating rollouts"));
                   if (generates) {
                     const infer::EngineStats& engine = side.generator->engine_stats();
                     decoding[0] += static_cast<double>(engine.decode_generated);
                     decoding[1] += static_cast<double>(engine.decode_rounds);
                     decoding[2] += static_cast<double>(engine.draft_proposed);
                     decoding[3] += static_cast<double>(engine.draft_accepted);
                   }
                   std::vector<double> local;
                   for (const RolloutGroup& g : *groups) {
                     for (const Rollout& x : g) {
                       local.push_back(x.reward);
                       generated[0] += x.reward;
                       generated[1] += x.correct;
                       generated[2] += static_cast<double>(x.sample.response.size());
                       generated[3] += x.flawed;
                       generated[4] += 1.0;
                     }
                   }
                   if (side.pool != nullptr) {
                     MS_ASSIGN_OR_RETURN(*groups, gather_rollout_groups(*side.pool, *groups));
                   }
                   out.rounds.push_back(std::move(*groups));
                   MS_ASSIGN_OR_RETURN(const std::vector<double> all, gather_over_ranks(gen, local));
                   std::vector<std::vector<double>> rewards(all.size() / G);
                   for (size_t i = 0; i < rewards.size(); ++i) {
                     rewards[i].assign(all.begin() + static_cast<ptrdiff_t>(i * G),
                                       all.begin() + static_cast<ptrdiff_t>((i + 1) * G));
                   }
                   return rewards;
                 }));
  const FilledBatch& batch = out.batch;
  m.kept_groups = static_cast<int64_t>(batch.kept.size());
  m.dropped_groups = batch.dropped;
  m.rounds = batch.rounds;
  // Every generated response counts in the reward and accuracy figures (what the policy does),
  // the kept ones in training.
  MS_RETURN_IF_ERROR(train::sum_in_rank_order(gen, generated));
  MS_RETURN_IF_ERROR(train::sum_in_rank_order(gen, decoding));
  if (decoding[1] > 0.0) m.tokens_per_forward = decoding[0] / decoding[1];
  if (decoding[2] > 0.0) m.draft_acceptance = decoding[3] / decoding[2];
  m.mean_reward = generated[0] / generated[4];
  m.accuracy = generated[1] / generated[4];
  m.response_length = generated[2] / generated[4];
  m.flawed_positives = static_cast<int64_t>(generated[3]);
  if (!side.dp) {  // a rank that only generates: the trainers' figures are not its own
    m.rollout_s = clock.elapsed_s();
    return out;
  }
  keep_trained_share(out, share * static_cast<size_t>(side.dp->rank()), share, base);
  MS_RETURN_IF_ERROR(evaluate_behavior(out, side.policy, gen, *side.dp, side.pad));
  m.rollout_s = clock.elapsed_s();
  return out;
}

void keep_trained_share(StepRollouts& out, size_t first, size_t share, size_t base) {
  const FilledBatch& batch = out.batch;
  out.kept.clear();
  out.before.assign(batch.kept.size() + 1, 0);
  for (size_t k = 0; k < batch.kept.size(); ++k) {
    const GroupRef& ref = batch.kept[k];
    const size_t index = static_cast<size_t>(ref.index);
    const bool mine = index >= first && index < first + share;
    out.before[k + 1] = out.before[k] + (mine ? 1 : 0);
    if (!mine) continue;
    for (Rollout& r : out.rounds[static_cast<size_t>(ref.round)][index - base]) {
      out.kept.push_back(&r);
    }
  }
}

Status evaluate_behavior(StepRollouts& out, model::Transformer* policy,
                         comm::Communicator& failures, comm::Communicator& sharers, int32_t pad) {
  std::vector<const Sample*> samples;
  for (const Rollout* r : out.kept) samples.push_back(&r->sample);
  Result<PolicyEval> behavior = PolicyEval{};
  if (policy) behavior = evaluate_policy(*policy, samples, kPolicyMicroBatch, pad);
  MS_RETURN_IF_ERROR(comm::agree(failures, behavior.status(), "the rollout policy's log-probs"));
  out.behavior = std::move(*behavior);
  std::vector<double> entropy = {
      std::accumulate(out.behavior.entropy.begin(), out.behavior.entropy.end(), 0.0),
      static_cast<double>(out.behavior.entropy.size())};
  MS_RETURN_IF_ERROR(train::sum_in_rank_order(sharers, entropy));
  if (entropy[1] > 0.0) out.metrics.entropy = entropy[0] / entropy[1];
  out.metrics.response_tokens = static_cast<int64_t>(entropy[1]);
  return Status::OK();
}

void attach_behavior(StepRollouts& out) {
  size_t at = 0;
  for (Rollout* r : out.kept) {
    const auto n = static_cast<ptrdiff_t>(r->sample.response.size());
    const auto from = static_cast<ptrdiff_t>(at);
    r->behavior.log_probs.assign(out.behavior.log_probs.begin() + from,
                                 out.behavior.log_probs.begin() + from + n);
    r->behavior.entropy.assign(out.behavior.entropy.begin() + from,
                               out.behavior.entropy.begin() + from + n);
    at += static_cast<size_t>(n);
  }
}

void collect_behavior(StepRollouts& out) {
  out.behavior = {};
  for (const Rollout* r : out.kept) {
    out.behavior.log_probs.insert(out.behavior.log_probs.end(), r->behavior.log_probs.begin(),
                                  r->behavior.log_probs.end());
    out.behavior.entropy.insert(out.behavior.entropy.end(), r->behavior.entropy.begin(),
                                r->behavior.entropy.end());
  }
}

}  // namespace ms::rl
