// `ms-diagnose train-denoiser <telemetry dirs...> --metric M -o FILE`: trains the LSTM-VAE
// denoiser of one metric on windows of healthy jobs (lib/diag/lstm_vae.h) for detect
// --denoiser FILE.
#include "cmd/common/registry.h"

#include <cstdio>
#include <memory>

#include "core/logging.h"
#include "diag/detect.h"
#include "diag/lstm_vae.h"
#include "io/env.h"

namespace ms::diagnose_cmd {
namespace {

struct TrainArgs {
  std::vector<std::string> dirs;
  std::string metric, output, group_by = "host";
  int stride = 30;
  diag::LstmVaeConfig config;
  diag::TrainOptions train;
};

Result<std::vector<std::vector<double>>> collect_windows(const TrainArgs& args) {
  MS_ASSIGN_OR_RETURN(telemetry::GroupBy group_by, telemetry::parse_group_by(args.group_by));
  std::vector<std::vector<double>> windows;
  for (const std::string& dir : args.dirs) {
    const std::string inner = dir + "/telemetry";
    const std::string path = io::default_env().is_directory(inner) ? inner : dir;
    MS_ASSIGN_OR_RETURN(auto ranks, telemetry::read_telemetry_dir(path));
    MS_ASSIGN_OR_RETURN(diag::AlignedTelemetry aligned, diag::align_telemetry(ranks, group_by));
    if (aligned.metrics.count(args.metric) == 0) {
      return NotFound("metric '" + args.metric + "' is not in the telemetry of '" + path + "'");
    }
    auto more = diag::training_windows(aligned, args.metric, args.config.window, args.stride);
    windows.insert(windows.end(), more.begin(), more.end());
  }
  if (windows.empty()) {
    return InvalidArgument("the telemetry is shorter than one " +
                           std::to_string(args.config.window) + "-sample window");
  }
  return windows;
}

Result<int> run_train(const TrainArgs& args) {
  MS_ASSIGN_OR_RETURN(auto windows, collect_windows(args));
  MS_ASSIGN_OR_RETURN(diag::LstmVae model, diag::LstmVae::create(args.config, args.train.seed));
  MS_LOG(Info) << "training the " << args.metric << " denoiser on " << windows.size()
               << " windows of " << args.config.window << " samples";
  MS_ASSIGN_OR_RETURN(std::vector<double> losses, diag::train_lstm_vae(model, windows, args.train));
  for (size_t e = 0; e < losses.size(); ++e) std::printf("epoch %3zu  loss %.6f\n", e + 1, losses[e]);
  MS_RETURN_IF_ERROR(diag::save_denoiser(io::default_env(), args.output,
                                         diag::DenoiserModel{args.metric, std::move(model)}));
  std::printf("wrote %s (%zu parameters, window %d)\n", args.output.c_str(),
              diag::LstmVae::param_count(args.config), args.config.window);
  return 0;
}

void add_train_denoiser_command(cli::Tool& tool) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* sub = tool.add_subcommand(
      "train-denoiser", "Train a metric's LSTM-VAE denoiser on healthy jobs' telemetry for detect",
      [a] { return run_train(*a); });
  sub->add_option("dirs", a->dirs, "Telemetry directories of healthy jobs")->required();
  sub->add_option("--metric", a->metric, "Metric to train for (cpu_util, net_tx_rate, ...)")
      ->required();
  sub->add_option("-o,--output", a->output, "Denoiser file to write")->required();
  sub->add_option("--group-by", a->group_by, "What a machine is: host or rank")->capture_default_str();
  sub->add_option("--window", a->config.window, "Window length in samples (= detect --window-s "
                  "at one sample a second)")->capture_default_str();
  sub->add_option("--stride", a->stride, "Samples between training windows")->capture_default_str();
  sub->add_option("--hidden", a->config.hidden, "LSTM state size")->capture_default_str();
  sub->add_option("--latent", a->config.latent, "Latent size")->capture_default_str();
  sub->add_option("--beta", a->config.beta, "Weight of the KL term")->capture_default_str();
  sub->add_option("--epochs", a->train.epochs, "Training epochs")->capture_default_str();
  sub->add_option("--batch", a->train.batch, "Windows per Adam step")->capture_default_str();
  sub->add_option("--lr", a->train.learning_rate, "Adam learning rate")->capture_default_str();
  sub->add_option("--seed", a->train.seed, "Seed of initialization, shuffling and sampling")
      ->capture_default_str();
}

}  // namespace

MS_CLI_COMMAND(train_denoiser, add_train_denoiser_command);

}  // namespace ms::diagnose_cmd
