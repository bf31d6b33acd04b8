// The GPU health rules (diag/gpu_health.h) over readings in NVML's terms, stored as JSON in
// tests/diag/data/gpu/ in the form `ms-diagnose gpu-health --record` writes. The readings are
// crafted after H100/V100 values (no GPU was at hand to record them); each exercises one
// failure the rules must name: healthy idle and busy GPUs, thermal / power-brake / software
// thermal throttling, a lowered power limit, uncorrectable ECC errors with a pending remap, a
// failed remap, pending page retirement, a degraded PCIe link and a down NVLink.
#include "diag/gpu_health.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "diag/gpu_reading.h"

namespace ms::diag {
namespace {

std::string fixture(const std::string& name) {
  const char* root = std::getenv("MS_SOURCE_DIR");
  return std::string(root ? root : MS_TEST_SOURCE_DIR) + "/tests/diag/data/gpu/" + name;
}

GpuReading load(const std::string& name) {
  Result<std::vector<GpuReading>> readings = read_gpu_readings_file(fixture(name));
  EXPECT_TRUE(readings.ok()) << readings.status().message();
  if (!readings.ok() || readings->size() != 1) {
    ADD_FAILURE() << name << ": expected one reading";
    return {};
  }
  return readings->front();
}

std::vector<std::string> rules(const GpuVerdict& v, GpuLevel level) {
  std::vector<std::string> names;
  for (const GpuFinding& f : v.findings) {
    if (f.level == level) names.push_back(f.rule);
  }
  std::sort(names.begin(), names.end());
  return names;
}

using Rules = std::vector<std::string>;

TEST(GpuHealth, HealthyIdleGpuIsOkAndItsDownTrainedLinkIsOnlyANote) {
  const GpuVerdict v = judge_gpu(load("healthy_idle.json"));
  EXPECT_EQ(v.level, GpuLevel::kOk);
  EXPECT_TRUE(v.findings.empty());
  EXPECT_EQ(v.index, 0);
  EXPECT_EQ(v.bus_id, "00000000:18:00.0");
  ASSERT_EQ(v.notes.size(), 1u);
  EXPECT_EQ(v.notes[0], "PCIe gen 1, below its maximum gen 5 (normal while idle)");
}

TEST(GpuHealth, HealthyBusyGpuAtItsPowerLimitIsOk) {
  const GpuVerdict v = judge_gpu(load("healthy_busy.json"));
  EXPECT_EQ(v.level, GpuLevel::kOk);
  EXPECT_TRUE(v.findings.empty());
  ASSERT_EQ(v.notes.size(), 1u);
  EXPECT_NE(v.notes[0].find("power limit"), std::string::npos);
}

TEST(GpuHealth, HardwareThermalSlowdownIsBad) {
  const GpuVerdict v = judge_gpu(load("throttled_hw_thermal.json"));
  EXPECT_EQ(v.level, GpuLevel::kBad);
  // 88 C against a slowdown threshold of 87 C; the generic hw_slowdown bit is explained by the
  // thermal one and not reported twice.
  EXPECT_EQ(rules(v, GpuLevel::kBad), (Rules{"hw_thermal_slowdown", "temperature"}));
  EXPECT_TRUE(rules(v, GpuLevel::kSuspect).empty());
}

TEST(GpuHealth, PowerBrakeSlowdownIsBad) {
  const GpuVerdict v = judge_gpu(load("throttled_power_brake.json"));
  EXPECT_EQ(v.level, GpuLevel::kBad);
  EXPECT_EQ(rules(v, GpuLevel::kBad), (Rules{"hw_power_brake_slowdown"}));
}

TEST(GpuHealth, SoftwareThermalSlowdownNearTheThresholdIsSuspect) {
  const GpuVerdict v = judge_gpu(load("throttled_sw_thermal.json"));
  EXPECT_EQ(v.level, GpuLevel::kSuspect);
  // 84 C is within 5 C of 87 C.
  EXPECT_EQ(rules(v, GpuLevel::kSuspect), (Rules{"sw_thermal_slowdown", "temperature"}));
  GpuThresholds narrow;
  narrow.temperature_margin_c = 2;
  EXPECT_EQ(rules(judge_gpu(load("throttled_sw_thermal.json"), narrow), GpuLevel::kSuspect),
            (Rules{"sw_thermal_slowdown"}));
}

TEST(GpuHealth, LoweredPowerLimitIsSuspect) {
  const GpuVerdict v = judge_gpu(load("power_capped.json"));
  EXPECT_EQ(v.level, GpuLevel::kSuspect);
  ASSERT_EQ(rules(v, GpuLevel::kSuspect), (Rules{"power_limit"}));
  EXPECT_EQ(v.findings[0].detail, "power limit 450 W is below 90% of the default 700 W");
}

TEST(GpuHealth, VolatileUncorrectableEccWithPendingRemapIsBad) {
  const GpuVerdict v = judge_gpu(load("ecc_uncorrectable_remap_pending.json"));
  EXPECT_EQ(v.level, GpuLevel::kBad);
  EXPECT_EQ(rules(v, GpuLevel::kBad), (Rules{"row_remap_pending", "volatile_uncorrectable_ecc"}));
  // The aggregate count holds the same errors: not reported again as history.
  EXPECT_TRUE(rules(v, GpuLevel::kSuspect).empty());
}

TEST(GpuHealth, FailedRowRemapIsBadAndPastUncorrectableErrorsSuspect) {
  const GpuVerdict v = judge_gpu(load("ecc_remap_failed.json"));
  EXPECT_EQ(v.level, GpuLevel::kBad);
  EXPECT_EQ(rules(v, GpuLevel::kBad), (Rules{"row_remap_failed"}));
  EXPECT_EQ(rules(v, GpuLevel::kSuspect), (Rules{"aggregate_uncorrectable_ecc"}));
  // Findings are ordered bad first.
  EXPECT_EQ(v.findings.front().level, GpuLevel::kBad);
}

TEST(GpuHealth, PendingPageRetirementIsBadAndTooManyRetiredPagesToo) {
  GpuReading r = load("ecc_retired_pages_pending.json");
  GpuVerdict v = judge_gpu(r);
  EXPECT_EQ(v.level, GpuLevel::kBad);
  EXPECT_EQ(rules(v, GpuLevel::kBad), (Rules{"retired_pages_pending"}));
  EXPECT_NE(std::find(v.notes.begin(), v.notes.end(), "4 retired pages (1 double-bit)"),
            v.notes.end());
  r.retired_pages_pending = false;
  r.retired_pages_sbe = 59;
  v = judge_gpu(r);
  EXPECT_EQ(rules(v, GpuLevel::kBad), (Rules{"retired_pages"}));  // 59 + 1 = 60
  r.retired_pages_sbe = 58;
  EXPECT_EQ(judge_gpu(r).level, GpuLevel::kSuspect);  // left: the lifetime uncorrectable error
}

TEST(GpuHealth, NarrowPcieLinkIsSuspectAndSoIsALowGenerationUnderLoad) {
  const GpuVerdict v = judge_gpu(load("degraded_pcie.json"));
  EXPECT_EQ(v.level, GpuLevel::kSuspect);
  ASSERT_EQ(rules(v, GpuLevel::kSuspect), (Rules{"pcie_gen", "pcie_width"}));
  const auto width = std::find_if(v.findings.begin(), v.findings.end(),
                                  [](const GpuFinding& f) { return f.rule == "pcie_width"; });
  EXPECT_EQ(width->detail, "PCIe link x8, below its maximum x16 (host transfers slowed by 50%)");
}

TEST(GpuHealth, DownNvLinkIsBadAndRecoveriesAndCrcErrorsSuspect) {
  const GpuVerdict v = judge_gpu(load("nvlink_down.json"));
  EXPECT_EQ(v.level, GpuLevel::kBad);
  EXPECT_EQ(rules(v, GpuLevel::kBad), (Rules{"nvlink_down"}));
  EXPECT_EQ(rules(v, GpuLevel::kSuspect), (Rules{"nvlink_crc", "nvlink_recovery"}));
  EXPECT_NE(v.findings[0].detail.find("NVLink 3 is down while 17 other links"), std::string::npos);
}

TEST(GpuHealth, UnreadFieldsAreNeitherHealthyNorBad) {
  GpuReading r;  // nothing read at all
  r.unread = {"ecc_volatile_uncorrected: Insufficient Permissions (nvmlReturn_t 4)"};
  const GpuVerdict v = judge_gpu(r);
  EXPECT_EQ(v.level, GpuLevel::kOk);
  ASSERT_EQ(v.notes.size(), 1u);
  EXPECT_EQ(v.notes[0].rfind("not read: ecc_volatile_uncorrected", 0), 0u);
}

TEST(GpuHealth, LostGpuIsBad) {
  GpuReading r;
  r.index = 5;
  r.lost = "nvmlDeviceGetHandleByIndex failed: GPU is lost";
  const GpuVerdict v = judge_gpu(r);
  EXPECT_EQ(v.level, GpuLevel::kBad);
  EXPECT_EQ(v.index, 5);
  EXPECT_EQ(rules(v, GpuLevel::kBad), (Rules{"gpu_lost"}));
}

TEST(GpuHealth, ReportCountsLevelsAndWorstLevelIsTheMaximum) {
  std::vector<GpuVerdict> verdicts = {judge_gpu(load("healthy_busy.json")),
                                      judge_gpu(load("degraded_pcie.json")),
                                      judge_gpu(load("nvlink_down.json"))};
  EXPECT_EQ(worst_level(verdicts), GpuLevel::kBad);
  EXPECT_EQ(worst_level({}), GpuLevel::kOk);
  const std::string text = format_gpu_verdicts(verdicts);
  EXPECT_NE(text.find("# GPU health: 1 bad, 1 suspect, 1 ok"), std::string::npos) << text;
  EXPECT_NE(text.find("    suspect: pcie_width: PCIe link x8"), std::string::npos) << text;
  EXPECT_EQ(gpu_verdict_json(verdicts[2])["level"], "bad");
}

TEST(GpuReadingJson, EveryFixtureRoundTripsExactly) {
  for (const char* name :
       {"healthy_idle.json", "healthy_busy.json", "throttled_hw_thermal.json",
        "throttled_power_brake.json", "throttled_sw_thermal.json", "power_capped.json",
        "ecc_uncorrectable_remap_pending.json", "ecc_remap_failed.json",
        "ecc_retired_pages_pending.json", "degraded_pcie.json", "nvlink_down.json"}) {
    const GpuReading r = load(name);
    const nlohmann::ordered_json once = gpu_reading_json(r);
    Result<GpuReading> back = gpu_reading_from_json(nlohmann::json::parse(once.dump()), name);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(gpu_reading_json(*back).dump(), once.dump()) << name;
  }
}

TEST(GpuReadingJson, OptionalFieldsNotReadAreLeftOutAndReasonsNamed) {
  GpuReading r;
  r.index = 2;
  r.name = "X";
  r.clock_event_reasons = 0x8 | 0x4 | 0x1000;
  const nlohmann::ordered_json j = gpu_reading_json(r);
  EXPECT_FALSE(j.contains("temperature_c"));
  EXPECT_FALSE(j.contains("nvlinks"));
  EXPECT_EQ(j["clock_event_reason_names"],
            nlohmann::json({"sw_power_cap", "hw_slowdown", "0x1000"}));
}

TEST(GpuReadingJson, BadInputIsNamed) {
  Result<std::vector<GpuReading>> typo =
      parse_gpu_readings(R"({"gpus": [{"index": 0, "temprature_c": 50}]})", "r.json");
  ASSERT_FALSE(typo.ok());
  EXPECT_EQ(typo.status().message(), "r.json gpus[0]: unknown key \"temprature_c\"");
  Result<std::vector<GpuReading>> type =
      parse_gpu_readings(R"({"gpus": [{"index": 0, "pcie_width": -8}]})", "r.json");
  ASSERT_FALSE(type.ok());
  EXPECT_EQ(type.status().message(), "r.json gpus[0]: \"pcie_width\" has the wrong type (-8)");
  Result<std::vector<GpuReading>> link = parse_gpu_readings(
      R"({"gpus": [{"nvlinks": [{"link": 0, "active": "yes"}]}]})", "r.json");
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.status().message(),
            "r.json gpus[0] nvlinks[0]: \"active\" has the wrong type (\"yes\")");
  EXPECT_FALSE(parse_gpu_readings("{", "r.json").ok());
  // A single reading without the "gpus" wrapper is accepted.
  Result<std::vector<GpuReading>> one = parse_gpu_readings(R"({"index": 3})", "r.json");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->at(0).index, 3);
}


TEST(GpuHealth, FaultLinesNameTheGpuAndLeaveOutNotes) {
  const GpuVerdict v = judge_gpu(load("degraded_pcie.json"));
  const std::vector<std::string> lines = gpu_fault_lines(v);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("GPU 0 (00000000:18:00.0): suspect: pcie_width: PCIe link x8", 0), 0u)
      << lines[0];
  EXPECT_TRUE(gpu_fault_lines(judge_gpu(load("healthy_busy.json"))).empty());
}

TEST(GpuReadingJson, ReadingsAreFoundByEitherSpellingOfTheBusId) {
  std::vector<GpuReading> readings(2);
  readings[0].bus_id = "00000000:18:00.0";
  readings[1].bus_id = "00000000:AB:00.0";
  EXPECT_EQ(find_reading_by_bus_id(readings, "0000:ab:00.0"), &readings[1]);
  EXPECT_EQ(find_reading_by_bus_id(readings, "00000000:18:00.0"), &readings[0]);
  EXPECT_EQ(find_reading_by_bus_id(readings, "0000:19:00.0"), nullptr);
}

}  // namespace
}  // namespace ms::diag
