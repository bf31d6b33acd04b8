// training_document_mask: the config's keys plus the plan's end-of-document id.
#include "train/document_mask.h"

#include "core/logging.h"
#include "data/plan_eod.h"

namespace ms::train {

Result<model::DocumentMask> training_document_mask(const config::RunConfig& config) {
  model::DocumentMask mask;
  if (!config.train.document_mask) return mask;
  MS_ASSIGN_OR_RETURN(mask.eod_id, data::plan_eod_id(config.data.plan, config.data.eod_id));
  mask.enabled = true;
  mask.positions = config.train.document_positions;
  MS_LOG(Info) << "document masking: attention stops at end-of-document id " << mask.eod_id
               << (config.data.eod_id >= 0 ? " (data.eod_id)" : " (the datasets' meta)")
               << (mask.positions ? "; positions restart at each document" : "");
  return mask;
}

}  // namespace ms::train
