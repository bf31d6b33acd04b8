// Writing a grown checkpoint (grow.h): the source's parameters grown by the plan, zero
// optimizer moments where the source had moments, the source's state with the optimizer and
// spike guard reset, through the training save path so it commits as a save does.
#include <algorithm>
#include <memory>
#include <set>

#include "ckpt/checkpoint.h"
#include "ckpt/diff.h"
#include "ckpt/grow.h"
#include "io/output_path.h"

namespace ms::ckpt {
namespace {

const char* const kMomentPrefixes[] = {"optimizer.exp_avg.", "optimizer.exp_avg_sq."};

// Every source tensor must be a parameter of its model or a moment of one: anything else would
// be dropped silently, and a resumed run would not be what was saved.
Status check_source_tensors(const Manifest& m, const config::ModelConfig& model,
                            const std::string& step_dir) {
  std::set<std::string> known;
  for (const TensorInfo& p : hf_parameter_specs(model)) {
    known.insert(p.name);
    for (const char* prefix : kMomentPrefixes) known.insert(prefix + p.name);
  }
  for (const TensorRecord& t : m.tensors) {
    if (known.count(t.name) == 0) {
      return InvalidArgument(step_dir + ": tensor \"" + t.name + "\" is neither a parameter "
                             "of the checkpoint's model nor its optimizer state; grow does not "
                             "know how to expand it");
    }
  }
  return Status::OK();
}

// The source's state for the grown model: the loader position kept, the step kept or 0, Adam's
// update count (its bias correction) and the spike guard's window reset with the moments,
// and where the checkpoint came from.
nlohmann::json grown_state(const Manifest& m, const std::string& step_dir, const GrowPlan& plan,
                           int64_t step) {
  nlohmann::json state = m.state;
  if (state.contains("step")) state["step"] = step;
  if (state.contains("optimizer_updates")) state["optimizer_updates"] = 0;
  if (state.contains("spike_guard") && state["spike_guard"].is_object()) {
    state["spike_guard"]["losses"] = nlohmann::json::array();
    state["spike_guard"]["grad_norms"] = nlohmann::json::array();
  }
  state["grown_from"] = {{"checkpoint", step_dir},
                         {"step", m.step},
                         {"from", grow_target_string(plan.from)},
                         {"to", grow_target_string(plan.to)}};
  return state;
}

Result<std::string> grown_config_yaml(const config::RunConfig& run, const GrowPlan& plan) {
  config::RunConfig grown = run;
  grown.model = plan.to;
  std::string yaml = config::dump_yaml(grown);
  // What ms-train and ms-infer will parse: checked here so a bad config is never committed.
  MS_RETURN_IF_ERROR(
      config::run_config_from_yaml_text(yaml, "the grown model's config").status());
  return yaml;
}

Status save_grown(const std::vector<GrownParameter>& params, const std::set<std::string>& moments,
                  SaveRequest request, comm::Communicator& comm,
                  io::Env& env, std::string& step_dir) {
  int64_t largest = 0;
  for (const GrownParameter& p : params) largest = std::max(largest, p.value.numel());
  // Every zero moment is written from the same buffer: the sync save reads the tensors only.
  MS_ASSIGN_OR_RETURN(Tensor zeros, allocate_tensor(DType::kF32, {largest}, "zero moments"));
  zeros.fill(0.0f);
  std::vector<SaveTensor> tensors;
  for (const GrownParameter& p : params) {
    const comm::ShardSpec spec = comm::ShardSpec::replicated(p.value.shape());
    tensors.push_back({p.name, DType::kF32, spec, p.value.raw_data()});
    if (moments.count(p.source) == 0) continue;
    for (const char* prefix : kMomentPrefixes) {
      tensors.push_back({prefix + p.name, DType::kF32, spec, zeros.raw_data()});
    }
  }
  request.async = false;
  Checkpointer checkpointer(comm, env);
  MS_RETURN_IF_ERROR(checkpointer.save(tensors, request));
  MS_ASSIGN_OR_RETURN(std::optional<SaveReport> finished, checkpointer.finish());
  if (finished) {
    step_dir = finished->step_dir;
  } else if (checkpointer.last_report()) {
    step_dir = checkpointer.last_report()->step_dir;
  } else {
    return Internal("the save of the grown checkpoint reported no commit");
  }
  return Status::OK();
}

}  // namespace

Result<GrowReport> grow_checkpoint(const std::string& step_dir, const GrowOptions& options,
                                   comm::Communicator& comm, io::Env& env) {
  if (comm.size() != 1) return InvalidArgument("grow runs as a single process; drop mpirun");
  MS_ASSIGN_OR_RETURN(Manifest read, Manifest::read(step_dir, env));
  auto manifest = std::make_shared<const Manifest>(std::move(read));
  for (const TensorRecord& t : manifest->tensors) {
    MS_RETURN_IF_ERROR(check_tensor_files(step_dir, t, env));
  }
  if (manifest->config_yaml.empty()) {
    return InvalidArgument(step_dir + "/manifest.json: the checkpoint records no run config, so "
                           "its model cannot be grown");
  }
  MS_ASSIGN_OR_RETURN(const config::RunConfig run,
                      config::run_config_from_yaml_text(manifest->config_yaml,
                                                        step_dir + "/manifest.json config"));
  GrowReport report;
  MS_ASSIGN_OR_RETURN(report.plan, plan_grow(run.model, options.target, options.insert));
  MS_RETURN_IF_ERROR(check_source_tensors(*manifest, run.model, step_dir));
  MS_ASSIGN_OR_RETURN(const std::string config_yaml, grown_config_yaml(run, report.plan));

  const io::OutputRules rules{{step_dir}, "--output", options.replace};
  MS_RETURN_IF_ERROR(io::check_output_is_not_an_input(options.output_dir, rules));
  const int64_t step = options.restart_schedule ? 0 : manifest->step;
  MS_RETURN_IF_ERROR(
      io::check_output_dir(env, options.output_dir + "/" + step_dir_name(step), rules));

  const uint64_t seed = options.seed ? *options.seed : static_cast<uint64_t>(run.run.seed);
  MS_ASSIGN_OR_RETURN(std::vector<GrownParameter> params,
                      grow_parameters(report.plan, checkpoint_catalog(step_dir, manifest, env),
                                      seed));
  std::set<std::string> moments;
  for (const TensorRecord& t : manifest->tensors) {
    if (t.name.starts_with(kMomentPrefixes[0])) {
      moments.insert(t.name.substr(std::string_view(kMomentPrefixes[0]).size()));
    }
  }
  SaveRequest request;
  request.checkpoints_dir = options.output_dir;
  request.config_yaml = config_yaml;
  request.step = step;
  request.state = grown_state(*manifest, step_dir, report.plan, step);
  if (env.exists(step_dir + "/tokenizer.json")) request.tokenizer_path = step_dir + "/tokenizer.json";
  MS_RETURN_IF_ERROR(
      save_grown(params, moments, std::move(request), comm, env, report.step_dir));
  report.parameters = params.size();
  report.optimizer_state = !moments.empty();
  return report;
}

}  // namespace ms::ckpt
