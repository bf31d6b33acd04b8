// JSON encoding of DatasetMeta with nlohmann::json; every key is checked for presence and type
// so a hand-edited or damaged sidecar is refused with the key that is wrong.
#include "data/dataset_meta.h"

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"

namespace ms::data {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// Looks up `key` in `object` and converts it to T, or says which key is missing or mistyped.
template <typename T>
Status get_key(const json& object, const char* key, const std::string& where, T* out) {
  auto it = object.find(key);
  if (it == object.end()) return Corruption(where + ": missing key '" + key + "'");
  try {
    *out = it->template get<T>();
  } catch (const json::exception&) {
    return Corruption(where + ": key '" + key + "' has the wrong type (" +
                      std::string(it->type_name()) + ")");
  }
  return Status::OK();
}

Result<DatasetSource> parse_source(const json& object, const std::string& where) {
  if (!object.is_object()) return Corruption(where + ": expected an object");
  DatasetSource s;
  MS_RETURN_IF_ERROR(get_key(object, "path", where, &s.path));
  MS_RETURN_IF_ERROR(get_key(object, "documents", where, &s.documents));
  MS_RETURN_IF_ERROR(get_key(object, "bytes", where, &s.bytes));
  MS_RETURN_IF_ERROR(get_key(object, "tokens", where, &s.tokens));
  MS_RETURN_IF_ERROR(get_key(object, "skipped_lines", where, &s.skipped_lines));
  return s;
}

Status parse_tokenizer(const json& doc, const std::string& path, DatasetMeta* meta) {
  const std::string where = path + ": tokenizer";
  auto it = doc.find("tokenizer");
  if (it == doc.end() || !it->is_object()) return Corruption(path + ": missing object 'tokenizer'");
  MS_RETURN_IF_ERROR(get_key(*it, "path", where, &meta->tokenizer_path));
  MS_RETURN_IF_ERROR(get_key(*it, "hash", where, &meta->tokenizer_hash));
  MS_RETURN_IF_ERROR(get_key(*it, "kind", where, &meta->tokenizer_kind));
  MS_RETURN_IF_ERROR(get_key(*it, "vocab_size", where, &meta->vocab_size));
  MS_RETURN_IF_ERROR(get_key(*it, "eos_id", where, &meta->eos_id));
  return Status::OK();
}

}  // namespace

std::string dataset_meta_to_json(const DatasetMeta& meta) {
  ordered_json doc;
  doc["format"] = "ms-dataset-meta";
  doc["format_version"] = meta.format_version;
  doc["toolkit_version"] = meta.toolkit_version;
  doc["git_revision"] = meta.git_revision;
  doc["tokenizer"] = {{"path", meta.tokenizer_path}, {"hash", meta.tokenizer_hash},
                      {"kind", meta.tokenizer_kind}, {"vocab_size", meta.vocab_size},
                      {"eos_id", meta.eos_id}};
  doc["append_eos"] = meta.append_eos;
  doc["dtype"] = meta.dtype;
  ordered_json sources = ordered_json::array();
  for (const DatasetSource& s : meta.sources) {
    sources.push_back({{"path", s.path}, {"documents", s.documents}, {"bytes", s.bytes},
                       {"tokens", s.tokens}, {"skipped_lines", s.skipped_lines}});
  }
  doc["sources"] = sources;
  doc["documents"] = meta.documents;
  doc["sequences"] = meta.sequences;
  doc["tokens"] = meta.tokens;
  return doc.dump(2) + "\n";
}

Result<DatasetMeta> parse_dataset_meta(std::string_view text, const std::string& path) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Corruption(path + ": not a JSON object; rebuild the dataset or delete the sidecar");
  }
  std::string format;
  MS_RETURN_IF_ERROR(get_key(doc, "format", path, &format));
  if (format != "ms-dataset-meta") return Corruption(path + ": format is '" + format + "', expected 'ms-dataset-meta'");
  DatasetMeta meta;
  MS_RETURN_IF_ERROR(get_key(doc, "format_version", path, &meta.format_version));
  if (meta.format_version < 1 || meta.format_version > kDatasetMetaFormatVersion) {
    return Corruption(path + ": format_version " + std::to_string(meta.format_version) +
                      " is not supported by this build (newest: " +
                      std::to_string(kDatasetMetaFormatVersion) + "); upgrade the toolkit");
  }
  MS_RETURN_IF_ERROR(get_key(doc, "toolkit_version", path, &meta.toolkit_version));
  MS_RETURN_IF_ERROR(get_key(doc, "git_revision", path, &meta.git_revision));
  MS_RETURN_IF_ERROR(parse_tokenizer(doc, path, &meta));
  MS_RETURN_IF_ERROR(get_key(doc, "append_eos", path, &meta.append_eos));
  MS_RETURN_IF_ERROR(get_key(doc, "dtype", path, &meta.dtype));
  auto sources = doc.find("sources");
  if (sources == doc.end() || !sources->is_array()) return Corruption(path + ": missing array 'sources'");
  for (size_t i = 0; i < sources->size(); ++i) {
    MS_ASSIGN_OR_RETURN(DatasetSource s, parse_source((*sources)[i], path + ": sources[" + std::to_string(i) + "]"));
    meta.sources.push_back(std::move(s));
  }
  MS_RETURN_IF_ERROR(get_key(doc, "documents", path, &meta.documents));
  MS_RETURN_IF_ERROR(get_key(doc, "sequences", path, &meta.sequences));
  MS_RETURN_IF_ERROR(get_key(doc, "tokens", path, &meta.tokens));
  return meta;
}

Result<DatasetMeta> read_dataset_meta(io::Env& env, const std::string& path) {
  MS_ASSIGN_OR_RETURN(std::string text,
                      io::read_file(env, path, io::kMaxConfigFileBytes, "dataset metadata"));
  return parse_dataset_meta(text, path);
}

}  // namespace ms::data
