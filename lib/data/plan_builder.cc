// Planning a mixture: hold-out, blending, per-epoch shuffles and packing streams. See
// plan_builder.h for the algorithm and docs/mixture.md for the user's view.
#include "data/plan_builder.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>

#include "core/host_metrics.h"
#include "core/logging.h"
#include "core/philox.h"
#include "core/thread_pool.h"
#include "core/version.h"
#include "data/indexed_dataset.h"
#include "io/env.h"

namespace ms::data {

namespace {

constexpr uint64_t kValidationStream = stream_id("ms-data/validation");

// The sequences (in dataset order) of one split of one source, with their totals.
struct SplitMembers {
  std::vector<uint32_t> sequences;
  uint64_t documents = 0;
  uint64_t tokens = 0;
};

std::array<SplitMembers, 2> split_members(const PlanSourceInput& in, uint64_t seed,
                                          double fraction) {
  std::array<SplitMembers, 2> splits;
  for (size_t d = 0; d + 1 < in.document_index.size(); ++d) {
    SplitMembers& m = splits[held_out_for_validation(seed, d, fraction) ? 1 : 0];
    ++m.documents;
    for (int64_t seq = in.document_index[d]; seq < in.document_index[d + 1]; ++seq) {
      m.sequences.push_back(static_cast<uint32_t>(seq));
      m.tokens += static_cast<uint64_t>(in.sequence_lengths[seq]);
    }
  }
  return splits;
}

std::vector<double> normalized(std::vector<double> weights) {
  double sum = 0;
  for (double w : weights) sum += w;
  for (double& w : weights) w = sum > 0 ? w / sum : 0;
  return weights;
}

// Phase 0 from the sources' weights, then one phase per schedule entry.
std::vector<PlanPhase> training_phases(const MixtureConfig& config) {
  std::vector<double> base;
  for (const MixtureSource& s : config.sources) base.push_back(s.weight);
  std::vector<PlanPhase> phases{{0, normalized(base)}};
  for (const WeightPhase& p : config.schedule) {
    std::vector<double> weights(config.sources.size(), 0.0);
    for (const auto& [name, w] : p.weights) {
      for (size_t s = 0; s < config.sources.size(); ++s) {
        if (config.sources[s].name == name) weights[s] = w;
      }
    }
    phases.push_back({p.at_sample, normalized(weights)});
  }
  return phases;
}

// The base weights restricted to sources that hold out validation documents.
Result<std::vector<PlanPhase>> validation_phases(const MixtureConfig& config,
                                                 const std::vector<std::array<SplitMembers, 2>>& members) {
  std::vector<double> weights;
  for (size_t s = 0; s < config.sources.size(); ++s) {
    weights.push_back(members[s][1].tokens > 0 ? config.sources[s].weight : 0.0);
  }
  weights = normalized(weights);
  if (config.validation_samples() > 0 && std::all_of(weights.begin(), weights.end(), [](double w) { return w == 0; })) {
    return InvalidArgument(
        "validation.fraction " + std::to_string(config.validation.fraction) +
        " holds out no documents of any weighted source; raise it or set validation.samples: 0 "
        "with validation.fraction: 0");
  }
  return std::vector<PlanPhase>{{0, weights}};
}

// Every epoch's shuffled order of `m` concatenated, with each entry's end offset in the stream.
// Each epoch is copied and shuffled in place in `order`.
void build_stream(const PlanSourceInput& in, const SplitMembers& m, uint64_t epochs,
                  uint64_t seed, Split split, HugePageArray<uint32_t>& order,
                  HugePageArray<uint64_t>& ends) {
  const size_t n = m.sequences.size();
  order.resize(epochs * n);
  ends.resize(epochs * n);
  uint64_t position = 0;
  for (uint64_t e = 0; e < epochs; ++e) {
    const std::span<uint32_t> epoch(order.data() + e * n, n);
    std::copy(m.sequences.begin(), m.sequences.end(), epoch.begin());
    const std::string stream = "ms-data/shuffle/" + in.source.name + "/" +
                               std::string(split_name(split)) + "/" + std::to_string(e);
    shuffle(epoch, seed, stream_id(stream));
    uint64_t* epoch_ends = ends.data() + e * n;
    for (size_t i = 0; i < n; ++i) {
      position += static_cast<uint64_t>(in.sequence_lengths[epoch[i]]);
      epoch_ends[i] = position;
    }
  }
}

Status check_inputs(const MixtureConfig& config, std::span<const PlanSourceInput> inputs) {
  if (inputs.size() != config.sources.size()) {
    return InvalidArgument("planner got " + std::to_string(inputs.size()) + " datasets for " +
                           std::to_string(config.sources.size()) + " sources");
  }
  if (inputs.size() > 65535) return InvalidArgument("a plan holds at most 65535 sources");
  const PlanSourceInput* first_tokenized = nullptr;
  for (const PlanSourceInput& in : inputs) {
    if (in.tokenizer_hash.empty()) continue;
    if (first_tokenized && first_tokenized->tokenizer_hash != in.tokenizer_hash) {
      return InvalidArgument("sources '" + first_tokenized->source.name + "' and '" + in.source.name +
                             "' were built with different tokenizers (" + first_tokenized->tokenizer_path +
                             ", " + in.tokenizer_path + "); rebuild them with one tokenizer");
    }
    if (!first_tokenized) first_tokenized = &in;
  }
  for (const PlanSourceInput& in : inputs) {
    if (in.sequence_lengths.size() >= std::numeric_limits<uint32_t>::max()) {
      return InvalidArgument("source '" + in.source.name + "' (" + in.source.prefix +
                             ") has 2^32 or more sequences, more than a plan can address");
    }
  }
  return Status::OK();
}

// Epochs of `m` needed for `samples` packed samples; InvalidArgument when it has no tokens.
Result<uint64_t> epochs_needed(const PlanSourceInput& in, const SplitMembers& m, uint64_t samples,
                               int64_t seq_len, Split split) {
  if (samples == 0) return uint64_t{0};
  if (m.tokens == 0) {
    return InvalidArgument("source '" + in.source.name + "' (" + in.source.prefix +
                           ") is blended into the " + std::string(split_name(split)) +
                           " split but has no tokens there (" + std::to_string(m.documents) +
                           " documents); check the dataset or validation.fraction");
  }
  const uint64_t needed = samples * static_cast<uint64_t>(seq_len) + 1;
  return (needed + m.tokens - 1) / m.tokens;
}

// What the plan's tables take per training or validation sample (blend_source u16 and
// blend_index u64) and per entry of a source's shuffled stream (sequence_order u32 and
// stream_end u64): they are built in memory and then written to the plan file.
constexpr double kPlanBytesPerSample = 10, kPlanBytesPerStreamEntry = 12;

// The key the number of samples comes from, for messages.
std::string samples_key(const MixtureConfig& c) {
  const std::string total = c.total_samples > 0 ? "total_samples " + std::to_string(c.total_samples)
                                                : "total_tokens " + std::to_string(c.total_tokens);
  return c.validation.samples > 0
             ? total + " and validation.samples " + std::to_string(c.validation.samples)
             : total;
}

// Refuses a plan whose tables need more memory than the machine can spare, or more disk than
// the output's filesystem has free, before they are allocated: `total_samples: 2^62` must be an
// error naming the key, not an allocation that fails (or succeeds) after minutes.
Status check_plan_size(double bytes, const std::string& what, const std::string& output) {
  MS_RETURN_IF_ERROR(check_memory_need(bytes, what));
  std::error_code ec;
  const std::filesystem::space_info space = std::filesystem::space(io::parent_dir(output), ec);
  if (!ec && bytes > static_cast<double>(space.available)) {
    char text[160];
    std::snprintf(text, sizeof(text), " needs %.4g bytes on disk, more than the %.4g bytes free",
                  bytes, static_cast<double>(space.available));
    return InvalidArgument(what + text + " where " + output + " goes");
  }
  return Status::OK();
}

PlanSource describe_source(const PlanSourceInput& in, double weight) {
  PlanSource s;
  s.name = in.source.name;
  s.prefix = in.source.prefix;
  s.content_hash = in.content_hash;
  s.dataset_sequences = in.sequence_lengths.size();
  s.weight = weight;
  s.vocab_size = in.vocab_size;
  s.tokenizer_path = in.tokenizer_path;
  s.tokenizer_hash = in.tokenizer_hash;
  return s;
}

}  // namespace

bool held_out_for_validation(uint64_t seed, uint64_t document, double fraction) {
  if (fraction <= 0) return false;
  return uniform(seed, kValidationStream, document) < fraction;
}

namespace {

// The source with the largest deficit w_s * k - taken_s, ties to the lower index, among
// `active`: the sources with a positive weight, in index order. Megatron's helper also scores
// zero-weight sources, which then win the 0 = 0 tie at sample 1 against a source that already
// holds one sample; a source a phase gives no weight must get no sample, so they are left out,
// which makes a phase exactly Megatron's blend over its weighted sources. With none active,
// source 0. This runs once per sample (10 M times for a long run), so the weighted sources are
// listed once per phase rather than tested in the loop.
size_t largest_deficit(std::span<const size_t> active, const std::vector<double>& w,
                       const std::vector<double>& taken, double k) {
  if (active.empty()) return 0;
  size_t best = active[0];
  double best_deficit = w[best] * k - taken[best];
  for (size_t a = 1; a < active.size(); ++a) {
    const size_t s = active[a];
    const double deficit = w[s] * k - taken[s];
    if (deficit > best_deficit) {
      best = s;
      best_deficit = deficit;
    }
  }
  return best;
}

}  // namespace

BlendResult blend(std::span<const PlanPhase> phases, size_t num_sources, int64_t samples) {
  BlendResult r;
  r.source.resize(samples);
  r.index.resize(samples);
  r.counts.assign(num_sources, 0);
  std::vector<double> taken(num_sources);
  std::vector<size_t> active;
  for (size_t p = 0; p < phases.size(); ++p) {
    const int64_t begin = std::min(phases[p].at_sample, samples);
    const int64_t end = p + 1 < phases.size() ? std::min(phases[p + 1].at_sample, samples) : samples;
    const std::vector<double>& w = phases[p].weights;
    active.clear();
    for (size_t s = 0; s < w.size(); ++s) {
      if (w[s] > 0) active.push_back(s);
    }
    std::fill(taken.begin(), taken.end(), 0.0);
    for (int64_t i = begin; i < end; ++i) {
      // Megatron-LM's build_blending_indices targets w * max(i, 1) with i counted from the
      // phase start; the max makes samples 0 and 1 both aim at one sample's worth.
      const double k = static_cast<double>(std::max<int64_t>(i - begin, 1));
      const size_t best = largest_deficit(active, w, taken, k);
      r.source[i] = static_cast<uint16_t>(best);
      r.index[i] = r.counts[best]++;
      taken[best] += 1.0;
    }
  }
  return r;
}

void shuffle(std::span<uint32_t> items, uint64_t seed, uint64_t stream) {
  for (size_t i = items.size(); i > 1; --i) {
    const PhiloxCounter c = philox_block(seed, stream, i);
    const uint64_t r = (uint64_t{c[0]} << 32) | c[1];
    const size_t j = static_cast<size_t>((static_cast<unsigned __int128>(r) * i) >> 64);
    std::swap(items[i - 1], items[j]);
  }
}

Result<PlanInfo> build_plan(const MixtureConfig& config, std::span<const PlanSourceInput> inputs,
                            const std::string& output) {
  MS_RETURN_IF_ERROR(check_inputs(config, inputs));
  const uint64_t seed = static_cast<uint64_t>(config.seed);
  const size_t num_sources = inputs.size();
  std::vector<std::array<SplitMembers, 2>> members(num_sources);
  ThreadPool pool(ThreadPool::default_size());
  pool.parallel_for(0, static_cast<int64_t>(num_sources), [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) members[s] = split_members(inputs[s], seed, config.validation.fraction);
  });

