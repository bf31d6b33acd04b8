// `ms-ckpt import`: a Hugging Face model directory (config.json, safetensors, tokenizer.json)
// into a step-00000000 checkpoint that ms-train can fine-tune from and ms-infer can serve. The
// checkpoint is written by the library's save path (lib/ckpt/checkpoint.h) in an MPI singleton,
// so it is exactly what a training run would write.
#include "cmd/common/mpi_world.h"
#include "cmd/common/registry.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_import.h"
#include "comm/mpi_communicator.h"
#include "config/run_config.h"
#include "data/progress.h"
#include "io/output_path.h"

namespace ms::ckpt_cmd {
namespace {

struct ImportArgs {
  std::string input;
  std::string output;
  int64_t step = 0;
  bool replace = false;
};

// Every parameter, read (and widened to f32) into memory: the save path snapshots all tensors
// of a step at once.
Result<std::vector<Tensor>> read_parameters(const ckpt::HfModel& model) {
  std::vector<Tensor> values;
  uint64_t bytes = 0;
  data::Progress progress("import " + model.dir, 0);
  for (const ckpt::TensorInfo& t : model.parameters.tensors) {
    MS_ASSIGN_OR_RETURN(Tensor value, model.parameters.read(t.name));
    bytes += value.nbytes();
    values.push_back(std::move(value));
    progress.update(bytes);
  }
  progress.finish();
  return values;
}

Result<ckpt::SaveReport> save_checkpoint(const ckpt::HfModel& model,
                                         const std::vector<Tensor>& values,
                                         const ImportArgs& args, comm::Communicator& world) {
  std::vector<ckpt::SaveTensor> tensors;
  for (size_t i = 0; i < values.size(); ++i) {
    const ckpt::TensorInfo& t = model.parameters.tensors[i];
    tensors.push_back({t.name, DType::kF32, comm::ShardSpec::replicated(t.shape),
                       values[i].raw_data()});
  }
  config::RunConfig run;
  run.model = model.config;
  run.train.seq_len = std::min(run.train.seq_len, model.config.max_seq_len);
  ckpt::SaveRequest request;
  request.checkpoints_dir = args.output;
  request.step = args.step;
  request.config_yaml = config::dump_yaml(run);
  request.state = {{"imported_from", model.dir}};
  request.tokenizer_path = model.tokenizer_json;
  request.async = false;
  ckpt::Checkpointer checkpointer(world);
  MS_RETURN_IF_ERROR(checkpointer.save(tensors, request));
  MS_ASSIGN_OR_RETURN(std::optional<ckpt::SaveReport> finished, checkpointer.finish());
  if (finished) return *finished;
  if (checkpointer.last_report()) return *checkpointer.last_report();
  return Internal("the save of " + args.output + " reported no commit");
}

Result<int> run_import(const ImportArgs& args) {
  return cli::run_in_world([&](comm::MpiCommunicator& world) -> Result<int> {
    if (world.size() != 1) return InvalidArgument("import runs as a single process; drop mpirun");
    // The save replaces a step directory atomically on its own; what is checked here is that
    // it lands apart from the model it reads and replaces an older import only when asked.
    const io::OutputRules rules{{args.input}, "--output", args.replace};
    MS_RETURN_IF_ERROR(io::check_output_is_not_an_input(args.output, rules));
    MS_RETURN_IF_ERROR(io::check_output_dir(
        io::default_env(), args.output + "/" + ckpt::step_dir_name(args.step), rules));
    MS_ASSIGN_OR_RETURN(ckpt::HfModel model, ckpt::open_hf_model(args.input));
    MS_ASSIGN_OR_RETURN(std::vector<Tensor> values, read_parameters(model));
    MS_ASSIGN_OR_RETURN(ckpt::SaveReport report, save_checkpoint(model, values, args, world));
    std::printf("imported %s (%zu tensors) as %s%s\n", args.input.c_str(), values.size(),
                report.step_dir.c_str(),
                model.tokenizer_json.empty() ? " (no tokenizer.json to copy)" : "");
    return 0;
  });
}

void add_import_command(cli::Tool& tool) {
  auto args = std::make_shared<ImportArgs>();
  CLI::App* sub = tool.add_subcommand(
      "import", "Import a Hugging Face Llama/Mistral/Mixtral safetensors model as a checkpoint",
      [args] { return run_import(*args); });
  sub->add_option("input", args->input, "Directory with config.json and safetensors")->required();
  sub->add_option("--output,-o", args->output,
                  "checkpoints/ directory to write step-XXXXXXXX into (e.g. runs/x/checkpoints), "
                  "outside the model directory")
      ->required();
  sub->add_option("--step", args->step, "Step number of the written checkpoint")
      ->check(cli::kNonNegativeNumber)
      ->capture_default_str();
  sub->add_flag("--replace", args->replace,
                "Replace an existing step directory of that step (removed once the new one is "
                "committed)");
}

}  // namespace

MS_CLI_COMMAND(import, add_import_command);

}  // namespace ms::ckpt_cmd
