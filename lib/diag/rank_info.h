// What `ms-diagnose info` reports about each rank: host, process, usable CPUs, CPU and memory
// use sampled now, the I/O backend, GPUs (or why there are none) and the clock offset from rank
// 0, as a JSON object, and every rank's object gathered on every rank.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"

namespace ms::diag {

// CPUs this process may run on (its affinity mask), else the hardware's count.
int usable_cpus();

// {"count": N, "names": [...]} for the GPUs this process sees, or {"count": 0, "note": why}.
nlohmann::ordered_json describe_gpus();

// One rank's facts, in this key order: rank, host, pid, cpus, cpu_util (sampled over 200 ms so
// it means "now"), mem_total, mem_used, io_backend, gpus, nvml (every GPU of the machine as
// NVML reads it, or why it cannot: diag/gpu_info.h), clock_offset_s, clock_rtt_s.
// Collective over `world` (the clock offset is measured against rank 0).
Result<nlohmann::ordered_json> describe_rank(comm::Communicator& world);

// Every rank's description on every rank, in rank order. Collective.
Result<std::vector<nlohmann::ordered_json>> gather_rank_descriptions(
    comm::Communicator& world, const nlohmann::ordered_json& mine);

}  // namespace ms::diag
