// ms-train: trains with no subcommand. This build resolves and validates run configs
// (--dry-run) and prints the config reference (--config-help); the training engine joins
// with the ms-train work, and until then a run without --dry-run is refused with a message.
#include <iostream>

#include "cmd/common/tool.h"
#include "config/run_config.h"

namespace {

struct TrainOptions {
  std::string config_path;
  std::vector<std::string> sets;
  bool dry_run = false;
  bool config_help = false;
};

ms::Result<int> train(const TrainOptions& opts) {
  if (opts.config_help) {
    std::cout << ms::config::help_text();
    return 0;
  }
  if (opts.config_path.empty()) {
    return ms::InvalidArgument("no run config given: pass --config <file.yaml> (see configs/)");
  }
  MS_ASSIGN_OR_RETURN(ms::config::RunConfig config,
                      ms::config::load_run_config(opts.config_path, opts.sets));
  if (!opts.dry_run) {
    return ms::FailedPrecondition(
        "this build validates configs only; rerun with --dry-run to print the resolved config");
  }
  std::cout << "# resolved from " << opts.config_path << "\n" << ms::config::dump_yaml(config);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ms::cli::Tool tool("ms-train",
                     "ms-train: train dense and MoE transformers with data, tensor, pipeline and "
                     "expert parallelism");
  TrainOptions opts;
  CLI::App& app = tool.app();
  ms::cli::add_config_options(&app, &opts.config_path, &opts.sets);
  app.add_flag("--dry-run", opts.dry_run,
               "Resolve and validate the config (file plus --set), print it and exit");
  app.add_flag("--config-help", opts.config_help,
               "List every config key with its type, default and meaning, then exit");
  tool.set_default_action([&opts] { return train(opts); });
  return tool.run(argc, argv);
}
