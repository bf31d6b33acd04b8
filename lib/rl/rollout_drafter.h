// Speculative rollouts (issue 46; SRT's per-prompt rollout trees): RL samples many responses to
// the same prompt, step after step, and they repeat each other and the prompt (an arithmetic
// answer restates the name and the object of its question). RolloutDrafter keeps the latest
// responses of each prompt in a suffix tree and proposes, for a rollout in progress, the most
// frequent continuation of the longest match of its last tokens in them; failing any match
// there, what first followed that match in its own prompt and tokens (prompt lookup). The actor
// verifies a proposal in the same forward that decodes the next token (infer::TokenDrafter), so
// greedy rollouts are identical with and without it and sampled ones follow the same
// distribution; what changes is the number of tokens per actor forward. The most frequent
// continuation among earlier samples of the same policy is the likeliest to be accepted.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "infer/engine.h"

namespace ms::rl {

// A suffix tree of a few token sequences, bounded in depth (a suffix trie cut at `depth`
// tokens): every run of at most `depth` tokens of an added sequence, starting at or after its
// `from`-th token, is a path from the root. Each node counts the added sequences' occurrences
// of its path and remembers the newest sequence that passed through it. Sequences are removed
// oldest first (remove takes back what add did).
class SuffixTree {
 public:
  explicit SuffixTree(size_t depth) : depth_(depth), nodes_(1) {}

  void add(std::span<const int32_t> seq, size_t from, uint64_t stamp);
  void remove(std::span<const int32_t> seq, size_t from);
  // Up to k tokens following `pattern` (a path of at most depth - 1 tokens): each the child
  // occurring most often (the newest on a tie), until k, no child, or the depth bound. Empty
  // when the pattern is not a path or nothing follows it.
  std::vector<int32_t> continuation(std::span<const int32_t> pattern, int64_t k) const;
  size_t nodes() const { return nodes_.size() - free_.size(); }

 private:
  struct Node {
    std::vector<std::pair<int32_t, uint32_t>> children;  // token -> node, sorted by token
    int64_t count = 0;
    uint64_t newest = 0;
  };
  // The child of `node` for `token`, or 0 (the root is never a child).
  uint32_t child(uint32_t node, int32_t token) const;

  size_t depth_;
  std::vector<Node> nodes_;      // [0] is the root
  std::vector<uint32_t> free_;   // slots of removed nodes, reused
};

class RolloutDrafter : public infer::TokenDrafter {
 public:
  // max_match: the longest suffix tried (then shorter ones down to 1 token); keep: the newest
  // responses kept per prompt; max_draft: the longest proposal the tree can give.
  explicit RolloutDrafter(int64_t max_match = 4, size_t keep = 32, int64_t max_draft = 16)
      : max_match_(max_match), keep_(keep), max_draft_(max_draft) {}

  // Remembers a finished rollout of `prompt`.
  void add(std::span<const int32_t> prompt, std::span<const int32_t> response);

  std::vector<int32_t> propose(const infer::Request& request, std::span<const int32_t> history,
                               int64_t k) override;

  // Responses kept for `prompt`, and its tree's nodes (tests).
  size_t kept(std::span<const int32_t> prompt) const;
  size_t tree_nodes(std::span<const int32_t> prompt) const;

 private:
  struct PromptRollouts {
    explicit PromptRollouts(size_t depth) : tree(depth) {}
    SuffixTree tree;
    std::deque<std::vector<int32_t>> sequences;  // prompt + response, newest first
  };
  int64_t max_match_;
  size_t keep_;
  int64_t max_draft_;
  uint64_t added_ = 0;  // stamps: the newest sequence wins a tie
  // Keyed by the prompt's token bytes.
  std::unordered_map<std::string, PromptRollouts> by_prompt_;
};

}  // namespace ms::rl
