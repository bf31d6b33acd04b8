// The grow plan (see grow_plan.h; the rules' maths are in grow.h).
#include "ckpt/grow_plan.h"

#include <algorithm>
#include <set>

#include "ckpt/hf_names.h"
#include "config/key_values.h"
#include "config/value_codec.h"

namespace ms::ckpt {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

Status apply_target_item(std::string_view key, std::string_view value, GrowTarget& t) {
  const std::optional<int64_t> v = config::parse_int64(value);
  if (!v || *v <= 0) {
    return InvalidArgument("--to: " + std::string(key) + " must be a positive integer, got '" +
                           std::string(value) + "'");
  }
  if (key == "d_model") {
    t.d_model = *v;
  } else if (key == "n_layers") {
    t.n_layers = *v;
  } else if (key == "d_ff") {
    t.d_ff = *v;
  } else if (key == "n_heads") {
    t.n_heads = *v;
  } else if (key == "n_kv_heads") {
    t.n_kv_heads = *v;
  } else if (key == "shared_expert_d_ff") {
    t.shared_expert_d_ff = *v;
  } else {
    return InvalidArgument("--to: unknown key '" + std::string(key) +
                           "' (grow knows d_model, n_layers, d_ff, n_heads, n_kv_heads, "
                           "shared_expert_d_ff)");
  }
  return Status::OK();
}

// `to` units, unit i copying original unit i mod `from`: the originals keep their places and
// the copies follow round-robin, so a non-integer ratio copies the first units once more.
// Copy k (0-based, in order) of a unit copied n times carries (k + 1) / (1 + 2 + ... + n) of its
// outgoing weights: unequal, so the copies receive different gradients and drift apart.
std::vector<UnitCopy> replicate(int64_t from, int64_t to) {
  std::vector<UnitCopy> units(static_cast<size_t>(to));
  for (int64_t i = 0; i < to; ++i) units[static_cast<size_t>(i)].source = i % from;
  return units;
}

// Sets each unit's share from the number of copies of its source and its place among them.
void assign_shares(std::vector<UnitCopy>& units, int64_t sources) {
  std::vector<int64_t> copies(static_cast<size_t>(sources), 0);
  for (const UnitCopy& u : units) ++copies[static_cast<size_t>(u.source)];
  std::vector<int64_t> seen(static_cast<size_t>(sources), 0);
  for (UnitCopy& u : units) {
    const int64_t n = copies[static_cast<size_t>(u.source)];
    const int64_t k = seen[static_cast<size_t>(u.source)]++;
    u.share = n == 1 ? 1.0f
                     : static_cast<float>(static_cast<double>(k + 1) /
                                          (static_cast<double>(n) * (n + 1) / 2));
  }
}

std::vector<UnitCopy> replicate_with_shares(int64_t from, int64_t to) {
  std::vector<UnitCopy> units = replicate(from, to);
  assign_shares(units, from);
  return units;
}

Status check_not_smaller(const char* key, int64_t from, int64_t to) {
  if (to >= from) return Status::OK();
  return InvalidArgument("--to " + std::string(key) + "=" + str(to) + " is smaller than the "
                         "checkpoint's " + str(from) + ": grow never shrinks a model (removing "
                         "units cannot keep its function)");
}

// d_model, n_heads and n_kv_heads of the grown model. The head size stays: rotary embeddings
// rotate pairs by frequencies that depend on it, and attention scales by 1/sqrt(head size).
Status plan_widths(const config::ModelConfig& from, const GrowTarget& t, config::ModelConfig& to) {
  const int64_t hd = from.d_model / from.n_heads;
  const int64_t group = from.n_heads / from.n_kv_heads;
  to.d_model = t.d_model ? t.d_model : (t.n_heads ? t.n_heads * hd : from.d_model);
  if (to.d_model % hd != 0) {
    return InvalidArgument("--to d_model=" + str(to.d_model) + " is not a multiple of the head "
                           "size " + str(hd) + " (d_model / n_heads): the head size cannot "
                           "change, since rotary embeddings depend on it, so the width grows by "
                           "whole heads");
  }
  to.n_heads = t.n_heads ? t.n_heads : to.d_model / hd;
  if (to.n_heads * hd != to.d_model) {
    return InvalidArgument("--to n_heads=" + str(to.n_heads) + " with d_model=" +
                           str(to.d_model) + " changes the head size from " + str(hd) +
                           ": it must stay d_model / n_heads = " + str(hd) + " (rotary "
                           "embeddings depend on it), so n_heads must be " +
                           str(to.d_model / hd));
  }
  if (t.n_kv_heads) {
    to.n_kv_heads = t.n_kv_heads;
  } else if (to.n_heads % group == 0) {
    to.n_kv_heads = to.n_heads / group;
  } else {
    const std::string heads = t.n_heads ? "--to n_heads=" + str(to.n_heads)
                                        : "--to d_model=" + str(to.d_model) + " gives n_heads=" +
                                              str(to.n_heads) + " (head size " + str(hd) + "),";
    return InvalidArgument(heads + " which is not a multiple of the query group size " +
                           str(group) + " (n_heads / n_kv_heads), so n_kv_heads cannot keep "
                           "the grouping; name n_kv_heads");
  }
  MS_RETURN_IF_ERROR(check_not_smaller("d_model", from.d_model, to.d_model));
  MS_RETURN_IF_ERROR(check_not_smaller("n_heads", from.n_heads, to.n_heads));
  MS_RETURN_IF_ERROR(check_not_smaller("n_kv_heads", from.n_kv_heads, to.n_kv_heads));
  if (to.n_heads % to.n_kv_heads != 0) {
    return InvalidArgument("--to n_kv_heads=" + str(to.n_kv_heads) + " does not divide n_heads=" +
                           str(to.n_heads) + ": grouped-query attention needs whole groups");
  }
  // Each key/value head is copied with its query group: the copies of original head j carry
  // between them every query head of j's group, so floor(K'/K) copies of G' slots must hold G.
  const int64_t new_group = to.n_heads / to.n_kv_heads;
  const int64_t fewest_copies = to.n_kv_heads / from.n_kv_heads;
  if (fewest_copies * new_group < group) {
    return InvalidArgument(
        "--to n_heads=" + str(to.n_heads) + ",n_kv_heads=" + str(to.n_kv_heads) +
        " breaks the query grouping: a key/value head is copied together with its whole query "
        "group, and the " + str(fewest_copies) + " copy(ies) of some key/value head hold " +
        str(fewest_copies * new_group) + " query head(s), fewer than its group's " + str(group) +
        " (keep n_heads / n_kv_heads = " + str(group) + ", or copy every key/value head often "
        "enough)");
  }
  return Status::OK();
}

// New key/value head k' copies original head j = k' mod K (its t = k' / K-th copy); its G'
// query heads take slots t G' .. t G' + G' - 1 of j's group, cycling through the G originals.
void plan_heads(const config::ModelConfig& from, GrowPlan& plan) {
  const config::ModelConfig& to = plan.to;
  plan.kv_heads = replicate(from.n_kv_heads, to.n_kv_heads);
  const int64_t group = from.n_heads / from.n_kv_heads;
  const int64_t new_group = to.n_heads / to.n_kv_heads;
  plan.query_heads.resize(static_cast<size_t>(to.n_heads));
  for (int64_t h = 0; h < to.n_heads; ++h) {
    const int64_t kv = h / new_group;
    const int64_t j = kv % from.n_kv_heads, t = kv / from.n_kv_heads;
    const int64_t slot = t * new_group + h % new_group;
    plan.query_heads[static_cast<size_t>(h)].source = j * group + slot % group;
  }
  assign_shares(plan.query_heads, from.n_heads);
}

// The original layers new layers follow, ascending, or an error naming the rule.
Result<std::vector<int64_t>> plan_insertions(const config::ModelConfig& from,
                                             const GrowTarget& t, const GrowInsert& insert) {
  const int64_t layers = from.n_layers;
  std::vector<int64_t> after;
  const bool explicit_insert = insert.every > 0 || !insert.after.empty();
  if (insert.every > 0) {
    for (int64_t p = 0; p < layers; ++p) {
      if ((p + 1) % insert.every == 0) after.push_back(p);
    }
  }
  for (int64_t p : insert.after) {
    if (p < 0 || p >= layers) {
      return InvalidArgument("--insert " + str(p) + ": no such layer (the checkpoint has layers "
                             "0.." + str(layers - 1) + "; a new layer goes after the one named)");
    }
    after.push_back(p);
  }
  std::sort(after.begin(), after.end());
  if (explicit_insert && after.empty()) {
    return InvalidArgument("--insert every-" + str(insert.every) + " inserts no layer into " +
                           str(layers) + " layers");
  }
  if (t.n_layers == 0) return after;
  MS_RETURN_IF_ERROR(check_not_smaller("n_layers", layers, t.n_layers));
  const int64_t added = t.n_layers - layers;
  if (explicit_insert && static_cast<int64_t>(after.size()) != added) {
    return InvalidArgument("--insert places " + str(static_cast<int64_t>(after.size())) +
                           " new layer(s), but --to n_layers=" + str(t.n_layers) + " needs " +
                           str(added) + " (from " + str(layers) + ")");
  }
  if (explicit_insert) return after;
  // Spread evenly: new layer i after original layer ceil((i + 1) L / N) - 1, so N = L puts a
  // new layer after each and N = L / 2 after every second.
  for (int64_t i = 0; i < added; ++i) {
    after.push_back(std::max<int64_t>(0, ((i + 1) * layers + added - 1) / added - 1));
  }
  return after;
}

}  // namespace

