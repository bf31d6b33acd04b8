// The LSTM-VAE denoiser model: hand-written backpropagation agrees with finite differences,
// training lowers the loss, and the model file round-trips and refuses damaged bytes.
#include "diag/lstm_vae.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "core/philox.h"
#include "io/atomic_file.h"
#include "io/fault_env.h"

namespace ms::diag {
namespace {

LstmVae tiny_model(double beta = 0.5) {
  Result<LstmVae> m = LstmVae::create({/*window=*/5, /*hidden=*/3, /*latent=*/2, beta}, 42);
  EXPECT_TRUE(m.ok());
  return std::move(m).value();
}

std::vector<double> wave(int n, double phase) {
  std::vector<double> x(n);
  for (int i = 0; i < n; ++i) x[i] = 0.5 * std::sin(0.9 * i + phase);
  return x;
}

TEST(LstmVaeTest, GradientMatchesFiniteDifferencesForEveryParameter) {
  LstmVae model = tiny_model();
  const std::vector<double> x = wave(5, 0.3);
  const std::vector<double> eps = {0.7, -1.2};
  std::vector<double> grad(model.params().size(), 0.0);
  model.loss_and_gradient(x, eps, grad);
  constexpr double kH = 1e-6;
  for (size_t i = 0; i < grad.size(); ++i) {
    const double saved = model.params()[i];
    model.params()[i] = saved + kH;
    const double up = model.loss_and_gradient(x, eps, {});
    model.params()[i] = saved - kH;
    const double down = model.loss_and_gradient(x, eps, {});
    model.params()[i] = saved;
    const double numeric = (up - down) / (2 * kH);
    EXPECT_NEAR(grad[i], numeric, 1e-6 + 1e-4 * std::fabs(numeric)) << "parameter " << i;
  }
}

TEST(LstmVaeTest, TrainingLowersTheLoss) {
  Result<LstmVae> model = LstmVae::create({5, 8, 2, 0.001}, 42);
  ASSERT_TRUE(model.ok());
  std::vector<std::vector<double>> windows;
  for (int k = 0; k < 16; ++k) windows.push_back(wave(5, 0.4 * k));
  Result<std::vector<double>> losses = train_lstm_vae(*model, windows, {150, 4, 1e-2, 3});
  ASSERT_TRUE(losses.ok()) << losses.status().to_string();
  EXPECT_LT(losses->back(), 0.2 * losses->front());
}

TEST(LstmVaeTest, TrainingRefusesWindowsOfTheWrongLength) {
  LstmVae model = tiny_model();
  EXPECT_FALSE(train_lstm_vae(model, {}, {}).ok());
  Result<std::vector<double>> r = train_lstm_vae(model, {wave(4, 0)}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("has 4 samples"), std::string::npos);
}

TEST(LstmVaeTest, CreateRefusesBadDimensions) {
  EXPECT_EQ(LstmVae::create({0, 3, 2, 0.1}, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LstmVae::create({5, 3, 2, -1}, 1).status().code(), StatusCode::kInvalidArgument);
}

class DenoiserFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ms_lstm_vae_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(DenoiserFileTest, SaveAndLoadRoundTripBitExactly) {
  const DenoiserModel saved{"cpu_util", tiny_model()};
  ASSERT_TRUE(save_denoiser(io::default_env(), path("d.bin"), saved).ok());
  Result<DenoiserModel> loaded = load_denoiser(io::default_env(), path("d.bin"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->metric, "cpu_util");
  EXPECT_EQ(loaded->model.config().window, 5);
  EXPECT_EQ(loaded->model.config().beta, 0.5);
  ASSERT_EQ(loaded->model.params().size(), saved.model.params().size());
  for (size_t i = 0; i < saved.model.params().size(); ++i) {
    EXPECT_EQ(loaded->model.params()[i], saved.model.params()[i]);
  }
  const std::vector<double> x = wave(5, 1.0);
  EXPECT_EQ(loaded->model.reconstruct(x), saved.model.reconstruct(x));
}

TEST_F(DenoiserFileTest, DamagedFilesAreCorruptionNamingTheProblem) {
  const std::string good = encode_denoiser({"net_tx_rate", tiny_model()});
  auto expect_corrupt = [](const std::string& bytes, const std::string& words) {
    Result<DenoiserModel> r = decode_denoiser(bytes, "m.bin");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("m.bin"), std::string::npos);
  };
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  expect_corrupt(bad_magic, "bad magic");
  expect_corrupt(good.substr(0, good.size() - 9), "truncated");
  expect_corrupt(good.substr(0, 10), "truncated");
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x10;
  expect_corrupt(flipped, "crc32c");
  std::string newer = good;
  newer[8] = 9;
  expect_corrupt(newer, "format version 9");
  expect_corrupt(good + "xx", "trailing");
}

TEST_F(DenoiserFileTest, FailedWriteLeavesNoFileAndNamesThePath) {
  io::FaultInjectingEnv env(io::default_env());
  env.fail_nth_write(1);
  Status s = save_denoiser(env, path("f.bin"), {"cpu_util", tiny_model()});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("f.bin"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path("f.bin")));
  EXPECT_EQ(load_denoiser(io::default_env(), path("f.bin")).status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace ms::diag
