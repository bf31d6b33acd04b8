// Hugging Face tokenizer.json -> BpeTokenizerSpec. Only the parts that decide encoding are read
// (model, normalizer, pre_tokenizer, added_tokens); post-processors and decoders are implied by
// the family. Anything that would change the encoding and is not supported is refused by name,
// so a tokenizer never loads and then silently encodes differently from its reference.
#include <nlohmann/json.hpp>

#include "data/tokenizer_formats.h"
#include "data/tokenizer_json_parse.h"
#include "data/unicode_utf8.h"

namespace ms::data {
namespace {

using nlohmann::json;

constexpr std::string_view kMetaspace = "\xE2\x96\x81";
// Deepest Sequence nesting read; real files nest one or two levels.
constexpr int kMaxNesting = 16;

class JsonReader {
 public:
  explicit JsonReader(std::string path) : path_(std::move(path)) {}

  Status error(const std::string& key, const std::string& what) const {
    return InvalidArgument("tokenizer '" + path_ + "': key '" + key + "' " + what);
  }
  Result<const json*> required(const json& obj, const std::string& name, const std::string& key) const {
    if (!obj.is_object() || !obj.contains(name)) return error(key, "is missing");
    return &obj.at(name);
  }
  Result<std::string> string_at(const json& obj, const std::string& name, const std::string& key) const {
    MS_ASSIGN_OR_RETURN(const json* v, required(obj, name, key));
    if (!v->is_string()) return error(key, "must be a string, found " + std::string(v->type_name()));
    return v->get<std::string>();
  }
  Result<bool> bool_or(const json& obj, const std::string& name, const std::string& key, bool fallback) const {
    if (!obj.contains(name) || obj.at(name).is_null()) return fallback;
    if (!obj.at(name).is_boolean()) return error(key, "must be true or false");
    return obj.at(name).get<bool>();
  }
  // The id `value` (an integer as written, nullopt for any other value) holds when it is one
  // id_at accepts, else nullopt: the per-entry path, which spells no key string (one allocation
  // per vocabulary entry otherwise).
  std::optional<int32_t> valid_id(std::optional<int64_t> value) const {
    if (!value || *value < 0 || *value > INT32_MAX || *value > max_id_) return std::nullopt;
    return static_cast<int32_t>(*value);
  }
  Result<int32_t> id_at(std::optional<int64_t> value, const std::string& key) const {
    if (std::optional<int32_t> id = valid_id(value)) return *id;
    if (!value || *value < 0 || *value > INT32_MAX) return error(key, "must be a non-negative 32-bit integer id");
    return error(key, "is id " + std::to_string(*value) + ", beyond the largest id " + std::to_string(max_id_) +
                          " a file of " + std::to_string(entries_) +
                          " vocab and added-token entries may use (2 x entries + 2^18)");
  }
  Result<int32_t> id_at(const json& v, const std::string& key) const {
    std::optional<int64_t> value;
    if (v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX)) {
      value = v.get<int64_t>();
    }
    return id_at(value, key);
  }
  // Bounds every id by the entries the file really holds (see max_token_id_for).
  void set_entries(size_t entries) {
    entries_ = entries;
    max_id_ = max_token_id_for(entries);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  size_t entries_ = 0;
  int64_t max_id_ = INT32_MAX;
};

// Vocabulary spelling -> stored form: raw bytes for byte-level BPE, unchanged otherwise.
// key() names the entry; called on an error only.
template <class Key>
Result<std::string> stored_token(const JsonReader& r, std::string_view spelling, bool byte_level, const Key& key) {
  if (!byte_level) return std::string(spelling);
  std::optional<std::string> bytes = byte_level_to_bytes(spelling);
  if (!bytes) {
    return r.error(key(), "holds token '" + std::string(spelling) +
                              "' with a character outside the byte-level alphabet");
  }
  return *bytes;
}

const std::vector<RawVocabEntry> kNoVocab;
const std::vector<RawMerge> kNoMerges;

// The key of `place` in the readers below: entry i's stored token.
auto vocab_key(const BpeTokenizerSpec& spec) {
  return [&spec](int32_t i) { return std::string_view(spec.vocab[i].first); };
}

// spec.vocab in file order; a token written twice keeps its last id, as a JSON object does.
// `place` maps each stored token to its index in spec.vocab, for read_merges.
Status read_vocab(const JsonReader& r, const ParsedTokenizerJson& doc, const json& model, BpeTokenizerSpec& spec,
                  StringIndex& place) {
  MS_ASSIGN_OR_RETURN(const json* vocab, r.required(model, "vocab", "model.vocab"));
  if (!vocab->is_object()) return r.error("model.vocab", "must be an object of token: id");
  const std::vector<RawVocabEntry>& entries = doc.vocab ? *doc.vocab : kNoVocab;
  spec.vocab.reserve(entries.size());
  place.reserve(entries.size());
  for (const RawVocabEntry& entry : entries) {
    std::optional<int32_t> id = r.valid_id(entry.id);
    const std::string_view spelling = doc.string_of(entry.token);
    if (!id) return r.id_at(entry.id, "model.vocab[\"" + std::string(spelling) + "\"]").status();
    MS_ASSIGN_OR_RETURN(std::string token, stored_token(r, spelling, spec.byte_level,
                                                           [] { return std::string("model.vocab"); }));
    const auto next = static_cast<int32_t>(spec.vocab.size());
    const int32_t at = place.insert(token, next, vocab_key(spec));
    if (at == next) spec.vocab.emplace_back(std::move(token), *id);
    else spec.vocab[at].second = *id;
  }
  return Status::OK();
}

// One merge entry's two spellings: "left right" (older files) or ["left", "right"] (newer ones).
template <class KeyOf>
Result<std::pair<std::string_view, std::string_view>> merge_parts(const JsonReader& r,
                                                                  const ParsedTokenizerJson& doc,
                                                                  const RawMerge& entry, const KeyOf& key_of,
                                                                  size_t i) {
  switch (entry.form) {
    case RawMerge::Form::kString: {
      const std::string_view s = doc.string_of(entry.first);
      const size_t space = s.find(' ');
      if (space == std::string_view::npos || s.find(' ', space + 1) != std::string_view::npos) {
        return r.error(key_of(i), "must be two tokens separated by one space, found '" + std::string(s) + "'");
      }
      return std::pair{s.substr(0, space), s.substr(space + 1)};
    }
    case RawMerge::Form::kPair:
      return std::pair{doc.string_of(entry.first), doc.string_of(entry.second)};
    case RawMerge::Form::kOther:
      break;
  }
  return r.error(key_of(i), "must be \"left right\" or [\"left\", \"right\"]");
}

Status read_merges(const JsonReader& r, const ParsedTokenizerJson& doc, const json& model,
                   const StringIndex& place, BpeTokenizerSpec& spec) {
  MS_ASSIGN_OR_RETURN(const json* merges, r.required(model, "merges", "model.merges"));
  if (!merges->is_array()) return r.error("model.merges", "must be an array");
  const std::vector<RawMerge>& entries = doc.merges ? *doc.merges : kNoMerges;
  // The key names the entry in an error only, so it is spelled only then.
  const auto key_of = [](size_t i) { return "model.merges[" + std::to_string(i) + "]"; };
  const auto id_of = [&](std::string_view stored, const auto& spelling, size_t i) -> Result<int32_t> {
    const int32_t at = place.find(stored, vocab_key(spec));
    if (at == StringIndex::kAbsent) {
      return r.error(key_of(i), "names token '" + spelling() + "', which is not in model.vocab");
    }
    return spec.vocab[at].second;
  };
  spec.merges.reserve(entries.size());
  std::string joined;
  for (size_t i = 0; i < entries.size(); ++i) {
    MS_ASSIGN_OR_RETURN(auto parts, merge_parts(r, doc, entries[i], key_of, i));
    const auto [left_spelling, right_spelling] = parts;
    const auto key = [&] { return key_of(i); };
    MS_ASSIGN_OR_RETURN(std::string left_stored, stored_token(r, left_spelling, spec.byte_level, key));
    MS_ASSIGN_OR_RETURN(std::string right_stored, stored_token(r, right_spelling, spec.byte_level, key));
    MS_ASSIGN_OR_RETURN(int32_t left, id_of(left_stored, [&] { return std::string(left_spelling); }, i));
    MS_ASSIGN_OR_RETURN(int32_t right, id_of(right_stored, [&] { return std::string(right_spelling); }, i));
    // The stored form maps each character alone, so the merged token's is the two parts'.
    joined.assign(left_stored).append(right_stored);
    MS_ASSIGN_OR_RETURN(int32_t merged, id_of(joined, [&] {
      return std::string(left_spelling) + std::string(right_spelling);
    }, i));
    spec.merges.push_back({left, right, merged, static_cast<int32_t>(i)});
  }
  return Status::OK();
}

Status read_model(const JsonReader& r, const ParsedTokenizerJson& doc, BpeTokenizerSpec& spec) {
  const json& root = doc.root;
  MS_ASSIGN_OR_RETURN(const json* model, r.required(root, "model", "model"));
  if (!model->is_object()) return r.error("model", "must be an object");
  if (model->contains("type")) {
    MS_ASSIGN_OR_RETURN(std::string type, r.string_at(*model, "type", "model.type"));
    if (type != "BPE") return r.error("model.type", "is '" + type + "'; only BPE models are supported");
  }
  if (model->contains("dropout") && !model->at("dropout").is_null()) {
    return r.error("model.dropout", "must be null: BPE dropout makes encoding random");
  }
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model->contains(affix) && !model->at(affix).is_null() && model->at(affix) != "") {
      return r.error(std::string("model.") + affix, "is not supported (only empty or null)");
    }
  }
  MS_ASSIGN_OR_RETURN(spec.byte_fallback, r.bool_or(*model, "byte_fallback", "model.byte_fallback", false));
  MS_ASSIGN_OR_RETURN(spec.ignore_merges, r.bool_or(*model, "ignore_merges", "model.ignore_merges", false));
  StringIndex place;
  MS_RETURN_IF_ERROR(read_vocab(r, doc, *model, spec, place));
  MS_RETURN_IF_ERROR(read_merges(r, doc, *model, place, spec));
  if (model->contains("unk_token") && !model->at("unk_token").is_null()) {
    MS_ASSIGN_OR_RETURN(std::string unk, r.string_at(*model, "unk_token", "model.unk_token"));
    if (const int32_t at = place.find(unk, vocab_key(spec)); at != StringIndex::kAbsent) {
      spec.unk_id = spec.vocab[at].second;
    }
    if (!spec.unk_id) return r.error("model.unk_token", "names '" + unk + "', which is not in model.vocab");
  }
  return Status::OK();
}