Result<GrowTarget> parse_grow_target(std::string_view text) {
  GrowTarget t;
  MS_RETURN_IF_ERROR(config::parse_key_values(
      text, "--to", "d_model=96,n_layers=6",
      [&](std::string_view key, std::string_view value) {
        return apply_target_item(key, value, t);
      }));
  return t;
}

Result<GrowInsert> parse_grow_insert(std::string_view text) {
  GrowInsert insert;
  if (text.empty()) return insert;
  if (text.starts_with("every-")) {
    const std::optional<int64_t> k = config::parse_int64(text.substr(6));
    if (!k || *k <= 0) {
      return InvalidArgument("--insert: every-K needs a positive K, got '" + std::string(text) +
                             "'");
    }
    insert.every = *k;
    return insert;
  }
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    const std::optional<int64_t> p = config::parse_int64(item);
    if (!p || *p < 0) {
      return InvalidArgument("--insert: expected every-K or layer indices like 1,3, got '" +
                             std::string(item) + "'");
    }
    insert.after.push_back(*p);
    start = comma + 1;
  }
  return insert;
}

Result<GrowPlan> plan_grow(const config::ModelConfig& from, const GrowTarget& target,
                           const GrowInsert& insert) {
  MS_RETURN_IF_ERROR(check_hf_sizes(from, "the checkpoint's model"));
  GrowPlan plan;
  plan.from = from;
  plan.to = from;
  config::ModelConfig& to = plan.to;
  MS_RETURN_IF_ERROR(plan_widths(from, target, to));
  to.d_ff = target.d_ff ? target.d_ff : from.d_ff;
  MS_RETURN_IF_ERROR(check_not_smaller("d_ff", from.d_ff, to.d_ff));
  if (target.shared_expert_d_ff) {
    if (from.moe.shared_expert_d_ff == 0) {
      return InvalidArgument("--to shared_expert_d_ff: the checkpoint's model has no shared "
                             "expert to widen");
    }
    to.moe.shared_expert_d_ff = target.shared_expert_d_ff;
    MS_RETURN_IF_ERROR(check_not_smaller("shared_expert_d_ff", from.moe.shared_expert_d_ff,
                                         to.moe.shared_expert_d_ff));
  }
  MS_ASSIGN_OR_RETURN(const std::vector<int64_t> after, plan_insertions(from, target, insert));
  to.n_layers = from.n_layers + static_cast<int64_t>(after.size());
  // RMSNorm over the zero-extended stream: see grow.h for why eps scales by D / D'.
  to.norm_eps = from.norm_eps * static_cast<double>(from.d_model) / static_cast<double>(to.d_model);
  MS_RETURN_IF_ERROR(check_hf_sizes(to, "--to"));

  size_t next = 0;
  for (int64_t l = 0; l < from.n_layers; ++l) {
    plan.layers.push_back({l, false});
    for (; next < after.size() && after[next] == l; ++next) plan.layers.push_back({l, true});
  }
  plan_heads(from, plan);
  plan.ffn = replicate_with_shares(from.d_ff, to.d_ff);
  if (from.moe.shared_expert_d_ff > 0) {
    plan.shared_ffn =
        replicate_with_shares(from.moe.shared_expert_d_ff, to.moe.shared_expert_d_ff);
  }
  return plan;
}

std::string grow_target_string(const config::ModelConfig& to) {
  std::string s = "d_model=" + str(to.d_model) + ",n_layers=" + str(to.n_layers) +
                  ",d_ff=" + str(to.d_ff) + ",n_heads=" + str(to.n_heads) +
                  ",n_kv_heads=" + str(to.n_kv_heads);
  if (to.moe.shared_expert_d_ff > 0) {
    s += ",shared_expert_d_ff=" + str(to.moe.shared_expert_d_ff);
  }
  return s;
}

}  // namespace ms::ckpt
