// The trainer's evaluation: the mean validation loss over a fixed set of batches, through the
// pipeline executor or the model directly, averaged over the data-parallel replicas.
#include "train/trainer.h"

#include <span>
#include <vector>

#include "data/loader.h"
#include "model/transformer.h"
#include "train/rank_sum.h"
#include "train/trainer_state.h"

namespace ms::train {

// Mean validation loss over train.eval_batches global batches, the same ones every time.
Result<double> Trainer::evaluate() {
  data::BatchSource& loader = *s_->eval_loader;
  loader.reset();
  const int64_t micro_batches = config_.train.eval_batches * loader.micro_batches_per_step();
  double local = 0;
  if (s_->pipeline_step) {
    std::vector<data::MicroBatch> batches;
    for (int64_t i = 0; i < micro_batches; ++i) {
      MS_ASSIGN_OR_RETURN(data::MicroBatch batch, loader.next());
      batches.push_back(local_tokens(std::move(batch)));
    }
    MS_ASSIGN_OR_RETURN(local, s_->pipeline_step->evaluate(batches));
    local *= static_cast<double>(micro_batches);
  }
  for (int64_t i = 0; s_->pipeline_step == nullptr && i < micro_batches; ++i) {
    MS_ASSIGN_OR_RETURN(data::MicroBatch whole, loader.next());
    const data::MicroBatch batch = local_tokens(std::move(whole));
    MS_ASSIGN_OR_RETURN(const model::LossStats stats,
                        s_->model->forward_loss(batch.inputs.data(), batch.targets.data(),
                                                batch.rows, batch.seq_len));
    local += stats.loss;
  }
  double mean = local / static_cast<double>(micro_batches);
  MS_RETURN_IF_ERROR(sum_in_rank_order(replicas(), std::span<double>(&mean, 1)));
  return mean / replicas().size();
}

}  // namespace ms::train
