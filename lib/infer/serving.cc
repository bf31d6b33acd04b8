// Serving across the ranks of a job (infer/serving.h): role assignment, the request share of
// each serving rank, and the collection of completions and reports on rank 0 as JSON messages.
#include "infer/serving.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "comm/agree.h"
#include "comm/variable_length.h"
#include "core/logging.h"
#include "core/timer.h"
#include "infer/request_json.h"

namespace ms::infer {
namespace {

using nlohmann::json;

constexpr int kCollectTag = 7201;

bool disaggregated(const ServeOptions& o) { return o.attention_ranks > 0; }

std::string role_of(const ServeOptions& o, int rank) {
  if (!disaggregated(o)) return "colocated";
  return rank < o.attention_ranks ? "attention" : "experts";
}

json report_json(const RankReport& r) {
  const PipelineStats& p = r.pipeline;
  return json{{"role", r.role},
              {"weight_bytes", r.weight_bytes},
              {"requests", r.requests},
              {"prefill_tokens", r.prefill_tokens},
              {"decode_tokens", r.decode_tokens},
              {"steps", r.steps},
              {"decode_rounds", r.decode_rounds},
              {"decode_generated", r.decode_generated},
              {"draft_passes", r.draft_passes},
              {"draft_proposed", r.draft_proposed},
              {"draft_accepted", r.draft_accepted},
              {"pipeline",
               {{"steps", p.steps},
                {"micro_batches", p.micro_batches},
                {"rows", p.rows},
                {"busy_s", p.busy_s},
                {"wait_s", p.wait_s},
                {"bytes_sent", p.bytes_sent},
                {"bytes_received", p.bytes_received}}}};
}

RankReport report_from(const json& j) {
  RankReport r;
  r.role = j.at("role").get<std::string>();
  r.weight_bytes = j.at("weight_bytes").get<int64_t>();
  r.requests = j.at("requests").get<int64_t>();
  r.prefill_tokens = j.at("prefill_tokens").get<int64_t>();
  r.decode_tokens = j.at("decode_tokens").get<int64_t>();
  r.steps = j.at("steps").get<int64_t>();
  r.decode_rounds = j.at("decode_rounds").get<int64_t>();
  r.decode_generated = j.at("decode_generated").get<int64_t>();
  r.draft_passes = j.at("draft_passes").get<int64_t>();
  r.draft_proposed = j.at("draft_proposed").get<int64_t>();
  r.draft_accepted = j.at("draft_accepted").get<int64_t>();
  const json& p = j.at("pipeline");
  r.pipeline.steps = p.at("steps").get<int64_t>();
  r.pipeline.micro_batches = p.at("micro_batches").get<int64_t>();
  r.pipeline.rows = p.at("rows").get<int64_t>();
  r.pipeline.busy_s = p.at("busy_s").get<double>();
  r.pipeline.wait_s = p.at("wait_s").get<double>();
  r.pipeline.bytes_sent = p.at("bytes_sent").get<int64_t>();
  r.pipeline.bytes_received = p.at("bytes_received").get<int64_t>();
  return r;
}

// Parameter values still held plus the quantized copies of the released ones.
int64_t held_bytes(const LoadedModel& m) {
  int64_t bytes = m.serving_weights.quantized_bytes;
  for (const model::Parameter& p : m.model->parameters()) {
    bytes += static_cast<int64_t>(p.value.nbytes());
  }
  return bytes;
}

// Logs the served weights: as stored in a quantized model directory, or as the loader
// converted them to --weights (model_loader.h).
void log_weights(const LoadedModel& loaded, const WeightOptions& options) {
  if (loaded.serving_weights.matrices > 0 && options.format == ops::WeightFormat::kF32) {
    MS_LOG(Info) << "weights as stored: " << loaded.serving_weights.matrices
                 << " quantized linear weights, "
                 << static_cast<double>(held_bytes(loaded)) / 1e6
                 << " MB of weights held; int8 and int4 weights multiply "
                 << ops::activation_format_name(options.activations) << " activations";
    return;
  }
  char held[64];
  std::snprintf(held, sizeof(held), "%.2f MB", static_cast<double>(held_bytes(loaded)) / 1e6);
  MS_LOG(Info) << "weights " << describe(options, loaded.serving_weights) << "; " << held
               << " of weights held";
}

// This rank's share of the requests, served through the engine; its completions are returned
// with their request indices.
struct Share {
  std::vector<size_t> index;
  std::vector<Completion> completions;
};

// `layout`: the disaggregated layout, or null when colocated.
Result<Share> serve_share(LoadedModel& loaded, const std::vector<Request>& requests,
                          const ServeOptions& o, const ServingLayout* layout,
                          comm::Communicator& comm, RankReport& report,
                          const std::function<void(const Completion&)>& on_done,
                          LoadedModel* draft) {
  const int servers = disaggregated(o) ? o.attention_ranks : comm.size();
  Share share;
  std::vector<Request> mine;
  for (size_t i = static_cast<size_t>(comm.rank()); i < requests.size();
       i += static_cast<size_t>(servers)) {
    share.index.push_back(i);
    mine.push_back(requests[i]);
  }
  std::unique_ptr<RemoteExperts> remote;
  if (layout != nullptr) {
    remote = std::make_unique<RemoteExperts>(*loaded.model, comm, *layout, o.micro_batches);
  }
  MS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                      Engine::create(*loaded.model, loaded.tokenizer.get(), o.engine, remote.get(),
                                     draft != nullptr ? draft->model.get() : nullptr));
  Result<std::vector<Completion>> out = engine->generate(mine, on_done);
  if (remote) {
    MS_RETURN_IF_ERROR(remote->finish());
    report.pipeline = remote->stats();
  }
  MS_RETURN_IF_ERROR(out.status());
  share.completions = std::move(*out);
  report.requests = static_cast<int64_t>(mine.size());
  report.prefill_tokens = engine->stats().prefill_tokens;
  report.decode_tokens = engine->stats().decode_tokens;
  const EngineStats& stats = engine->stats();
  report.steps = stats.steps;
  report.decode_rounds = stats.decode_rounds;
  report.decode_generated = stats.decode_generated;
  report.draft_passes = stats.draft_passes;
  report.draft_proposed = stats.draft_proposed;
  report.draft_accepted = stats.draft_accepted;
  return share;
}

// Every rank's report and completions, in a form rank 0 merges.
json rank_json(const RankReport& report, const Share& share) {
  json completions = json::array();
  for (size_t k = 0; k < share.completions.size(); ++k) {
    // A json object (keys sorted) like the rest of the message.
    json c = completion_json(share.completions[k], CompletionForm::kBetweenRanks, share.index[k]);
    completions.push_back(std::move(c));
  }
  return json{{"report", report_json(report)}, {"completions", completions}};
}

Status merge(const json& part, int rank, ServeResult& result) {
  try {
    result.ranks[static_cast<size_t>(rank)] = report_from(part.at("report"));
    for (const json& c : part.at("completions")) {
      result.completions.at(c.at("index").get<size_t>()) = completion_from(c);
    }
  } catch (const std::exception& e) {
    return Internal("rank " + std::to_string(rank) + " sent a malformed result: " + e.what());
  }
  return Status::OK();
}

}  // namespace

