// LSTM-VAE forward pass, backpropagation through time, Adam training and the denoiser file.
// Parameter layout in the flat vector (row-major matrices), in this order:
//   encoder W_e (4H,1) U_e (4H,H) b_e (4H) | W_mu (Z,H) b_mu (Z) | W_lv (Z,H) b_lv (Z) |
//   decoder W_d (4H,Z) U_d (4H,H) b_d (4H) | w_out (H) b_out (1)
// Gate blocks inside 4H are input, forget, cell candidate, output.
#include "diag/lstm_vae.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/crc32c.h"
#include "core/philox.h"
#include "io/atomic_file.h"

namespace ms::diag {
namespace {

constexpr char kMagic[8] = {'M', 'S', 'L', 'S', 'T', 'M', 'V', 'A'};
constexpr uint32_t kFileVersion = 1;

double sigmoid(double a) { return 1.0 / (1.0 + std::exp(-a)); }

// Where each tensor starts in the flat parameter vector.
struct Layout {
  size_t enc_w, enc_u, enc_b, mu_w, mu_b, lv_w, lv_b, dec_w, dec_u, dec_b, out_w, out_b, total;

  explicit Layout(const LstmVaeConfig& c) {
    const size_t h = c.hidden, z = c.latent, g = 4 * h;
    size_t at = 0;
    auto take = [&at](size_t n) { const size_t start = at; at += n; return start; };
    enc_w = take(g); enc_u = take(g * h); enc_b = take(g);
    mu_w = take(z * h); mu_b = take(z);
    lv_w = take(z * h); lv_b = take(z);
    dec_w = take(g * z); dec_u = take(g * h); dec_b = take(g);
    out_w = take(h); out_b = take(1);
    total = at;
  }
};

// One LSTM's weights: W (4H,in), U (4H,H), b (4H), as pointers into a flat vector.
template <typename T>
struct LstmWeights {
  T* w;
  T* u;
  T* b;
  int in, hid;
};

// Activations kept for backpropagation: gates (T,4H) after their nonlinearity, c and h
// (T+1,H) with row 0 the zero initial state.
struct LstmTrace {
  std::vector<double> gates, c, h;
};

// inputs is (T,in); fills trace for t = 1..T.
void lstm_forward(const LstmWeights<const double>& p, std::span<const double> inputs, int steps,
                  LstmTrace& trace) {
  const int hid = p.hid, g4 = 4 * p.hid;
  trace.gates.assign(static_cast<size_t>(steps) * g4, 0.0);
  trace.c.assign(static_cast<size_t>(steps + 1) * hid, 0.0);
  trace.h.assign(static_cast<size_t>(steps + 1) * hid, 0.0);
  std::vector<double> a(g4);
  for (int t = 0; t < steps; ++t) {
    const double* x = inputs.data() + static_cast<size_t>(t) * p.in;
    const double* h_prev = trace.h.data() + static_cast<size_t>(t) * hid;
    for (int r = 0; r < g4; ++r) {
      double sum = p.b[r];
      for (int k = 0; k < p.in; ++k) sum += p.w[r * p.in + k] * x[k];
      for (int k = 0; k < hid; ++k) sum += p.u[r * hid + k] * h_prev[k];
      a[r] = sum;
    }
    double* gates = trace.gates.data() + static_cast<size_t>(t) * g4;
    const double* c_prev = trace.c.data() + static_cast<size_t>(t) * hid;
    double* c = trace.c.data() + static_cast<size_t>(t + 1) * hid;
    double* h = trace.h.data() + static_cast<size_t>(t + 1) * hid;
    for (int j = 0; j < hid; ++j) {
      const double i = sigmoid(a[j]), f = sigmoid(a[hid + j]);
      const double g = std::tanh(a[2 * hid + j]), o = sigmoid(a[3 * hid + j]);
      gates[j] = i; gates[hid + j] = f; gates[2 * hid + j] = g; gates[3 * hid + j] = o;
      c[j] = f * c_prev[j] + i * g;
      h[j] = o * std::tanh(c[j]);
    }
  }
}

// Backpropagation through time. dh_out is (T,H): the loss gradient reaching h_t from outside
// the recurrence. Adds parameter gradients to `grad` and writes d loss / d inputs (T,in).
void lstm_backward(const LstmWeights<const double>& p, const LstmWeights<double>& grad,
                   std::span<const double> inputs, int steps, const LstmTrace& trace,
                   std::span<const double> dh_out, std::span<double> d_inputs) {
  const int hid = p.hid, g4 = 4 * p.hid;
  std::vector<double> dh(hid, 0.0), dc(hid, 0.0), da(g4), dh_prev(hid);
  for (int t = steps - 1; t >= 0; --t) {
    const double* gates = trace.gates.data() + static_cast<size_t>(t) * g4;
    const double* c_prev = trace.c.data() + static_cast<size_t>(t) * hid;
    const double* c = trace.c.data() + static_cast<size_t>(t + 1) * hid;
    for (int j = 0; j < hid; ++j) {
      const double dhj = dh[j] + dh_out[static_cast<size_t>(t) * hid + j];
      const double i = gates[j], f = gates[hid + j], g = gates[2 * hid + j], o = gates[3 * hid + j];
      const double tc = std::tanh(c[j]);
      const double dcj = dc[j] + dhj * o * (1 - tc * tc);
      da[j] = dcj * g * i * (1 - i);
      da[hid + j] = dcj * c_prev[j] * f * (1 - f);
      da[2 * hid + j] = dcj * i * (1 - g * g);
      da[3 * hid + j] = dhj * tc * o * (1 - o);
      dc[j] = dcj * f;
    }
    const double* x = inputs.data() + static_cast<size_t>(t) * p.in;
    const double* h_prev = trace.h.data() + static_cast<size_t>(t) * hid;
    std::fill(dh_prev.begin(), dh_prev.end(), 0.0);
    double* dx = d_inputs.data() + static_cast<size_t>(t) * p.in;
    std::fill(dx, dx + p.in, 0.0);
    for (int r = 0; r < g4; ++r) {
      grad.b[r] += da[r];
      for (int k = 0; k < p.in; ++k) {
        grad.w[r * p.in + k] += da[r] * x[k];
        dx[k] += p.w[r * p.in + k] * da[r];
      }
      for (int k = 0; k < hid; ++k) {
        grad.u[r * hid + k] += da[r] * h_prev[k];
        dh_prev[k] += p.u[r * hid + k] * da[r];
      }
    }
    dh = dh_prev;
  }
}

template <typename T>
LstmWeights<T> encoder(T* base, const Layout& l, const LstmVaeConfig& c) {
  return {base + l.enc_w, base + l.enc_u, base + l.enc_b, 1, c.hidden};
}
template <typename T>
LstmWeights<T> decoder(T* base, const Layout& l, const LstmVaeConfig& c) {
  return {base + l.dec_w, base + l.dec_u, base + l.dec_b, c.latent, c.hidden};
}

// y = W v + b for W (rows, cols).
void affine(const double* w, const double* b, const double* v, int rows, int cols, double* y) {
  for (int r = 0; r < rows; ++r) {
    double sum = b[r];
    for (int k = 0; k < cols; ++k) sum += w[r * cols + k] * v[k];
    y[r] = sum;
  }
}

// Everything the forward pass computes that backward needs.
struct Forward {
  LstmTrace enc, dec;
  std::vector<double> mu, logvar, z, z_inputs, y;
};

Forward run_forward(const LstmVaeConfig& c, std::span<const double> p, std::span<const double> x,
                    std::span<const double> eps) {
  const Layout l(c);
  Forward f;
  lstm_forward(encoder(p.data(), l, c), x, c.window, f.enc);
  const double* h_last = f.enc.h.data() + static_cast<size_t>(c.window) * c.hidden;
  f.mu.resize(c.latent);
  f.logvar.resize(c.latent);
  affine(p.data() + l.mu_w, p.data() + l.mu_b, h_last, c.latent, c.hidden, f.mu.data());
  affine(p.data() + l.lv_w, p.data() + l.lv_b, h_last, c.latent, c.hidden, f.logvar.data());
  f.z.resize(c.latent);
  for (int j = 0; j < c.latent; ++j) {
    f.z[j] = f.mu[j] + std::exp(0.5 * f.logvar[j]) * (eps.empty() ? 0.0 : eps[j]);
  }
  f.z_inputs.resize(static_cast<size_t>(c.window) * c.latent);
  for (int t = 0; t < c.window; ++t) {
    std::copy(f.z.begin(), f.z.end(), f.z_inputs.begin() + static_cast<size_t>(t) * c.latent);
  }
  lstm_forward(decoder(p.data(), l, c), f.z_inputs, c.window, f.dec);
  f.y.resize(c.window);
  for (int t = 0; t < c.window; ++t) {
    const double* h = f.dec.h.data() + static_cast<size_t>(t + 1) * c.hidden;
    f.y[t] = p[l.out_b] + std::inner_product(h, h + c.hidden, p.data() + l.out_w, 0.0);
  }
  return f;
}

double kl_divergence(const Forward& f) {
  double kl = 0;
  for (size_t j = 0; j < f.mu.size(); ++j) {
    kl += -0.5 * (1 + f.logvar[j] - f.mu[j] * f.mu[j] - std::exp(f.logvar[j]));
  }
  return kl;
}

// Gradient of the loss through the output layer and decoder; returns d loss / d z.
std::vector<double> backward_decoder(const LstmVaeConfig& c, const Layout& l,
                                     std::span<const double> p, std::span<double> grad,
                                     std::span<const double> x, const Forward& f) {
  const int hid = c.hidden;
  std::vector<double> dh_out(static_cast<size_t>(c.window) * hid);
  for (int t = 0; t < c.window; ++t) {
    const double dy = 2.0 * (f.y[t] - x[t]) / c.window;
    const double* h = f.dec.h.data() + static_cast<size_t>(t + 1) * hid;
    grad[l.out_b] += dy;
    for (int j = 0; j < hid; ++j) {
      grad[l.out_w + j] += dy * h[j];
      dh_out[static_cast<size_t>(t) * hid + j] = dy * p[l.out_w + j];
    }
  }
  std::vector<double> dz_inputs(f.z_inputs.size());
  lstm_backward(decoder(p.data(), l, c), decoder(grad.data(), l, c), f.z_inputs, c.window, f.dec,
                dh_out, dz_inputs);
  std::vector<double> dz(c.latent, 0.0);
  for (int t = 0; t < c.window; ++t) {
    for (int j = 0; j < c.latent; ++j) dz[j] += dz_inputs[static_cast<size_t>(t) * c.latent + j];
  }
  return dz;
}

// Gradient through the reparameterization, the two heads and the encoder.
void backward_encoder(const LstmVaeConfig& c, const Layout& l, std::span<const double> p,
                      std::span<double> grad, std::span<const double> x,
                      std::span<const double> eps, const Forward& f,
                      const std::vector<double>& dz) {
  const int hid = c.hidden;
  const double* h_last = f.enc.h.data() + static_cast<size_t>(c.window) * hid;
  std::vector<double> dh_out(static_cast<size_t>(c.window) * hid, 0.0);
  double* dh_last = dh_out.data() + static_cast<size_t>(c.window - 1) * hid;
  for (int j = 0; j < c.latent; ++j) {
    const double sd = std::exp(0.5 * f.logvar[j]);
    const double e = eps.empty() ? 0.0 : eps[j];
    const double dmu = dz[j] + c.beta * f.mu[j];
    const double dlv = dz[j] * e * 0.5 * sd + c.beta * 0.5 * (sd * sd - 1);
    grad[l.mu_b + j] += dmu;
    grad[l.lv_b + j] += dlv;
    for (int k = 0; k < hid; ++k) {
      grad[l.mu_w + j * hid + k] += dmu * h_last[k];
      grad[l.lv_w + j * hid + k] += dlv * h_last[k];
      dh_last[k] += p[l.mu_w + j * hid + k] * dmu + p[l.lv_w + j * hid + k] * dlv;
    }
  }
  std::vector<double> dx(c.window);
  lstm_backward(encoder(p.data(), l, c), encoder(grad.data(), l, c), x, c.window, f.enc, dh_out,
                dx);
}

// Little-endian append/read helpers for the file format.
template <typename T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

class ByteReader {
 public:
  ByteReader(std::string_view bytes, const std::string& origin) : bytes_(bytes), origin_(origin) {}
  template <typename T>
  Result<T> get(const char* what) {
    if (bytes_.size() - at_ < sizeof(T)) {
      return Corruption("denoiser file '" + origin_ + "' is truncated: it ends inside the " +
                        what + " at byte " + std::to_string(at_));
    }
    T value;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  Result<std::string_view> take(size_t n, const char* what) {
    if (bytes_.size() - at_ < n) {
      return Corruption("denoiser file '" + origin_ + "' is truncated: it ends inside the " +
                        what + " at byte " + std::to_string(at_));
    }
    std::string_view s = bytes_.substr(at_, n);
    at_ += n;
    return s;
  }
  size_t offset() const { return at_; }

 private:
  std::string_view bytes_;
  const std::string& origin_;
  size_t at_ = 0;
};

Status validate_config(const LstmVaeConfig& c) {
  if (c.window < 1 || c.hidden < 1 || c.latent < 1 || c.window > 100000 || c.hidden > 4096 ||
      c.latent > 4096) {
    return InvalidArgument("LSTM-VAE dimensions must be positive and moderate (window " +
                           std::to_string(c.window) + ", hidden " + std::to_string(c.hidden) +
                           ", latent " + std::to_string(c.latent) + ")");
  }
  if (!(c.beta >= 0) || !std::isfinite(c.beta)) {
    return InvalidArgument("LSTM-VAE beta must be a finite value >= 0");
  }
  return Status::OK();
}

Result<LstmVaeConfig> decode_header(ByteReader& in, const std::string& origin) {
  MS_ASSIGN_OR_RETURN(std::string_view magic, in.take(sizeof(kMagic), "magic"));
  if (magic != std::string_view(kMagic, sizeof(kMagic))) {
    return Corruption("'" + origin + "' is not a denoiser file (bad magic; expected \"MSLSTMVA\")");
  }
  MS_ASSIGN_OR_RETURN(uint32_t version, in.get<uint32_t>("version"));
  if (version > kFileVersion || version == 0) {
    return Corruption("denoiser file '" + origin + "' has format version " +
                      std::to_string(version) + "; this toolkit reads version " +
                      std::to_string(kFileVersion) + " (upgrade ms-diagnose or retrain)");
  }
  LstmVaeConfig c;
  MS_ASSIGN_OR_RETURN(uint32_t window, in.get<uint32_t>("window"));
  MS_ASSIGN_OR_RETURN(uint32_t hidden, in.get<uint32_t>("hidden size"));
  MS_ASSIGN_OR_RETURN(uint32_t latent, in.get<uint32_t>("latent size"));
  MS_ASSIGN_OR_RETURN(c.beta, in.get<double>("beta"));
  c.window = static_cast<int>(std::min<uint32_t>(window, 1u << 30));
  c.hidden = static_cast<int>(std::min<uint32_t>(hidden, 1u << 30));
  c.latent = static_cast<int>(std::min<uint32_t>(latent, 1u << 30));
  Status valid = validate_config(c);
  if (!valid.ok()) return Corruption("denoiser file '" + origin + "': " + valid.message());
  return c;
}

}  // namespace

Result<LstmVae> LstmVae::create(const LstmVaeConfig& config, uint64_t seed) {
  MS_RETURN_IF_ERROR(validate_config(config));
  const Layout l(config);
  std::vector<double> p(l.total, 0.0);
  const uint64_t stream = stream_id("diag.lstm_vae.init");
  auto fill = [&](size_t start, size_t count, int fan_in) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(fan_in));
    for (size_t i = 0; i < count; ++i) p[start + i] = scale * normal(seed, stream, start + i);
  };
  const int h = config.hidden, z = config.latent;
  fill(l.enc_w, 4 * h, 1 + h);
  fill(l.enc_u, 4 * h * h, 1 + h);
  fill(l.mu_w, z * h, h);
  fill(l.lv_w, z * h, h);
  fill(l.dec_w, 4 * h * z, z + h);
  fill(l.dec_u, 4 * h * h, z + h);
  fill(l.out_w, h, h);
  for (int j = 0; j < h; ++j) {
    p[l.enc_b + h + j] = 1.0;
    p[l.dec_b + h + j] = 1.0;
  }
  return LstmVae(config, std::move(p));
}

