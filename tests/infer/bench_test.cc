// ms-infer bench's pure parts: percentiles, prompts, and the sweep table's arithmetic on given
// timings (the timings themselves are not asserted).
#include "infer/bench.h"

#include <gtest/gtest.h>

namespace ms::infer {
namespace {

TEST(BenchPercentile, NearestRankAndEmpty) {
  EXPECT_EQ(percentile({}, 50), 0.0);
  EXPECT_EQ(percentile({5, 1, 3}, 50), 3.0);
  EXPECT_EQ(percentile({5, 1, 3}, 0), 1.0);
  EXPECT_EQ(percentile({5, 1, 3}, 100), 5.0);
}

TEST(BenchPrompt, DeterministicAndInRange) {
  const std::vector<int32_t> a = random_prompt(64, 10, 7);
  EXPECT_EQ(a, random_prompt(64, 10, 7));
  EXPECT_NE(a, random_prompt(64, 10, 8));
  for (int32_t t : a) EXPECT_TRUE(t >= 0 && t < 10) << t;
}

TEST(BenchSweepTable, RowsFollowFromTheTimings) {
  SweepOptions options;
  options.input_len = 4;
  options.output_len = 3;
  options.stream_mib = 8;
  SweepResult r;
  r.bandwidth_bytes_s = 10e9;
  r.weight_bytes = 1e9;  // bound: 10 decode steps/s
  r.linear_params = 1e9;  // a prefill of 2 x 4 tokens in 0.5 s: 2 * 1e9 * 8 / 0.5 = 32 GFLOP/s
  r.rows.push_back({2, 0.5, 1.0});  // 2 decode steps in 1 s: 2 steps/s, 20% of the bound
  const std::string text = format_sweep(r, options);
  EXPECT_NE(text.find("10.00 GB/s"), std::string::npos) << text;
  EXPECT_NE(text.find("bound 10.0 steps/s"), std::string::npos) << text;
  EXPECT_NE(text.find("|     4 |      3 |    2 |     14 |    0.500 |     16.0 |    1.000 |      4.0 |"
                      "     2.0 |    20.0% |"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("|       32.0 |\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace ms::infer
