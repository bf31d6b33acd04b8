// Hang analysis over watchdog in-flight reports; the outlier rules are in hang.h.
#include "diag/hang.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "core/rank_file.h"
#include "io/atomic_file.h"
#include "io/env.h"

namespace ms::diag {

namespace {

using nlohmann::json;

Status bad_key(const std::string& source, std::string_view key, std::string_view what) {
  return Corruption(source + ": key '" + std::string(key) + "' is missing or not " +
                    std::string(what));
}

template <typename T>
Status take(const json& j, std::string_view key, const std::string& source, T& out,
            bool (json::*is_type)() const noexcept, std::string_view what) {
  auto it = j.find(key);
  if (it == j.end() || !((*it).*is_type)()) return bad_key(source, key, what);
  out = it->get<T>();
  return Status::OK();
}

bool is_p2p(const std::string& op) {
  return op == "send" || op == "recv" || op == "isend" || op == "irecv";
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

std::string describe(const std::string& op, const std::string& group, uint64_t seq) {
  return op + " on '" + group + "' seq " + std::to_string(seq);
}

std::string describe(const InflightReport& r) { return describe(r.op, r.group, r.seq); }

// An array whose every element passes `is_type`.
Status check_array_of(const json& j, std::string_view key, const std::string& source,
                      bool (json::*is_type)() const noexcept, std::string_view what) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return bad_key(source, key, what);
  for (const json& element : *it) {
    if (!(element.*is_type)()) return bad_key(source, key, what);
  }
  return Status::OK();
}

}  // namespace

Result<InflightReport> parse_inflight_report(std::string_view text, const std::string& source) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corruption(source + ": not a JSON object");
  InflightReport r;
  MS_RETURN_IF_ERROR(take(j, "rank", source, r.rank, &json::is_number_integer, "an integer"));
  MS_RETURN_IF_ERROR(take(j, "op", source, r.op, &json::is_string, "a string"));
  MS_RETURN_IF_ERROR(take(j, "group", source, r.group, &json::is_string, "a string"));
  MS_RETURN_IF_ERROR(take(j, "seq", source, r.seq, &json::is_number_integer, "an integer"));
  MS_RETURN_IF_ERROR(check_array_of(j, "group_ranks", source, &json::is_number_integer,
                                    "an array of ranks"));
  r.group_ranks = j["group_ranks"].get<std::vector<int>>();
  if (j.contains("host")) {
    MS_RETURN_IF_ERROR(take(j, "host", source, r.host, &json::is_string, "a string"));
  }
  if (j.contains("pid")) {
    MS_RETURN_IF_ERROR(take(j, "pid", source, r.pid, &json::is_number_integer, "an integer"));
  }
  if (j.contains("t")) MS_RETURN_IF_ERROR(take(j, "t", source, r.t, &json::is_number, "a number"));
  if (j.contains("bytes")) {
    MS_RETURN_IF_ERROR(take(j, "bytes", source, r.bytes, &json::is_number_integer, "an integer"));
  }
  if (j.contains("waiting_s")) {
    MS_RETURN_IF_ERROR(take(j, "waiting_s", source, r.waiting_s, &json::is_number, "a number"));
  }
  if (j.contains("stack")) {
    MS_RETURN_IF_ERROR(check_array_of(j, "stack", source, &json::is_string, "an array of strings"));
    r.stack = j["stack"].get<std::vector<std::string>>();
  }
  return r;
}

Result<std::vector<InflightReport>> read_inflight_reports(const std::string& dir) {
  io::Env& env = io::default_env();
  if (!env.is_directory(dir)) return NotFound(dir + ": no such directory");
  const std::string inflight = env.is_directory(dir + "/inflight") ? dir + "/inflight" : dir;
  MS_ASSIGN_OR_RETURN(std::vector<std::string> names, env.list_dir(inflight));
  std::vector<InflightReport> reports;
  for (const std::string& name : names) {
    if (!is_rank_file_name(name, ".json")) continue;
    const std::string path = inflight + "/" + name;
    MS_ASSIGN_OR_RETURN(std::string text,
                        io::read_file(env, path, io::kMaxConfigFileBytes, "inflight report"));
    MS_ASSIGN_OR_RETURN(InflightReport r, parse_inflight_report(text, path));
    reports.push_back(std::move(r));
  }
  std::sort(reports.begin(), reports.end(),
            [](const InflightReport& a, const InflightReport& b) { return a.rank < b.rank; });
  return reports;
}

