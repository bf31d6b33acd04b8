// `ms-diagnose info`: which ranks, hosts, devices and I/O backends a job got, and how far each
// rank's clock is from rank 0's. Run under mpirun to see the whole job; rank 0 prints. Each
// rank describes itself and the descriptions are gathered in lib/diag (diag/rank_info.h).
#include "cmd/common/mpi_world.h"
#include "cmd/common/registry.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "comm/mpi_communicator.h"
#include "core/version.h"
#include "diag/gpu_info.h"
#include "diag/rank_info.h"

namespace ms::diagnose_cmd {
namespace {

using nlohmann::ordered_json;

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

// Each machine's GPUs as NVML lists them, once per host (from its lowest rank), or the named
// reason NVML could not be read there.
void print_nvml_gpus(const std::vector<ordered_json>& ranks) {
  std::vector<std::string> hosts_done;
  for (const ordered_json& r : ranks) {
    const std::string host = r["host"].get<std::string>();
    if (std::find(hosts_done.begin(), hosts_done.end(), host) != hosts_done.end()) continue;
    hosts_done.push_back(host);
    const ordered_json& nvml = r["nvml"];
    if (nvml.contains("skip")) {
      std::printf("# GPUs of %s: skipped: %s\n", host.c_str(),
                  nvml["skip"].get<std::string>().c_str());
      continue;
    }
    Result<std::vector<diag::GpuReading>> readings =
        diag::parse_gpu_readings(nvml.dump(), "rank " + std::to_string(r["rank"].get<int>()));
    if (!readings.ok()) {
      std::printf("# GPUs of %s: %s\n", host.c_str(), readings.status().message().c_str());
      continue;
    }
    std::printf("#\n# GPUs of %s (NVML): %zu\n", host.c_str(), readings->size());
    std::fputs(diag::format_gpu_table(*readings).c_str(), stdout);
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
  print_nvml_gpus(ranks);
}

Result<int> run_info(bool json) {
  return cli::run_in_world([&](comm::MpiCommunicator& world) -> Result<int> {
    MS_ASSIGN_OR_RETURN(ordered_json mine, diag::describe_rank(world));
    MS_ASSIGN_OR_RETURN(std::vector<ordered_json> ranks, diag::gather_rank_descriptions(world, mine));
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
      "info", "Show every rank's host, CPUs, memory, GPUs, I/O backend and clock offset, and each "
      "machine's GPUs as NVML describes them",
      [json] { return run_info(*json); });
  cli::add_json_flag(sub, json.get());
}

}  // namespace

MS_CLI_COMMAND(info, add_info_command);

}  // namespace ms::diagnose_cmd
