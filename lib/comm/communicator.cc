// Backend-independent parts of the Communicator interface: Request bookkeeping.
#include "comm/communicator.h"

#include "core/logging.h"

namespace ms::comm {
namespace {

// A Request dropped before completion still owns buffers the transport may write into.
void finish_abandoned(std::unique_ptr<RequestImpl>& impl) {
  if (!impl) return;
  Status status = impl->wait();
  if (!status.ok()) {
    MS_LOG(Error) << "a nonblocking operation dropped before completion failed: "
                  << status.to_string();
  }
  impl.reset();
}

}  // namespace

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    finish_abandoned(impl_);
    impl_ = std::move(other.impl_);
  }
  return *this;
}

Request::~Request() { finish_abandoned(impl_); }

Status Request::wait() {
  if (!impl_) return Status::OK();
  Status status = impl_->wait();
  impl_.reset();
  return status;
}

Result<bool> Request::test() {
  if (!impl_) return true;
  Result<bool> done = impl_->test();
  if (!done.ok()) {
    impl_.reset();
    return done.status();
  }
  if (*done) impl_.reset();
  return *done;
}

Status wait_all(std::span<Request> requests) {
  Status first;
  for (Request& request : requests) {
    Status status = request.wait();
    if (first.ok() && !status.ok()) first = std::move(status);
  }
  return first;
}

Status check_memory(const Communicator* comm, Device device, std::string_view what) {
  // A group of one moves no buffers: its callers keep the data where it is (a device trains on
  // one rank with MPI groups of one).
  if (comm == nullptr || comm->size() <= 1 || comm->memory() == device) return Status::OK();
  return InvalidArgument("communicator '" + comm->name() + "' moves buffers on " +
                         device_name(comm->memory()) + ", but " + std::string(what) +
                         " are on " + device_name(device));
}

}  // namespace ms::comm
