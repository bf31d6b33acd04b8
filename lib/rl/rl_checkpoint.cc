// Checkpoints of an RL run (docs/rl.md, "Checkpoints and resume"): ms-train's checkpoint format
// under <run.dir>/checkpoints, holding the actor's weights (so ms-infer --checkpoint serves the
// post-trained model and ms-ckpt reshards or exports it), the optimizer's moments, with PPO and
// VAPO the critic's weights and moments under the prefix "critic." (which serving and export,
// reading the model's own names, pass over), and in the manifest's state the optimizers' update
// counts and the run's position in its prompt stream. An asynchronous run's checkpoint also
// holds the older weight versions its next rollouts still need, under "async_weights.v<step>."
// (State::versions_to_save: the rollout thread's, or split placement's trainers'), so its
// resumed steps equal the uninterrupted ones.
// Rollout seeds are a function of (run.seed, step, round, position), so a run resumed from the
// checkpoint after step k takes exactly the steps k+1... the uninterrupted run takes.
#include <algorithm>
#include <sstream>

#include "core/logging.h"
#include "io/atomic_file.h"
#include "io/env.h"
#include "rl/rl_state.h"
#include "train/flat_layout.h"

namespace ms::rl {
namespace {

const char* const kMomentPrefixes[] = {"optimizer.exp_avg.", "optimizer.exp_avg_sq."};
const char* const kCriticPrefix = "critic.";

std::string async_version_prefix(int64_t version) {
  return "async_weights.v" + std::to_string(version) + ".";
}

// The moments' tensors `optimizer` owns on this rank: name, spec and the floats of each.
struct MomentTensor {
  std::string name;
  comm::ShardSpec spec;
  float* data;
};

Result<std::vector<MomentTensor>> moment_tensors(const SavedModel& m) {
  std::vector<MomentTensor> out;
  train::Optimizer& moments = m.optimizer->optimizer();
  for (const train::ShardSegment& segment : m.optimizer->owned_segments()) {
    const model::Parameter& p = *(*m.trainable)[segment.param];
    MS_ASSIGN_OR_RETURN(const comm::ShardSpec spec, train::zero_shard_spec(p.shard, segment));
    float* from[] = {moments.exp_avg().data(), moments.exp_avg_sq().data()};
    for (size_t i = 0; i < 2; ++i) {
      out.push_back({kMomentPrefixes[i] + m.prefix + p.name, spec, from[i] + segment.shard_offset});
    }
  }
  return out;
}

// The model description a save writes as config_yaml (what ms-infer and ms-ckpt read): the
// actor checkpoint's own (`step_dir`), or for a Hugging Face actor (no step_dir) a run config
// holding its model section.
Result<std::string> actor_config_yaml(const std::string& step_dir,
                                      const config::ModelConfig& model) {
  if (!step_dir.empty()) {
    MS_ASSIGN_OR_RETURN(const ckpt::Manifest m, ckpt::Manifest::read(step_dir));
    return m.config_yaml;
  }
  config::RunConfig run;
  run.model = model;
  run.train.seq_len = std::min(run.train.seq_len, model.max_seq_len);  // the config must validate
  return config::dump_yaml(run);
}

// Keeps the lines of a JSON-lines file whose "step" is at most `step`.
Status trim_jsonl(const std::string& path, int64_t step) {
  if (!io::default_env().exists(path)) return Status::OK();
  MS_ASSIGN_OR_RETURN(const std::string text, io::read_file(path));
  std::istringstream in(text);
  std::string line, kept;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
      return Corruption(path + ":" + std::to_string(number) + ": not a step record");
    }
    if (j["step"].get<int64_t>() <= step) kept += line + "\n";
  }
  return io::write_file_atomic(path, kept);
}

}  // namespace

std::vector<SavedModel> RlRun::State::saved_models() {
  std::vector<SavedModel> out;
  std::vector<model::Parameter*> actor_parameters;
  for (model::Parameter& p : actor->parameters()) actor_parameters.push_back(&p);
  out.push_back({"", std::move(actor_parameters), &trainable, optimizer.get(), "optimizer_updates"});
  if (critic) {
    out.push_back({kCriticPrefix, critic->parameters(), &critic_trainable, critic_optimizer.get(),
                   "critic_optimizer_updates"});
  }
  return out;
}

