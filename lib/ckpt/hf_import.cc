// Reading Hugging Face safetensors directories (see hf_import.h). The files are opened (headers
// only) once; each read opens nothing new and pulls one tensor's bytes.
#include "ckpt/hf_import.h"

#include <filesystem>
#include <map>
#include <memory>
#include <new>
#include <set>

#include "ckpt/safetensors.h"
#include "io/atomic_file.h"

namespace ms::ckpt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using FileMap = std::map<std::string, std::shared_ptr<SafetensorsFile>>;

// Whether `file`, a weight_map value, names a file directly inside the model directory, as
// every Hugging Face index does: a plain name, so no absolute path, no "..", no subdirectory.
bool confined(const std::string& file) {
  return !file.empty() && file != "." && file != ".." &&
         file.find_first_of(std::string("/\\\0", 3)) == std::string::npos;
}

// The index's weight_map, read from `path` (files only under 64 MiB: real indexes are KBs).
Result<std::map<std::string, std::string>> read_index(const std::string& path, io::Env& env) {
  constexpr uint64_t kMaxIndexBytes = 64ull << 20;
  MS_ASSIGN_OR_RETURN(std::string text,
                      io::read_file(env, path, kMaxIndexBytes, "safetensors index"));
  return parse_safetensors_index(text, path);
}

// Adds every tensor of each file to `catalog`; a name seen twice is Corruption.
Status add_files(const std::vector<std::string>& paths, io::Env& env, TensorCatalog& catalog,
                 std::map<std::string, std::shared_ptr<SafetensorsFile>>& owner) {
  for (const std::string& p : paths) {
    MS_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(p, env));
    auto shared = std::make_shared<SafetensorsFile>(std::move(file));
    for (const SafetensorsEntry& e : shared->tensors()) {
      if (owner.count(e.name) != 0) {
        return Corruption(p + ": tensor '" + e.name + "' also appears in " +
                          owner[e.name]->path());
      }
      owner[e.name] = shared;
      catalog.tensors.push_back(TensorInfo{e.name, e.dtype, e.shape});
    }
  }
  return Status::OK();
}

Result<std::vector<std::string>> files_of(const std::string& path, io::Env& env,
                                          std::map<std::string, std::string>* index_map) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!fs::exists(path, ec)) return NotFound("no such file or directory: '" + path + "'");
    return std::vector<std::string>{path};
  }
  const std::string index = path + "/model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    MS_ASSIGN_OR_RETURN(*index_map, read_index(index, env));
    std::set<std::string> names;
    for (const auto& [tensor, file] : *index_map) names.insert(file);
    std::vector<std::string> files;
    for (const std::string& f : names) files.push_back(path + "/" + f);
    return files;
  }
  if (fs::exists(path + "/model.safetensors", ec)) {
    return std::vector<std::string>{path + "/model.safetensors"};
  }
  return NotFound("'" + path + "' holds neither model.safetensors nor "
                  "model.safetensors.index.json");
}

Status check_index(const std::string& dir, const std::map<std::string, std::string>& index,
                   const std::map<std::string, std::shared_ptr<SafetensorsFile>>& owner) {
  for (const auto& [name, file] : index) {
    auto it = owner.find(name);
    if (it == owner.end() || fs::path(it->second->path()).filename() != file) {
      return Corruption(dir + "/model.safetensors.index.json: tensor '" + name +
                        "' is mapped to " + file + ", which does not hold it");
    }
  }
  return Status::OK();
}

bool ignorable(const std::string& name) {
  return name.size() > 22 && name.ends_with("rotary_emb.inv_freq");
}

