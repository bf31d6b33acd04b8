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
  r.read_bytes_s = 10e9;
  r.read_worst_bytes_s = 6e9;
  r.read_passes = 9;
  r.read_threads = 2;
  r.read_probe_bytes = 8 * 1024 * 1024;
  r.copy_bytes_s = 5e9;   // half the read bound: 2 steps/s is 60% of its B=2 bound
  r.weight_bytes = 1e9;
  r.kv_bytes = 0.2e9;
  r.row_bytes = 0.05e9;   // read bound: 10 / 1.25 = 8 decode steps/s at B=1, 10 / 1.5 at B=2
  r.linear_params = 1e9;  // a prefill of 2 x 4 tokens in 0.5 s: 2 * 1e9 * 8 / 0.5 = 32 GFLOP/s
  r.rows.push_back({2, 0.5, 1.0, {}});  // 2 decode steps in 1 s: 2 steps/s, 30% of B=2 bound
  const std::string text = format_sweep(r, options);
  EXPECT_NE(text.find("read bandwidth (2 threads, 8 MiB, best of 9 passes taken between the "
                      "decode runs, worst 6.00): 10.00 GB/s"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("copy bandwidth (1 thread, 8 MiB arrays, read + write counted): 5.00 GB/s"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("KV cache bytes per decode step and sequence: 200.00 MB; embedding row: "
                      "50.0000 MB"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("read bound at B=1 8.0 steps/s"), std::string::npos) << text;
  EXPECT_NE(
      text.find("|     4 |      3 |    2 |     14 |    0.500 |     16.0 |    1.000 |      4.0 |"
                "     2.0 |         30.0% |"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("|       32.0 |         60.0% |\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("runs:"), std::string::npos) << text;  // one repetition: no spread line

  r.rows[0].decode_steps_s = {2.0, 1.5, 1.0};
  EXPECT_NE(format_sweep(r, options)
                .find("B=2: decode steps/s over 3 runs: min 1.0, median 1.5, "
                      "max 2.0\n"),
            std::string::npos)
      << format_sweep(r, options);
}

TEST(BenchKvBytes, EachStepReadsItsPositionsKeysAndValues) {
  config::ModelConfig c;
  c.n_layers = 2;
  c.d_model = 8;
  c.n_heads = 4;  // head_dim 2
  c.n_kv_heads = 2;
  // A position: keys and values of 2 layers x 2 kv heads x 2 floats = 64 bytes. PP 4, TG 3:
  // the two decode steps attend over 5 and 6 positions.
  EXPECT_DOUBLE_EQ(decode_kv_bytes(c, 4, 3), 64 * 5.5);
  c.sliding_window = 5;
  EXPECT_DOUBLE_EQ(decode_kv_bytes(c, 4, 3), 64 * 5.0);
  EXPECT_DOUBLE_EQ(decode_kv_bytes(c, 4, 1), 0.0);  // no decode step
}

}  // namespace
}  // namespace ms::infer