std::string_view outlier_kind_name(OutlierKind kind) {
  switch (kind) {
    case OutlierKind::kNotWaiting: return "not-waiting";
    case OutlierKind::kBehind: return "behind";
    case OutlierKind::kAhead: return "ahead";
    case OutlierKind::kMismatch: return "mismatch";
    case OutlierKind::kWaitsElsewhere: return "waits-elsewhere";
  }
  return "?";
}

namespace {

std::vector<WaitGroup> wait_groups(std::span<const InflightReport> reports) {
  std::map<std::tuple<std::string, std::string, uint64_t, std::vector<int>>, WaitGroup> by_key;
  for (const InflightReport& r : reports) {
    WaitGroup& g = by_key[{r.op, r.group, r.seq, r.group_ranks}];
    g.op = r.op;
    g.group = r.group;
    g.seq = r.seq;
    g.group_ranks = r.group_ranks;
    g.ranks.push_back(r.rank);
    g.max_waiting_s = std::max(g.max_waiting_s, r.waiting_s);
  }
  std::vector<WaitGroup> groups;
  for (auto& [key, g] : by_key) groups.push_back(std::move(g));
  std::stable_sort(groups.begin(), groups.end(), [](const WaitGroup& a, const WaitGroup& b) {
    return a.ranks.size() > b.ranks.size();
  });
  return groups;
}

struct Context {
  std::span<const InflightReport> reports;
  std::map<int, int> report_of_rank;  // rank -> index
  std::vector<HangOutlier> primary;
  std::vector<HangOutlier> cascade;
  std::set<std::pair<int, OutlierKind>> seen;
};

void add(std::vector<HangOutlier>& list, Context& ctx, HangOutlier outlier) {
  if (!ctx.seen.insert({outlier.rank, outlier.kind}).second) return;
  list.push_back(std::move(outlier));
}

// A member of `g`'s group that is not waiting in `g`.
void judge_member(const WaitGroup& g, int member, Context& ctx) {
  const std::string others =
      describe(g.op, g.group, g.seq) + " (ranks " + join_ranks(g.ranks) + ")";
  auto it = ctx.report_of_rank.find(member);
  if (it == ctx.report_of_rank.end()) {
    add(ctx.primary, ctx,
        {member, OutlierKind::kNotWaiting,
         "wrote no in-flight report while " + others +
             " wait for it: busy outside communication, hung in compute, or dead",
         -1});
    return;
  }
  const InflightReport& r = ctx.reports[it->second];
  const bool same_group = r.group == g.group && r.group_ranks == g.group_ranks;
  if (same_group && !is_p2p(g.op) && r.seq != g.seq) {
    const OutlierKind kind = r.seq < g.seq ? OutlierKind::kBehind : OutlierKind::kAhead;
    add(ctx.primary, ctx,
        {member, kind, "waits in " + describe(r) + " while " + others + " wait", it->second});
  } else if (same_group && !is_p2p(g.op) && r.op != g.op) {
    add(ctx.primary, ctx,
        {member, OutlierKind::kMismatch,
         "waits in " + describe(r) + ", a different operation from " + others, it->second});
  } else if (!same_group) {
    add(ctx.cascade, ctx,
        {member, OutlierKind::kWaitsElsewhere,
         "waits in " + describe(r) + " while " + others + " wait for it", it->second});
  }
}

}  // namespace

// Per group instance (name and members), the operation most of its waiting members are in;
// ties go to the later sequence number, so the ranks on earlier ones read as behind.
std::vector<const WaitGroup*> reference_groups(const std::vector<WaitGroup>& groups) {
  std::map<std::pair<std::string, std::vector<int>>, const WaitGroup*> best;
  for (const WaitGroup& g : groups) {
    const WaitGroup*& b = best[{g.group, g.group_ranks}];
    const bool better = !b || g.ranks.size() > b->ranks.size() ||
                        (g.ranks.size() == b->ranks.size() && g.seq > b->seq);
    if (better) b = &g;
  }
  std::vector<const WaitGroup*> out;
  for (const auto& [key, g] : best) out.push_back(g);
  return out;
}

HangAnalysis analyze_hang(std::span<const InflightReport> reports) {
  HangAnalysis analysis;
  analysis.groups = wait_groups(reports);
  Context ctx;
  ctx.reports = reports;
  for (size_t i = 0; i < reports.size(); ++i) {
    ctx.report_of_rank[reports[i].rank] = static_cast<int>(i);
  }
  for (const WaitGroup* g : reference_groups(analysis.groups)) {
    for (int member : g->group_ranks) {
      if (std::find(g->ranks.begin(), g->ranks.end(), member) == g->ranks.end()) {
        judge_member(*g, member, ctx);
      }
    }
  }
  analysis.outliers = ctx.primary.empty() ? std::move(ctx.cascade) : std::move(ctx.primary);
  std::sort(analysis.outliers.begin(), analysis.outliers.end(),
            [](const HangOutlier& a, const HangOutlier& b) { return a.rank < b.rank; });
  return analysis;
}

