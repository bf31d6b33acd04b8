// Ranked merge table and merge loop (see bpe_model.h).
#include "data/bpe_model.h"

#include <functional>
#include <queue>

namespace ms::data {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finalizer: spreads (left, right) keys over the table
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

size_t BpeMerges::slot_index(uint64_t key) const {
  const size_t mask = slots_.size() - 1;
  size_t i = mix(key) & mask;
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask;
  return i;
}

void BpeMerges::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
  for (const Slot& s : old) {
    if (s.key != kEmpty) slots_[slot_index(s.key)] = s;
  }
}

void BpeMerges::add(int32_t left, int32_t right, int32_t merged_id, int32_t rank) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const uint64_t key = key_of(left, right);
  Slot& slot = slots_[slot_index(key)];
  if (slot.key == key) return;
  slot.key = key;
  slot.merge = Merge{rank, merged_id};
  ++size_;
}

std::optional<BpeMerges::Merge> BpeMerges::find(int32_t left, int32_t right) const {
  if (slots_.empty()) return std::nullopt;
  const Slot& slot = slots_[slot_index(key_of(left, right))];
  if (slot.key == kEmpty) return std::nullopt;
  return slot.merge;
}

void BpeMerges::apply(std::vector<int32_t>& symbols) const {
  const int32_t n = static_cast<int32_t>(symbols.size());
  if (n < 2) return;
  std::vector<int32_t> next(n), prev(n);
  for (int32_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  struct Candidate {  // pair (left_id at pos, right_id at next[pos]) merging at `rank`
    int32_t rank, pos, left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push_pair = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (auto m = find(symbols[pos], symbols[next[pos]])) {
      heap.push(Candidate{m->rank, pos, symbols[pos], symbols[next[pos]]});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    // A candidate is stale once either side took part in another merge: the left symbol's id
    // then changed (ids only grow longer), or its right neighbour's did.
    const int32_t right = next[c.pos];
    if (symbols[c.pos] != c.left_id || right < 0 || symbols[right] != c.right_id) continue;
    symbols[c.pos] = find(c.left_id, c.right_id)->merged_id;
    symbols[right] = -1;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    push_pair(prev[c.pos]);
    push_pair(c.pos);
  }
  size_t out = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) symbols[out++] = symbols[i];
  symbols.resize(out);
}

PieceCache::Shard& PieceCache::shard_of(std::string_view piece) const {
  return shards_[(std::hash<std::string_view>{}(piece) >> 7) % kShards];
}

bool PieceCache::lookup(std::string_view piece, std::vector<int32_t>& out) const {
  Shard& shard = shard_of(piece);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.entries.find(piece);
  if (it == shard.entries.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void PieceCache::insert(std::string_view piece, const std::vector<int32_t>& ids) const {
  Shard& shard = shard_of(piece);
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.entries.size() >= kEntriesPerShard) shard.entries.clear();
  shard.entries.emplace(std::string(piece), ids);
}

}  // namespace ms::data
