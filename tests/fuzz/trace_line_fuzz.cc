// Fuzz target: arbitrary bytes as rank 1's trace file beside a fixed, valid rank 0 trace, read by
// read_trace_dir (clock offsets, the span bound) and, when it reads, analyzed by
// analyze_stragglers (replay and what-if). Every outcome must be a report or a Status naming
// the file and line, the group and seq; nothing may crash, hang or run away with an absurd
// timestamp.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "diag/straggler.h"
#include "fuzz_scratch.h"
#include "telemetry/reader.h"

namespace {

// Rank 0 runs one step: a forward pass and a data-parallel allreduce (seq 0) that rank 1's
// events may or may not match.
constexpr std::string_view kRank0 =
    "{\"kind\":\"clock\",\"offset_s\":0,\"rank\":0,\"format_version\":1}\n"
    "{\"kind\":\"compute\",\"rank\":0,\"op\":\"fwd\",\"stage\":0,\"mb\":0,\"step\":1,"
    "\"t0\":100.0,\"t1\":100.5}\n"
    "{\"kind\":\"comm\",\"rank\":0,\"op\":\"allreduce\",\"group\":\"dp\",\"seq\":0,"
    "\"bytes\":1024,\"t0\":100.5,\"t1\":100.7}\n";

// Traces with more events than this are still analyzed correctly, but each what-if subset
// replays them all, which is too slow for a fuzzing loop.
constexpr size_t kMaxAnalyzedEvents = 2000;

// The trace directory inside the scratch directory, made on first use.
const std::string& trace_dir() {
  static const std::string dir = [] {
    const std::string path = ms::fuzz::scratch_dir() + "/trace";
    if (!ms::io::default_env().create_dirs(path).ok()) std::abort();
    return path;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  trace_dir();
  ms::fuzz::write_scratch("trace/rank-00000.jsonl", kRank0);
  ms::fuzz::write_scratch("trace/rank-00001.jsonl", bytes);
  auto traces = ms::telemetry::read_trace_dir(trace_dir());
  if (!traces.ok()) return 0;
  size_t events = 0;
  for (const auto& rank : *traces) events += rank.size();
  if (events > kMaxAnalyzedEvents) return 0;
  (void)ms::diag::analyze_stragglers(*traces);
  return 0;
}
