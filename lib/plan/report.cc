// Plan output; see report.h.
#include "plan/report.h"

#include <cstdio>

#include "model/transformer.h"

namespace ms::plan {
namespace {

constexpr double kMB = 1e6;

std::string format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, a);
  return buf;
}

std::string what_if_text(const PlanContext& ctx, const WhatIf& w) {
  std::string out = "# what-if net=" + format("%g", w.scaling.net) +
                    ", compute=" + format("%g", w.scaling.compute) + ":\n";
  const double base = w.baseline_best.step_s;
  out += "#   the best layout (" + layout_name(w.baseline_best.layout) + "): step " +
         format("%.4g", base) + " s -> " + format("%.4g", w.same_layout.step_s) + " s (" +
         format("%+.1f", (w.same_layout.step_s / base - 1) * 100) + "%)\n";
  if (w.best.layout == w.baseline_best.layout) {
    out += "#   it stays the best layout\n";
  } else {
    out += "#   new best: " + layout_name(w.best.layout) + ", step " +
           format("%.4g", w.best.step_s) + " s (" +
           format("%+.1f", (w.best.step_s / base - 1) * 100) + "% against today's best)\n";
    out += "#   " + run_command(ctx, w.best.layout) + "\n";
  }
  return out;
}

nlohmann::ordered_json axis_json(const AxisTraffic& a) {
  return {{"bytes", a.bytes}, {"seconds", a.seconds}};
}

}  // namespace

std::string prediction_row_header() {
  return "#  layout                                        step_s    +-band    tok/s   mfu%  "
         "bubble%  "
         "peak_GiB = weights + grads + optim + acts (+ runtime)       dp_MB    tp_MB    pp_MB    "
         "ep_MB    cp_MB\n";
}

std::string prediction_row(size_t index, const Prediction& p) {
  const RankMemory& m = p.peak;
  char line[400];
  std::snprintf(
      line, sizeof(line),
      "%-2zu %-45s %8.4g %9.2g %8.0f %6.1f %7.1f   %8.3f = %7.3f + %7.3f + %7.3f + %7.3f (+ %.3f)"
      "  %8.2f %8.2f %8.2f %8.2f %8.2f\n",
      index, layout_name(p.layout).c_str(), p.step_s, p.band_s, p.tokens_per_s, p.mfu * 100,
      p.bubble * 100,
      p.peak_gib(), m.weights_mib / 1024, m.gradients_mib / 1024, m.optimizer_mib / 1024,
      m.activations_mib / 1024, m.overhead_mib / 1024, p.dp.bytes / kMB, p.tp.bytes / kMB,
      p.pp.bytes / kMB, p.ep.bytes / kMB, p.cp.bytes / kMB);
  return line;
}

std::string disturbed_note(const Cluster& cl) {
  return "# note: " + cl.source + " was profiled while other processes took " +
         format("%.0f%%", cl.profile.load_share * 100) +
         " of the node's CPU; its op times, and these predictions, may be slow (profile again "
         "on a quiet machine)";
}

std::string run_command(const PlanContext& ctx, const Layout& layout) {
  std::string out =
      "mpirun -np " + std::to_string(ctx.world) + " ms-train --config " + ctx.config_path;
  for (const std::string& flag : set_flags(layout)) out += " --set " + flag;
  return out;
}

std::string plan_text(const PlanContext& ctx, const SearchResult& result, const WhatIf* what_if) {
  const Cluster& cl = *ctx.cluster;
  const config::RunConfig& c = *ctx.config;
  std::string out = "# ms-train plan: " + ctx.config_path + " on " + cl.name + " (" + cl.source +
                    "): " + std::to_string(ctx.world) + " ranks, " +
                    std::to_string(cl.ranks_per_node) + " per node, " +
                    format("%g", cl.memory_per_rank_gib) + " GiB per rank, " + cl.device.dtype +
                    " on " + cl.device.name + "\n";
  out += "# global batch " + std::to_string(c.train.global_batch) + " x seq_len " +
         std::to_string(c.train.seq_len) + "; " +
         format("%.4g", model::training_flops_per_token(c.model, c.train.seq_len) / 1e9) +
         " GFLOP per token; " + std::to_string(result.considered) +
         " layouts the trainer accepts, " + std::to_string(result.over_memory) +
         " over the memory limit\n";
  out += "# memory per rank is the peak pipeline rank's; MB are bus bytes per rank per step\n";
  out += prediction_row_header();
  for (size_t i = 0; i < result.ranked.size(); ++i) out += prediction_row(i + 1, result.ranked[i]);
  const Recommendation& r = result.recommendation;
  out += r.ties == 1
             ? std::string("# ties: none (no layout within the error band of the fastest)\n")
             : "# ties: layouts 1 to " + std::to_string(r.ties) +
                   " (within the error band of the fastest)\n";
  out += "# recommended: layout " + std::to_string(r.index + 1) + ", " +
         layout_name(result.recommended().layout) + ": " + r.reason + "\n";
  out += "# run: " + run_command(ctx, result.recommended().layout) + "\n";
  if (cl.disturbed()) out += disturbed_note(cl) + "\n";
  if (what_if) out += what_if_text(ctx, *what_if);
  return out;
}

