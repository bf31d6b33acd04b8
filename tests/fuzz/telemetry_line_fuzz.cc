// Fuzz target: arbitrary bytes as one rank's telemetry file, read by read_telemetry_file; a file
// that reads is copied to three ranks (so detect has a majority to compare with) and goes
// through align_telemetry and detect_faults. Every outcome must be a result or a Status naming
// the file and line; nothing may crash, hang or allocate by an unchecked time (the grid's size
// comes from the records' times, and align_telemetry must refuse an absurd span first).
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "diag/detect.h"
#include "fuzz_scratch.h"
#include "telemetry/reader.h"

namespace {

// Beyond this many samples detection is still correct but too slow for a fuzzing loop; the
// readers and the grid check, which this target is about, have already run by then.
constexpr int kMaxDetectSamples = 20000;

void detect(const std::vector<ms::telemetry::RankTelemetry>& ranks) {
  ms::Result<ms::diag::AlignedTelemetry> aligned =
      ms::diag::align_telemetry(ranks, ms::telemetry::GroupBy::kRank);
  if (!aligned.ok() || aligned->samples > kMaxDetectSamples) return;
  ms::diag::DetectOptions options;
  options.window_s = 4 * aligned->interval_s;
  options.hop_s = aligned->interval_s;
  options.period_s = 8 * aligned->interval_s;
  (void)ms::diag::detect_faults(*aligned, ms::diag::DenoiserSet{}, options);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string path = ms::fuzz::write_scratch("rank-00000.jsonl", bytes);
  ms::Result<ms::telemetry::RankTelemetry> rank = ms::telemetry::read_telemetry_file(path);
  if (!rank.ok()) return 0;
  std::vector<ms::telemetry::RankTelemetry> ranks(3, *rank);
  for (int r = 0; r < 3; ++r) {
    ranks[r].rank = r;
    for (ms::telemetry::HostRecord& h : ranks[r].hosts) h.rank = r;
    for (ms::telemetry::StepRecordRead& s : ranks[r].steps) s.rank = r;
  }
  detect(ranks);
  return 0;
}
