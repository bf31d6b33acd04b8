// Denoisers for detect: each turns one machine's window of one metric into the smooth shape
// that the pairwise distances compare. Minder's choice is an LSTM-VAE trained on healthy windows
// (lstm_vae.h); the moving-average denoiser is the documented fallback when no trained model is
// at hand, and "none" compares raw samples. All work on one window at a time, so a denoiser
// never sees the future of the window it is scoring.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "diag/lstm_vae.h"

namespace ms::diag {

class Denoiser {
 public:
  virtual ~Denoiser() = default;
  // "none", "moving-average" or "lstm-vae".
  virtual std::string name() const = 0;
  // The window length (samples) the denoiser requires, or 0 when any length works.
  virtual int required_window() const { return 0; }
  // out = denoised in; both hold the same number of samples (in is normalized, see detect.h).
  virtual void denoise(std::span<const double> in, std::span<double> out) const = 0;
};

// Returns its input.
class IdentityDenoiser final : public Denoiser {
 public:
  std::string name() const override { return "none"; }
  void denoise(std::span<const double> in, std::span<double> out) const override;
};

// A running median of 2*median_radius+1 samples (removes single-sample spikes, which a mean
// would smear over its neighbours) followed by a centred moving average of 2*mean_radius+1
// samples (removes Gaussian jitter). Both shrink at the window's edges.
class MovingAverageDenoiser final : public Denoiser {
 public:
  explicit MovingAverageDenoiser(int median_radius = 2, int mean_radius = 5)
      : median_radius_(median_radius), mean_radius_(mean_radius) {}
  std::string name() const override { return "moving-average"; }
  void denoise(std::span<const double> in, std::span<double> out) const override;

 private:
  int median_radius_, mean_radius_;
};

// The LSTM-VAE reconstruction of the window with its mean removed, plus the mean: the model
// learns shapes, and the level a machine runs at passes through unchanged.
class LstmVaeDenoiser final : public Denoiser {
 public:
  explicit LstmVaeDenoiser(LstmVae model) : model_(std::move(model)) {}
  std::string name() const override { return "lstm-vae"; }
  int required_window() const override { return model_.config().window; }
  void denoise(std::span<const double> in, std::span<double> out) const override;

 private:
  LstmVae model_;
};

// The window with its mean subtracted: what the LSTM-VAE is trained on and reconstructs.
std::vector<double> centered(std::span<const double> window);

}  // namespace ms::diag
