// Ranked merge table and merge loop (see bpe_model.h).
#include "data/bpe_model.h"

#include <algorithm>
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

void BpeMerges::grow() { rehash(slots_.empty() ? 1024 : slots_.size() * 2); }

void BpeMerges::reserve(size_t pairs) {
  size_t want = 1024;
  while (want < pairs * 2) want *= 2;
  if (want > slots_.size()) rehash(want);
}

void BpeMerges::rehash(size_t slots) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(slots, Slot{});
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

uint64_t PieceCache::hash_of(std::string_view piece) {
  const uint64_t h = std::hash<std::string_view>{}(piece);
  return h == 0 ? 1 : h;
}

// The slot holding `piece`, or the empty slot where it would go.
size_t PieceCache::find_slot(const Shard& shard, uint64_t hash, std::string_view piece) {
  const size_t mask = shard.slots.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& slot = shard.slots[i];
    if (slot.hash == 0) return i;
    if (slot.hash == hash && slot.key_size == piece.size() &&
        std::string_view(shard.keys).substr(slot.key_offset, slot.key_size) == piece) {
      return i;
    }
  }
}

void PieceCache::grow(Shard& shard) {
  std::vector<Slot> old = std::move(shard.slots);
  shard.slots.assign(old.empty() ? kFirstSlots : old.size() * 2, Slot{});
  const size_t mask = shard.slots.size() - 1;
  for (const Slot& slot : old) {
    if (slot.hash == 0) continue;
    size_t i = slot.hash & mask;
    while (shard.slots[i].hash != 0) i = (i + 1) & mask;
    shard.slots[i] = slot;
  }
}

bool PieceCache::lookup(std::string_view piece, std::vector<int32_t>& out) const {
  const uint64_t hash = hash_of(piece);
  Shard& shard = shards_[(hash >> 32) % kShards];
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.slots.empty()) return false;
  const Slot& slot = shard.slots[find_slot(shard, hash, piece)];
  if (slot.hash == 0) return false;
  const int32_t* ids = shard.ids.data() + slot.ids_offset;
  out.insert(out.end(), ids, ids + slot.ids_size);
  return true;
}

void PieceCache::insert(std::string_view piece, const std::vector<int32_t>& ids) const {
  const uint64_t hash = hash_of(piece);
  Shard& shard = shards_[(hash >> 32) % kShards];
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.entries >= kEntriesPerShard) {
    std::fill(shard.slots.begin(), shard.slots.end(), Slot{});
    shard.keys.clear();
    shard.ids.clear();
    shard.entries = 0;
  }
  if ((shard.entries + 1) * 2 > shard.slots.size()) grow(shard);
  Slot& slot = shard.slots[find_slot(shard, hash, piece)];
  if (slot.hash != 0) return;  // another thread cached it first
  // A piece is at most kMaxPieceBytes bytes and so at most that many ids; the arenas stay below
  // kEntriesPerShard times that, well inside the 16- and 32-bit fields.
  slot = Slot{hash, static_cast<uint32_t>(shard.keys.size()), static_cast<uint32_t>(shard.ids.size()),
              static_cast<uint16_t>(piece.size()), static_cast<uint16_t>(ids.size())};
  shard.keys.append(piece);
  shard.ids.insert(shard.ids.end(), ids.begin(), ids.end());
  ++shard.entries;
}

}  // namespace ms::data
