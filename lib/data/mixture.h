// MixtureConfig: the YAML a user writes to blend several token datasets into one training
// stream (docs/mixture.md): the sources with their weights, the sequence length, the seed, how
// many samples (or tokens) to plan, the validation hold-out, and an optional weight schedule
// for curricula. It is read through lib/config's Schema<T>, so unknown keys, wrong types and
// out-of-range values are reported with file:line:col and a did-you-mean, and every key can be
// overridden with --set. The list-valued keys (sources, schedule) have their own codecs below
// so an error inside an item still names the item, its line and the offending key.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/schema.h"
#include "core/status.h"

namespace ms::data {

struct MixtureSource {
  std::string name;    // unique label, used in the schedule, plan dumps and error messages
  std::string prefix;  // dataset prefix (<prefix>.idx/.bin), relative to the working directory
  double weight = 0;   // relative share; weights are normalized to sum 1
  bool operator==(const MixtureSource&) const = default;
};

// From global sample `at_sample` on, blend with `weights` (source name -> relative weight;
// sources not named get weight 0).
struct WeightPhase {
  int64_t at_sample = 0;
  std::vector<std::pair<std::string, double>> weights;
  bool operator==(const WeightPhase&) const = default;
};

struct ValidationConfig {
  double fraction = 0.01;  // share of each source's documents held out for validation
  int64_t samples = 0;     // validation samples to plan; 0: round(fraction * train samples)
  bool operator==(const ValidationConfig&) const = default;
};

struct MixtureConfig {
  std::vector<MixtureSource> sources;
  int64_t seq_len = 2048;
  int64_t seed = 1234;
  int64_t total_samples = 0;  // exactly one of total_samples and total_tokens is set
  int64_t total_tokens = 0;   // planned as ceil(total_tokens / seq_len) samples
  ValidationConfig validation;
  std::vector<WeightPhase> schedule;
  bool operator==(const MixtureConfig&) const = default;

  // Training samples to plan (from total_samples or total_tokens).
  int64_t train_samples() const;
  // Validation samples to plan (validation.samples, or derived from the fraction).
  int64_t validation_samples() const;
};

// The schema of mixture files (keys, descriptions, constraints and rules between keys).
const config::Schema<MixtureConfig>& mixture_schema();

// Parses mixture YAML `text` (named `source_name` in errors) with `--set` overrides applied;
// InvalidArgument listing every problem, one a line.
Result<MixtureConfig> parse_mixture(std::string_view text, std::string_view source_name,
                                    const std::vector<std::string>& sets = {});
Result<MixtureConfig> load_mixture(const std::string& path,
                                   const std::vector<std::string>& sets = {});

}  // namespace ms::data

namespace ms::config {

// One `{name, prefix, weight}` mapping.
template <>
struct Codec<data::MixtureSource> {
  std::string type_name() const { return "source"; }
  std::string expected() const { return "a mapping {name, prefix, weight}"; }
  Result<data::MixtureSource> decode(const YAML::Node& node) const;
  void emit(YAML::Emitter& out, const data::MixtureSource& value) const;
};

// One `{at_sample, weights: {name: weight, ...}}` mapping.
template <>
struct Codec<data::WeightPhase> {
  std::string type_name() const { return "phase"; }
  std::string expected() const { return "a mapping {at_sample, weights}"; }
  Result<data::WeightPhase> decode(const YAML::Node& node) const;
  void emit(YAML::Emitter& out, const data::WeightPhase& value) const;
};

// Lists of the two above that keep an item's own error ("item 2 (line 7): unknown key ...").
template <>
struct Codec<std::vector<data::MixtureSource>> {
  std::string type_name() const { return "list of sources"; }
  std::string expected() const { return "a list of {name, prefix, weight} mappings"; }
  Result<std::vector<data::MixtureSource>> decode(const YAML::Node& node) const;
  void emit(YAML::Emitter& out, const std::vector<data::MixtureSource>& values) const;
};

template <>
struct Codec<std::vector<data::WeightPhase>> {
  std::string type_name() const { return "list of phases"; }
  std::string expected() const { return "a list of {at_sample, weights} mappings"; }
  Result<std::vector<data::WeightPhase>> decode(const YAML::Node& node) const;
  void emit(YAML::Emitter& out, const std::vector<data::WeightPhase>& values) const;
};

}  // namespace ms::config