  PlanInfo info;
  info.toolkit_version = version_string();
  info.git_revision = std::string(git_revision());
  info.seq_len = config.seq_len;
  info.seed = config.seed;
  info.validation_fraction = config.validation.fraction;
  info.schedule = training_phases(config);
  info.samples = {config.train_samples(), config.validation_samples()};
  for (size_t s = 0; s < num_sources; ++s) {
    info.sources.push_back(describe_source(inputs[s], info.schedule[0].weights[s]));
  }
  MS_ASSIGN_OR_RETURN(std::vector<PlanPhase> val_phases, validation_phases(config, members));
  const double sample_bytes = kPlanBytesPerSample * (static_cast<double>(info.samples[0]) +
                                                     static_cast<double>(info.samples[1]));
  MS_RETURN_IF_ERROR(
      check_plan_size(sample_bytes, samples_key(config) + ": the plan's sample table", output));

  std::array<PlanSplitArrays, 2> arrays;
  std::array<BlendResult, 2> blends = {blend(info.schedule, num_sources, info.samples[0]),
                                       blend(val_phases, num_sources, info.samples[1])};
  for (int split = 0; split < 2; ++split) {
    arrays[split].sequence_order.resize(num_sources);
    arrays[split].stream_end.resize(num_sources);
    for (size_t s = 0; s < num_sources; ++s) {
      const SplitMembers& m = members[s][split];
      PlanSplitCounts& c = info.sources[s].splits[split];
      c = {m.documents, m.sequences.size(), m.tokens, blends[split].counts[s], 0};
      MS_ASSIGN_OR_RETURN(c.epochs, epochs_needed(inputs[s], m, c.samples, config.seq_len,
                                                  static_cast<Split>(split)));
    }
  }
  double stream_entries = 0;
  for (size_t s = 0; s < num_sources; ++s) {
    for (int split = 0; split < 2; ++split) {
      stream_entries += static_cast<double>(info.sources[s].splits[split].epochs) *
                        static_cast<double>(members[s][split].sequences.size());
    }
  }
  MS_RETURN_IF_ERROR(check_plan_size(sample_bytes + kPlanBytesPerStreamEntry * stream_entries,
                                     samples_key(config) + ": the plan's sample table and the " +
                                         std::to_string(static_cast<uint64_t>(stream_entries)) +
                                         " entries of its shuffled "
                                         "document streams",
                                     output));
  pool.parallel_for(0, static_cast<int64_t>(2 * num_sources), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int split = static_cast<int>(i / num_sources);
      const size_t s = static_cast<size_t>(i % num_sources);
      build_stream(inputs[s], members[s][split], info.sources[s].splits[split].epochs, seed,
                   static_cast<Split>(split), arrays[split].sequence_order[s],
                   arrays[split].stream_end[s]);
    }
  });
  for (int split = 0; split < 2; ++split) {
    arrays[split].blend_source = std::move(blends[split].source);
    arrays[split].blend_index = std::move(blends[split].index);
  }
  MS_RETURN_IF_ERROR(write_plan_file(output, info, arrays));
  return info;
}

