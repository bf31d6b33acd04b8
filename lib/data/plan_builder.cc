// Planning a mixture: hold-out, blending, per-epoch shuffles and packing streams. See
// plan_builder.h for the algorithm and docs/mixture.md for the user's view.
#include "data/plan_builder.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <future>
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

// Epochs [first, end) of the stream of `m` in `order` (which holds at least end x |m| entries,
// epoch after epoch): each is a copy of `m`'s sequences shuffled in place. Epochs are
// independent, so a stream can be filled in several calls.
void shuffle_epochs(const PlanSourceInput& in, const SplitMembers& m, uint64_t seed, Split split,
                    uint64_t first, uint64_t end, std::span<uint32_t> order) {
  const size_t n = m.sequences.size();
  assert(order.size() >= end * n);
  for (uint64_t e = first; e < end; ++e) {
    const std::span<uint32_t> epoch = order.subspan(e * n, n);
    std::copy(m.sequences.begin(), m.sequences.end(), epoch.begin());
    const std::string stream = "ms-data/shuffle/" + in.source.name + "/" +
                               std::string(split_name(split)) + "/" + std::to_string(e);
    shuffle(epoch, seed, stream_id(stream));
  }
}

// Appends the stream-end section of `order`: each entry's end offset in the concatenated token
// stream, computed and written a piece at a time.
Status append_stream_ends(PlanFileWriter& out, const PlanSourceInput& in,
                          std::span<const uint32_t> order) {
  std::vector<uint64_t> ends(std::min<size_t>(kBlendPieceSamples, order.size()));
  uint64_t position = 0;
  for (size_t at = 0; at < order.size(); at += ends.size()) {
    const size_t n = std::min(ends.size(), order.size() - at);
    for (size_t i = 0; i < n; ++i) {
      position += static_cast<uint64_t>(in.sequence_lengths[order[at + i]]);
      ends[i] = position;
    }
    MS_RETURN_IF_ERROR(out.append(std::span<const uint64_t>(ends).first(n)));
  }
  return Status::OK();
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

// Passes over `tokens` tokens that `samples` packed samples of `seq_len` + 1 tokens need.
uint64_t epochs_for(uint64_t samples, int64_t seq_len, uint64_t tokens) {
  if (samples == 0 || tokens == 0) return 0;
  const uint64_t needed = samples * static_cast<uint64_t>(seq_len) + 1;
  return (needed + tokens - 1) / tokens;
}

// Bounds on the samples the blend of `phases` over `samples` gives source `s`, from its
// guarantee that after n samples of a phase w n - w - 1 < taken < w n + 1, widened for
// rounding. Only used to start shuffling before the blend is done; nothing depends on them
// holding.
std::pair<uint64_t, uint64_t> blend_count_bounds(std::span<const PlanPhase> phases, size_t s,
                                                 int64_t samples) {
  double lo = 0, hi = 0;
  for (size_t p = 0; p < phases.size(); ++p) {
    const int64_t begin = std::min(phases[p].at_sample, samples);
    const int64_t end = p + 1 < phases.size() ? std::min(phases[p + 1].at_sample, samples) : samples;
    const double n = static_cast<double>(end - begin);
    const double w = phases[p].weights[s];
    const double margin = 2 + n * 1e-12;
    if (w <= 0 || n <= 0) continue;
    lo += std::max(0.0, std::floor(w * (n - 1)) - margin);
    hi += std::ceil(w * n) + margin;
  }
  return {static_cast<uint64_t>(lo), static_cast<uint64_t>(hi)};
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
  return epochs_for(samples, seq_len, m.tokens);
}

// What the plan's tables take on disk per sample (blend_source u16 and blend_index u64) and per
// entry of a source's shuffled stream (sequence_order u32 and stream_end u64), and what planning
// holds in memory meanwhile: the training blend's sources (its indices go to the file as they
// are made; the small validation blend is held whole) and the streams' sequence orders (their
// ends are computed as they are written).
constexpr double kDiskBytesPerSample = 10, kDiskBytesPerStreamEntry = 12;
constexpr double kMemoryBytesPerTrainSample = 2, kMemoryBytesPerStreamEntry = 4;

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
Status check_plan_size(double memory_bytes, double disk_bytes, const std::string& what,
                       const std::string& output) {
  MS_RETURN_IF_ERROR(check_memory_need(memory_bytes, what));
  std::error_code ec;
  const std::filesystem::space_info space = std::filesystem::space(io::parent_dir(output), ec);
  if (!ec && disk_bytes > static_cast<double>(space.available)) {
    char text[160];
    std::snprintf(text, sizeof(text), " needs %.4g bytes on disk, more than the %.4g bytes free",
                  disk_bytes, static_cast<double>(space.available));
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

// One phase of the blend: sample k of the phase (k counted from the phase start, k >= 1; samples
// 0 and 1 both use k = 1) goes to the source with the largest deficit w_s * k - taken_s, ties
// to the lower index, among the sources with a positive weight. Megatron's helper also scores
// zero-weight sources, which then win the 0 = 0 tie at sample 1 against a source that already
// holds one sample; a source a phase gives no weight must get no sample, so they are left out,
// which makes a phase exactly Megatron's blend over its weighted sources. With none weighted,
// source 0.
//
// This runs once per sample (10 M times for a long run), and the plain loop is a chain: each
// pick needs the previous pick's taken_s. So each step looks one pick behind: it ranks the
// deficits computed without the previous pick (the top two, `first` and `second`), which needs
// only the pick before that, and then settles the step with the previous pick alone. A previous
// pick other than `first` only lowered a deficit that did not lead, so `first` wins; when the
// previous pick was `first`, its lowered deficit meets `second`. The same doubles are computed
// and compared as in the plain loop, so the picks are identical (tests/data/plan_test.cc
// checks them against it); the chain is half as long.
class PhaseBlender {
 public:
  explicit PhaseBlender(const std::vector<double>& weights) {
    for (size_t s = 0; s < weights.size(); ++s) {
      if (weights[s] > 0) {
        weight_.push_back(weights[s]);
        source_.push_back(static_cast<uint16_t>(s));
      }
    }
    taken_.assign(weight_.size(), 0.0);
  }

  // The source of the phase's next sample, whose target is k.
  uint16_t next(double k) {
    const size_t n = weight_.size();
    if (n == 0) return 0;
    // Deficits without the previous pick: the lowest-index maximum and the lowest-index
    // maximum of the others.
    size_t first = 0, second = kNone;
    double first_deficit = weight_[0] * k - taken_[0];
    double second_deficit = 0;
    for (size_t a = 1; a < n; ++a) {
      const double deficit = weight_[a] * k - taken_[a];
      if (deficit > first_deficit) {
        second = first;
        second_deficit = first_deficit;
        first = a;
        first_deficit = deficit;
      } else if (second == kNone || deficit > second_deficit) {
        second = a;
        second_deficit = deficit;
      }
    }
    size_t pick = first;
    if (previous_ == first && second != kNone) {
      const double lowered = weight_[first] * k - (taken_[first] + 1.0);
      const bool keeps = lowered > second_deficit || (lowered == second_deficit && first < second);
      pick = keeps ? first : second;
    }
    if (previous_ != kNone) taken_[previous_] += 1.0;
    previous_ = pick;
    return source_[pick];
  }

 private:
  static constexpr size_t kNone = ~size_t{0};
  std::vector<double> weight_;    // the weighted sources' weights, in source order
  std::vector<uint16_t> source_;  // their indices
  std::vector<double> taken_;     // samples taken, except the previous pick's
  size_t previous_ = kNone;       // the previous pick (an index into weight_)
};

}  // namespace

std::vector<uint64_t> blend_pieces(std::span<const PlanPhase> phases, size_t num_sources,
                                   int64_t samples, const BlendSink& sink) {
  std::vector<uint64_t> counts(num_sources, 0);
  std::vector<uint16_t> source(std::min<size_t>(kBlendPieceSamples, static_cast<size_t>(samples)));
  std::vector<uint64_t> index(source.size());
  int64_t piece_begin = 0;
  size_t filled = 0;
  for (size_t p = 0; p < phases.size(); ++p) {
    const int64_t begin = std::min(phases[p].at_sample, samples);
    const int64_t end = p + 1 < phases.size() ? std::min(phases[p + 1].at_sample, samples) : samples;
    PhaseBlender phase(phases[p].weights);
    for (int64_t i = begin; i < end; ++i) {
      // Megatron-LM's build_blending_indices targets w * max(i, 1) with i counted from the
      // phase start; the max makes samples 0 and 1 both aim at one sample's worth.
      const uint16_t pick = phase.next(static_cast<double>(std::max<int64_t>(i - begin, 1)));
      source[filled] = pick;
      index[filled] = counts[pick]++;
      if (++filled == source.size()) {
        sink(piece_begin, source, index);
        piece_begin += static_cast<int64_t>(filled);
        filled = 0;
      }
    }
  }
  if (filled > 0) {
    sink(piece_begin, std::span<const uint16_t>(source).first(filled),
         std::span<const uint64_t>(index).first(filled));
  }
  return counts;
}

BlendResult blend(std::span<const PlanPhase> phases, size_t num_sources, int64_t samples) {
  BlendResult r;
  r.source.resize(samples);
  r.index.resize(samples);
  r.counts = blend_pieces(phases, num_sources, samples,
                          [&](int64_t begin, std::span<const uint16_t> source,
                              std::span<const uint64_t> index) {
                            std::copy(source.begin(), source.end(), r.source.begin() + begin);
                            std::copy(index.begin(), index.end(), r.index.begin() + begin);
                          });
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

Result<PlannedMixture> build_plan(const MixtureConfig& config,
                                  std::span<const PlanSourceInput> inputs,
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
  const double train_samples = static_cast<double>(info.samples[0]);
  const double validation_samples = static_cast<double>(info.samples[1]);
  const double sample_disk = kDiskBytesPerSample * (train_samples + validation_samples);
  const double sample_memory =
      kMemoryBytesPerTrainSample * train_samples + kDiskBytesPerSample * validation_samples;
  MS_RETURN_IF_ERROR(check_plan_size(sample_memory, sample_disk,
                                     samples_key(config) + ": the plan's sample table", output));

  // Each stream's epochs are bounded before the blend, so the pool shuffles the epochs certain
  // to be used while the main thread blends; the rest are shuffled once the counts are known.
  const size_t num_streams = 2 * num_sources;  // (split, source), in file order
  auto split_of = [&](size_t i) { return static_cast<int>(i / num_sources); };
  auto source_of = [&](size_t i) { return i % num_sources; };
  const std::array<std::span<const PlanPhase>, 2> split_phases = {info.schedule, val_phases};
  std::vector<uint64_t> early_epochs(num_streams), epoch_room(num_streams);
  double stream_entries = 0;
  for (size_t i = 0; i < num_streams; ++i) {
    const int split = split_of(i);
    const size_t s = source_of(i);
    const SplitMembers& m = members[s][split];
    const auto [lo, hi] = blend_count_bounds(split_phases[split], s, info.samples[split]);
    early_epochs[i] = epochs_for(lo, config.seq_len, m.tokens);
    epoch_room[i] = epochs_for(hi, config.seq_len, m.tokens);
    stream_entries += static_cast<double>(epoch_room[i]) * static_cast<double>(m.sequences.size());
  }
  MS_RETURN_IF_ERROR(check_plan_size(sample_memory + kMemoryBytesPerStreamEntry * stream_entries,
                                     sample_disk + kDiskBytesPerStreamEntry * stream_entries,
                                     samples_key(config) + ": the plan's sample table and the " +
                                         std::to_string(static_cast<uint64_t>(stream_entries)) +
                                         " entries of its shuffled "
                                         "document streams",
                                     output));

  MS_ASSIGN_OR_RETURN(std::unique_ptr<PlanFileWriter> out, PlanFileWriter::create(output));
  std::vector<HugePageArray<uint32_t>> orders(num_streams);
  std::vector<std::vector<std::future<void>>> shuffles(num_streams);
  auto shuffle_later = [&](size_t i, uint64_t first, uint64_t end) {
    const int split = split_of(i);
    const size_t s = source_of(i);
    shuffles[i].push_back(pool.submit([&, i, split, s, first, end] {
      shuffle_epochs(inputs[s], members[s][split], seed, static_cast<Split>(split), first, end,
                     orders[i]);
    }));
  };
  for (size_t i = 0; i < num_streams; ++i) {
    orders[i].resize(epoch_room[i] * members[source_of(i)][split_of(i)].sequences.size());
    if (early_epochs[i] > 0) shuffle_later(i, 0, early_epochs[i]);
  }

  // The file is written as it is produced: the training blend's index a piece at a time while
  // the blend runs (its sources, 2 bytes a sample, are kept for the next section), then the
  // validation blend, then each stream once shuffled, its ends computed as they are written.
  // The description and section table go last: they need every count.
  auto build_and_write = [&]() -> Status {
    HugePageArray<uint16_t> train_sources(static_cast<size_t>(info.samples[0]));
    Status written = out->begin_section(PlanSection::kBlendIndex, 0);
    std::array<std::vector<uint64_t>, 2> blend_counts;
    blend_counts[0] = blend_pieces(info.schedule, num_sources, info.samples[0],
                                   [&](int64_t begin, std::span<const uint16_t> source,
                                       std::span<const uint64_t> index) {
                                     std::copy(source.begin(), source.end(),
                                               train_sources.begin() + begin);
                                     if (written.ok()) written = out->append(index);
                                   });
    MS_RETURN_IF_ERROR(written);
    MS_RETURN_IF_ERROR(out->begin_section(PlanSection::kBlendSource, 0));
    MS_RETURN_IF_ERROR(out->append(std::span<const uint16_t>(train_sources)));
    const BlendResult validation = blend(val_phases, num_sources, info.samples[1]);
    blend_counts[1] = validation.counts;
    MS_RETURN_IF_ERROR(out->begin_section(PlanSection::kBlendIndex, 1));
    MS_RETURN_IF_ERROR(out->append(std::span<const uint64_t>(validation.index)));
    MS_RETURN_IF_ERROR(out->begin_section(PlanSection::kBlendSource, 1));
    MS_RETURN_IF_ERROR(out->append(std::span<const uint16_t>(validation.source)));

    for (size_t i = 0; i < num_streams; ++i) {
      const int split = split_of(i);
      const size_t s = source_of(i);
      const SplitMembers& m = members[s][split];
      PlanSplitCounts& c = info.sources[s].splits[split];
      c = {m.documents, m.sequences.size(), m.tokens, blend_counts[split][s], 0};
      MS_ASSIGN_OR_RETURN(c.epochs, epochs_needed(inputs[s], m, c.samples, config.seq_len,
                                                  static_cast<Split>(split)));
      if (c.epochs > epoch_room[i]) {  // beyond the bound: grow once nothing is filling it
        for (std::future<void>& f : shuffles[i]) f.wait();
        orders[i].resize(c.epochs * m.sequences.size());
      }
      if (c.epochs > early_epochs[i]) shuffle_later(i, early_epochs[i], c.epochs);
    }
    for (size_t i = 0; i < num_streams; ++i) {
      const int split = split_of(i);
      const uint32_t s = static_cast<uint32_t>(source_of(i));
      for (std::future<void>& f : shuffles[i]) f.wait();
      const PlanSplitCounts& c = info.sources[s].splits[split];
      const std::span<const uint32_t> order =
          std::span<const uint32_t>(orders[i]).first(c.epochs * c.sequences);
      MS_RETURN_IF_ERROR(out->begin_section(PlanSection::kSequenceOrder, split, s));
      MS_RETURN_IF_ERROR(out->append(order));
      MS_RETURN_IF_ERROR(out->begin_section(PlanSection::kStreamEnd, split, s));
      MS_RETURN_IF_ERROR(append_stream_ends(*out, inputs[s], order));
      orders[i] = {};  // written: its memory can go
    }
    return Status::OK();
  };
  const Status written = build_and_write();
  for (auto& stream : shuffles) {
    for (std::future<void>& f : stream) f.wait();  // `orders` outlives every task
  }
  MS_RETURN_IF_ERROR(written);
  MS_ASSIGN_OR_RETURN(PlanFileSummary file, out->finish(info));
  return PlannedMixture{std::move(info), std::move(file)};
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

Result<PlannedMixture> plan_mixture(const MixtureConfig& config, const std::string& output) {
  MS_ASSIGN_OR_RETURN(std::vector<PlanSourceInput> inputs, load_plan_inputs(config));
  return build_plan(config, inputs, output);
}

}  // namespace ms::data