Status read_added_tokens(const JsonReader& r, const json& root, BpeTokenizerSpec& spec) {
  if (!root.contains("added_tokens") || root.at("added_tokens").is_null()) return Status::OK();
  const json& added = root.at("added_tokens");
  if (!added.is_array()) return r.error("added_tokens", "must be an array");
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string key = "added_tokens[" + std::to_string(i) + "]";
    AddedToken t;
    MS_ASSIGN_OR_RETURN(const json* id, r.required(added[i], "id", key + ".id"));
    MS_ASSIGN_OR_RETURN(t.id, r.id_at(*id, key + ".id"));
    MS_ASSIGN_OR_RETURN(t.content, r.string_at(added[i], "content", key + ".content"));
    MS_ASSIGN_OR_RETURN(t.special, r.bool_or(added[i], "special", key + ".special", false));
    MS_ASSIGN_OR_RETURN(t.lstrip, r.bool_or(added[i], "lstrip", key + ".lstrip", false));
    MS_ASSIGN_OR_RETURN(t.rstrip, r.bool_or(added[i], "rstrip", key + ".rstrip", false));
    if (t.content.empty()) return r.error(key + ".content", "must not be empty");
    spec.added.push_back(std::move(t));
  }
  return Status::OK();
}

// Llama-2's legacy normalizer: Prepend("▁") and Replace(" " -> "▁"), alone or in a Sequence.
Status read_normalizer(const JsonReader& r, const json& root, BpeTokenizerSpec& spec) {
  if (!root.contains("normalizer") || root.at("normalizer").is_null()) return Status::OK();
  const json& n = root.at("normalizer");
  std::vector<const json*> steps;
  MS_ASSIGN_OR_RETURN(std::string type, r.string_at(n, "type", "normalizer.type"));
  if (type == "Sequence") {
    MS_ASSIGN_OR_RETURN(const json* list, r.required(n, "normalizers", "normalizer.normalizers"));
    if (!list->is_array()) return r.error("normalizer.normalizers", "must be an array");
    for (const json& step : *list) steps.push_back(&step);
  } else {
    steps.push_back(&n);
  }
  for (const json* step : steps) {
    MS_ASSIGN_OR_RETURN(std::string step_type, r.string_at(*step, "type", "normalizer.type"));
    if (step_type == "Prepend" && step->value("prepend", "") == kMetaspace) {
      spec.metaspace = true;
      spec.prepend = PrependScheme::kAlways;
      spec.prepend_even_if_present = true;
    } else if (step_type == "Replace" && step->contains("pattern") &&
               step->at("pattern").value("String", "") == " " && step->value("content", "") == kMetaspace) {
      spec.metaspace = true;
    } else {
      return r.error("normalizer", "has a '" + step_type +
                                       "' step that is not supported (supported: Prepend(\"▁\"), "
                                       "Replace(\" \" -> \"▁\"))");
    }
  }
  return Status::OK();
}

