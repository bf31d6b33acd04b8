#include "rl/rollout_drafter.h"

#include <algorithm>

namespace ms::rl {
namespace {

std::string key_of(std::span<const int32_t> prompt) {
  return std::string(reinterpret_cast<const char*>(prompt.data()), prompt.size_bytes());
}

// Up to k tokens that followed an occurrence of `pattern` in seq that ends before `limit` (so at
// least one token follows it): the last such occurrence, or with `earliest` the first. Nothing
// when there is none.
std::vector<int32_t> continuation(std::span<const int32_t> seq, size_t limit,
                                  std::span<const int32_t> pattern, int64_t k, bool earliest) {
  const size_t n = pattern.size();
  if (limit > seq.size() || limit < n + 1) return {};
  const auto matches_at = [&](size_t end) {  // the match is seq[end - n, end)
    return std::equal(pattern.begin(), pattern.end(), seq.begin() + static_cast<ptrdiff_t>(end - n));
  };
  const auto from = [&](size_t end) {
    const size_t stop = std::min(seq.size(), end + static_cast<size_t>(k));
    return std::vector<int32_t>(seq.begin() + static_cast<ptrdiff_t>(end),
                                seq.begin() + static_cast<ptrdiff_t>(stop));
  };
  if (earliest) {
    for (size_t end = n; end < limit; ++end) {
      if (matches_at(end)) return from(end);
    }
    return {};
  }
  for (size_t end = limit - 1; end >= n; --end) {
    if (matches_at(end)) return from(end);
  }
  return {};
}

}  // namespace

void RolloutDrafter::add(std::span<const int32_t> prompt, std::span<const int32_t> response) {
  if (response.empty()) return;
  std::deque<std::vector<int32_t>>& kept = by_prompt_[key_of(prompt)];
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  all.insert(all.end(), response.begin(), response.end());
  kept.push_front(std::move(all));
  if (kept.size() > keep_) kept.pop_back();
}

std::vector<int32_t> RolloutDrafter::propose(const infer::Request& request,
                                             std::span<const int32_t> history, int64_t k) {
  if (k < 1 || history.empty()) return {};
  const auto found = by_prompt_.find(key_of(request.prompt));
  for (int64_t n = std::min<int64_t>(max_match_, static_cast<int64_t>(history.size())); n >= 1;
       --n) {
    const std::span<const int32_t> pattern = history.last(static_cast<size_t>(n));
    if (found != by_prompt_.end()) {
      for (const std::vector<int32_t>& earlier : found->second) {
        std::vector<int32_t> next = continuation(earlier, earlier.size(), pattern, k, false);
        if (!next.empty()) return next;
      }
    }
    // Prompt lookup: the first occurrence within this sequence itself (as prompt lookup
    // decoding takes it: a response restating its question follows the question's wording).
    std::vector<int32_t> next = continuation(history, history.size(), pattern, k, true);
    if (!next.empty()) return next;
  }
  return {};
}

size_t RolloutDrafter::kept(std::span<const int32_t> prompt) const {
  const auto found = by_prompt_.find(key_of(prompt));
  return found == by_prompt_.end() ? 0 : found->second.size();
}

}  // namespace ms::rl
