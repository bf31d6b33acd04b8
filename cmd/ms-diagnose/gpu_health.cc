// `ms-diagnose gpu-health`: reads every GPU of this machine through NVML (loaded at run time,
// lib/diag/nvml.h) and judges each with the rules of lib/diag/gpu_health.h: bad, suspect or ok
// with the reasons. --record writes the readings as JSON; --replay judges such a file instead
// of the live GPUs. Exit 0 when every GPU is ok (or NVML is absent: a named skip line), 3 when
// one is suspect or bad. It runs per machine, without MPI.
#include "cmd/common/registry.h"

#include <cstdio>
#include <iostream>
#include <memory>

#include "diag/gpu_health.h"
#include "diag/gpu_reading.h"
#include "diag/nvml.h"
#include "io/atomic_file.h"

namespace ms::diagnose_cmd {
namespace {

constexpr int kSuspectExit = 3;

struct GpuHealthArgs {
  std::string replay;
  std::string record;
  diag::GpuThresholds thresholds;
  bool json = false;
};

Result<int> run_gpu_health(const GpuHealthArgs& args) {
  std::vector<diag::GpuReading> readings;
  const std::string source = args.replay.empty() ? "NVML (" + diag::default_nvml_library() + ")"
                                                 : args.replay;
  if (!args.replay.empty()) {
    MS_ASSIGN_OR_RETURN(readings, diag::read_gpu_readings_file(args.replay));
  } else {
    Result<std::vector<diag::GpuReading>> live = diag::read_all_gpus();
    if (!live.ok() && live.status().code() != StatusCode::kUnavailable) return live.status();
    if (!live.ok()) {
      // No driver here: nothing to judge, and nothing wrong with the machine for it.
      if (args.json) {
        std::cout << nlohmann::ordered_json{{"skipped", live.status().message()}}.dump(2)
                  << std::endl;
      } else {
        std::printf("# gpu-health skipped: %s\n", live.status().message().c_str());
      }
      return 0;
    }
    readings = std::move(*live);
  }
  if (!args.record.empty()) {
    MS_RETURN_IF_ERROR(io::write_file_atomic(args.record, diag::gpu_readings_json(readings).dump(1) + "\n")
                           .with_context("--record"));
  }
  std::vector<diag::GpuVerdict> verdicts;
  for (const diag::GpuReading& r : readings) verdicts.push_back(diag::judge_gpu(r, args.thresholds));
  const diag::GpuLevel worst = diag::worst_level(verdicts);
  if (args.json) {
    nlohmann::ordered_json doc;
    doc["source"] = source;
    doc["level"] = diag::gpu_level_name(worst);
    doc["gpus"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < verdicts.size(); ++i) {
      nlohmann::ordered_json g = diag::gpu_verdict_json(verdicts[i]);
      g["reading"] = diag::gpu_reading_json(readings[i]);
      doc["gpus"].push_back(std::move(g));
    }
    std::cout << doc.dump(2) << std::endl;
  } else {
    std::printf("# ms-diagnose gpu-health: %zu GPU(s) from %s\n", readings.size(), source.c_str());
    std::fputs(diag::format_gpu_verdicts(verdicts).c_str(), stdout);
  }
  return worst == diag::GpuLevel::kOk ? 0 : kSuspectExit;
}

void add_gpu_health_command(cli::Tool& tool) {
  auto a = std::make_shared<GpuHealthArgs>();
  CLI::App* sub = tool.add_subcommand(
      "gpu-health",
      "Judge every GPU of this machine from NVML (ECC, remapped rows, throttling, temperature, "
      "power, PCIe, NVLink): bad, suspect or ok; exit 3 unless all are ok",
      [a] { return run_gpu_health(*a); });
  sub->add_option("--replay", a->replay,
                  "Judge the readings in this JSON file (written by --record) instead of the "
                  "live GPUs");
  sub->add_option("--record", a->record, "Also write the readings to this JSON file");
  diag::GpuThresholds& t = a->thresholds;
  sub->add_option("--max-retired-pages", t.max_retired_pages,
                  "Retired pages at which a GPU is bad")->capture_default_str();
  sub->add_option("--suspect-corrected-ecc", t.suspect_corrected_ecc,
                  "Corrected ECC errors since the driver loaded that make a GPU suspect")
      ->capture_default_str();
  sub->add_option("--temperature-margin", t.temperature_margin_c,
                  "Degrees below the slowdown threshold from which a GPU is suspect")
      ->capture_default_str();
  sub->add_option("--min-power-limit-fraction", t.min_power_limit_fraction,
                  "Power limit below this fraction of the default makes a GPU suspect")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--suspect-nvlink-crc", t.suspect_nvlink_crc,
                  "NVLink CRC errors (flit + data) per link that make a GPU suspect")
      ->capture_default_str();
  cli::add_json_flag(sub, &a->json);
}

}  // namespace

MS_CLI_COMMAND(gpu_health, add_gpu_health_command);

}  // namespace ms::diagnose_cmd
