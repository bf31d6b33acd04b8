#include "ckpt/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "ckpt/hf_names.h"
#include "core/checked_math.h"
#include "io/atomic_file.h"

namespace ms::ckpt {
namespace {

using nlohmann::json;

// A header larger than this is refused before it is read: real files have a few MB at most.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::kF32, "F32"}, {DType::kBF16, "BF16"}, {DType::kF16, "F16"}, {DType::kI32, "I32"},
    {DType::kI64, "I64"}, {DType::kU16, "U16"},   {DType::kU8, "U8"},
};

Result<DType> dtype_from_name(const std::string& name) {
  for (const DTypeName& d : kDTypeNames) {
    if (name == d.name) return d.dtype;
  }
  return Corruption("dtype '" + name +
                         "' is not supported (supported: F32, BF16, F16, I32, I64, U16, U8)");
}

uint64_t read_le_u64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

Result<SafetensorsEntry> parse_entry(const std::string& name, const json& spec) {
  if (!spec.is_object() || !spec.contains("dtype") || !spec.contains("shape") ||
      !spec.contains("data_offsets")) {
    return Corruption("tensor '" + name + "' needs \"dtype\", \"shape\" and \"data_offsets\"");
  }
  const json& dtype = spec["dtype"];
  const json& shape = spec["shape"];
  const json& offsets = spec["data_offsets"];
  if (!dtype.is_string()) return Corruption("tensor '" + name + "': dtype is not a string");
  Result<DType> parsed = dtype_from_name(dtype.get<std::string>());
  if (!parsed.ok()) return parsed.status().with_context("tensor '" + name + "'");
  SafetensorsEntry entry{name, *parsed, {}, 0, 0};
  if (!shape.is_array()) return Corruption("tensor '" + name + "': shape is not an array");
  for (const json& d : shape) {
    if (!d.is_number_unsigned()) {
      return Corruption("tensor '" + name + "': shape holds a non-integer or negative value");
    }
    const uint64_t extent = d.get<uint64_t>();
    if (extent > static_cast<uint64_t>(kMaxDimension)) {
      return Corruption("tensor '" + name + "': shape dimension " + std::to_string(extent) +
                        " is above the limit 2^62");
    }
    entry.shape.push_back(static_cast<int64_t>(extent));
  }
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    return Corruption("tensor '" + name + "': data_offsets must be [begin, end]");
  }
  const uint64_t begin = offsets[0].get<uint64_t>();
  const uint64_t end = offsets[1].get<uint64_t>();
  if (end < begin) return Corruption("tensor '" + name + "': data_offsets end before begin");
  entry.file_offset = begin;  // relative for now; open() adds the data section's start
  entry.length = end - begin;
  const Result<uint64_t> bytes =
      checked_nbytes(entry.shape, dtype_size(entry.dtype), "tensor '" + name + "': shape");
  if (!bytes.ok()) return Corruption(bytes.status().message());
  const uint64_t expected = *bytes;
  if (entry.length != expected) {
    return Corruption("tensor '" + name + "': " + std::to_string(entry.length) +
                      " bytes for shape " + shape_string(entry.shape) + " of " +
                      std::string(dtype_name(entry.dtype)) + " (expected " +
                      std::to_string(expected) + ")");
  }
  return entry;
}

// Entries sorted by offset must tile [0, data_bytes) exactly, as the format requires.
Status check_layout(std::vector<SafetensorsEntry>& entries, uint64_t data_bytes) {
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.file_offset < b.file_offset; });
  uint64_t next = 0;
  for (const SafetensorsEntry& e : entries) {
    if (e.file_offset != next) {
      return Corruption("tensor '" + e.name + "' starts at data offset " +
                        std::to_string(e.file_offset) + ", expected " + std::to_string(next) +
                        (e.file_offset < next ? " (overlaps the previous tensor)" : " (gap)"));
    }
    next = e.file_offset + e.length;
  }
  if (next != data_bytes) {
    return Corruption("tensors cover " + std::to_string(next) + " bytes but the data section holds " +
                      std::to_string(data_bytes) + " (truncated or trailing bytes)");
  }
  return Status::OK();
}

Result<json> read_header(io::File& file, uint64_t file_size, uint64_t* header_bytes) {
  if (file_size < 8) return Corruption("file is " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
  std::byte len_bytes[8];
  MS_ASSIGN_OR_RETURN(size_t got, file.read_at(0, len_bytes));
  if (got != 8) return Corruption("cannot read the header length");
  const uint64_t n = read_le_u64(len_bytes);
  if (n > kMaxHeaderBytes || n > file_size - 8) {
    return Corruption("header length " + std::to_string(n) + " exceeds the file (" +
                      std::to_string(file_size) + " bytes)");
  }
  std::string text(n, '\0');
  MS_ASSIGN_OR_RETURN(size_t read, file.read_at(8, std::as_writable_bytes(std::span(text))));
  if (read != n) return Corruption("header truncated");
  json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Corruption("header is not a JSON object");
  }
  *header_bytes = n;
  return header;
}

