// Speculative rollouts (issue 46; SRT's idea): RL samples many responses to the same prompt,
// step after step, and they repeat each other and the prompt (an arithmetic answer restates the
// name and the object of its question). RolloutDrafter keeps the latest responses of each
// prompt and proposes, for a rollout in progress, what followed the longest match of its last
// tokens: first in earlier rollouts of the same prompt (newest first, the last match in each),
// then in its own prompt and tokens (prompt lookup: the first match). The actor verifies a proposal in the same forward that decodes the next
// token (infer::TokenDrafter), so greedy rollouts are identical with and without it and sampled
// ones follow the same distribution; what changes is the number of tokens per actor forward.
// Matching is a scan of the kept sequences (a few dozen short ones per prompt), not a suffix
// tree: at this size the scan costs microseconds per proposal.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "infer/engine.h"

namespace ms::rl {

class RolloutDrafter : public infer::TokenDrafter {
 public:
  // max_match: the longest suffix tried (then shorter ones down to 1 token); keep: the newest
  // responses kept per prompt.
  explicit RolloutDrafter(int64_t max_match = 4, size_t keep = 32)
      : max_match_(max_match), keep_(keep) {}

  // Remembers a finished rollout of `prompt`.
  void add(std::span<const int32_t> prompt, std::span<const int32_t> response);

  std::vector<int32_t> propose(const infer::Request& request, std::span<const int32_t> history,
                               int64_t k) override;

  // Responses kept for `prompt` (tests).
  size_t kept(std::span<const int32_t> prompt) const;

 private:
  int64_t max_match_;
  size_t keep_;
  // Keyed by the prompt's token bytes; each entry holds prompt + response, newest first.
  std::unordered_map<std::string, std::deque<std::vector<int32_t>>> by_prompt_;
};

}  // namespace ms::rl