Status RlRun::State::find_and_load_weights() {
  const std::string checkpoints = config.run_dir + "/checkpoints";
  if (config.resume == "auto") {
    MS_ASSIGN_OR_RETURN(const ckpt::AutoResumeChoice choice,
                        ckpt::newest_complete_checkpoint(checkpoints, io::default_env()));
    if (!choice.warning.empty()) MS_LOG(Warn) << "checkpoint.resume auto: " << choice.warning;
    resume_dir = choice.step_dir;
  }
  std::string actor_step_dir;
  if (!config.checkpoint.empty()) {
    MS_ASSIGN_OR_RETURN(actor_step_dir, ckpt::resolve_checkpoint(config.checkpoint));
  }
  MS_ASSIGN_OR_RETURN(config_yaml, actor_config_yaml(actor_step_dir, actor->config()));
  tokenizer_path = (actor_step_dir.empty() ? config.model_dir : actor_step_dir) + "/tokenizer.json";
  if (resume_dir.empty()) return Status::OK();
  MS_ASSIGN_OR_RETURN(const ckpt::Manifest m, ckpt::Manifest::read(resume_dir));
  std::vector<ckpt::ExpectedTensor> expected;
  std::vector<ckpt::LoadTensor> load;
  for (const SavedModel& saved : saved_models()) {
    for (model::Parameter* p : saved.parameters) {
      const std::string name = saved.prefix + p->name;
      expected.push_back({name, DType::kF32, p->global_shape});
      load.push_back({name, DType::kF32, p->shard, p->value.raw_data()});
      if (!p->trainable) continue;
      for (const char* prefix : kMomentPrefixes) {
        expected.push_back({prefix + name, DType::kF32, p->global_shape});
      }
    }
  }
  // An asynchronous run's older weight versions: checked whatever this run is, loaded when it
  // generates asynchronously too.
  std::vector<int64_t> versions;
  try {
    if (m.state.contains("async_versions")) {
      versions = m.state.at("async_versions").get<std::vector<int64_t>>();
    }
  } catch (const nlohmann::json::exception& e) {
    return Corruption(resume_dir + "/manifest.json: state.async_versions: " + e.what());
  }
  const bool async = config.async_staleness >= 0;
  for (int64_t v : versions) {
    std::vector<std::vector<float>>* weights = async ? &resumed_versions[v] : nullptr;
    for (const model::Parameter& p : actor->parameters()) {
      const std::string name = async_version_prefix(v) + p.name;
      expected.push_back({name, DType::kF32, p.global_shape});
      if (weights == nullptr) continue;
      weights->emplace_back(static_cast<size_t>(p.value.numel()));
      load.push_back({name, DType::kF32, p.shard, weights->back().data()});
    }
  }
  MS_RETURN_IF_ERROR(ckpt::check_tensors(m, expected, {}).with_context(resume_dir));
  MS_RETURN_IF_ERROR(ckpt::load_tensors(resume_dir, m, load, {}, io::default_env()));
  start_step = m.step;
  return Status::OK();
}

Status RlRun::State::restore_optimizer_and_position() {
  if (resume_dir.empty()) return Status::OK();
  MS_ASSIGN_OR_RETURN(const ckpt::Manifest m, ckpt::Manifest::read(resume_dir));
  std::vector<ckpt::LoadTensor> load;
  for (const SavedModel& saved : saved_models()) {
    MS_ASSIGN_OR_RETURN(const std::vector<MomentTensor> moments, moment_tensors(saved));
    for (const MomentTensor& t : moments) load.push_back({t.name, DType::kF32, t.spec, t.data});
  }
  MS_RETURN_IF_ERROR(ckpt::load_tensors(resume_dir, m, load, {}, io::default_env()));
  try {
    const nlohmann::json& state = m.state;
    for (const SavedModel& saved : saved_models()) {
      saved.optimizer->optimizer().set_updates(state.at(saved.updates_key).get<int64_t>());
    }
    // Written since value pretraining can end early; absent from older checkpoints.
    value_warmup_ended = state.value("critic_warmup_ended", int64_t{0});
    const nlohmann::json& rl = state.at("rl");
    if (rl.at("seed").get<uint64_t>() != config.seed) {
      return InvalidArgument(resume_dir + " was saved by a run with run.seed " +
                             std::to_string(rl.at("seed").get<uint64_t>()) + ", this one has " +
                             std::to_string(config.seed) +
                             ": resuming would not continue the same run (checkpoint.resume: "
                             "none, or another run.dir, starts a new one)");
    }
    std::vector<size_t> saved_order = rl.at("order").get<std::vector<size_t>>();
    if (saved_order.size() != stream.order.size()) {
      return InvalidArgument(resume_dir + " was saved with " + std::to_string(saved_order.size()) +
                             " training prompts, prompts.train now holds " +
                             std::to_string(stream.order.size()));
    }
    stream.order = std::move(saved_order);
    stream.cursor = rl.at("cursor").get<size_t>();
    std::istringstream rng(rl.at("shuffle_rng").get<std::string>());
    rng >> stream.rng;
    if (!rng || stream.cursor > stream.order.size()) {
      return Corruption(resume_dir + "/manifest.json: state.rl holds no valid prompt position");
    }
  } catch (const nlohmann::json::exception& e) {
    return Corruption(resume_dir + "/manifest.json: state: " + e.what());
  }
  log("rl: resumed from " + resume_dir + " after step " + std::to_string(start_step));
  return Status::OK();
}

