// Byte strings of a length only the sender knows, over a Communicator: gathered from every rank
// (the length first, so each receiver can size its buffer, then the bytes), broadcast from one
// rank the same way, or sent point to point with a length prefix. Callers exchange JSON or packed records this way; the one framing
// lives here so every sender and receiver agrees on it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"

namespace ms::comm {

// Every rank's `mine`, on every rank, in rank order. Collective over `comm`: one allgather of the
// lengths, then one allgatherv of the bytes.
Result<std::vector<std::string>> all_gather_variable(Communicator& comm, std::string_view mine);

// `bytes` as rank `root` holds it, on every rank (the others' `bytes` are replaced). Collective
// over `comm`: one broadcast of the length, then, when not empty, one of the bytes.
Status broadcast_variable(Communicator& comm, std::string& bytes, int root);

// Sends `bytes` to `dest` as its length (one int64) and then, when not empty, the bytes, both
// with `tag`. The receiver calls recv_sized, or receives the length itself and calls
// recv_sized_payload.
Status send_sized(Communicator& comm, std::string_view bytes, int dest, int tag);

// Receives what send_sized sent from `source` with `tag`.
Result<std::string> recv_sized(Communicator& comm, int source, int tag);

// The bytes after a length the caller already received (for example with a nonblocking irecv
// that lets it wait on several senders at once): `length` bytes, none received when 0.
// Internal when `length` is negative.
Result<std::string> recv_sized_payload(Communicator& comm, int source, int tag, int64_t length);

}  // namespace ms::comm
