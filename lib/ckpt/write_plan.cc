// The save planner (ckpt/write_plan.h).
#include "ckpt/write_plan.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/crc32c.h"

namespace ms::ckpt {
namespace {

using nlohmann::json;

uint64_t box_bytes(const Box& box, DType dtype) {
  return static_cast<uint64_t>(box.numel()) * dtype_size(dtype);
}

// The boxes of `spec` cut to at most `max_bytes` each, with their local-buffer offsets.
std::vector<WriteItem> pieces_of(const SaveTensor& t, uint64_t max_bytes) {
  std::vector<WriteItem> out;
  const int64_t max_elements =
      std::max<int64_t>(1, static_cast<int64_t>(max_bytes / dtype_size(t.dtype)));
  for (const LocalBox& local : spec_boxes(t.spec)) {
    int64_t offset = local.local_offset;
    for (Box& piece : split_box(local.box, max_elements)) {
      const int64_t n = piece.numel();
      const uint64_t bytes = box_bytes(piece, t.dtype);
      out.push_back({t.name, t.dtype, t.spec.global_shape(), t.data, std::move(piece), offset, bytes, 0});
      offset += n;
    }
  }
  return out;
}

// A digest of the replicated tensors' names and shapes: every rank must list the same ones.
int64_t replicated_digest(std::span<const SaveTensor> tensors) {
  uint32_t crc = 0;
  for (const SaveTensor& t : tensors) {
    if (!t.replicated()) continue;
    crc = crc32c(t.name.data(), t.name.size(), crc);
    const std::string shape = json(t.spec.global_shape()).dump();
    crc = crc32c(shape.data(), shape.size(), crc);
  }
  return static_cast<int64_t>(crc);
}

}  // namespace

// Slices only this rank holds are its own; replicated tensors are cut into pieces that go,
// largest first, to the rank with the least bytes so far (counting every rank's own slices).
Result<std::vector<WriteItem>> plan_writes(std::span<const SaveTensor> tensors, uint64_t max_bytes,
                                           comm::Communicator& comm, int64_t& nonce) {
  std::vector<WriteItem> mine, replicated;
  for (const SaveTensor& t : tensors) {
    if (t.data == nullptr && t.spec.numel() > 0) {
      return InvalidArgument("checkpoint tensor \"" + t.name + "\" has no data pointer");
    }
    for (WriteItem& item : pieces_of(t, max_bytes)) {
      (t.replicated() ? replicated : mine).push_back(std::move(item));
    }
  }
  int64_t own[3] = {0, replicated_digest(tensors), nonce};
  for (const WriteItem& item : mine) own[0] += static_cast<int64_t>(item.bytes);
  std::vector<int64_t> all(3 * static_cast<size_t>(comm.size()));
  MS_RETURN_IF_ERROR(comm.allgather(own, all.data(), 3, DType::kI64));
  nonce = all[2];
  std::vector<int64_t> load(static_cast<size_t>(comm.size()));
  for (size_t r = 0; r < load.size(); ++r) {
    if (all[3 * r + 1] != own[1]) {
      return InvalidArgument("ranks list different replicated tensors for the checkpoint (rank " +
                             std::to_string(r) + " differs from rank " +
                             std::to_string(comm.rank()) + ")");
    }
    load[r] = all[3 * r];
  }
  std::stable_sort(replicated.begin(), replicated.end(),
                   [](const WriteItem& a, const WriteItem& b) { return a.bytes > b.bytes; });
  for (WriteItem& item : replicated) {
    const size_t writer = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[writer] += static_cast<int64_t>(item.bytes);
    if (static_cast<int>(writer) == comm.rank()) mine.push_back(std::move(item));
  }
  return mine;
}

}  // namespace ms::ckpt