ParameterFilter serving_filter(const ServeOptions& options, int rank, int world) {
  if (!disaggregated(options)) return {};
  const int attention = options.attention_ranks;
  return [=](const model::Transformer& m, size_t index) {
    const std::optional<model::Transformer::ExpertRef> expert = m.routed_expert(index);
    if (rank < attention) return !expert.has_value();
    if (!expert) return false;
    const ServingLayout layout{world, attention, m.config().moe.num_experts};
    return layout.owner(expert->expert) == rank - attention;
  };
}

Result<LoadedModel> load_for_serving(const std::string& model_dir, const std::string& checkpoint,
                                     const ServeOptions& options,
                                     comm::Communicator& comm) {
  if (options.attention_ranks < 0 || options.micro_batches < 1) {
    return InvalidArgument("--attention-ranks (" + std::to_string(options.attention_ranks) +
                           ") must be 0 or more and --micro-batches (" +
                           std::to_string(options.micro_batches) + ") at least 1");
  }
  Result<LoadedModel> loaded = load_model(
      model_dir, checkpoint, serving_filter(options, comm.rank(), comm.size()), options.weights);
  Status local = loaded.status();
  if (local.ok()) log_weights(*loaded, options.weights);
  if (local.ok() && disaggregated(options)) {
    local = ServingLayout::create(comm.size(), options.attention_ranks,
                                  loaded->model->config().moe.num_experts)
                .status();
  }
  MS_RETURN_IF_ERROR(comm::agree(comm, local, "loading the model"));
  return loaded;
}