// The catalog narrowed to the parameters `config` implies, read as f32.
Result<TensorCatalog> parameter_catalog(const std::string& dir, const config::ModelConfig& config,
                                        const TensorCatalog& all) {
  TensorCatalog out;
  std::set<std::string> expected;
  for (const TensorInfo& want : hf_parameter_specs(config)) {
    const TensorInfo* have = all.find(want.name);
    if (have == nullptr) {
      return InvalidArgument(dir + ": tensor '" + want.name + "' is missing (" + dir +
                             "/config.json implies it)");
    }
    if (have->shape != want.shape) {
      return InvalidArgument(dir + ": tensor '" + want.name + "' has shape " +
                             shape_string(have->shape) + "; " + dir + "/config.json implies " +
                             shape_string(want.shape));
    }
    expected.insert(want.name);
    out.tensors.push_back(want);
  }
  for (const TensorInfo& t : all.tensors) {
    if (expected.count(t.name) == 0 && !ignorable(t.name)) {
      return InvalidArgument(dir + ": unexpected tensor '" + t.name + "' (the model described by " +
                             dir + "/config.json has no such parameter)");
    }
  }
  out.read = [read = all.read, dir](const std::string& name) -> Result<Tensor> {
    MS_ASSIGN_OR_RETURN(Tensor t, read(name));
    if (t.dtype() == DType::kF32) return t;
    try {
      return convert(t, DType::kF32);
    } catch (const std::bad_alloc&) {
      return Unavailable(dir + ": out of memory widening tensor '" + name + "' " +
                         shape_string(t.shape()) + " to f32");
    }
  };
  return out;
}

}  // namespace

Result<std::map<std::string, std::string>> parse_safetensors_index(std::string_view text,
                                                                    const std::string& path) {
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("weight_map") ||
      !doc["weight_map"].is_object()) {
    return Corruption(path + ": not a safetensors index (expected an object with weight_map)");
  }
  std::map<std::string, std::string> map;
  for (const auto& [name, file] : doc["weight_map"].items()) {
    if (!file.is_string()) return Corruption(path + ": weight_map['" + name + "'] is not a string");
    const std::string value = file.get<std::string>();
    if (!confined(value)) {
      return Corruption(path + ": weight_map['" + name + "'] = \"" + value +
                        "\" is not a file inside the model directory (a plain file name is required: no "
                        "absolute path, no \"..\", no subdirectory)");
    }
    map[name] = value;
  }
  return map;
}

Result<TensorCatalog> open_safetensors_catalog(const std::string& path, io::Env& env) {
  std::map<std::string, std::string> index;
  MS_ASSIGN_OR_RETURN(std::vector<std::string> files, files_of(path, env, &index));
  TensorCatalog catalog;
  auto owner = std::make_shared<FileMap>();
  MS_RETURN_IF_ERROR(add_files(files, env, catalog, *owner));
  if (!index.empty()) MS_RETURN_IF_ERROR(check_index(path, index, *owner));
  catalog.read = [owner](const std::string& name) -> Result<Tensor> {
    auto it = owner->find(name);
    if (it == owner->end()) return NotFound("no safetensors tensor named '" + name + "'");
    return it->second->read(name);
  };
  return catalog;
}

Result<TensorCatalog> open_safetensors_catalog(const std::string& path) {
  return open_safetensors_catalog(path, io::default_env());
}

Result<config::ModelConfig> read_hf_config(const std::string& dir, io::Env& env,
                                           bool allow_sliding_window) {
  const std::string config_path = dir + "/config.json";
  MS_ASSIGN_OR_RETURN(std::string text,
                      io::read_file(env, config_path, io::kMaxConfigFileBytes, "config.json"));
  const json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded()) return InvalidArgument(config_path + ": not valid JSON");
  return model_config_from_hf_json(doc, config_path, allow_sliding_window);
}

Result<HfModel> open_hf_model(const std::string& dir, io::Env& env, bool allow_sliding_window) {
  const std::string config_path = dir + "/config.json";
  HfModel model;
  model.dir = dir;
  MS_ASSIGN_OR_RETURN(model.config, read_hf_config(dir, env, allow_sliding_window));
  MS_ASSIGN_OR_RETURN(TensorCatalog all, open_safetensors_catalog(dir, env));
  // The config's sizes meet the weights' shapes before anything is built from them.
  MS_RETURN_IF_ERROR(check_hf_weights_fit(model.config, config_path, all.tensors.size(),
                                          "the safetensors files in " + dir));
  MS_ASSIGN_OR_RETURN(model.parameters, parameter_catalog(dir, model.config, all));
  std::error_code ec;
  if (fs::exists(dir + "/tokenizer.json", ec)) model.tokenizer_json = dir + "/tokenizer.json";
  return model;
}

Result<HfModel> open_hf_model(const std::string& dir) {
  return open_hf_model(dir, io::default_env());
}

}  // namespace ms::ckpt
