// Incremental BPE training (see bpe_trainer.h).
#include "data/bpe_trainer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "data/unicode_utf8.h"

namespace ms::data {
namespace {

using PairKey = uint64_t;
PairKey pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
int32_t pair_left(PairKey k) { return static_cast<int32_t>(k >> 32); }
int32_t pair_right(PairKey k) { return static_cast<int32_t>(k & 0xFFFFFFFFu); }

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

// The training state: words as symbol sequences, how often each pair occurs (weighted by word
// count), which words hold each pair, and a max-heap of (count, pair) entries that may be stale.
class MergeState {
 public:
  explicit MergeState(std::vector<Word> words) : words_(std::move(words)) {
    for (int32_t w = 0; w < static_cast<int32_t>(words_.size()); ++w) add_pairs(w, +1);
    for (const auto& [key, count] : counts_) heap_.push({count, ~key});
  }

  // The most frequent pair with its count, or count 0 when none is left.
  std::pair<PairKey, int64_t> best() {
    while (!heap_.empty()) {
      const auto [count, inverted] = heap_.top();
      const PairKey key = ~inverted;
      heap_.pop();
      auto it = counts_.find(key);
      const int64_t current = it == counts_.end() ? 0 : it->second;
      if (current == count && count > 0) return {key, count};
      if (current > 0 && current < count) heap_.push({current, inverted});
    }
    return {0, 0};
  }

  // Replaces every occurrence of `key` by `merged_id`, updating counts of the words it touches.
  void merge(PairKey key, int32_t merged_id) {
    std::vector<int32_t> holders = std::move(where_[key]);
    where_.erase(key);
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    for (int32_t w : holders) {
      if (!contains(words_[w].symbols, key)) continue;
      add_pairs(w, -1);
      replace_pair(words_[w].symbols, key, merged_id);
      add_pairs(w, +1, merged_id);
    }
  }

 private:
  static bool contains(const std::vector<int32_t>& s, PairKey key) {
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      if (pair_key(s[i], s[i + 1]) == key) return true;
    }
    return false;
  }

  static void replace_pair(std::vector<int32_t>& s, PairKey key, int32_t merged_id) {
    size_t out = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (i + 1 < s.size() && pair_key(s[i], s[i + 1]) == key) {
        s[out++] = merged_id;
        ++i;
      } else {
        s[out++] = s[i];
      }
    }
    s.resize(out);
  }

  // Adds (sign +1) or removes (-1) word w's pairs from the counts; new pairs that involve
  // `fresh_id` are indexed and pushed on the heap with their updated counts.
  void add_pairs(int32_t w, int sign, int32_t fresh_id = -1) {
    const Word& word = words_[w];
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      const PairKey key = pair_key(word.symbols[i], word.symbols[i + 1]);
      int64_t& count = counts_[key];
      count += sign * word.count;
      if (sign > 0 && (fresh_id < 0 || word.symbols[i] == fresh_id || word.symbols[i + 1] == fresh_id)) {
        where_[key].push_back(w);
        if (fresh_id >= 0) heap_.push({count, ~key});
      }
    }
  }

  std::vector<Word> words_;
  std::unordered_map<PairKey, int64_t> counts_;
  std::unordered_map<PairKey, std::vector<int32_t>> where_;
  // (count, ~key): the max-heap then prefers the smaller key among equal counts.
  std::priority_queue<std::pair<int64_t, PairKey>> heap_;
};

}  // namespace

Result<std::unique_ptr<BpeTrainer>> BpeTrainer::create(BpeTrainerOptions options) {
  const int64_t minimum = 256 + static_cast<int64_t>(options.special_tokens.size());
  if (options.vocab_size < minimum) {
    return InvalidArgument("vocabulary size " + std::to_string(options.vocab_size) +
                           " cannot hold the 256 byte tokens and " +
                           std::to_string(options.special_tokens.size()) + " special token(s); use at least " +
                           std::to_string(minimum));
  }
  for (const std::string& s : options.special_tokens) {
    if (s.empty()) return InvalidArgument("special tokens must not be empty");
  }
  std::optional<std::string> pattern = named_split_pattern(options.split_pattern);
  if (!pattern) {
    return InvalidArgument("split pattern '" + options.split_pattern +
                           "' is unknown (gpt2, cl100k_base, llama3, o200k_base)");
  }
  MS_ASSIGN_OR_RETURN(auto regex, SplitRegex::compile(*pattern));
  return std::unique_ptr<BpeTrainer>(new BpeTrainer(std::move(options), std::move(regex)));
}

