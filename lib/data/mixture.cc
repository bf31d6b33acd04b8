// Mixture YAML: the schema declaration and the codecs of its list-valued keys. See mixture.h.
#include "data/mixture.h"

#include <cmath>
#include <set>

#include "config/suggest.h"
#include "data/plan.h"

namespace ms::data {

int64_t MixtureConfig::train_samples() const {
  if (total_samples > 0) return total_samples;
  // Not (total_tokens + seq_len - 1) / seq_len: that sum overflows near INT64_MAX.
  return total_tokens / seq_len + (total_tokens % seq_len != 0 ? 1 : 0);
}

int64_t MixtureConfig::validation_samples() const {
  if (validation.samples > 0 || validation.fraction <= 0) return validation.samples;
  const double derived = std::round(validation.fraction * static_cast<double>(train_samples()));
  return std::max<int64_t>(1, static_cast<int64_t>(derived));
}

namespace {

using Violation = std::optional<std::string>;

Violation exactly_one_total(const MixtureConfig& c) {
  if ((c.total_samples > 0) == (c.total_tokens > 0)) {
    return "set exactly one of total_samples and total_tokens (got total_samples " +
           std::to_string(c.total_samples) + ", total_tokens " + std::to_string(c.total_tokens) +
           ")";
  }
  return std::nullopt;
}

Violation unique_source_names(const MixtureConfig& c) {
  std::set<std::string> seen;
  for (const MixtureSource& s : c.sources) {
    if (!seen.insert(s.name).second) return "source name '" + s.name + "' is used twice";
  }
  return std::nullopt;
}

Violation some_positive_weight(const MixtureConfig& c) {
  for (const MixtureSource& s : c.sources) {
    if (s.weight > 0) return std::nullopt;
  }
  return "every source has weight 0; give at least one a positive weight";
}

std::vector<std::string> source_names(const MixtureConfig& c) {
  std::vector<std::string> names;
  for (const MixtureSource& s : c.sources) names.push_back(s.name);
  return names;
}

// A phase's weights must name known sources and not all be 0.
Violation phase_weights_problem(const MixtureConfig& c, const WeightPhase& phase) {
  const std::vector<std::string> names = source_names(c);
  double sum = 0;
  for (const auto& [name, weight] : phase.weights) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::string message = "schedule phase at sample " + std::to_string(phase.at_sample) +
                            " names unknown source '" + name + "'";
      if (auto meant = config::closest_match(name, names)) message += "; did you mean '" + *meant + "'?";
      return message;
    }
    sum += weight;
  }
  if (sum <= 0) {
    return "schedule phase at sample " + std::to_string(phase.at_sample) +
           " gives every source weight 0";
  }
  return std::nullopt;
}

Violation schedule_problem(const MixtureConfig& c) {
  int64_t previous = 0;
  for (const WeightPhase& phase : c.schedule) {
    if (phase.at_sample <= previous) {
      return "schedule at_sample values must be positive and increasing; got " +
             std::to_string(phase.at_sample) + " after " + std::to_string(previous);
    }
    if (phase.at_sample >= c.train_samples()) {
      return "schedule phase at sample " + std::to_string(phase.at_sample) +
             " starts after the last training sample (" + std::to_string(c.train_samples()) + ")";
    }
    if (Violation v = phase_weights_problem(c, phase)) return v;
    previous = phase.at_sample;
  }
  return std::nullopt;
}