Result<LoadedModel> load_draft_for_serving(const ServeOptions& options, const LoadedModel& target,
                                           comm::Communicator& comm) {
  if (role_of(options, comm.rank()) == "experts") {
    // The draft runs beside the sequences, on the attention ranks only; an expert rank serves
    // the target's verify rows like any other.
    MS_RETURN_IF_ERROR(comm::agree(comm, Status::OK(), "loading the draft model"));
    return LoadedModel{};
  }
  const std::string& path = options.draft_model;
  std::error_code ec;
  const bool hf = std::filesystem::exists(std::filesystem::path(path) / "config.json", ec);
  Result<LoadedModel> loaded = load_model(hf ? path : "", hf ? "" : path, {}, options.weights);
  Status local = loaded.status();
  if (local.ok()) {
    const int64_t draft_vocab = loaded->model->config().vocab_size;
    const int64_t target_vocab = target.model->config().vocab_size;
    if (draft_vocab != target_vocab) {
      local = InvalidArgument("vocab_size " + std::to_string(draft_vocab) +
                              " differs from the target's " + std::to_string(target_vocab) +
                              "; the draft must share the target's tokenizer");
    } else if (loaded->tokenizer->content_hash() != target.tokenizer->content_hash()) {
      local = InvalidArgument("its tokenizer.json differs from the target's; the draft must "
                              "share the target's tokenizer");
    }
  }
  if (local.ok()) {
    const config::ModelConfig& c = loaded->model->config();
    MS_LOG(Info) << "draft model " << path << ": " << loaded->model->parameter_count()
                 << " parameters, d_model " << c.d_model << ", " << c.n_layers << " layers";
    log_weights(*loaded, options.weights);
  }
  if (!local.ok()) local = Status(local.code(), "--draft-model " + path + ": " + local.message());
  MS_RETURN_IF_ERROR(comm::agree(comm, local, "loading the draft model"));
  return loaded;
}

Result<ServeResult> serve(LoadedModel& loaded, const std::vector<Request>& requests,
                          const ServeOptions& options, comm::Communicator& comm,
                          const std::function<void(const Completion&)>& on_done,
                          LoadedModel* draft) {
  const int rank = comm.rank();
  RankReport report;
  report.role = role_of(options, rank);
  report.weight_bytes = held_bytes(loaded);
  std::optional<ServingLayout> layout;
  if (disaggregated(options)) {
    MS_ASSIGN_OR_RETURN(layout, ServingLayout::create(comm.size(), options.attention_ranks,
                                                      loaded.model->config().moe.num_experts));
  }
  Share share;
  MS_RETURN_IF_ERROR(comm.barrier());
  const Stopwatch clock;
  if (report.role == "experts") {
    MS_ASSIGN_OR_RETURN(report.pipeline, serve_experts(*loaded.model, comm, *layout));
  } else {
    MS_ASSIGN_OR_RETURN(share, serve_share(loaded, requests, options,
                                           layout ? &*layout : nullptr, comm, report, on_done,
                                           draft));
  }
  MS_RETURN_IF_ERROR(comm.barrier());
  ServeResult result;
  result.seconds = clock.elapsed_s();
  const json mine = rank_json(report, share);
  if (rank != 0) {
    MS_RETURN_IF_ERROR(comm::send_sized(comm, mine.dump(), 0, kCollectTag));
    return result;
  }
  result.completions.resize(requests.size());
  result.ranks.resize(static_cast<size_t>(comm.size()));
  MS_RETURN_IF_ERROR(merge(mine, 0, result));
  for (int r = 1; r < comm.size(); ++r) {
    MS_ASSIGN_OR_RETURN(std::string text, comm::recv_sized(comm, r, kCollectTag));
    const json part = json::parse(text, nullptr, false);
    if (part.is_discarded()) return Internal("rank " + std::to_string(r) + " sent invalid JSON");
    MS_RETURN_IF_ERROR(merge(part, r, result));
  }
  return result;
}

