// Fuzz target: arbitrary bytes as a Hugging Face tokenizer.json. Tokenizer::load must either
// refuse them with a Status or return a tokenizer that can encode and decode text without
// touching memory it does not own. Every number in the file (ids above all) is bounded before
// it sizes an allocation, so no input may allocate more than the replay's memory limit (ctest
// runs the replay under `ulimit -v`, see CMakeLists.txt) or nest deep enough to exhaust the
// stack. Built with clang -fsanitize=fuzzer,address locally; CI replays
// tests/fuzz/corpus/tokenizer_json/ (replay_main.cc).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"
#include "fuzz_scratch.h"

namespace {

// Text that reaches every encoder path: ASCII words and spaces, newlines, multi-byte UTF-8, an
// invalid byte, and the usual special-token spellings.
constexpr std::string_view kSample =
    "ROMEO: Hello  world!\n\tit's 42 \xE2\x96\x81 caf\xC3\xA9 \xF0\x9F\x98\x80 \xFF"
    "<|endoftext|></s><s><unk>";

void exercise(const ms::data::Tokenizer& tokenizer) {
  for (bool allow_special : {true, false}) {
    const std::vector<int32_t> ids = tokenizer.encode(kSample, allow_special);
    (void)tokenizer.decode(ids);
  }
  const std::vector<int32_t> probes = {0, 1, tokenizer.vocab_size() - 1, tokenizer.vocab_size(),
                                       tokenizer.eos_id(), -1};
  for (int32_t id : probes) (void)tokenizer.decode(std::vector<int32_t>{id});
  (void)tokenizer.token_to_id("<|endoftext|>");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ms::fuzz::write_scratch(
      "tokenizer.json", std::string(reinterpret_cast<const char*>(data), size));
  auto tokenizer = ms::data::Tokenizer::load(path);
  if (tokenizer.ok()) exercise(**tokenizer);
  return 0;
}
