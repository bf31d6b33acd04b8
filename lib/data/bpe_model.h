// The merge engine shared by every BPE tokenizer: a table of ranked merges over token ids and
// the loop that applies them to one pre-split piece, plus a bounded cache of finished pieces.
// The loop keeps the piece's symbols on a doubly linked list and candidate pairs in a min-heap
// ordered by (rank, position), so it always merges the leftmost pair of lowest rank -- the rule
// of both Hugging Face's BPE and tiktoken -- in O(n log n) instead of rescanning.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ms::data {

// Hash for unordered maps keyed by std::string that are searched with string_views.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// A flat hash index from strings kept elsewhere (a vocabulary) to the int32 handle that names
// each one there: 8 bytes a slot, no per-entry allocation, one hash per lookup. `key_of(handle)`
// gives the string of an inserted handle. Loading a 50k-200k token vocabulary and looking up
// whole pieces are the uses; a node map spent most of that time allocating and chasing nodes.
class StringIndex {
 public:
  static constexpr int32_t kAbsent = -1;

  void reserve(size_t entries) {
    size_t want = 16;
    while (want < entries * 2) want *= 2;
    if (want > slots_.size()) rehash(want);
  }
  size_t size() const { return size_; }

  // Adds `handle` under `key` and returns it, or returns the handle already there.
  template <class KeyOf>
  int32_t insert(std::string_view key, int32_t handle, const KeyOf& key_of) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    const uint32_t hash = hash_of(key);
    Slot& slot = slots_[find_slot(key, hash, key_of)];
    if (slot.handle != kAbsent) return slot.handle;
    slot = Slot{hash, handle};
    ++size_;
    return handle;
  }
  // The handle under `key`, or kAbsent.
  template <class KeyOf>
  int32_t find(std::string_view key, const KeyOf& key_of) const {
    if (slots_.empty()) return kAbsent;
    return slots_[find_slot(key, hash_of(key), key_of)].handle;
  }

 private:
  struct Slot {
    uint32_t hash = 0;
    int32_t handle = kAbsent;
  };
  static uint32_t hash_of(std::string_view key) {
    return static_cast<uint32_t>(std::hash<std::string_view>{}(key));
  }
  template <class KeyOf>
  size_t find_slot(std::string_view key, uint32_t hash, const KeyOf& key_of) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      const Slot& slot = slots_[i];
      if (slot.handle == kAbsent || (slot.hash == hash && key_of(slot.handle) == key)) return i;
    }
  }
  void rehash(size_t slots) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(slots, Slot{});
    for (const Slot& s : old) {
      if (s.handle == kAbsent) continue;
      size_t i = s.hash & (slots - 1);
      while (slots_[i].handle != kAbsent) i = (i + 1) & (slots - 1);
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;  // power-of-two size, linear probing, at most half full
  size_t size_ = 0;
};

class BpeMerges {
 public:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };

  // Declares that the adjacent pair (left, right) merges into merged_id with priority `rank`
  // (lower merges first). A pair declared twice keeps its first (lower-rank) declaration.
  void add(int32_t left, int32_t right, int32_t merged_id, int32_t rank);
  // Sizes the table for `pairs` declarations up front, so that loading a vocabulary's merges
  // does not rehash (and touch) the table once per doubling.
  void reserve(size_t pairs);
  std::optional<Merge> find(int32_t left, int32_t right) const;
  size_t size() const { return size_; }

  // Merges `symbols` (initial ids of one piece, e.g. its bytes) in place until no declared pair
  // is adjacent.
  void apply(std::vector<int32_t>& symbols) const;

 private:
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key_of(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  size_t slot_index(uint64_t key) const;
  void grow();
  void rehash(size_t slots);  // a power of two above twice size_

  std::vector<Slot> slots_;  // open addressing, linear probing, power-of-two size
  size_t size_ = 0;
};

// Thread-safe cache from piece bytes to its ids. Sharded by hash so threads of encode_batch
// rarely meet on one lock; a full shard is cleared, which bounds memory without bookkeeping.
// Each shard is a flat open-addressing table over two arenas (piece bytes, ids): a lookup hashes
// the piece once and touches one slot and two arena runs, where a node map per shard hashed it
// twice and chased a node and a vector per entry. Encoding text is mostly these lookups.
class PieceCache {
 public:
  bool lookup(std::string_view piece, std::vector<int32_t>& out) const;
  void insert(std::string_view piece, const std::vector<int32_t>& ids) const;

  static constexpr size_t kMaxPieceBytes = 64;

 private:
  static constexpr size_t kShards = 64;
  static constexpr size_t kEntriesPerShard = 4096;
  static constexpr size_t kFirstSlots = 64;  // a shard's table doubles from here while half full
  struct Slot {
    uint64_t hash = 0;  // 0: empty (a piece hashing to 0 is stored as 1)
    uint32_t key_offset = 0;
    uint32_t ids_offset = 0;
    uint16_t key_size = 0;
    uint16_t ids_size = 0;
  };
  struct Shard {
    std::mutex mu;
    std::vector<Slot> slots;  // power-of-two size, linear probing
    std::string keys;
    std::vector<int32_t> ids;
    size_t entries = 0;
  };
  static uint64_t hash_of(std::string_view piece);
  static size_t find_slot(const Shard& shard, uint64_t hash, std::string_view piece);
  static void grow(Shard& shard);
  mutable Shard shards_[kShards];
};

}  // namespace ms::data