Status parse_metadata(const json& meta, std::map<std::string, std::string>* out) {
  if (!meta.is_object()) return Corruption("__metadata__ is not an object");
  for (const auto& [key, value] : meta.items()) {
    if (!value.is_string()) return Corruption("__metadata__ value of '" + key + "' is not a string");
    (*out)[key] = value.get<std::string>();
  }
  return Status::OK();
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  for (const DTypeName& d : kDTypeNames) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path, io::Env& env) {
  auto context = [&](const Status& s) { return s.with_context("safetensors '" + path + "'"); };
  MS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> file, env.open(path, io::OpenMode::kRead));
  MS_ASSIGN_OR_RETURN(uint64_t file_size, file->size());
  uint64_t header_bytes = 0;
  Result<json> header = read_header(*file, file_size, &header_bytes);
  if (!header.ok()) return context(header.status());
  SafetensorsFile out;
  out.path_ = path;
  out.env_ = &env;
  for (const auto& [name, spec] : header->items()) {
    if (name == "__metadata__") {
      Status s = parse_metadata(spec, &out.metadata_);
      if (!s.ok()) return context(s);
      continue;
    }
    Result<SafetensorsEntry> entry = parse_entry(name, spec);
    if (!entry.ok()) return context(entry.status());
    out.entries_.push_back(std::move(*entry));
  }
  const uint64_t data_start = 8 + header_bytes;
  Status layout = check_layout(out.entries_, file_size - data_start);
  if (!layout.ok()) return context(layout);
  for (SafetensorsEntry& e : out.entries_) e.file_offset += data_start;
  return out;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  return open(path, io::default_env());
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  for (const SafetensorsEntry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

Result<Tensor> SafetensorsFile::read(std::string_view name) const {
  const SafetensorsEntry* entry = find(name);
  if (!entry) return NotFound("tensor '" + std::string(name) + "' is not in '" + path_ + "'");
  MS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> file, env_->open(path_, io::OpenMode::kRead));
  // open() checked the entry's bytes lie inside this file, so its size is backed by the disk.
  MS_ASSIGN_OR_RETURN(Tensor t, allocate_tensor(entry->dtype, entry->shape,
                                                "safetensors '" + path_ + "': tensor '" +
                                                    entry->name + "'"));
  auto dest = std::span(static_cast<std::byte*>(t.raw_data()), entry->length);
  MS_ASSIGN_OR_RETURN(size_t got, file->read_at(entry->file_offset, dest));
  if (got != entry->length) {
    return Corruption("safetensors '" + path_ + "': tensor '" + entry->name + "' truncated at offset " +
                      std::to_string(entry->file_offset + got));
  }
  return t;
}

Status write_safetensors(const std::string& path, std::span<const NamedTensor> tensors,
                         const std::map<std::string, std::string>& metadata, io::Env& env) {
  json header = json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const NamedTensor& nt : tensors) {
    if (nt.name == "__metadata__" || !names.insert(nt.name).second) {
      return InvalidArgument("safetensors '" + path + "': duplicate or reserved tensor name '" +
                             nt.name + "'");
    }
    const uint64_t bytes = static_cast<uint64_t>(nt.tensor->nbytes());
    header[nt.name] = {{"dtype", safetensors_dtype_name(nt.tensor->dtype())},
                       {"shape", nt.tensor->shape()},
                       {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep tensor data 8-byte aligned
  std::byte len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<std::byte>((text.size() >> (8 * i)) & 0xff);

  MS_ASSIGN_OR_RETURN(std::unique_ptr<io::AtomicFileWriter> writer,
                      io::AtomicFileWriter::create(env, path));
  MS_RETURN_IF_ERROR(writer->append(std::string_view(reinterpret_cast<const char*>(len_bytes), 8)));
  MS_RETURN_IF_ERROR(writer->append(text));
  for (const NamedTensor& nt : tensors) {
    MS_RETURN_IF_ERROR(writer->append(std::string_view(
        static_cast<const char*>(nt.tensor->raw_data()), static_cast<size_t>(nt.tensor->nbytes()))));
  }
  return writer->commit();
}

Status write_safetensors(const std::string& path, std::span<const NamedTensor> tensors,
                         const std::map<std::string, std::string>& metadata) {
  return write_safetensors(path, tensors, metadata, io::default_env());
}

}  // namespace ms::ckpt
