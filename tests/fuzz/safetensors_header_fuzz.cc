// libFuzzer target for the safetensors reader (lib/ckpt/safetensors.h): any bytes must either
// be refused with a Status or open as a file whose every tensor reads back with exactly the
// bytes its shape needs, nothing allocated beyond the file's size. Each input is tried twice:
// as a whole file, and as the JSON header alone behind a correct length prefix and 64 data
// bytes, so mutations of the JSON reach the shape, dtype and offset checks. Built with clang
// -fsanitize=fuzzer,address locally; CI replays tests/fuzz/corpus/safetensors_header/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "ckpt/safetensors.h"
#include "fuzz_scratch.h"

namespace {

void exercise(const std::string& bytes) {
  const std::string path = ms::fuzz::write_scratch("f.safetensors", bytes);
  ms::Result<ms::ckpt::SafetensorsFile> file = ms::ckpt::SafetensorsFile::open(path);
  if (!file.ok()) return;
  uint64_t total = 0;
  for (const ms::ckpt::SafetensorsEntry& e : file->tensors()) {
    total += e.length;
    ms::Result<ms::Tensor> t = file->read(e.name);
    // An accepted entry lies inside the file, so reading it cannot fail or differ in size.
    if (!t.ok() || t->nbytes() != e.length) std::abort();
  }
  if (total > bytes.size()) std::abort();
}

std::string with_length_prefix(const std::string& header) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return bytes + header + std::string(64, '\0');
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  exercise(bytes);
  exercise(with_length_prefix(bytes));
  return 0;
}
