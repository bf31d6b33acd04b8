// The safetensors container (Hugging Face): an 8-byte little-endian header length N, N bytes of
// JSON {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}, then the tensor bytes back to back. Offsets are relative to
// the end of the header. Models move to and from the wider ecosystem in this format, and the
// golden tests carry weights to PyTorch in it, so the reader validates everything a damaged or
// hostile file could get wrong and names the file, the tensor and the offset.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/env.h"

namespace ms::ckpt {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t file_offset = 0;  // absolute byte offset of the first element in the file
  uint64_t length = 0;       // bytes
};

// "F32", "BF16", "F16", "I32", "I64", "U16", "U8".
std::string_view safetensors_dtype_name(DType dtype);

class SafetensorsFile {
 public:
  // Reads and validates the header: header length within the file, a JSON object, known dtypes,
  // lengths that match shapes, offsets inside the data section, no overlaps, no gaps. Tensor
  // bytes are read on demand by read().
  static Result<SafetensorsFile> open(const std::string& path, io::Env& env);
  static Result<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return path_; }
  // In data order.
  const std::vector<SafetensorsEntry>& tensors() const { return entries_; }
  // nullptr when absent.
  const SafetensorsEntry* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // An owning tensor with the named tensor's bytes; NotFound naming the file when absent.
  Result<Tensor> read(std::string_view name) const;

 private:
  std::string path_;
  io::Env* env_ = nullptr;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

struct NamedTensor {
  std::string name;
  const Tensor* tensor = nullptr;
};

// Writes `tensors` in the given order with `metadata` to `path`, atomically (temp file, fsync,
// rename). Names must be unique and not "__metadata__".
Status write_safetensors(const std::string& path, std::span<const NamedTensor> tensors,
                         const std::map<std::string, std::string>& metadata, io::Env& env);
Status write_safetensors(const std::string& path, std::span<const NamedTensor> tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace ms::ckpt