size_t LstmVae::param_count(const LstmVaeConfig& config) { return Layout(config).total; }

double LstmVae::loss_and_gradient(std::span<const double> x, std::span<const double> eps,
                                  std::span<double> grad) const {
  const Forward f = run_forward(config_, params_, x, eps);
  double reconstruction = 0;
  for (int t = 0; t < config_.window; ++t) reconstruction += (f.y[t] - x[t]) * (f.y[t] - x[t]);
  const double loss = reconstruction / config_.window + config_.beta * kl_divergence(f);
  if (grad.empty()) return loss;
  const Layout l(config_);
  const std::vector<double> dz = backward_decoder(config_, l, params_, grad, x, f);
  backward_encoder(config_, l, params_, grad, x, eps, f, dz);
  return loss;
}

std::vector<double> LstmVae::reconstruct(std::span<const double> x) const {
  return run_forward(config_, params_, x, {}).y;
}

std::string encode_denoiser(const DenoiserModel& m) {
  const LstmVaeConfig& c = m.model.config();
  std::string out(kMagic, sizeof(kMagic));
  put<uint32_t>(out, kFileVersion);
  put<uint32_t>(out, static_cast<uint32_t>(c.window));
  put<uint32_t>(out, static_cast<uint32_t>(c.hidden));
  put<uint32_t>(out, static_cast<uint32_t>(c.latent));
  put<double>(out, c.beta);
  put<uint32_t>(out, static_cast<uint32_t>(m.metric.size()));
  out += m.metric;
  put<uint64_t>(out, m.model.params().size());
  for (double v : m.model.params()) put<double>(out, v);
  put<uint32_t>(out, crc32c(out.data(), out.size()));
  return out;
}

