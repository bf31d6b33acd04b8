// Fuzz target: arbitrary bytes as a .jsonl corpus file, read strictly and with bad lines
// skipped, and each line through parse_jsonl_document. Every outcome must be a document or a
// Status naming the line; nothing may crash or hang.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "data/corpus.h"
#include "fuzz_scratch.h"

namespace {

void read_file(const std::string& path, bool skip_bad_lines) {
  ms::data::CorpusOptions options;
  options.skip_bad_lines = skip_bad_lines;
  auto reader = ms::data::DocumentReader::open(ms::io::default_env(), path, options);
  if (!reader.ok()) return;
  std::string text;
  while (true) {
    ms::Result<bool> got = (*reader)->next(&text);
    if (!got.ok() || !*got) return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  size_t start = 0;
  while (start <= bytes.size()) {
    size_t end = bytes.find('\n', start);
    if (end == std::string_view::npos) end = bytes.size();
    (void)ms::data::parse_jsonl_document(bytes.substr(start, end - start), "text");
    start = end + 1;
  }
  const std::string path = ms::fuzz::write_scratch("f.jsonl", bytes);
  read_file(path, false);
  read_file(path, true);
  return 0;
}
