// Progress line text: amount, percent, rate, detail, ETA and elapsed time.
#include "data/progress.h"

#include <gtest/gtest.h>

namespace ms::data {
namespace {

TEST(Progress, LineShowsAmountRateAndEta) {
  EXPECT_EQ(Progress::format_line("build x", 2'000'000, 8'000'000, 2.0, "B", "123 tokens"),
            "build x: 2.00 MB / 8.00 MB (25.0%), 1.00 MB/s, 123 tokens, ETA 0:00:06, elapsed 0:00:02");
}

TEST(Progress, UnknownTotalHasNoPercentOrEta) {
  EXPECT_EQ(Progress::format_line("plan", 1500, 0, 3.0, "samples", ""),
            "plan: 1500 samples, 500 samples/s, elapsed 0:00:03");
}

TEST(Progress, LogStyleFinishesQuietlyWhenNothingWasPrinted) {
  ProgressOptions options;
  options.style = ProgressOptions::Style::kLog;
  Progress progress("quiet", 10, options);
  progress.update(5);
  progress.finish();
  SUCCEED();
}

}  // namespace
}  // namespace ms::data