Result<DenoiserModel> decode_denoiser(std::string_view bytes, const std::string& origin) {
  ByteReader in(bytes, origin);
  MS_ASSIGN_OR_RETURN(LstmVaeConfig c, decode_header(in, origin));
  MS_ASSIGN_OR_RETURN(uint32_t name_len, in.get<uint32_t>("metric name length"));
  MS_ASSIGN_OR_RETURN(std::string_view name, in.take(name_len, "metric name"));
  MS_ASSIGN_OR_RETURN(uint64_t count, in.get<uint64_t>("parameter count"));
  if (count != LstmVae::param_count(c)) {
    return Corruption("denoiser file '" + origin + "' holds " + std::to_string(count) +
                      " parameters but its dimensions need " +
                      std::to_string(LstmVae::param_count(c)));
  }
  MS_ASSIGN_OR_RETURN(LstmVae model, LstmVae::create(c, 0));
  for (double& v : model.params()) {
    MS_ASSIGN_OR_RETURN(v, in.get<double>("parameters"));
  }
  const size_t body = in.offset();
  MS_ASSIGN_OR_RETURN(uint32_t stored_crc, in.get<uint32_t>("checksum"));
  if (in.offset() != bytes.size()) {
    return Corruption("denoiser file '" + origin + "' has " +
                      std::to_string(bytes.size() - in.offset()) + " unexpected trailing bytes");
  }
  if (crc32c(bytes.data(), body) != stored_crc) {
    return Corruption("denoiser file '" + origin +
                      "' failed its crc32c check (the file is damaged; retrain or restore it)");
  }
  return DenoiserModel{std::string(name), std::move(model)};
}

