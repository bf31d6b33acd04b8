// The document masking a training run applies (train.document_mask, train.document_positions)
// with its end-of-document id: data.eod_id, or the one the plan's datasets record
// (data/plan_eod.h). Every model chunk of the run gets it (model::Transformer::
// set_document_mask).
#pragma once

#include "config/run_config.h"
#include "core/status.h"
#include "model/documents.h"

namespace ms::train {

// Off (and the plan untouched) without train.document_mask; otherwise the id is resolved and
// its errors (a dataset without end-of-document tokens, sources disagreeing) are returned.
Result<model::DocumentMask> training_document_mask(const config::RunConfig& config);

}  // namespace ms::train
