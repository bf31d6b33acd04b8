// Planning: from a MixtureConfig and the source datasets to a plan file (plan.h). The steps,
// each exposed for tests:
//   1. hold out documents for validation by a seeded hash of the document index;
//   2. blend: global sample i goes to the source with the largest deficit
//      w_s * max(i - phase_start, 1) - taken_s within the current schedule phase, ties to the
//      lower source index (exactly Megatron-LM's build_blending_indices), so after n samples of
//      a phase w_s * (n - 1) - 1 < taken_s < w_s * n + 1;
//   3. per source and split, shuffle the split's sequences per epoch (Philox keyed by seed,
//      source name, split and epoch) and concatenate epochs into a token stream long enough for
//      the samples the blend takes from it.
// Everything is a pure function of the config and the datasets' contents.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/mixture.h"
#include "data/plan.h"

namespace ms::data {

// What the planner needs from one source dataset (IndexedDataset or a test fixture).
struct PlanSourceInput {
  MixtureSource source;
  std::string content_hash;
  int64_t vocab_size = 0;
  std::string tokenizer_path;
  std::string tokenizer_hash;
  std::vector<int64_t> document_index;  // Megatron layout: documents + 1 entries, from 0
  std::vector<int32_t> sequence_lengths;
};

// True when document `document` is held out for validation: a Philox uniform keyed by
// (seed, "ms-data/validation", document) falls below `fraction`. The same document of the same
// dataset is held out whichever source names it.
bool held_out_for_validation(uint64_t seed, uint64_t document, double fraction);

struct BlendResult {
  HugePageArray<uint16_t> source;  // global sample -> source
  HugePageArray<uint64_t> index;   // global sample -> index within the source
  std::vector<uint64_t> counts;  // samples per source
};

// Receives consecutive pieces of a blend: the source and the index within it of global samples
// [begin, begin + source.size()). The spans are valid only during the call.
using BlendSink = std::function<void(int64_t begin, std::span<const uint16_t> source,
                                     std::span<const uint64_t> index)>;
inline constexpr size_t kBlendPieceSamples = size_t{1} << 20;

// Blends `samples` global samples over `num_sources` sources by `phases` (the first starts at
// 0; weights normalized, one per source), handing them to `sink` in pieces of up to
// kBlendPieceSamples, so a long blend is written as it is produced instead of held in memory.
// Returns the samples per source. Deterministic; ties go to the lower source index.
std::vector<uint64_t> blend_pieces(std::span<const PlanPhase> phases, size_t num_sources,
                                   int64_t samples, const BlendSink& sink);
// The whole blend in memory.
BlendResult blend(std::span<const PlanPhase> phases, size_t num_sources, int64_t samples);

// Shuffles `items` in place (Fisher-Yates with Philox draws keyed by seed and `stream`).
void shuffle(std::span<uint32_t> items, uint64_t seed, uint64_t stream);

// A plan as build_plan wrote it: what it records and the file's hash and size.
struct PlannedMixture {
  PlanInfo info;
  PlanFileSummary file;
};

// Builds the plan of `config` over `inputs` (one per config source, same order) and writes it
// to `output`. InvalidArgument naming the source when a source with weight has no tokens in a
// split, or a dataset is too large for the format (2^32 sequences).
Result<PlannedMixture> build_plan(const MixtureConfig& config,
                                  std::span<const PlanSourceInput> inputs,
                                  const std::string& output);

// Opens every source dataset of `config` (NotFound/Corruption naming the source and prefix).
Result<std::vector<PlanSourceInput>> load_plan_inputs(const MixtureConfig& config);

// load_plan_inputs + build_plan.
Result<PlannedMixture> plan_mixture(const MixtureConfig& config, const std::string& output);

}  // namespace ms::data