Result<std::vector<PlanSourceInput>> load_plan_inputs(const MixtureConfig& config) {
  std::vector<PlanSourceInput> inputs;
  for (const MixtureSource& source : config.sources) {
    Result<IndexedDataset> dataset = IndexedDataset::open(source.prefix);
    if (!dataset.ok()) return dataset.status().with_context("source '" + source.name + "'");
    PlanSourceInput in;
    in.source = source;
    in.content_hash = dataset->content_hash();
    if (const auto& meta = dataset->meta()) {
      in.vocab_size = meta->vocab_size;
      in.tokenizer_path = meta->tokenizer_path;
      in.tokenizer_hash = meta->tokenizer_hash;
    }
    const std::span<const int64_t> docs = dataset->document_index();
    in.document_index.assign(docs.begin(), docs.end());
    in.sequence_lengths.resize(dataset->num_sequences());
    for (size_t seq = 0; seq < in.sequence_lengths.size(); ++seq) {
      in.sequence_lengths[seq] = dataset->sequence_length(seq);
    }
    inputs.push_back(std::move(in));
  }
  return inputs;
}

Result<PlanInfo> plan_mixture(const MixtureConfig& config, const std::string& output) {
  MS_ASSIGN_OR_RETURN(std::vector<PlanSourceInput> inputs, load_plan_inputs(config));
  return build_plan(config, inputs, output);
}

}  // namespace ms::data
