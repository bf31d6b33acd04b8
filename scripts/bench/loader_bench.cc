// loader_bench: what a trainer rank pays for its data, local loading against disaggregated
// loading (MegaScale-Data). Run under mpirun:
//   mpirun -np 2 loader_bench --plan P --mode local           # every rank a trainer with a Loader
//   mpirun -np 3 loader_bench --plan P --mode disaggregated   # last rank a loader rank
// Each trainer reads `steps` global batches and reports its peak resident memory (VmHWM), open file
// descriptors, bytes of memory-mapped data files (plan and datasets) and samples/s; rank 0
// prints one line per trainer plus their means. scripts/bench/loader_bench.sh runs both modes.
#include <CLI/CLI.hpp>
#include <dirent.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "comm/mpi_communicator.h"
#include "core/timer.h"
#include "data/disaggregated.h"
#include "data/loader.h"

namespace {

using namespace ms;

struct Args {
  std::string plan;
  std::string mode = "local";
  int64_t steps = 100;
  int64_t global_batch = 32;
  int64_t micro_batch = 4;
};

// Peak resident memory (VmHWM): what the rank needed at its worst, even after it let go.
double peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) * 1024.0;
  }
  return 0;
}

double open_fds() {
  double n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n - 2;  // "." and ".."
}

// Bytes of mappings backed by .bin, .idx or .plan files.
double mapped_data_bytes() {
  std::ifstream in("/proc/self/maps");
  std::string line;
  double bytes = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    fields >> range >> perms >> offset >> dev >> inode >> path;
    const auto ends_with = [&](const std::string& suffix) {
      return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (!(ends_with(".bin") || ends_with(".idx") || ends_with(".plan"))) continue;
    const size_t dash = range.find('-');
    bytes += static_cast<double>(std::stoull(range.substr(dash + 1), nullptr, 16) -
                                 std::stoull(range.substr(0, dash), nullptr, 16));
  }
  return bytes;
}

Result<std::unique_ptr<data::BatchSource>> open_source(comm::Communicator& world, const Args& a,
                                                       int trainers) {
  data::LoaderOptions o;
  o.plan_path = a.plan;
  o.global_batch = a.global_batch;
  o.micro_batch = a.micro_batch;
  o.dp_rank = world.rank();
  o.dp_size = trainers;
  if (a.mode == "local") {
    MS_ASSIGN_OR_RETURN(auto loader, data::Loader::open(o));
    return std::unique_ptr<data::BatchSource>(std::move(loader));
  }
  MS_ASSIGN_OR_RETURN(auto client, data::DisaggregatedLoaderClient::open(world, 1, o));
  return std::unique_ptr<data::BatchSource>(std::move(client));
}

// rss, fds, mapped bytes, samples/s of this trainer (float: the values are gathered as f32).
Result<std::vector<float>> run_trainer(comm::Communicator& world, const Args& a, int trainers) {
  MS_ASSIGN_OR_RETURN(auto source, open_source(world, a, trainers));
  Stopwatch watch;
  const int64_t micro = a.steps * source->micro_batches_per_step();
  for (int64_t i = 0; i < micro; ++i) MS_RETURN_IF_ERROR(source->next().status());
  const double rate = a.steps * a.global_batch / trainers / watch.elapsed_s();
  std::vector<float> stats{static_cast<float>(peak_rss_bytes()), static_cast<float>(open_fds()),
                           static_cast<float>(mapped_data_bytes()), static_cast<float>(rate)};
  source.reset();
  if (a.mode != "local") MS_RETURN_IF_ERROR(data::finish_disaggregated_loading(world, 1));
  return stats;
}

Status run(const Args& a) {
  MS_ASSIGN_OR_RETURN(auto world, comm::MpiCommunicator::world());
  const bool disaggregated = a.mode == "disaggregated";
  const int trainers = world->size() - (disaggregated ? 1 : 0);
  std::vector<float> mine(4, 0.0f);
  if (disaggregated && world->rank() == trainers) {
    MS_RETURN_IF_ERROR(data::run_loader_server(*world, 1));
    mine = {static_cast<float>(peak_rss_bytes()), static_cast<float>(open_fds()),
            static_cast<float>(mapped_data_bytes()), 0.0f};
  } else {
    MS_ASSIGN_OR_RETURN(mine, run_trainer(*world, a, trainers));
  }
  std::vector<float> all(4 * world->size());
  MS_RETURN_IF_ERROR(world->allgather(mine.data(), all.data(), 4, DType::kF32));
  if (world->rank() != 0) return Status::OK();
  std::printf("# loader_bench --mode %s: %d trainer(s), global batch %lld, %lld steps\n",
              a.mode.c_str(), trainers, static_cast<long long>(a.global_batch), static_cast<long long>(a.steps));
  std::printf("%5s %-8s %12s %6s %12s %12s\n", "rank", "role", "peak rss MB", "fds", "mapped MB", "samples/s");
  double mean_rss = 0, mean_map = 0, total_rate = 0;
  for (int r = 0; r < world->size(); ++r) {
    const float* s = &all[4 * r];
    const bool trainer = r < trainers;
    std::printf("%5d %-8s %12.1f %6.0f %12.1f %12.0f\n", r, trainer ? "trainer" : "loader",
                s[0] / 1e6, s[1], s[2] / 1e6, s[3]);
    if (trainer) {
      mean_rss += s[0] / trainers;
      mean_map += s[2] / trainers;
      total_rate += s[3];
    }
  }
  std::printf("trainer mean peak rss %.1f MB, mean mapped %.1f MB, all trainers %.0f samples/s\n",
              mean_rss / 1e6, mean_map / 1e6, total_rate);
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app("loader_bench: trainer-side cost of local vs disaggregated loading");
  app.add_option("--plan", a.plan, "Plan file")->required();
  app.add_option("--mode", a.mode, "local or disaggregated")->check(CLI::IsMember({"local", "disaggregated"}));
  app.add_option("--steps", a.steps, "Global steps per trainer");
  app.add_option("--global-batch", a.global_batch, "Global batch");
  app.add_option("--micro-batch", a.micro_batch, "Micro-batch");
  CLI11_PARSE(app, argc, argv);
  if (Status s = comm::init(argc, argv); !s.ok()) {
    std::fprintf(stderr, "loader_bench: error: %s\n", s.to_string().c_str());
    return 1;
  }
  const Status s = run(a);
  if (!s.ok()) std::fprintf(stderr, "loader_bench: error: %s\n", s.to_string().c_str());
  const Status f = comm::finalize();
  return s.ok() && f.ok() ? 0 : 1;
}