nlohmann::ordered_json prediction_json(const Prediction& p) {
  const Layout& l = p.layout;
  nlohmann::ordered_json memory = nlohmann::ordered_json::array();
  for (const RankMemory& m : p.memory) {
    memory.push_back({{"pp_rank", m.pp_rank},
                      {"weights_mib", m.weights_mib},
                      {"gradients_mib", m.gradients_mib},
                      {"optimizer_mib", m.optimizer_mib},
                      {"activations_mib", m.activations_mib},
                      {"runtime_mib", m.overhead_mib},
                      {"total_mib", m.total_mib()}});
  }
  return {{"layout",
           {{"dp", l.dp},
            {"tp", l.tp},
            {"pp", l.pp},
            {"vpp", l.vpp},
            {"ep", l.ep},
            {"cp", l.cp},
            {"schedule", l.schedule},
            {"micro_batch", l.micro_batch},
            {"zero", l.zero ? 1 : 0},
            {"recompute", std::string(config::enum_to_name(l.recompute))},
            {"sequence_parallel", l.sequence_parallel},
            {"pp_layers", l.pp_layers}}},
          {"name", layout_name(l)},
          {"set", set_flags(l)},
          {"step_s", p.step_s},
          {"band_s", p.band_s},
          {"disturbed_profile", p.disturbed_profile},
          {"peer_wait_s", p.peer_wait_s()},
          {"tokens_per_s", p.tokens_per_s},
          {"mfu", p.mfu},
          {"bubble", p.bubble},
          {"pipeline_s", p.compute_s},
          {"dp_exposed_s", p.dp_exposed_s},
          {"optimizer_s", p.optimizer_s},
          {"forward_s", p.forward_s},
          {"backward_s", p.backward_s},
          {"cp_ring_measured", p.cp_ring_measured},
          {"dp_overlap_measured", p.dp_overlap_measured},
          {"layer_calibration", {{"fwd", p.layer_calibration_fwd}, {"bwd", p.layer_calibration_bwd}}},
          {"peak_memory_mib", p.peak.total_mib()},
          {"memory", memory},
          {"axes",
           {{"dp", axis_json(p.dp)},
            {"tp", axis_json(p.tp)},
            {"pp", axis_json(p.pp)},
            {"ep", axis_json(p.ep)},
            {"cp", axis_json(p.cp)}}}};
}

nlohmann::ordered_json plan_json(const PlanContext& ctx, const SearchResult& result,
                                 const WhatIf* what_if) {
  nlohmann::ordered_json doc;
  doc["config"] = ctx.config_path;
  doc["cluster"] = {{"file", ctx.cluster->source},
                    {"name", ctx.cluster->name},
                    {"ranks", ctx.world},
                    {"ranks_per_node", ctx.cluster->ranks_per_node},
                    {"memory_per_rank_gib", ctx.cluster->memory_per_rank_gib}};
  doc["global_batch"] = ctx.config->train.global_batch;
  doc["seq_len"] = ctx.config->train.seq_len;
  doc["considered"] = result.considered;
  doc["over_memory"] = result.over_memory;
  doc["layouts"] = nlohmann::ordered_json::array();
  for (const Prediction& p : result.ranked) doc["layouts"].push_back(prediction_json(p));
  doc["recommended"] = {{"index", result.recommendation.index},
                        {"name", layout_name(result.recommended().layout)},
                        {"ties", result.recommendation.ties},
                        {"reason", result.recommendation.reason},
                        {"command", run_command(ctx, result.recommended().layout)}};
  doc["best_command"] = doc["recommended"]["command"];
  doc["profile"] = {{"spread", ctx.cluster->profile.spread},
                    {"load_share", ctx.cluster->profile.load_share},
                    {"disturbed", ctx.cluster->disturbed()}};
  if (what_if) {
    doc["what_if"] = {
        {"net", what_if->scaling.net},
        {"compute", what_if->scaling.compute},
        {"baseline_best", prediction_json(what_if->baseline_best)},
        {"baseline_best_scaled", prediction_json(what_if->same_layout)},
        {"best", prediction_json(what_if->best)},
        {"step_change", what_if->same_layout.step_s / what_if->baseline_best.step_s - 1}};
  }
  return doc;
}

}  // namespace ms::plan