config::Schema<MixtureConfig> make_schema() {
  config::Schema<MixtureConfig> s;
  s.add("sources", "Datasets to blend: a list of {name, prefix, weight}.", &MixtureConfig::sources)
      .non_empty();
  s.add("seq_len", "Tokens per sample fed to the model; packed samples hold seq_len + 1.",
        &MixtureConfig::seq_len)
      .at_least(1)
      .at_most(kMaxPlanSeqLen);
  s.add("seed", "Seed of the document shuffles and the validation hold-out.", &MixtureConfig::seed)
      .at_least(0);
  s.add("total_samples", "Training samples to plan (or set total_tokens).",
        &MixtureConfig::total_samples)
      .at_least(0);
  s.add("total_tokens", "Training tokens to plan, as ceil(total_tokens / seq_len) samples.",
        &MixtureConfig::total_tokens)
      .at_least(0);
  s.add("validation.fraction", "Share of each source's documents held out for validation.",
        &MixtureConfig::validation, &ValidationConfig::fraction)
      .at_least(0.0)
      .below(1.0);
  s.add("validation.samples", "Validation samples to plan; 0 derives round(fraction * train samples).",
        &MixtureConfig::validation, &ValidationConfig::samples)
      .at_least(0);
  s.add("schedule", "Weight changes for curricula: a list of {at_sample, weights: {name: w}}.",
        &MixtureConfig::schedule);
  s.add_rule("exactly one of `total_samples` and `total_tokens`", exactly_one_total);
  s.add_rule("source names unique", unique_source_names);
  s.add_rule("at least one source with a positive weight", some_positive_weight);
  s.add_rule("`schedule` phases increasing, inside the plan, naming known sources",
             schedule_problem);
  s.add_rule("`validation.samples` needs `validation.fraction` above 0",
             [](const MixtureConfig& c) -> Violation {
               if (c.validation.samples > 0 && c.validation.fraction <= 0) {
                 return "validation.samples is " + std::to_string(c.validation.samples) +
                        " but validation.fraction is 0, so no documents are held out";
               }
               return std::nullopt;
             });
  return s;
}

}  // namespace

const config::Schema<MixtureConfig>& mixture_schema() {
  static const config::Schema<MixtureConfig> schema = make_schema();
  return schema;
}

Result<MixtureConfig> parse_mixture(std::string_view text, std::string_view source_name,
                                    const std::vector<std::string>& sets) {
  return mixture_schema().parse_text(text, source_name, sets);
}

Result<MixtureConfig> load_mixture(const std::string& path, const std::vector<std::string>& sets) {
  return mixture_schema().parse_file(path, sets);
}

}  // namespace ms::data

namespace ms::config {
namespace {

// InvalidArgument unless `node` is a mapping whose keys are all in `known`; an unknown key is
// named with the closest known one.
Status check_mapping_keys(const YAML::Node& node, const std::vector<std::string>& known,
                          const std::string& expected) {
  if (!node.IsMap()) return type_mismatch(expected, node);
  for (const auto& entry : node) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : describe_node(entry.first);
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string message = "unknown key '" + key + "'";
    if (auto meant = closest_match(key, known)) message += "; did you mean '" + *meant + "'?";
    return InvalidArgument(message);
  }
  return Status::OK();
}

// Decodes `node[key]` with Codec<V>; a missing key is an error when `required`.
template <typename V>
Status decode_member(const YAML::Node& node, const std::string& key, bool required, V& out) {
  const YAML::Node value = node[key];
  if (!value) {
    return required ? InvalidArgument("missing key '" + key + "'") : Status::OK();
  }
  Result<V> decoded = Codec<V>{}.decode(value);
  if (!decoded.ok()) return decoded.status().with_context("'" + key + "'");
  out = std::move(decoded).value();
  return Status::OK();
}

// "item 2 (line 7): <message>" for list codecs.
Status item_error(std::size_t index, const YAML::Node& item, const Status& status) {
  return InvalidArgument("item " + std::to_string(index + 1) + " (line " +
                         std::to_string(item.Mark().line + 1) + "): " + status.message());
}

template <typename E>
Result<std::vector<E>> decode_list(const YAML::Node& node, const std::string& expected) {
  if (node.IsNull()) return std::vector<E>{};
  if (!node.IsSequence()) return type_mismatch(expected, node);
  std::vector<E> items;
  for (std::size_t i = 0; i < node.size(); ++i) {
    Result<E> item = Codec<E>{}.decode(node[i]);
    if (!item.ok()) return item_error(i, node[i], item.status());
    items.push_back(std::move(item).value());
  }
  return items;
}

}  // namespace