Status read_split(const JsonReader& r, const json& p, const std::string& key, BpeTokenizerSpec& spec) {
  MS_ASSIGN_OR_RETURN(const json* pattern, r.required(p, "pattern", key + ".pattern"));
  if (!pattern->is_object() || !pattern->contains("Regex") || !pattern->at("Regex").is_string()) {
    return r.error(key + ".pattern", "must be {\"Regex\": \"...\"}");
  }
  if (p.value("behavior", "Isolated") != "Isolated" || p.value("invert", false)) {
    return r.error(key + ".behavior", "must be \"Isolated\" without invert");
  }
  Result<std::shared_ptr<const SplitRegex>> regex = SplitRegex::compile(pattern->at("Regex").get<std::string>());
  if (!regex.ok()) return r.error(key + ".pattern.Regex", regex.status().message());
  spec.splits.push_back(*regex);
  return Status::OK();
}

Status read_metaspace(const JsonReader& r, const json& p, const std::string& key, BpeTokenizerSpec& spec) {
  if (p.value("replacement", std::string(kMetaspace)) != kMetaspace) {
    return r.error(key + ".replacement", "must be \"▁\"");
  }
  spec.metaspace = true;
  MS_ASSIGN_OR_RETURN(spec.metaspace_split, r.bool_or(p, "split", key + ".split", true));
  const std::string scheme = p.value("prepend_scheme", p.value("add_prefix_space", true) ? "always" : "never");
  if (scheme == "always") spec.prepend = PrependScheme::kAlways;
  else if (scheme == "first") spec.prepend = PrependScheme::kFirst;
  else if (scheme == "never") spec.prepend = PrependScheme::kNever;
  else return r.error(key + ".prepend_scheme", "must be always, first or never, found '" + scheme + "'");
  return Status::OK();
}

