// parse_tokenizer_json: one pass of nlohmann's SAX parser that builds the tree for everything but
// model.vocab and model.merges, which go straight into flat lists (see tokenizer_json_parse.h).
#include "data/tokenizer_json_parse.h"

#include <limits>
#include <utility>

namespace ms::data {
namespace {

using nlohmann::json;

// "line L, column C" of byte offset `offset` in `text`.
std::string line_and_column(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// The SAX handler. In tree mode each value is put into the innermost open container (a repeated
// key replacing the earlier value, as nlohmann's own tree parser does). The object at
// model.vocab and the array at model.merges switch to a streaming mode until they close; a value
// nested deeper than an entry is skipped (`skip_` counts its open containers) and its entry
// recorded as malformed, for the reader to refuse by index or key.
class Handler {
 public:
  // `text_bytes` sizes the streamed lists up front. Growing them by doubling would copy each
  // and touch its pages twice; a reservation past what is used costs address space only.
  Handler(ParsedTokenizerJson& out, size_t text_bytes)
      : out_(out), reserve_entries_(text_bytes / kMinEntryBytes) {
    out_.strings.reserve(text_bytes / 2);
  }

  bool null() { return scalar(json(nullptr)); }
  bool boolean(bool v) { return scalar(json(v)); }
  bool number_integer(json::number_integer_t v) { return scalar(json(v), v); }
  bool number_unsigned(json::number_unsigned_t v) {
    std::optional<int64_t> as_signed;
    if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) as_signed = static_cast<int64_t>(v);
    return scalar(json(v), as_signed);
  }
  bool number_float(json::number_float_t v, const std::string&) { return scalar(json(v)); }
  bool binary(json::binary_t& v) { return scalar(json::binary(std::move(v))); }

  bool string(std::string& v) {
    if (mode_ == Mode::kMerges && skip_ == 0) {
      if (!in_pair_) {
        out_.merges->push_back({RawMerge::Form::kString, keep(v), {}});
      } else if (pair_strings_ == 0) {
        pair_.first = keep(v);
        ++pair_strings_;
      } else if (pair_strings_ == 1) {
        pair_.second = keep(v);
        ++pair_strings_;
      } else {
        pair_malformed_ = true;
      }
      return true;
    }
    return scalar(json(std::move(v)));
  }

  bool key(std::string& k) {
    if (mode_ == Mode::kVocab) {
      if (skip_ == 0) vocab_key_ = keep(k);
    } else if (mode_ == Mode::kTree) {
      key_ = std::move(k);
    }
    return true;
  }

  bool start_object(std::size_t) {
    if (mode_ != Mode::kTree) return open_nested();
    if (at_model_key("vocab")) {
      put(json::object());
      out_.vocab.emplace().reserve(reserve_entries_);
      mode_ = Mode::kVocab;
      return true;
    }
    return open(json::object());
  }
  bool start_array(std::size_t) {
    if (mode_ == Mode::kMerges && skip_ == 0 && !in_pair_) {
      in_pair_ = true;
      pair_ = RawMerge{RawMerge::Form::kPair, {}, {}};
      pair_strings_ = 0;
      pair_malformed_ = false;
      return true;
    }
    if (mode_ != Mode::kTree) return open_nested();
    if (at_model_key("merges")) {
      put(json::array());
      out_.merges.emplace().reserve(reserve_entries_);
      mode_ = Mode::kMerges;
      return true;
    }
    return open(json::array());
  }
  bool end_object() { return close(); }
  bool end_array() {
    if (mode_ == Mode::kMerges && skip_ == 0 && in_pair_) {
      if (pair_malformed_ || pair_strings_ != 2) pair_.form = RawMerge::Form::kOther;
      out_.merges->push_back(std::move(pair_));
      in_pair_ = false;
      return true;
    }
    return close();
  }

  bool parse_error(std::size_t byte, const std::string&, const nlohmann::detail::exception& e) {
    error_byte_ = byte;
    error_ = e.what();
    return false;
  }

  const std::optional<std::string>& error() const { return error_; }
  size_t error_byte() const { return error_byte_; }

 private:
  enum class Mode { kTree, kVocab, kMerges };
  // Fewest bytes of text a real vocab or merges entry takes ("a":0, or "a b",); a shorter one
  // only makes its list grow once more.
  static constexpr size_t kMinEntryBytes = 7;

  // The open container is the object at root.model and the next value goes under `name`.
  bool at_model_key(std::string_view name) const {
    return stack_.size() == 2 && stack_[0]->is_object() && keys_[1] == "model" && stack_[1]->is_object() &&
           key_ == name;
  }

  StringRef keep(const std::string& s) {
    const StringRef ref{out_.strings.size(), s.size()};
    out_.strings += s;
    return ref;
  }

  // A scalar value; `integer` is its value when it is an integer that fits int64.
  bool scalar(json value, std::optional<int64_t> integer = std::nullopt) {
    if (mode_ == Mode::kTree) {
      put(std::move(value));
    } else if (skip_ == 0) {
      if (mode_ == Mode::kVocab) {
        out_.vocab->push_back({vocab_key_, integer});
      } else if (in_pair_) {
        pair_malformed_ = true;
      } else {
        out_.merges->push_back({RawMerge::Form::kOther, {}, {}});
      }
    }
    return true;
  }

  // A container opened inside a streamed part: its entry is malformed and its contents skipped.
  bool open_nested() {
    if (skip_ == 0) {
      if (mode_ == Mode::kVocab) out_.vocab->push_back({vocab_key_, std::nullopt});
      else if (in_pair_) pair_malformed_ = true;
      else out_.merges->push_back({RawMerge::Form::kOther, {}, {}});
    }
    ++skip_;
    return true;
  }

  bool open(json container) {
    const bool under_key = !stack_.empty() && stack_.back()->is_object();
    json* slot = put(std::move(container));
    keys_.push_back(under_key ? key_ : std::string());
    stack_.push_back(slot);
    return true;
  }

  bool close() {
    if (mode_ != Mode::kTree) {
      if (skip_ > 0) --skip_;
      else mode_ = Mode::kTree;  // the streamed vocab or merges ended
      return true;
    }
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }

  // Puts a tree value into the open container. A value that replaces root.model, or
  // root.model's vocab or merges, also drops what was streamed for them, as the tree drops the
  // value it replaces.
  json* put(json value) {
    if (stack_.empty()) {
      out_.root = std::move(value);
      return &out_.root;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    if (stack_.size() == 1 && key_ == "model") {
      out_.vocab.reset();
      out_.merges.reset();
    } else if (at_model_key("vocab")) {
      out_.vocab.reset();
    } else if (at_model_key("merges")) {
      out_.merges.reset();
    }
    json& slot = parent[key_];
    slot = std::move(value);
    return &slot;
  }

  ParsedTokenizerJson& out_;
  size_t reserve_entries_;
  Mode mode_ = Mode::kTree;
  std::vector<json*> stack_;        // open containers in tree mode, root first
  std::vector<std::string> keys_;   // the key each open container sits under ("" in an array)
  std::string key_;                 // the key of the next value in the open object
  StringRef vocab_key_;             // the token of the next vocab value
  int skip_ = 0;
  bool in_pair_ = false;            // a ["left", "right"] merge entry is open
  RawMerge pair_;
  int pair_strings_ = 0;
  bool pair_malformed_ = false;
  std::optional<std::string> error_;
  size_t error_byte_ = 0;
};

}  // namespace

Result<ParsedTokenizerJson> parse_tokenizer_json(const std::string& path, std::string_view text) {
  ParsedTokenizerJson out;
  Handler handler(out, text.size());
  const bool ok = json::sax_parse(text.data(), text.data() + text.size(), &handler);
  if (!ok) {
    const size_t at = handler.error_byte() == 0 ? 0 : handler.error_byte() - 1;
    return InvalidArgument("tokenizer '" + path + "' is not valid JSON at " + line_and_column(text, at) + ": " +
                           handler.error().value_or("parse failed"));
  }
  return out;
}

}  // namespace ms::data
