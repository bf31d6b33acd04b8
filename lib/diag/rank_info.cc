#include "diag/rank_info.h"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "comm/clock_offset.h"
#include "comm/variable_length.h"
#include "core/host_metrics.h"
#include "core/logging.h"
#include "diag/gpu_info.h"
#include "io/env.h"
#ifdef MS_HAVE_CUDA
#include "kernels/device.h"
#endif

namespace ms::diag {

using nlohmann::ordered_json;

int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

ordered_json describe_gpus() {
  ordered_json gpus = ordered_json::object();
#ifdef MS_HAVE_CUDA
  Result<int> count = kernels::device_count();
  if (!count.ok()) {
    gpus["count"] = 0;
    gpus["note"] = count.status().message();
    return gpus;
  }
  gpus["count"] = *count;
  ordered_json names = ordered_json::array();
  for (int d = 0; d < *count; ++d) {
    Result<std::string> name = kernels::device_name(d);
    names.push_back(name.ok() ? *name : name.status().message());
  }
  gpus["names"] = names;
#else
  gpus["count"] = 0;
  gpus["note"] = "built without CUDA";
#endif
  return gpus;
}

Result<ordered_json> describe_rank(comm::Communicator& world) {
  HostMetricsSampler sampler;
  MS_RETURN_IF_ERROR(sampler.sample().status());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  MS_ASSIGN_OR_RETURN(HostMetrics metrics, sampler.sample());
  MS_ASSIGN_OR_RETURN(comm::ClockOffset clock, comm::measure_clock_offset(world));
  ordered_json r;
  r["rank"] = world.rank();
  r["host"] = log::host();
  r["pid"] = static_cast<int64_t>(getpid());
  r["cpus"] = usable_cpus();
  r["cpu_util"] = metrics.cpu_util;
  r["mem_total"] = metrics.mem_total;
  r["mem_used"] = metrics.mem_used;
  r["io_backend"] = std::string(io::default_env().backend_name());
  r["gpus"] = describe_gpus();
  r["nvml"] = describe_nvml_gpus();
  r["clock_offset_s"] = clock.offset_s;
  r["clock_rtt_s"] = clock.rtt_s;
  return r;
}

Result<std::vector<ordered_json>> gather_rank_descriptions(comm::Communicator& world,
                                                           const ordered_json& mine) {
  MS_ASSIGN_OR_RETURN(const std::vector<std::string> texts,
                      comm::all_gather_variable(world, mine.dump()));
  std::vector<ordered_json> ranks;
  for (const std::string& text : texts) ranks.push_back(ordered_json::parse(text));
  return ranks;
}

}  // namespace ms::diag