namespace {

// The size `key` names in "pp=1,dp=2,..." text, or null for an unknown key.
int* mesh_shape_field(comm::MeshShape& shape, std::string_view key) {
  if (key == "pp") return &shape.pp;
  if (key == "dp") return &shape.dp;
  if (key == "cp") return &shape.cp;
  if (key == "tp") return &shape.tp;
  if (key == "ep") return &shape.ep;
  if (key == "loaders") return &shape.loaders;
  return nullptr;
}

}  // namespace

Result<comm::MeshShape> parse_mesh_shape(std::string_view text) {
  comm::MeshShape shape;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string_view part = text.substr(begin, end - begin);
    const size_t eq = part.find('=');
    const std::string key(part.substr(0, eq == std::string_view::npos ? 0 : eq));
    int value = -1;
    if (eq != std::string_view::npos) {
      try {
        value = std::stoi(std::string(part.substr(eq + 1)));
      } catch (const std::exception&) {
        value = -1;
      }
    }
    int* field = mesh_shape_field(shape, key);
    if (!field || value < (key == "loaders" ? 0 : 1)) {
      return InvalidArgument("bad mesh part '" + std::string(part) + "' in '" + std::string(text) +
                             "': expected e.g. pp=1,dp=2,tp=2");
    }
    *field = value;
    begin = end + 1;
  }
  return shape;
}

std::string mesh_label(const comm::MeshLayout* layout, int rank) {
  if (!layout || rank < 0 || rank >= layout->world_size()) return "";
  if (layout->is_loader(rank)) return "loader";
  const comm::MeshCoord c = layout->coord(rank);
  // cp only when the mesh has it, so labels of cp-less runs read as before.
  const std::string cp = layout->shape().cp == 1 ? "" : " cp=" + std::to_string(c.cp);
  return "pp=" + std::to_string(c.pp) + " dp=" + std::to_string(c.dp) + cp +
         " tp=" + std::to_string(c.tp);
}

namespace {

std::string format_groups(const HangAnalysis& analysis) {
  std::string out = "# waiting groups: op, group, seq, waiting ranks / members, longest wait\n";
  char line[512];
  for (const WaitGroup& g : analysis.groups) {
    std::snprintf(line, sizeof(line), "  %-14s %-10s seq %-8llu ranks %s / %s  %.1f s\n",
                  g.op.c_str(), g.group.c_str(), static_cast<unsigned long long>(g.seq),
                  join_ranks(g.ranks).c_str(), join_ranks(g.group_ranks).c_str(),
                  g.max_waiting_s);
    out += line;
  }
  return out;
}

std::string format_outlier(const HangOutlier& o, std::span<const InflightReport> reports,
                           const comm::MeshLayout* layout) {
  std::string where = mesh_label(layout, o.rank);
  if (o.report >= 0 && !reports[o.report].host.empty()) {
    where = reports[o.report].host + (where.empty() ? "" : ", " + where);
  }
  std::string out = "  rank " + std::to_string(o.rank) + (where.empty() ? "" : " (" + where + ")") +
                    " [" + std::string(outlier_kind_name(o.kind)) + "]: " + o.explanation + "\n";
  if (o.report >= 0) {
    for (const std::string& frame : reports[o.report].stack) out += "      " + frame + "\n";
  }
  return out;
}

}  // namespace

std::string format_hang_report(const HangAnalysis& analysis,
                               std::span<const InflightReport> reports,
                               const comm::MeshLayout* layout) {
  std::string out = "# ms-diagnose hang: " + std::to_string(reports.size()) +
                    " in-flight report(s)\n";
  if (reports.empty()) return out + "# no rank reported a hung operation\n";
  out += format_groups(analysis);
  if (analysis.outliers.empty()) {
    out += "# no outlier: every member of each blocked group waits in the same operation\n";
    if (!analysis.groups.empty() && !analysis.groups.front().ranks.empty()) {
      const int rank = analysis.groups.front().ranks.front();
      for (const InflightReport& r : reports) {
        if (r.rank != rank) continue;
        out += "# stack of rank " + std::to_string(rank) + ":\n";
        for (const std::string& frame : r.stack) out += "      " + frame + "\n";
      }
    }
    return out;
  }
  out += "# outliers (" + std::to_string(analysis.outliers.size()) + "):\n";
  for (const HangOutlier& o : analysis.outliers) out += format_outlier(o, reports, layout);
  return out;
}

}  // namespace ms::diag
