// Layouts as config values and flags; see layout.h.
#include "plan/layout.h"

#include "core/checked_math.h"
#include "model/transformer.h"
#include "parallel/tp_layout.h"
#include "train/run_checks.h"

namespace ms::plan {

Result<Layout> layout_of(const config::RunConfig& config, int world_size) {
  MS_ASSIGN_OR_RETURN(const int dp, train::data_parallel_size(config, world_size));
  const config::ParallelConfig& p = config.parallel;
  Layout l;
  l.dp = dp;
  l.tp = static_cast<int>(p.tp);
  l.pp = static_cast<int>(p.pp);
  l.vpp = static_cast<int>(p.vpp);
  l.ep = static_cast<int>(p.ep);
  l.cp = static_cast<int>(p.cp);
  l.schedule = p.schedule;
  l.micro_batch = config.train.micro_batch;
  l.zero = p.zero == 1;
  l.recompute = p.recompute;
  l.sequence_parallel = p.sequence_parallel;
  l.pp_layers = p.pp_layers;
  MS_RETURN_IF_ERROR(check_layout(config, l, world_size));
  return l;
}

config::RunConfig apply_layout(const config::RunConfig& config, const Layout& l) {
  config::RunConfig c = config;
  c.parallel.dp = l.dp;
  c.parallel.tp = l.tp;
  c.parallel.pp = l.pp;
  c.parallel.vpp = l.vpp;
  c.parallel.ep = l.ep;
  c.parallel.schedule = l.schedule;
  c.parallel.pp_layers = l.pp_layers;
  c.parallel.zero = l.zero ? 1 : 0;
  c.parallel.recompute = l.recompute;
  c.parallel.sequence_parallel = l.sequence_parallel;
  c.parallel.loaders = 0;
  c.parallel.cp = l.cp;
  c.train.micro_batch = l.micro_batch;
  return c;
}

Status check_layout(const config::RunConfig& config, const Layout& l, int world_size) {
  const config::RunConfig c = apply_layout(config, l);
  // The config schema's rule (config/run_config.cc), which a loaded config has passed but a
  // layout the search makes up has not: each cp rank holds 2 chunks of T / (2 cp) tokens.
  MS_ASSIGN_OR_RETURN(const int64_t chunks, checked_mul(2, l.cp, "2 * parallel.cp"));
  if (chunks < 2 || c.train.seq_len % chunks != 0) {
    return InvalidArgument("train.seq_len (" + std::to_string(c.train.seq_len) +
                           ") must be divisible by 2 * parallel.cp = " + std::to_string(chunks));
  }
  MS_ASSIGN_OR_RETURN(const int dp, train::data_parallel_size(c, world_size));
  if (dp != l.dp) {
    return InvalidArgument("dp " + std::to_string(l.dp) + " does not fill " +
                           std::to_string(world_size) + " ranks at tp " + std::to_string(l.tp) +
                           ", pp " + std::to_string(l.pp) + ", cp " + std::to_string(l.cp));
  }
  const config::ModelConfig& m = c.model;
  MS_RETURN_IF_ERROR(
      parallel::check_tp_model({m.n_heads, m.n_kv_heads, m.d_ff, m.moe.shared_expert_d_ff}, l.tp));
  return model::validate_model_config(m);
}

std::vector<std::string> set_flags(const Layout& l) {
  std::vector<std::string> flags = {
      "parallel.dp=" + std::to_string(l.dp),
      "parallel.tp=" + std::to_string(l.tp),
      "parallel.pp=" + std::to_string(l.pp),
      "parallel.vpp=" + std::to_string(l.vpp),
      "parallel.schedule=" + l.schedule,
      "parallel.ep=" + std::to_string(l.ep),
      "parallel.zero=" + std::to_string(l.zero ? 1 : 0),
      "parallel.recompute=" + std::string(config::enum_to_name(l.recompute)),
      "parallel.sequence_parallel=" + std::string(l.sequence_parallel ? "true" : "false"),
      "parallel.loaders=0",
      "parallel.cp=" + std::to_string(l.cp),
      "train.micro_batch=" + std::to_string(l.micro_batch),
  };
  // Always written, so an uneven pp_layers in the config file does not outlive the layout.
  std::string split;
  for (int64_t n : l.pp_layers) split += (split.empty() ? "" : ",") + std::to_string(n);
  flags.push_back("parallel.pp_layers=[" + split + "]");
  return flags;
}

std::vector<std::vector<int64_t>> planned_pp_splits(int64_t n_layers, int pp, int vpp) {
  const int64_t stages = int64_t{pp} * vpp;
  if (stages < 1 || stages > n_layers) return {};
  if (n_layers % stages == 0) return {{}};  // the even split, as an empty pp_layers runs it
  const int64_t base = n_layers / stages, extra = n_layers % stages;
  std::vector<int64_t> larger_first, larger_last;
  for (int64_t i = 0; i < stages; ++i) {
    larger_first.push_back(base + (i < extra ? 1 : 0));
    larger_last.push_back(base + (i >= stages - extra ? 1 : 0));
  }
  return {larger_first, larger_last};
}

std::string layout_name(const Layout& l) {
  std::string s =
      "dp" + std::to_string(l.dp) + " tp" + std::to_string(l.tp) + " pp" + std::to_string(l.pp);
  if (l.vpp > 1) s += " vpp" + std::to_string(l.vpp);
  if (l.cp > 1) s += " cp" + std::to_string(l.cp);
  if (l.ep > 1) s += " ep" + std::to_string(l.ep);
  if (l.pp > 1) s += " " + l.schedule;
  if (!l.pp_layers.empty()) {
    s += " split";
    for (size_t i = 0; i < l.pp_layers.size(); ++i)
      s += (i ? "+" : "") + std::to_string(l.pp_layers[i]);
  }
  s += " mb" + std::to_string(l.micro_batch);
  s += l.zero ? " zero1" : " zero0";
  if (l.recompute != config::Recompute::kNone)
    s += " rc-" + std::string(config::enum_to_name(l.recompute));
  if (l.tp > 1 && !l.sequence_parallel) s += " no-sp";
  return s;
}

}  // namespace ms::plan
