// The end-of-document token id of a plan's datasets, which document masking
// (train.document_mask) splits packed samples at. ms-data build appends the tokenizer's
// end-of-document id after every document and records it in each dataset's
// `<prefix>.meta.json` (eos_id, append_eos), so a plan's id is read from there.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace ms::data {

// `configured` (data.eod_id) when it is >= 0. Otherwise every source of the plan at plan_path
// must have a meta sidecar saying the id was appended (append_eos) and all must record the
// same eos_id >= 0; FailedPrecondition naming the source and what to do when one does not,
// the plan's own open error when it cannot be read.
Result<int32_t> plan_eod_id(const std::string& plan_path, int64_t configured);

}  // namespace ms::data
