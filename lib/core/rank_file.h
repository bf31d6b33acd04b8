// The one spelling of per-rank file names: "rank-00003.jsonl" (telemetry, traces),
// "rank-00003.data" (checkpoint shards), "rank-00003.json" (in-flight reports). Five digits
// keep directory listings in rank order up to 99999 ranks; larger ranks still get a unique
// name, just a longer one.
#pragma once

#include <string>
#include <string_view>

namespace ms {

// "rank-00003" + extension (which includes its dot: ".jsonl"). rank must be >= 0.
std::string rank_file_name(int rank, std::string_view extension);

// True when `name` is "rank-" followed by digits and then exactly `extension`.
bool is_rank_file_name(std::string_view name, std::string_view extension);

}  // namespace ms