Status read_pre_tokenizer_step(const JsonReader& r, const json& p, const std::string& key,
                               int depth, BpeTokenizerSpec& spec) {
  if (depth > kMaxNesting) {
    return r.error(key, "nests Sequence pre-tokenizers deeper than " + std::to_string(kMaxNesting) + " levels");
  }
  MS_ASSIGN_OR_RETURN(std::string type, r.string_at(p, "type", key + ".type"));
  if (type == "ByteLevel") {
    spec.byte_level = true;
    MS_ASSIGN_OR_RETURN(spec.add_prefix_space, r.bool_or(p, "add_prefix_space", key + ".add_prefix_space", false));
    MS_ASSIGN_OR_RETURN(bool use_regex, r.bool_or(p, "use_regex", key + ".use_regex", true));
    if (use_regex) {
      MS_ASSIGN_OR_RETURN(auto regex, SplitRegex::compile(*named_split_pattern("gpt2")));
      spec.splits.push_back(std::move(regex));
    }
    return Status::OK();
  }
  if (type == "Split") return read_split(r, p, key, spec);
  if (type == "Metaspace") return read_metaspace(r, p, key, spec);
  if (type == "Sequence") {
    MS_ASSIGN_OR_RETURN(const json* steps, r.required(p, "pretokenizers", key + ".pretokenizers"));
    if (!steps->is_array()) return r.error(key + ".pretokenizers", "must be an array");
    for (size_t i = 0; i < steps->size(); ++i) {
      MS_RETURN_IF_ERROR(read_pre_tokenizer_step(r, (*steps)[i], key + ".pretokenizers[" + std::to_string(i) + "]",
                                                 depth + 1, spec));
    }
    return Status::OK();
  }
  return r.error(key + ".type", "is '" + type + "', which is not supported (ByteLevel, Split, Metaspace, Sequence)");
}

