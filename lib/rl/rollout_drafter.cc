#include "rl/rollout_drafter.h"

#include <algorithm>

namespace ms::rl {
namespace {

std::string key_of(std::span<const int32_t> prompt) {
  return std::string(reinterpret_cast<const char*>(prompt.data()), prompt.size_bytes());
}

// Up to k tokens that followed the first occurrence of `pattern` in seq that ends before its
// last token (so at least one token follows it), as prompt lookup decoding takes it: a response
// restating its question follows the question's wording. Nothing when there is none.
std::vector<int32_t> first_continuation(std::span<const int32_t> seq,
                                        std::span<const int32_t> pattern, int64_t k) {
  const size_t n = pattern.size();
  for (size_t end = n; end < seq.size(); ++end) {
    if (!std::equal(pattern.begin(), pattern.end(), seq.begin() + static_cast<ptrdiff_t>(end - n))) {
      continue;
    }
    const size_t stop = std::min(seq.size(), end + static_cast<size_t>(k));
    return std::vector<int32_t>(seq.begin() + static_cast<ptrdiff_t>(end),
                                seq.begin() + static_cast<ptrdiff_t>(stop));
  }
  return {};
}

}  // namespace

uint32_t SuffixTree::child(uint32_t node, int32_t token) const {
  const auto& c = nodes_[node].children;
  const auto it = std::lower_bound(c.begin(), c.end(), std::make_pair(token, uint32_t{0}));
  return it != c.end() && it->first == token ? it->second : 0;
}

void SuffixTree::add(std::span<const int32_t> seq, size_t from, uint64_t stamp) {
  for (size_t start = from; start < seq.size(); ++start) {
    uint32_t node = 0;
    const size_t stop = std::min(seq.size(), start + depth_);
    for (size_t i = start; i < stop; ++i) {
      uint32_t next = child(node, seq[i]);
      if (next == 0) {
        if (free_.empty()) {
          next = static_cast<uint32_t>(nodes_.size());
          nodes_.emplace_back();
        } else {
          next = free_.back();
          free_.pop_back();
          nodes_[next] = Node{};
        }
        auto& c = nodes_[node].children;
        c.insert(std::lower_bound(c.begin(), c.end(), std::make_pair(seq[i], uint32_t{0})),
                 {seq[i], next});
      }
      node = next;
      ++nodes_[node].count;
      nodes_[node].newest = std::max(nodes_[node].newest, stamp);
    }
  }
}

void SuffixTree::remove(std::span<const int32_t> seq, size_t from) {
  for (size_t start = from; start < seq.size(); ++start) {
    uint32_t node = 0;
    const size_t stop = std::min(seq.size(), start + depth_);
    for (size_t i = start; i < stop; ++i) {
      const uint32_t next = child(node, seq[i]);
      if (next == 0) break;  // not added (a bug); nothing below to take back
      if (--nodes_[next].count == 0) {
        // Nothing passes through it any more, nor through anything below it: unlink the
        // subtree and reuse its slots.
        auto& c = nodes_[node].children;
        c.erase(std::lower_bound(c.begin(), c.end(), std::make_pair(seq[i], uint32_t{0})));
        std::vector<uint32_t> stack = {next};
        while (!stack.empty()) {
          const uint32_t dead = stack.back();
          stack.pop_back();
          for (const auto& [token, below] : nodes_[dead].children) stack.push_back(below);
          nodes_[dead].children.clear();
          free_.push_back(dead);
        }
        break;
      }
      node = next;
    }
  }
}

std::vector<int32_t> SuffixTree::continuation(std::span<const int32_t> pattern, int64_t k) const {
  uint32_t node = 0;
  for (int32_t token : pattern) {
    node = child(node, token);
    if (node == 0) return {};
  }
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < k && !nodes_[node].children.empty()) {
    const std::pair<int32_t, uint32_t>* best = nullptr;
    for (const auto& c : nodes_[node].children) {
      const Node& n = nodes_[c.second];
      if (best == nullptr || n.count > nodes_[best->second].count ||
          (n.count == nodes_[best->second].count && n.newest > nodes_[best->second].newest)) {
        best = &c;
      }
    }
    out.push_back(best->first);
    node = best->second;
  }
  return out;
}

void RolloutDrafter::add(std::span<const int32_t> prompt, std::span<const int32_t> response) {
  if (response.empty()) return;
  // A match can end anywhere from the prompt's last max_match tokens on: runs starting earlier
  // lie inside the prompt, which the rollout's own prompt lookup covers.
  const size_t from = prompt.size() - std::min(prompt.size(), static_cast<size_t>(max_match_));
  PromptRollouts& kept =
      by_prompt_.try_emplace(key_of(prompt), static_cast<size_t>(max_match_ + max_draft_))
          .first->second;
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  all.insert(all.end(), response.begin(), response.end());
  kept.tree.add(all, from, ++added_);
  kept.sequences.push_front(std::move(all));
  if (kept.sequences.size() > keep_) {
    kept.tree.remove(kept.sequences.back(), from);
    kept.sequences.pop_back();
  }
}

std::vector<int32_t> RolloutDrafter::propose(const infer::Request& request,
                                             std::span<const int32_t> history, int64_t k) {
  if (k < 1 || history.empty()) return {};
  k = std::min(k, max_draft_);
  const auto found = by_prompt_.find(key_of(request.prompt));
  for (int64_t n = std::min<int64_t>(max_match_, static_cast<int64_t>(history.size())); n >= 1;
       --n) {
    const std::span<const int32_t> pattern = history.last(static_cast<size_t>(n));
    if (found != by_prompt_.end()) {
      std::vector<int32_t> next = found->second.tree.continuation(pattern, k);
      if (!next.empty()) return next;
    }
    std::vector<int32_t> next = first_continuation(history, pattern, k);
    if (!next.empty()) return next;
  }
  return {};
}

size_t RolloutDrafter::kept(std::span<const int32_t> prompt) const {
  const auto found = by_prompt_.find(key_of(prompt));
  return found == by_prompt_.end() ? 0 : found->second.sequences.size();
}

size_t RolloutDrafter::tree_nodes(std::span<const int32_t> prompt) const {
  const auto found = by_prompt_.find(key_of(prompt));
  return found == by_prompt_.end() ? 0 : found->second.tree.nodes();
}

}  // namespace ms::rl
