// plan_eod_id: the datasets' meta sidecars agree on one end-of-document id (data/plan_eod.h).
#include "data/plan_eod.h"

#include <memory>

#include "data/dataset_meta.h"
#include "data/plan.h"
#include "io/env.h"

namespace ms::data {

Result<int32_t> plan_eod_id(const std::string& plan_path, int64_t configured) {
  if (configured >= 0) return static_cast<int32_t>(configured);
  MS_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, Plan::open(plan_path));
  const std::string fix = "; set data.eod_id to the end-of-document token id";
  int64_t eod = -1;
  std::string first;
  for (const PlanSource& source : plan->info().sources) {
    const std::string path = source.prefix + ".meta.json";
    const std::string where = "document masking: plan '" + plan_path + "' source '" +
                              source.name + "' (" + path + ")";
    Result<DatasetMeta> meta = read_dataset_meta(io::default_env(), path);
    if (!meta.ok()) {
      return FailedPrecondition(where + ": cannot tell the end-of-document id: " +
                                meta.status().message() + fix);
    }
    if (!meta->append_eos || meta->eos_id < 0) {
      return FailedPrecondition(where + " was built without end-of-document tokens "
                                "(--no-append-eos, or a tokenizer without one), so its samples "
                                "do not say where documents end; rebuild it with them" + fix);
    }
    if (eod >= 0 && meta->eos_id != eod) {
      return FailedPrecondition(where + " ends documents with id " +
                                std::to_string(meta->eos_id) + " but source '" + first +
                                "' with " + std::to_string(eod) + fix);
    }
    if (eod < 0) first = source.name;
    eod = meta->eos_id;
  }
  if (eod < 0) return FailedPrecondition("document masking: plan '" + plan_path +
                                         "' has no sources" + fix);
  return static_cast<int32_t>(eod);
}

}  // namespace ms::data
