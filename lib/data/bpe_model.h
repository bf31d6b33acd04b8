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

class BpeMerges {
 public:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };

  // Declares that the adjacent pair (left, right) merges into merged_id with priority `rank`
  // (lower merges first). A pair declared twice keeps its first (lower-rank) declaration.
  void add(int32_t left, int32_t right, int32_t merged_id, int32_t rank);
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

  std::vector<Slot> slots_;  // open addressing, linear probing, power-of-two size
  size_t size_ = 0;
};

// Thread-safe cache from piece bytes to its ids. Sharded by hash so threads of encode_batch
// rarely meet on one lock; a full shard is cleared, which bounds memory without bookkeeping.
class PieceCache {
 public:
  bool lookup(std::string_view piece, std::vector<int32_t>& out) const;
  void insert(std::string_view piece, const std::vector<int32_t>& ids) const;

  static constexpr size_t kMaxPieceBytes = 64;

 private:
  static constexpr size_t kShards = 64;
  static constexpr size_t kEntriesPerShard = 4096;
  struct Shard {
    std::mutex mu;
    StringMap<std::vector<int32_t>> entries;
  };
  Shard& shard_of(std::string_view piece) const;
  mutable Shard shards_[kShards];
};

}  // namespace ms::data
