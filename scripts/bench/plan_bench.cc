// plan_bench: how long planning takes at scale, and how fast a local Loader feeds batches.
// Generates N synthetic u16 token datasets (documents of random length), plans a mixture of
// them with `total_samples` samples, and reports the planning time, the plan's size, and the
// loader's samples/s and tokens/s against a raw sequential read of the same datasets' bytes.
//
//   plan_bench --dir /tmp/planbench --sources 8 --docs 20000 --samples 10000000 --seq-len 1024
//
// Results go to docs/bench/data-plan.md (scripts/bench/plan_bench.sh runs the standard sizes).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/philox.h"
#include "core/timer.h"
#include "core/version.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"
#include "data/plan.h"
#include "data/plan_builder.h"

namespace {

using namespace ms;

struct Args {
  std::string dir = "/tmp/ms-plan-bench";
  int sources = 8;
  int docs = 20000;
  int min_len = 200;
  int max_len = 1800;
  int64_t samples = 10'000'000;
  int64_t seq_len = 1024;
  int64_t loader_steps = 200;
  bool keep = false;
};

// A dataset of `docs` documents with lengths uniform in [min_len, max_len]; skipped when present.
Status make_dataset(const std::string& prefix, const Args& a, int tag) {
  if (std::filesystem::exists(prefix + ".idx")) return Status::OK();
  MS_ASSIGN_OR_RETURN(auto writer, data::IndexedDatasetWriter::create(prefix, 8));
  std::vector<int32_t> tokens;
  for (int d = 0; d < a.docs; ++d) {
    const int span = a.max_len - a.min_len + 1;
    const int len = a.min_len + static_cast<int>(uniform(tag, 1, d) * span);
    tokens.resize(len);
    for (int i = 0; i < len; ++i) tokens[i] = (tag * 7919 + d * 31 + i) % 50000;
    MS_RETURN_IF_ERROR(writer->add_document(tokens));
  }
  data::DatasetMeta meta;
  meta.vocab_size = 50257;
  return writer->finish(meta);
}

// Bytes/s of reading every .bin once (after the loader run, so the page cache is equally warm).
double raw_read_rate(const Args& a) {
  Stopwatch w;
  uint64_t bytes = 0;
  std::vector<char> buffer(1 << 20);
  for (int s = 0; s < a.sources; ++s) {
    std::ifstream in(a.dir + "/src" + std::to_string(s) + ".bin", std::ios::binary);
    while (in.read(buffer.data(), buffer.size()) || in.gcount() > 0) bytes += in.gcount();
  }
  return bytes / w.elapsed_s();
}

Status run(const Args& a) {
  std::filesystem::create_directories(a.dir);
  data::MixtureConfig config;
  config.seq_len = a.seq_len;
  config.total_samples = a.samples;
  config.validation.fraction = 0.001;
  Stopwatch watch;
  for (int s = 0; s < a.sources; ++s) {
    const std::string prefix = a.dir + "/src" + std::to_string(s);
    MS_RETURN_IF_ERROR(make_dataset(prefix, a, s + 1));
    config.sources.push_back({"src" + std::to_string(s), prefix, 1.0 + s});
  }
  std::printf("# plan_bench: toolkit %s, %d sources x %d documents of %d..%d tokens\n",
              version_string().c_str(), a.sources, a.docs, a.min_len, a.max_len);
  std::printf("datasets ready in %.2f s\n", watch.lap_s());
  MS_ASSIGN_OR_RETURN(auto inputs, data::load_plan_inputs(config));
  const double open_s = watch.lap_s();
  const std::string plan_path = a.dir + "/bench.plan";
  MS_ASSIGN_OR_RETURN(data::PlannedMixture planned, data::build_plan(config, inputs, plan_path));
  const data::PlanInfo& info = planned.info;
  const double plan_s = watch.lap_s();
  MS_ASSIGN_OR_RETURN(auto plan, data::Plan::open(plan_path));
  const double validate_s = watch.lap_s();
  uint64_t epochs = 0;
  for (const auto& s : info.sources) epochs = std::max(epochs, s.splits[0].epochs);
  std::printf("samples %lld  seq_len %lld  open datasets %.3f s  plan+write %.3f s  "
              "reopen+validate %.3f s  plan file %.1f MB  max epochs %llu\n",
              static_cast<long long>(a.samples), static_cast<long long>(a.seq_len), open_s, plan_s,
              validate_s, plan->file_size() / 1e6, static_cast<unsigned long long>(epochs));

  data::LoaderOptions o;
  o.plan_path = plan_path;
  o.global_batch = 64;
  o.micro_batch = 8;
  MS_ASSIGN_OR_RETURN(auto loader, data::Loader::open(o));
  watch.reset();
  const int64_t micro = a.loader_steps * loader->micro_batches_per_step();
  for (int64_t i = 0; i < micro; ++i) MS_RETURN_IF_ERROR(loader->next().status());
  const double load_s = watch.lap_s();
  const double samples_per_s = a.loader_steps * o.global_batch / load_s;
  const double raw = raw_read_rate(a);
  const double loader_bytes_per_s = samples_per_s * (a.seq_len + 1) * 2;  // u16 tokens read
  std::printf("loader: %lld samples in %.3f s = %.0f samples/s, %.1f M tokens/s; token bytes %.0f MB/s "
              "vs raw sequential read %.0f MB/s (%.2fx)\n",
              static_cast<long long>(a.loader_steps * o.global_batch), load_s, samples_per_s,
              samples_per_s * a.seq_len / 1e6, loader_bytes_per_s / 1e6, raw / 1e6, loader_bytes_per_s / raw);
  if (!a.keep) std::filesystem::remove(plan_path);
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app("plan_bench: planning time and loader throughput on synthetic datasets");
  app.add_option("--dir", a.dir, "Working directory (datasets are reused between runs)");
  app.add_option("--sources", a.sources, "Source datasets");
  app.add_option("--docs", a.docs, "Documents per source");
  app.add_option("--samples", a.samples, "Training samples to plan");
  app.add_option("--seq-len", a.seq_len, "Sequence length");
  app.add_option("--loader-steps", a.loader_steps, "Steps of 64 samples read through the loader");
  app.add_flag("--keep", a.keep, "Keep the plan file");
  CLI11_PARSE(app, argc, argv);
  const Status s = run(a);
  if (!s.ok()) {
    std::fprintf(stderr, "plan_bench: error: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}