namespace {

std::string format(const char* fmt, double a, double b = 0, double c = 0, double d = 0) {
  char line[256];
  std::snprintf(line, sizeof(line), fmt, a, b, c, d);
  return line;
}

}  // namespace

std::string describe(const ServeResult& result) {
  int attention = 0, experts = 0;
  int64_t tokens = 0, traffic = 0, micro = 0, steps = 0;
  for (const RankReport& r : result.ranks) {
    attention += r.role == "attention";
    experts += r.role == "experts";
    tokens += r.prefill_tokens + r.decode_tokens;
    if (r.role == "attention") {
      traffic += r.pipeline.bytes_sent + r.pipeline.bytes_received;
      micro += r.pipeline.micro_batches;
      steps += r.pipeline.steps;
    }
  }
  std::string out = "serving: " + std::to_string(result.ranks.size()) + " ranks, ";
  out += experts == 0 ? std::string("colocated (each holds the whole model)")
                      : std::to_string(attention) + " attention + " + std::to_string(experts) +
                            " expert ranks" +
                            format(", %.2f micro-batches per step", static_cast<double>(micro) /
                                                                         std::max<int64_t>(steps, 1));
  out += format(", %.3f s\n", result.seconds);
  for (size_t rank = 0; rank < result.ranks.size(); ++rank) {
    const RankReport& r = result.ranks[rank];
    out += "  rank " + std::to_string(rank) + " " + r.role + ":" +
           format(" %.2f MB of weights", static_cast<double>(r.weight_bytes) / 1e6);
    if (r.role != "experts") out += ", " + std::to_string(r.requests) + " requests";
    if (r.role != "colocated") {
      out += format(", idle %.1f%% (%.3f s waiting), sent %.2f MB, received %.2f MB",
                    100.0 * r.pipeline.idle_fraction(), r.pipeline.wait_s,
                    static_cast<double>(r.pipeline.bytes_sent) / 1e6,
                    static_cast<double>(r.pipeline.bytes_received) / 1e6);
    }
    out += "\n";
  }
  if (experts > 0) {
    out += format("  token traffic: %.2f MB for %.0f tokens, %.1f KB per token\n",
                  static_cast<double>(traffic) / 1e6, static_cast<double>(tokens),
                  static_cast<double>(traffic) / 1e3 / std::max<double>(1, tokens));
  }
  return out;
}

std::string describe_speculation(const ServeResult& result, int64_t draft_tokens) {
  int64_t rounds = 0, generated = 0, passes = 0, proposed = 0, accepted = 0;
  for (const RankReport& r : result.ranks) {
    rounds += r.decode_rounds;
    generated += r.decode_generated;
    passes += r.draft_passes;
    proposed += r.draft_proposed;
    accepted += r.draft_accepted;
  }
  char line[256];
  std::snprintf(line, sizeof(line),
                "speculative decoding: k %lld, acceptance %.3f (%lld of %lld draft tokens), "
                "%.2f tokens per target forward per sequence, %lld draft passes\n",
                static_cast<long long>(draft_tokens),
                proposed > 0 ? static_cast<double>(accepted) / static_cast<double>(proposed) : 0.0,
                static_cast<long long>(accepted), static_cast<long long>(proposed),
                rounds > 0 ? static_cast<double>(generated) / static_cast<double>(rounds) : 0.0,
                static_cast<long long>(passes));
  return line;
}

}  // namespace ms::infer