Status save_denoiser(io::Env& env, const std::string& path, const DenoiserModel& model) {
  return io::write_file_atomic(env, path, encode_denoiser(model));
}

Result<DenoiserModel> load_denoiser(io::Env& env, const std::string& path) {
  MS_ASSIGN_OR_RETURN(std::string bytes,
                      io::read_file(env, path, io::kMaxTextFileBytes, "denoiser model"));
  return decode_denoiser(bytes, path);
}

namespace {

// Adam (Kingma and Ba) with the usual bias correction.
class Adam {
 public:
  Adam(size_t n, double lr) : lr_(lr), m_(n, 0.0), v_(n, 0.0) {}
  void step(std::span<double> params, std::span<const double> grad) {
    constexpr double kB1 = 0.9, kB2 = 0.999, kEps = 1e-8;
    ++t_;
    const double c1 = 1 - std::pow(kB1, t_), c2 = 1 - std::pow(kB2, t_);
    for (size_t i = 0; i < params.size(); ++i) {
      m_[i] = kB1 * m_[i] + (1 - kB1) * grad[i];
      v_[i] = kB2 * v_[i] + (1 - kB2) * grad[i] * grad[i];
      params[i] -= lr_ * (m_[i] / c1) / (std::sqrt(v_[i] / c2) + kEps);
    }
  }

