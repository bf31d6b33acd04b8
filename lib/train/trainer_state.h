// The state a Trainer holds between its steps, shared by the training loop (trainer.cc), its
// start-up wiring (trainer_setup.cc), evaluation (trainer_eval.cc), end-of-run reports
// (trainer_report.cc) and the checkpoint plumbing (trainer_checkpoint.cc). Private to lib/train.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "comm/mesh.h"
#include "comm/simulated_link.h"
#include "comm/watchdog.h"
#include "data/disaggregated.h"
#include "data/loader.h"
#include "io/directory_lock.h"
#include "model/transformer.h"
#include "telemetry/writer.h"
#include "train/distributed_optimizer.h"
#include "train/fault_injection.h"
#include "train/optimizer_set.h"
#include "train/pipeline_step.h"
#include "train/run_checks.h"
#include "train/spike_guard.h"
#include "train/trainer.h"

namespace ms::train {

struct Trainer::State {
  std::optional<io::DirectoryLock> run_dir_lock;  // rank 0: this job owns run.dir
  // comm.simulate_link: the world as the mesh's groups see it, with the link held back.
  std::unique_ptr<comm::SimulatedLink> link;
  std::vector<int> node_of_world_rank;  // with compression or a simulated link
  std::optional<comm::Mesh> mesh;
  int dp = 1;
  int micro_batches = 1;
  int loaders = 0;            // parallel.loaders: trailing world ranks serving the data
  bool loader_rank = false;   // this rank is one of them (it holds no model)
  bool loaders_serving = false;  // the loader ranks got past create() and are serving
  // Local Loaders, or clients of this rank's loader rank when parallel.loaders > 0.
  std::unique_ptr<data::BatchSource> train_loader;
  std::unique_ptr<data::BatchSource> eval_loader;
  // train_loader as a loader-rank client (null with local loading), for its stop reports.
  const data::DisaggregatedLoaderClient* train_client = nullptr;
  // This rank's model chunks: one, or parallel.vpp with pipeline parallelism (chunk c is
  // virtual stage c * pp + pp rank). `model` is chunks[0].
  std::vector<std::unique_ptr<model::Transformer>> chunks;
  model::Transformer* model = nullptr;
  // train.device: where the chunks and the optimizer run (ops/backend_registry.h).
  Device device;
  ops::Backend* backend = nullptr;
  double predicted_mib = 0;  // the memory plan's total per model rank (log_memory_plan)
  PipelineLayout pipeline;
  std::unique_ptr<PipelineStep> pipeline_step;  // with parallel.pp > 1
  parallel::PpP2pStats pp_stats;                // summed over the run's steps
  parallel::CommStats ep_stats;                 // summed over the run's steps
  parallel::CommStats cp_stats;                 // the cp ring's, in the same terms
  double attention_s = 0;                       // in the attention, summed over the steps
  std::unique_ptr<OptimizerSet> dist;
  std::unique_ptr<SpikeGuard> guard;
  std::unique_ptr<telemetry::TelemetryWriter> telemetry;
  std::shared_ptr<comm::Watchdog> watchdog;  // with telemetry.watchdog_s > 0
  std::optional<FaultInjector> faults;       // the debug.* keys for this rank's slot
  std::unique_ptr<telemetry::TraceWriter> trace;
  uint64_t tp_comm_seq = 0;  // numbers the tp collectives in the trace
  double flops_per_token = 0;
  double peak_flops = 0;  // summed over the dp ranks
  TrainSummary summary;
  std::unique_ptr<ckpt::Checkpointer> checkpointer;
  // The resolved config as YAML for every save's manifest, dumped at the first save: the config
  // does not change once create() resolved it, and dumping it took part of each save's time.
  std::string checkpoint_config_yaml;
  std::string resume_dir;  // the step directory resumed from ("" for a fresh start)
  std::optional<ckpt::Manifest> resume_manifest;
  int64_t start_step = 0;        // steps already done when this run starts
  int64_t last_saved_step = -1;  // newest step a save was started for
};

}  // namespace ms::train
