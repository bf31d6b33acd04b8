// Fuzz target: arbitrary bytes as a Megatron .idx next to a fixed 64-byte .bin. open() must
// either refuse them with a Status or accept an index whose every advertised token can be read
// and verified without touching memory outside the mappings (run under ASan locally).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "data/indexed_dataset_stats.h"
#include "fuzz_scratch.h"

namespace {

void read_everything(const ms::data::IndexedDataset& ds) {
  std::vector<int32_t> tokens;
  for (size_t s = 0; s < ds.num_sequences(); ++s) {
    tokens.resize(static_cast<size_t>(ds.sequence_length(s)));
    ds.read_tokens(s, 0, tokens.size(), tokens.data());
  }
  (void)ms::data::compute_dataset_stats(ds);
  ms::data::VerifyOptions options;
  options.vocab_size = 50;
  (void)ms::data::verify_dataset(ds, options);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool bin_written = [] {
    std::string bin;
    for (int i = 0; i < 64; ++i) bin.push_back(static_cast<char>(i));
    ms::fuzz::write_scratch("f.bin", bin);
    return true;
  }();
  (void)bin_written;
  ms::fuzz::write_scratch("f.idx", std::string(reinterpret_cast<const char*>(data), size));
  auto ds = ms::data::IndexedDataset::open(ms::fuzz::scratch_dir() + "/f");
  if (ds.ok()) read_everything(*ds);
  return 0;
}