Result<data::MixtureSource> Codec<data::MixtureSource>::decode(const YAML::Node& node) const {
  MS_RETURN_IF_ERROR(check_mapping_keys(node, {"name", "prefix", "weight"}, expected()));
  data::MixtureSource source;
  MS_RETURN_IF_ERROR(decode_member(node, "name", true, source.name));
  MS_RETURN_IF_ERROR(decode_member(node, "prefix", true, source.prefix));
  MS_RETURN_IF_ERROR(decode_member(node, "weight", true, source.weight));
  if (source.name.empty()) return InvalidArgument("'name' must not be empty");
  if (source.prefix.empty()) return InvalidArgument("'prefix' must not be empty");
  if (source.weight < 0) {
    return InvalidArgument("'weight' must be >= 0, got " + format_double(source.weight));
  }
  return source;
}

void Codec<data::MixtureSource>::emit(YAML::Emitter& out, const data::MixtureSource& value) const {
  out << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value;
  emit_string(out, value.name);
  out << YAML::Key << "prefix" << YAML::Value;
  emit_string(out, value.prefix);
  out << YAML::Key << "weight" << YAML::Value << format_double(value.weight) << YAML::EndMap;
}

Result<data::WeightPhase> Codec<data::WeightPhase>::decode(const YAML::Node& node) const {
  MS_RETURN_IF_ERROR(check_mapping_keys(node, {"at_sample", "weights"}, expected()));
  data::WeightPhase phase;
  MS_RETURN_IF_ERROR(decode_member(node, "at_sample", true, phase.at_sample));
  const YAML::Node weights = node["weights"];
  if (!weights) return InvalidArgument("missing key 'weights'");
  if (!weights.IsMap()) return type_mismatch("'weights' as a mapping {source name: weight}", weights);
  for (const auto& entry : weights) {
    Result<double> w = Codec<double>{}.decode(entry.second);
    const std::string name = entry.first.Scalar();
    if (!w.ok()) return w.status().with_context("weight of '" + name + "'");
    if (*w < 0) return InvalidArgument("weight of '" + name + "' must be >= 0");
    phase.weights.emplace_back(name, *w);
  }
  return phase;
}

void Codec<data::WeightPhase>::emit(YAML::Emitter& out, const data::WeightPhase& value) const {
  out << YAML::Flow << YAML::BeginMap << YAML::Key << "at_sample" << YAML::Value
      << std::to_string(value.at_sample) << YAML::Key << "weights" << YAML::Value << YAML::BeginMap;
  for (const auto& [name, weight] : value.weights) {
    out << YAML::Key << name << YAML::Value << format_double(weight);
  }
  out << YAML::EndMap << YAML::EndMap;
}

Result<std::vector<data::MixtureSource>> Codec<std::vector<data::MixtureSource>>::decode(
    const YAML::Node& node) const {
  return decode_list<data::MixtureSource>(node, expected());
}

void Codec<std::vector<data::MixtureSource>>::emit(
    YAML::Emitter& out, const std::vector<data::MixtureSource>& values) const {
  out << YAML::BeginSeq;
  for (const data::MixtureSource& v : values) Codec<data::MixtureSource>{}.emit(out, v);
  out << YAML::EndSeq;
}

Result<std::vector<data::WeightPhase>> Codec<std::vector<data::WeightPhase>>::decode(
    const YAML::Node& node) const {
  return decode_list<data::WeightPhase>(node, expected());
}

void Codec<std::vector<data::WeightPhase>>::emit(
    YAML::Emitter& out, const std::vector<data::WeightPhase>& values) const {
  out << YAML::BeginSeq;
  for (const data::WeightPhase& v : values) Codec<data::WeightPhase>{}.emit(out, v);
  out << YAML::EndSeq;
}

}  // namespace ms::config
