// Export of toolkit traces to the Chrome trace-event JSON format, which Perfetto
// (ui.perfetto.dev) and chrome://tracing open. Each event becomes a complete ("ph":"X") event;
// a process row per rank (or per host, with a thread row per rank) and separate thread rows for
// compute and communication, so overlap is visible.
#pragma once

#include <string>
#include <vector>

#include "telemetry/schema.h"

namespace ms::telemetry {

// `ranks[r]` holds rank r's events (as read_trace_dir returns them). Timestamps are
// microseconds from the earliest event. Returns the JSON document text.
std::string export_chrome_trace(const std::vector<std::vector<TraceEvent>>& ranks,
                                GroupBy group_by = GroupBy::kRank);

}  // namespace ms::telemetry
