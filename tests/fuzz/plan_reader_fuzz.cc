// libFuzzer target for the mixture plan reader: any bytes must either be refused with a Status
// or yield a plan whose every sample can be located without reading out of bounds. Each input
// is tried twice: as given, and with the header's size and crc fields recomputed, so mutations
// get past the checksums and exercise the structural checks (section table, description JSON,
// blend and stream arrays). Built with clang -fsanitize=fuzzer,address locally; CI replays
// tests/fuzz/corpus/plan_reader/ (replay_main.cc).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "data/plan.h"

namespace {

// Rewrites file size (byte 16), payload crc (52) and header crc (56) to match `bytes`.
void fix_checksums(std::string& bytes) {
  if (bytes.size() < ms::data::kPlanHeaderBytes) return;
  const uint64_t size = bytes.size();
  std::memcpy(bytes.data() + 16, &size, 8);
  const uint32_t payload = ms::crc32c(bytes.data() + 64, bytes.size() - 64);
  std::memcpy(bytes.data() + 52, &payload, 4);
  const uint32_t header = ms::crc32c(bytes.data(), 56);
  std::memcpy(bytes.data() + 56, &header, 4);
}

void exercise(std::string bytes) {
  auto plan = ms::data::Plan::from_bytes(std::move(bytes), "fuzz.plan");
  if (!plan.ok()) return;
  std::vector<ms::data::TokenRange> ranges;
  for (ms::data::Split split : {ms::data::Split::kTrain, ms::data::Split::kValidation}) {
    const int64_t samples = (*plan)->samples(split);
    for (int64_t g = 0; g < samples && g < 64; ++g) {
      ranges.clear();
      (*plan)->sample_ranges(split, (*plan)->sample(split, g), ranges);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  exercise(bytes);
  fix_checksums(bytes);
  exercise(std::move(bytes));
  return 0;
}
