// Rank-ordered double sums through an allgather of raw bytes; see rank_sum.h.
#include "train/rank_sum.h"

#include <vector>

namespace ms::train {

Status sum_in_rank_order(comm::Communicator& comm, std::span<double> values) {
  if (comm.size() == 1 || values.empty()) return Status::OK();
  const size_t n = values.size();
  std::vector<double> all(n * static_cast<size_t>(comm.size()));
  MS_RETURN_IF_ERROR(comm.allgather(values.data(), all.data(), n * sizeof(double), DType::kU8));
  for (size_t i = 0; i < n; ++i) {
    double total = 0;
    for (int r = 0; r < comm.size(); ++r) total += all[static_cast<size_t>(r) * n + i];
    values[i] = total;
  }
  return Status::OK();
}

}  // namespace ms::train
