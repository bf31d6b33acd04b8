// Private to lib/ckpt: the save planner, which rank writes which box of which tensor. A rank's
// own slices are its to write; replicated tensors are cut into pieces spread over the ranks
// holding them so every replica shares the write (docs/checkpoint.md, "Saving").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/regions.h"
#include "comm/communicator.h"
#include "core/status.h"

namespace ms::ckpt {

// One box of one tensor this rank writes, and where its bytes wait in the staging buffer. It
// copies the tensor's description: the caller's SaveTensor list is gone once save() returns.
struct WriteItem {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> global_shape;
  const void* data = nullptr;  // the caller's elements: read by the snapshot or a sync write
  Box box;
  int64_t local_offset = 0;  // elements into data
  uint64_t bytes = 0;
  uint64_t staging_offset = 0;
  size_t first_bucket = 0;  // an async save's snapshot buckets of this item, in order
};

// Which boxes this rank writes, each at most max_bytes. Collective (one allgather, which also
// hands every rank rank 0's `nonce` for the temporary directory's name); InvalidArgument when
// a tensor has no data or the ranks list different replicated tensors.
Result<std::vector<WriteItem>> plan_writes(std::span<const SaveTensor> tensors, uint64_t max_bytes,
                                           comm::Communicator& comm, int64_t& nonce);

}  // namespace ms::ckpt