// True when a string "ByteLevel" occurs in `j` within kMaxNesting levels. Bounded so a file
// nested a million levels deep cannot exhaust the stack.
bool mentions_byte_level(const json& j, int depth) {
  if (j.is_string()) return j.get_ref<const std::string&>() == "ByteLevel";
  if (!j.is_structured() || depth >= kMaxNesting) return false;
  for (const json& v : j) {
    if (mentions_byte_level(v, depth + 1)) return true;
  }
  return false;
}

// Byte-level BPE is recognized by a ByteLevel pre-tokenizer or decoder; its vocabulary must
// then be read in the byte-level alphabet, so this is decided before the model is read.
bool uses_byte_level(const json& root) {
  for (const char* part : {"pre_tokenizer", "decoder"}) {
    if (root.contains(part) && mentions_byte_level(root.at(part), 0)) return true;
  }
  return false;
}

// Vocabulary plus added-token entries, counted before any id is read so every id can be bounded.
size_t count_entries(const ParsedTokenizerJson& doc) {
  const json& root = doc.root;
  size_t entries = doc.vocab ? doc.vocab->size() : 0;
  if (root.contains("added_tokens") && root.at("added_tokens").is_array()) {
    entries += root.at("added_tokens").size();
  }
  return entries;
}

Result<BpeTokenizerSpec> read_spec(JsonReader& r, const ParsedTokenizerJson& doc) {
  const json& root = doc.root;
  if (!root.is_object()) return r.error("(root)", "must be a JSON object");
  r.set_entries(count_entries(doc));
  BpeTokenizerSpec spec;
  spec.byte_level = uses_byte_level(root);
  if (root.contains("pre_tokenizer") && !root.at("pre_tokenizer").is_null()) {
    MS_RETURN_IF_ERROR(read_pre_tokenizer_step(r, root.at("pre_tokenizer"), "pre_tokenizer", 0, spec));
  }
  MS_RETURN_IF_ERROR(read_normalizer(r, root, spec));
  if (spec.byte_level && spec.metaspace) {
    return r.error("pre_tokenizer", "mixes ByteLevel with Metaspace, which is not supported");
  }
  MS_RETURN_IF_ERROR(read_model(r, doc, spec));
  MS_RETURN_IF_ERROR(read_added_tokens(r, root, spec));
  if (!spec.byte_level && !spec.byte_fallback) {
    return r.error("model.byte_fallback", "must be true when the pre-tokenizer is not ByteLevel: only "
                                          "byte-level and byte-fallback BPE are supported");
  }
  spec.kind = spec.byte_level ? "byte-level-bpe" : "byte-fallback-bpe";
  return spec;
}

}  // namespace

Result<std::unique_ptr<BpeTokenizer>> load_hf_tokenizer_json(const std::string& path,
                                                             std::string_view text) {
  MS_ASSIGN_OR_RETURN(const ParsedTokenizerJson doc, parse_tokenizer_json(path, text));
  JsonReader reader(path);
  Result<BpeTokenizerSpec> spec = InvalidArgument("unread");
  try {
    spec = read_spec(reader, doc);
  } catch (const json::exception& e) {  // a value of an unexpected JSON type deep in a step
    return InvalidArgument("tokenizer '" + path + "': " + e.what());
  }
  if (!spec.ok()) return spec.status();
  return BpeTokenizer::create(std::move(spec).value(), "tokenizer '" + path + "'");
}

}  // namespace ms::data