void BpeTrainer::add_text(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t cut = text.size(), cut_length = 0;
    for (const std::string& special : options_.special_tokens) {
      const size_t at = text.find(special, begin);
      if (at < cut) {
        cut = at;
        cut_length = special.size();
      }
    }
    count_pieces(text.substr(begin, cut - begin));
    begin = cut + cut_length;
  }
}

void BpeTrainer::count_pieces(std::string_view text) {
  std::vector<std::string_view> pieces;
  for_each_utf8_run(
      text, [&](std::string_view run) { regex_->split(run, pieces); },
      [&](std::string_view byte) { pieces.push_back(byte); });
  for (std::string_view piece : pieces) {
    auto it = piece_counts_.find(piece);
    if (it == piece_counts_.end()) {
      piece_counts_.emplace(std::string(piece), 1);
    } else {
      ++it->second;
    }
  }
}

TrainedBpe BpeTrainer::train() const {
  TrainedBpe out;
  out.split_pattern = options_.split_pattern;
  out.special_tokens = options_.special_tokens;
  for (int b = 0; b < 256; ++b) out.tokens.emplace_back(1, static_cast<char>(b));
  // Words in byte order of their text, so the state (and tie-breaking) never depends on hash order.
  std::vector<std::pair<std::string_view, int64_t>> sorted(piece_counts_.begin(), piece_counts_.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [piece, count] : sorted) {
    Word w{{}, count};
    for (char c : piece) w.symbols.push_back(static_cast<uint8_t>(c));
    words.push_back(std::move(w));
  }
  MergeState state(std::move(words));
  StringMap<int32_t> ids;
  for (int32_t id = 0; id < 256; ++id) ids.emplace(out.tokens[id], id);
  const size_t learned_limit = static_cast<size_t>(options_.vocab_size) - options_.special_tokens.size();
  while (out.tokens.size() < learned_limit) {
    const auto [key, count] = state.best();
    if (count < std::max<int64_t>(options_.min_frequency, 1)) break;
    const std::string bytes = out.tokens[pair_left(key)] + out.tokens[pair_right(key)];
    auto [it, is_new] = ids.emplace(bytes, static_cast<int32_t>(out.tokens.size()));
    if (is_new) out.tokens.push_back(bytes);
    out.merges.emplace_back(pair_left(key), pair_right(key));
    state.merge(key, it->second);
  }
  return out;
}

std::string trained_bpe_to_json(const TrainedBpe& bpe) {
  using nlohmann::ordered_json;
  const bool gpt2_regex = bpe.split_pattern == "gpt2";
  const ordered_json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                   {"trim_offsets", true},  {"use_regex", gpt2_regex}};
  ordered_json doc;
  doc["version"] = "1.0";
  doc["truncation"] = nullptr;
  doc["padding"] = nullptr;
  doc["added_tokens"] = ordered_json::array();
  for (size_t i = 0; i < bpe.special_tokens.size(); ++i) {
    doc["added_tokens"].push_back({{"id", bpe.tokens.size() + i}, {"content", bpe.special_tokens[i]},
                                   {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                                   {"normalized", false}, {"special", true}});
  }
  doc["normalizer"] = nullptr;
  if (gpt2_regex) {
    doc["pre_tokenizer"] = byte_level;
  } else {
    const ordered_json split = {{"type", "Split"},
                                {"pattern", {{"Regex", *named_split_pattern(bpe.split_pattern)}}},
                                {"behavior", "Isolated"},
                                {"invert", false}};
    doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}};
  }
  doc["post_processor"] = nullptr;
  doc["decoder"] = byte_level;
  ordered_json vocab = ordered_json::object();
  for (size_t id = 0; id < bpe.tokens.size(); ++id) vocab[bytes_to_byte_level(bpe.tokens[id])] = id;
  ordered_json merges = ordered_json::array();
  for (const auto& [left, right] : bpe.merges) {
    merges.push_back({bytes_to_byte_level(bpe.tokens[left]), bytes_to_byte_level(bpe.tokens[right])});
  }
  doc["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                  {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                  {"vocab", vocab}, {"merges", merges}};
  return doc.dump(1) + "\n";
}

}  // namespace ms::data
