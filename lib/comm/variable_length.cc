#include "comm/variable_length.h"

#include <numeric>

namespace ms::comm {

Result<std::vector<std::string>> all_gather_variable(Communicator& comm, std::string_view mine) {
  const int64_t length = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lengths(static_cast<size_t>(comm.size()));
  MS_RETURN_IF_ERROR(comm.allgather(&length, lengths.data(), 1, DType::kI64));
  std::vector<size_t> counts(lengths.begin(), lengths.end());
  std::string joined(std::accumulate(counts.begin(), counts.end(), size_t{0}), '\0');
  MS_RETURN_IF_ERROR(comm.allgatherv(mine.data(), mine.size(), joined.data(), counts, DType::kU8));
  std::vector<std::string> out;
  out.reserve(counts.size());
  size_t at = 0;
  for (size_t c : counts) {
    out.push_back(joined.substr(at, c));
    at += c;
  }
  return out;
}

Status send_sized(Communicator& comm, std::string_view bytes, int dest, int tag) {
  const int64_t length = static_cast<int64_t>(bytes.size());
  MS_RETURN_IF_ERROR(comm.send(&length, 1, DType::kI64, dest, tag));
  if (length == 0) return Status::OK();
  return comm.send(bytes.data(), bytes.size(), DType::kU8, dest, tag);
}

Result<std::string> recv_sized(Communicator& comm, int source, int tag) {
  int64_t length = 0;
  MS_RETURN_IF_ERROR(comm.recv(&length, 1, DType::kI64, source, tag));
  return recv_sized_payload(comm, source, tag, length);
}

Status broadcast_variable(Communicator& comm, std::string& bytes, int root) {
  int64_t length = static_cast<int64_t>(bytes.size());
  MS_RETURN_IF_ERROR(comm.broadcast(&length, 1, DType::kI64, root));
  if (length < 0) {
    return Internal("rank " + std::to_string(root) + " announced a broadcast of " +
                    std::to_string(length) + " bytes on group " + comm.name());
  }
  bytes.resize(static_cast<size_t>(length));
  if (length == 0) return Status::OK();
  return comm.broadcast(bytes.data(), bytes.size(), DType::kU8, root);
}

Result<std::string> recv_sized_payload(Communicator& comm, int source, int tag, int64_t length) {
  if (length < 0) {
    return Internal("rank " + std::to_string(source) + " announced a message of " +
                    std::to_string(length) + " bytes on group " + comm.name());
  }
  std::string bytes(static_cast<size_t>(length), '\0');
  if (length > 0) {
    MS_RETURN_IF_ERROR(comm.recv(bytes.data(), bytes.size(), DType::kU8, source, tag));
  }
  return bytes;
}

}  // namespace ms::comm
