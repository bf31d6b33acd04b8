// Speculative rollouts' drafter (rl/rollout_drafter.h): proposals from earlier rollouts of the
// same prompt, then from the sequence itself (prompt lookup), longest match first; bounded by k
// and by what follows the match; other prompts' rollouts never used; the newest `keep` kept.
#include <gtest/gtest.h>

#include <vector>

#include "rl/rollout_drafter.h"

namespace ms::rl {
namespace {

using Tokens = std::vector<int32_t>;

infer::Request request_for(std::vector<int32_t> prompt) {
  infer::Request r;
  r.prompt = std::move(prompt);
  return r;
}

std::vector<int32_t> join(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(RolloutDrafter, ProposesWhatFollowedInAnEarlierRolloutOfThePrompt) {
  RolloutDrafter drafter;
  const std::vector<int32_t> prompt = {10, 11, 12};
  drafter.add(prompt, Tokens{20, 21, 22, 23, 24});
  const infer::Request r = request_for(prompt);
  EXPECT_EQ(drafter.propose(r, join(prompt, {20, 21}), 2), (std::vector<int32_t>{22, 23}));
  EXPECT_EQ(drafter.propose(r, join(prompt, {20, 21}), 9), (std::vector<int32_t>{22, 23, 24}));
  // At the start of the response the prompt's last tokens match the earlier rollout's.
  EXPECT_EQ(drafter.propose(r, prompt, 3), (std::vector<int32_t>{20, 21, 22}));
  // The newest rollout wins a tie.
  drafter.add(prompt, Tokens{20, 21, 30});
  EXPECT_EQ(drafter.propose(r, join(prompt, {20, 21}), 3), (std::vector<int32_t>{30}));
  // A longer match beats a newer shorter one: ..., 99, 21 occurs only in the older rollout.
  drafter.add(prompt, Tokens{99, 21, 40, 41});
  drafter.add(prompt, Tokens{21, 50});
  EXPECT_EQ(drafter.propose(r, join(prompt, {99, 21}), 2), (std::vector<int32_t>{40, 41}));
  EXPECT_EQ(drafter.kept(prompt), 4u);
}

TEST(RolloutDrafter, FallsBackToThePromptItselfAndKeepsPromptsApart) {
  RolloutDrafter drafter;
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 1, 2};
  drafter.add(Tokens{9, 9}, Tokens{5, 6, 100});  // another prompt's rollout
  const infer::Request r = request_for(prompt);
  // ... 7, 8, 1, 2 then 5, 6: "5 6" occurred in the prompt, followed by 7 8 1.
  EXPECT_EQ(drafter.propose(r, join(prompt, {5, 6}), 3), (std::vector<int32_t>{7, 8, 1}));
  // Prompt lookup takes the first occurrence: 3 is followed by 1 4, later by 1 5.
  EXPECT_EQ(drafter.propose(r, Tokens{3, 1, 4, 3, 1, 5, 3}, 2), (std::vector<int32_t>{1, 4}));
  // Nothing matches the last token anywhere: no proposal.
  EXPECT_TRUE(drafter.propose(r, join(prompt, {77}), 3).empty());
  EXPECT_TRUE(drafter.propose(r, join(prompt, {5, 6}), 0).empty());
  EXPECT_EQ(drafter.kept(prompt), 0u);
}

TEST(RolloutDrafter, KeepsTheNewestRollouts) {
  RolloutDrafter drafter(4, 3);
  const std::vector<int32_t> prompt = {1};
  for (int32_t i = 0; i < 5; ++i) drafter.add(prompt, Tokens{50 + i, 60 + i});
  drafter.add(prompt, Tokens{});  // an empty response teaches nothing
  EXPECT_EQ(drafter.kept(prompt), 3u);
  const infer::Request r = request_for(prompt);
  EXPECT_EQ(drafter.propose(r, join(prompt, {52}), 1), (std::vector<int32_t>{62}));
  EXPECT_TRUE(drafter.propose(r, join(prompt, {51}), 1).empty());  // dropped
}

}  // namespace
}  // namespace ms::rl
