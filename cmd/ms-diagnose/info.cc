// `ms-diagnose info`: which ranks, hosts, devices and I/O backends a job got, and how far each
// rank's clock is from rank 0's. Run under mpirun to see the whole job; rank 0 prints.
#include "cmd/common/mpi_world.h"
#include "cmd/common/registry.h"

#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "comm/clock_offset.h"
#include "comm/mpi_communicator.h"
#include "comm/variable_length.h"
#include "core/host_metrics.h"
#include "core/logging.h"
#include "core/version.h"
#include "io/env.h"
#ifdef MS_HAVE_CUDA
#include "kernels/device.h"
#endif

namespace ms::diagnose_cmd {
namespace {

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

// One rank's facts. CPU utilization is sampled over a short interval so it means "now".
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
  r["clock_offset_s"] = clock.offset_s;
  r["clock_rtt_s"] = clock.rtt_s;
  return r;
}

// Gathers every rank's JSON text on every rank and parses it.
Result<std::vector<ordered_json>> gather_ranks(comm::Communicator& world,
                                               const ordered_json& mine) {
  MS_ASSIGN_OR_RETURN(const std::vector<std::string> texts,
                      comm::all_gather_variable(world, mine.dump()));
  std::vector<ordered_json> ranks;
  for (const std::string& text : texts) ranks.push_back(ordered_json::parse(text));
  return ranks;
}

std::string mpi_library() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<size_t>(len));
  size_t eol = s.find_first_of("\n,");
  return eol == std::string::npos ? s : s.substr(0, eol);
}

// Why ranks have no GPU, once per distinct reason, below the table (the reason is too long
// for a column).
void print_gpu_notes(const std::vector<ordered_json>& ranks) {
  std::vector<std::pair<std::string, std::string>> notes;  // reason, ranks
  for (const ordered_json& r : ranks) {
    if (!r["gpus"].contains("note")) continue;
    // Vendor errors name the host and rank; group by the reason that follows them.
    std::string note = r["gpus"]["note"].get<std::string>();
    const size_t rank_at = note.find(" rank ");
    const size_t reason_at = rank_at == std::string::npos ? rank_at : note.find(": ", rank_at);
    if (reason_at != std::string::npos) note = note.substr(reason_at + 2);
    const std::string rank = std::to_string(r["rank"].get<int>());
    auto it = std::find_if(notes.begin(), notes.end(), [&](const auto& n) { return n.first == note; });
    if (it == notes.end()) {
      notes.emplace_back(note, rank);
    } else {
      it->second += "," + rank;
    }
  }
  for (const auto& [note, rank_list] : notes) {
    std::printf("# no GPU on rank(s) %s: %s\n", rank_list.c_str(), note.c_str());
  }
}

void print_table(const std::vector<ordered_json>& ranks) {
  std::printf("# ms-diagnose info: %zu rank(s), toolkit %s, %s\n", ranks.size(),
              version_string().c_str(), mpi_library().c_str());
  std::printf("%6s  %-20s %8s %5s %6s %9s %9s  %-13s %12s %10s  %s\n", "rank", "host", "pid",
              "cpus", "cpu%", "used GiB", "total GiB", "io backend", "offset ms", "rtt ms",
              "gpus");
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  for (const ordered_json& r : ranks) {
    const ordered_json& g = r["gpus"];
    std::string gpus = std::to_string(g["count"].get<int>());
    if (g.contains("names")) {
      for (const ordered_json& name : g["names"]) gpus += " " + name.get<std::string>();
    }
    std::printf("%6d  %-20s %8lld %5d %6.1f %9.2f %9.2f  %-13s %12.3f %10.3f  %s\n",
                r["rank"].get<int>(), r["host"].get<std::string>().c_str(),
                static_cast<long long>(r["pid"].get<int64_t>()), r["cpus"].get<int>(),
                100.0 * r["cpu_util"].get<double>(), r["mem_used"].get<double>() / kGiB,
                r["mem_total"].get<double>() / kGiB, r["io_backend"].get<std::string>().c_str(),
                1e3 * r["clock_offset_s"].get<double>(), 1e3 * r["clock_rtt_s"].get<double>(),
                gpus.c_str());
  }
  print_gpu_notes(ranks);
}

Result<int> run_info(bool json) {
  return cli::run_in_world([&](comm::MpiCommunicator& world) -> Result<int> {
    MS_ASSIGN_OR_RETURN(ordered_json mine, describe_rank(world));
    MS_ASSIGN_OR_RETURN(std::vector<ordered_json> ranks, gather_ranks(world, mine));
    if (world.rank() != 0) return 0;
    if (json) {
      ordered_json doc;
      doc["version"] = version_string();
      doc["mpi_library"] = mpi_library();
      doc["world_size"] = world.size();
      doc["ranks"] = ranks;
      std::cout << doc.dump(2) << std::endl;
    } else {
      print_table(ranks);
    }
    return 0;
  });
}

void add_info_command(cli::Tool& tool) {
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = tool.add_subcommand(
      "info", "Show every rank's host, CPUs, memory, GPUs, I/O backend and clock offset",
      [json] { return run_info(*json); });
  cli::add_json_flag(sub, json.get());
}

}  // namespace

MS_CLI_COMMAND(info, add_info_command);

}  // namespace ms::diagnose_cmd
