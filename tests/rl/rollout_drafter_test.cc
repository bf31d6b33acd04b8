// Speculative rollouts' drafter (rl/rollout_drafter.h): proposals from the suffix tree of
// earlier rollouts of the same prompt (the most frequent continuation, the newest on a tie),
// then from the sequence itself (prompt lookup), longest match first; bounded by k and by what
// follows the match; other prompts' rollouts never used; the newest `keep` kept, the evicted
// ones' counts taken back out of the tree.
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

TEST(RolloutDrafter, ProposesTheMostFrequentContinuation) {
  RolloutDrafter drafter;
  const std::vector<int32_t> prompt = {1, 2};
  drafter.add(prompt, Tokens{7, 8, 9});
  drafter.add(prompt, Tokens{7, 8, 9});
  drafter.add(prompt, Tokens{7, 8, 30, 31});  // the newest, but seen once
  const infer::Request r = request_for(prompt);
  EXPECT_EQ(drafter.propose(r, join(prompt, {7, 8}), 4), (std::vector<int32_t>{9}));
  // Past a branch each step takes the most frequent child: 7 then 8 (3 times), then 9 (twice).
  EXPECT_EQ(drafter.propose(r, prompt, 4), (std::vector<int32_t>{7, 8, 9}));
  // A proposal never exceeds the drafter's bound.
  RolloutDrafter short_drafts(4, 32, 2);
  short_drafts.add(prompt, Tokens{7, 8, 9});
  EXPECT_EQ(short_drafts.propose(r, prompt, 8), (std::vector<int32_t>{7, 8}));
}

TEST(RolloutDrafter, EvictionTakesCountsBackOutOfTheTree) {
  RolloutDrafter drafter(4, 2);
  const std::vector<int32_t> prompt = {1, 2};
  const infer::Request r = request_for(prompt);
  drafter.add(prompt, Tokens{7, 9});
  const size_t one = drafter.tree_nodes(prompt);
  drafter.add(prompt, Tokens{7, 9});
  EXPECT_EQ(drafter.tree_nodes(prompt), one);  // the same paths, counted twice
  drafter.add(prompt, Tokens{7, 30});  // evicts the first {7, 9}: 9 and 30 once each now
  EXPECT_EQ(drafter.kept(prompt), 2u);
  EXPECT_EQ(drafter.propose(r, join(prompt, {7}), 1), (std::vector<int32_t>{30}));  // newest
  drafter.add(prompt, Tokens{40});  // evicts the second {7, 9}: its paths are gone
  EXPECT_EQ(drafter.propose(r, join(prompt, {7}), 1), (std::vector<int32_t>{30}));
  EXPECT_EQ(drafter.propose(r, Tokens{1, 2, 7, 9}, 1), (std::vector<int32_t>{}));
  drafter.add(prompt, Tokens{41});
  drafter.add(prompt, Tokens{40});
  // {40} and {41} only: paths of {7, 30} were freed, their slots reused.
  EXPECT_LE(drafter.tree_nodes(prompt), one);
}

}  // namespace
}  // namespace ms::rl