 private:
  double lr_;
  int t_ = 0;
  std::vector<double> m_, v_;
};

// A permutation of 0..n-1 drawn from Philox (Fisher-Yates).
std::vector<size_t> shuffled(size_t n, uint64_t seed, uint64_t epoch) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  const uint64_t stream = stream_id("diag.lstm_vae.shuffle") + epoch;
  for (size_t i = n; i > 1; --i) {
    const size_t j = static_cast<size_t>(uniform(seed, stream, i) * static_cast<float>(i));
    std::swap(order[i - 1], order[std::min(j, i - 1)]);
  }
  return order;
}

}  // namespace

Result<std::vector<double>> train_lstm_vae(LstmVae& model,
                                           const std::vector<std::vector<double>>& windows,
                                           const TrainOptions& options) {
  const LstmVaeConfig& c = model.config();
  if (windows.empty()) return InvalidArgument("no training windows for the LSTM-VAE");
  for (size_t i = 0; i < windows.size(); ++i) {
    if (windows[i].size() != static_cast<size_t>(c.window)) {
      return InvalidArgument("training window " + std::to_string(i) + " has " +
                             std::to_string(windows[i].size()) + " samples; the model takes " +
                             std::to_string(c.window));
    }
  }
  const size_t n = model.params().size();
  const size_t batch = static_cast<size_t>(std::max(1, options.batch));
  Adam adam(n, options.learning_rate);
  std::vector<double> grad(n), eps(c.latent), epoch_loss;
  const uint64_t eps_stream = stream_id("diag.lstm_vae.eps");
  uint64_t draws = 0;
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    const std::vector<size_t> order = shuffled(windows.size(), options.seed, epoch);
    double total = 0;
    for (size_t start = 0; start < order.size(); start += batch) {
      const size_t end = std::min(order.size(), start + batch);
      std::fill(grad.begin(), grad.end(), 0.0);
      for (size_t k = start; k < end; ++k) {
        for (double& e : eps) e = normal(options.seed, eps_stream, draws++);
        total += model.loss_and_gradient(windows[order[k]], eps, grad);
      }
      for (double& g : grad) g /= static_cast<double>(end - start);
      adam.step(model.params(), grad);
    }
    epoch_loss.push_back(total / static_cast<double>(windows.size()));
  }
  return epoch_loss;
}

}  // namespace ms::diag
