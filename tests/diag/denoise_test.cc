// Window denoisers: what each keeps and what it removes.
#include "diag/denoise.h"

#include <gtest/gtest.h>

#include <numeric>

namespace ms::diag {
namespace {

TEST(DenoiseTest, MovingAverageRemovesASingleSampleSpikeAndKeepsALevel) {
  std::vector<double> x(30, 0.8), out(30);
  x[12] = 0.1;
  MovingAverageDenoiser().denoise(x, out);
  for (double v : out) EXPECT_NEAR(v, 0.8, 1e-12);
}

TEST(DenoiseTest, MovingAverageFollowsAStepChange) {
  std::vector<double> x(40, 0.2), out(40);
  for (int i = 20; i < 40; ++i) x[i] = 0.9;
  MovingAverageDenoiser().denoise(x, out);
  EXPECT_NEAR(out[2], 0.2, 1e-12);
  EXPECT_NEAR(out[37], 0.9, 1e-12);
  EXPECT_GT(out[21], out[18]);
}

TEST(DenoiseTest, IdentityReturnsItsInput) {
  const std::vector<double> x = {1, 5, 2};
  std::vector<double> out(3);
  IdentityDenoiser().denoise(x, out);
  EXPECT_EQ(out, x);
}

TEST(DenoiseTest, LstmVaeDenoiserKeepsTheWindowMean) {
  Result<LstmVae> model = LstmVae::create({8, 4, 2, 0.01}, 5);
  ASSERT_TRUE(model.ok());
  LstmVaeDenoiser denoiser(std::move(model).value());
  EXPECT_EQ(denoiser.required_window(), 8);
  const std::vector<double> a(8, 0.3), b(8, 0.9);
  std::vector<double> out_a(8), out_b(8);
  denoiser.denoise(a, out_a);
  denoiser.denoise(b, out_b);
  // Flat windows have the same shape, so only their levels differ.
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(out_b[i] - out_a[i], 0.6, 1e-12);
}

TEST(DenoiseTest, CenteredSubtractsTheMean) {
  const std::vector<double> c = centered(std::vector<double>{1, 2, 3});
  EXPECT_EQ(c, (std::vector<double>{-1, 0, 1}));
}

}  // namespace
}  // namespace ms::diag
