// A small LSTM variational auto-encoder over one metric's time window: the denoiser of Minder
// (Deng et al., NSDI 2025). Trained on healthy windows, it reconstructs the typical shape of a
// window and drops the jitter that does not fit it, so distances between machines compare
// behaviour rather than noise.
//
//   encoder LSTM (input 1, hidden H) over x_1..x_T -> h_T
//   mu = W_mu h_T + b_mu, logvar = W_lv h_T + b_lv               (latent Z each)
//   z = mu + exp(logvar / 2) * eps,  eps ~ N(0, I)               (eps = 0 when denoising)
//   decoder LSTM (input Z, z fed at every step, hidden H) -> h'_t
//   y_t = w_out . h'_t + b_out
//   loss = (1/T) sum_t (y_t - x_t)^2 + beta * KL(N(mu, exp(logvar)) || N(0, I))
//
// Everything is plain C++ in double precision with hand-written backpropagation through time
// (checked against finite differences in tests/diag/lstm_vae_test.cc): the model is a few
// thousand parameters, so neither a BLAS nor a framework would pay for itself. Parameters live
// in one flat vector so Adam and the file format treat them as one array.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/env.h"

namespace ms::diag {

struct LstmVaeConfig {
  int window = 60;     // T: samples per window
  int hidden = 16;     // H: LSTM state size of encoder and decoder
  int latent = 4;      // Z
  double beta = 0.01;  // weight of the KL term
};

class LstmVae {
 public:
  // A model with weights drawn from Philox keyed by `seed` (N(0, 1/fan_in), forget-gate bias 1).
  // InvalidArgument when a dimension is < 1 or beta < 0.
  static Result<LstmVae> create(const LstmVaeConfig& config, uint64_t seed);

  const LstmVaeConfig& config() const { return config_; }
  std::span<double> params() { return params_; }
  std::span<const double> params() const { return params_; }
  static size_t param_count(const LstmVaeConfig& config);

  // Loss of one window x (T values) with the given noise eps (Z values). When `grad` is not
  // empty (param_count values), adds d loss / d params to it.
  double loss_and_gradient(std::span<const double> x, std::span<const double> eps,
                           std::span<double> grad) const;

  // The reconstruction of x (T values) from z = mu (no sampling): the denoised window.
  std::vector<double> reconstruct(std::span<const double> x) const;

 private:
  LstmVae(LstmVaeConfig config, std::vector<double> params)
      : config_(config), params_(std::move(params)) {}

  LstmVaeConfig config_;
  std::vector<double> params_;
};

// A trained denoiser as stored on disk: the model and the metric it was trained for.
struct DenoiserModel {
  std::string metric;
  LstmVae model;
};

// File bytes (docs/diagnose-detect.md "Denoiser file"): magic "MSLSTMVA", u32 version, dims,
// beta, metric name, parameters as little-endian f64, crc32c of everything before it.
std::string encode_denoiser(const DenoiserModel& model);
// Parses file bytes; Corruption naming `origin` and what is wrong (magic, version, truncation,
// dimension mismatch, checksum) when they are not a valid denoiser file.
Result<DenoiserModel> decode_denoiser(std::string_view bytes, const std::string& origin);

// Writes atomically through lib/io (IOError naming the path on failure) / reads and decodes.
Status save_denoiser(io::Env& env, const std::string& path, const DenoiserModel& model);
Result<DenoiserModel> load_denoiser(io::Env& env, const std::string& path);

struct TrainOptions {
  int epochs = 20;
  int batch = 16;
  double learning_rate = 3e-3;
  uint64_t seed = 1;
};

// Trains `model` in place with Adam on `windows` (each config().window values), shuffled per
// epoch and with fresh eps per sample, both from Philox keyed by options.seed. Returns the mean
// loss of each epoch. InvalidArgument when there are no windows or one has the wrong length.
Result<std::vector<double>> train_lstm_vae(LstmVae& model,
                                           const std::vector<std::vector<double>>& windows,
                                           const TrainOptions& options);

}  // namespace ms::diag