Status RlRun::State::trim_run_files() const {
  if (start_step == 0) return Status::OK();
  MS_RETURN_IF_ERROR(trim_jsonl(config.run_dir + "/rl_steps.jsonl", start_step));
  return trim_jsonl(config.run_dir + "/rl_eval.jsonl", start_step);
}

Status RlRun::State::save_checkpoint(int64_t step) {
  if (!checkpointer) checkpointer = std::make_unique<ckpt::Checkpointer>(*trainers);
  // Every dp rank holds the whole actor (with tp, its tp group holds it in slices) and, without
  // ZeRO, every moment: the Checkpointer writes each tensor every rank holds whole once, and a
  // tp slice, held alike by the ranks of a dp group, is listed by dp rank 0.
  const auto lists = [&](const comm::ShardSpec& spec) {
    return spec.numel() > 0 && (spec.is_replicated() || dp->rank() == 0);
  };
  std::vector<ckpt::SaveTensor> tensors;
  for (const SavedModel& saved : saved_models()) {
    for (const model::Parameter* p : saved.parameters) {
      if (!lists(p->shard)) continue;
      tensors.push_back({saved.prefix + p->name, DType::kF32, p->shard, p->value.raw_data(), false});
    }
    MS_ASSIGN_OR_RETURN(const std::vector<MomentTensor> moments, moment_tensors(saved));
    for (const MomentTensor& t : moments) {
      if (!saved.optimizer->zero() && !lists(t.spec)) continue;
      tensors.push_back({t.name, DType::kF32, t.spec, t.data, saved.optimizer->zero()});
    }
  }
  // The older versions the asynchronous rollouts of the next steps still need.
  std::vector<int64_t> version_steps;
  for (const auto& [v, weights] : versions_to_save(step)) {
    version_steps.push_back(v);
    const std::vector<model::Parameter>& params = actor->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!lists(params[i].shard)) continue;
      tensors.push_back({async_version_prefix(v) + params[i].name, DType::kF32,
                         params[i].shard, (*weights)[i].data(), false});
    }
  }
  std::ostringstream rng;
  rng << stream.rng;
  ckpt::SaveRequest request;
  request.checkpoints_dir = config.run_dir + "/checkpoints";
  request.step = step;
  request.layout = {trainers->size(), dp->size(), trainers->size() / dp->size(), 1, 1, 0};
  request.config_yaml = config_yaml;
  request.state = {{"step", step},
                   {"rl", {{"seed", config.seed},
                           {"cursor", stream.cursor},
                           {"order", stream.order},
                           {"shuffle_rng", rng.str()}}}};
  request.tokenizer_path = tokenizer_path;
  request.async = false;
  request.keep = config.checkpoint_keep;
  for (const SavedModel& saved : saved_models()) {
    request.state[saved.updates_key] = saved.optimizer->optimizer().updates();
  }
  if (!version_steps.empty()) request.state["async_versions"] = version_steps;
  if (critic) request.state["critic_warmup_ended"] = value_warmup_ended;
  MS_RETURN_IF_ERROR(checkpointer->save(tensors, std::move(request)));
  log("rl: saved " + checkpointer->last_report()->step_dir);
  return Status::OK();
}

}  // namespace ms::rl
