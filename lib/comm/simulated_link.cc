// The simulated inter-node link; see simulated_link.h for the model.
#include "comm/simulated_link.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/timer.h"

namespace ms::comm {

Result<std::vector<int>> node_ids(Communicator& group, int64_t ranks_per_node) {
  const size_t n = static_cast<size_t>(group.size());
  std::vector<int> nodes(n);
  if (ranks_per_node > 0) {
    for (size_t r = 0; r < n; ++r) {
      nodes[r] = static_cast<int>(group.world_ranks()[r] / ranks_per_node);
    }
  } else {
    constexpr size_t kName = 256;
    std::array<char, kName> mine{};
    if (gethostname(mine.data(), kName - 1) != 0) {
      return IOError("gethostname failed: " + std::string(std::strerror(errno)));
    }
    std::vector<char> all(n * kName);
    MS_RETURN_IF_ERROR(group.allgather(mine.data(), all.data(), kName, DType::kU8));
    for (size_t r = 0; r < n; ++r) nodes[r] = static_cast<int>(r);  // first member of its name
    for (size_t r = 0; r < n; ++r) {
      for (size_t s = 0; s < r; ++s) {
        if (std::strncmp(&all[r * kName], &all[s * kName], kName) == 0) {
          nodes[r] = nodes[s];
          break;
        }
      }
    }
  }
  // Renumber 0, 1, ... in order of first appearance.
  std::vector<int> order;
  for (int& node : nodes) {
    auto it = std::find(order.begin(), order.end(), node);
    if (it == order.end()) it = order.insert(order.end(), node);
    node = static_cast<int>(it - order.begin());
  }
  return nodes;
}

struct SimulatedLink::Shared {
  std::vector<int> node_of_world_rank;
  LinkModel model;
  double link_free_at = 0;
  std::map<std::string, LinkTraffic> traffic;
};

// A request that completes when the real one has and the link has released it.
class SimulatedLink::DelayedRequest final : public RequestImpl {
 public:
  DelayedRequest(Request inner, double release, LinkTraffic* traffic)
      : inner_(std::move(inner)), release_(release), traffic_(traffic) {}
  Status wait() override {
    MS_RETURN_IF_ERROR(inner_.wait());
    const double now = wall_time_s();
    if (now < release_) {
      traffic_->waited_s += release_ - now;
      std::this_thread::sleep_for(std::chrono::duration<double>(release_ - now));
    }
    return Status::OK();
  }
  Result<bool> test() override {
    MS_ASSIGN_OR_RETURN(const bool finished, inner_.test());
    return finished && wall_time_s() >= release_;
  }

 private:
  Request inner_;
  double release_;
  LinkTraffic* traffic_;  // owned by Shared's map, whose nodes never move
};

SimulatedLink::SimulatedLink(Communicator& inner, std::vector<int> node_of_world_rank,
                             LinkModel model)
    : inner_(inner), shared_(std::make_shared<Shared>()) {
  shared_->node_of_world_rank = std::move(node_of_world_rank);
  shared_->model = model;
}

SimulatedLink::SimulatedLink(std::unique_ptr<Communicator> owned, std::shared_ptr<Shared> shared)
    : owned_(std::move(owned)), inner_(*owned_), shared_(std::move(shared)) {}

SimulatedLink::~SimulatedLink() = default;

std::map<std::string, LinkTraffic> SimulatedLink::traffic() const { return shared_->traffic; }

void SimulatedLink::set_watchdog(std::shared_ptr<Watchdog> watchdog) {
  inner_.set_watchdog(std::move(watchdog));
}

bool SimulatedLink::remote(int member) const {
  const std::vector<int>& nodes = shared_->node_of_world_rank;
  const auto node = [&](int m) {
    const size_t w = static_cast<size_t>(inner_.world_ranks()[static_cast<size_t>(m)]);
    return w < nodes.size() ? nodes[w] : 0;
  };
  return node(member) != node(inner_.rank());
}

int SimulatedLink::remote_members() const {
  int n = 0;
  for (int m = 0; m < inner_.size(); ++m) n += remote(m) ? 1 : 0;
  return n;
}

std::pair<uint64_t, uint64_t> SimulatedLink::to_each(size_t count, DType dtype) const {
  const uint64_t block = count * dtype_size(dtype);
  const int far = remote_members();
  return {block * static_cast<uint64_t>(far),
          block * static_cast<uint64_t>(inner_.size() - 1 - far)};
}

double SimulatedLink::book(const Charge& c) {
  LinkTraffic& t = shared_->traffic[inner_.name()];
  t.intra_node_bytes += c.intra;
  t.inter_node_bytes += c.sent;
  const double now = wall_time_s();
  if ((c.sent == 0 && c.received == 0) || shared_->model.gbps <= 0) return now;
  const double busy =
      shared_->model.latency_us * 1e-6 +
      static_cast<double>(std::max(c.sent, c.received)) * 8.0 / (shared_->model.gbps * 1e9);
  const double start = std::max(now, shared_->link_free_at);
  shared_->link_free_at = start + busy;
  t.delay_s += busy;
  return shared_->link_free_at;
}

Status SimulatedLink::blocking(const Charge& charge, const std::function<Status()>& call) {
  const double release = book(charge);
  MS_RETURN_IF_ERROR(call());
  const double now = wall_time_s();
  if (now >= release) return Status::OK();
  shared_->traffic[inner_.name()].waited_s += release - now;
  std::this_thread::sleep_for(std::chrono::duration<double>(release - now));
  return Status::OK();
}

Result<Request> SimulatedLink::nonblocking(const Charge& charge,
                                           const std::function<Result<Request>()>& call) {
  const double release = book(charge);
  MS_ASSIGN_OR_RETURN(Request inner, call());
  return Request(std::make_unique<DelayedRequest>(std::move(inner), release,
                                                  &shared_->traffic[inner_.name()]));
}

// The charges of each kind of operation, as direct exchanges.

SimulatedLink::Charge SimulatedLink::broadcast_charge(size_t count, DType dtype, int root) const {
  const auto [far, near] = to_each(count, dtype);
  const uint64_t block = count * dtype_size(dtype);
  return rank() == root ? Charge{far, 0, near} : Charge{0, remote(root) ? block : 0, 0};
}

// A block of count / size elements to and from every other member, twice.
SimulatedLink::Charge SimulatedLink::allreduce_charge(size_t count, DType dtype) const {
  const auto [far, near] = to_each(count / static_cast<size_t>(size()), dtype);
  return {2 * far, 2 * far, 2 * near};
}

// A block of `count` elements to and from every other member (reduce-scatter, all-gather,
// all-to-all).
SimulatedLink::Charge SimulatedLink::exchange_charge(size_t count, DType dtype) const {
  const auto [far, near] = to_each(count, dtype);
  return {far, far, near};
}

// Per-member counts: bytes to other nodes and to this node's other members.
std::pair<uint64_t, uint64_t> SimulatedLink::split_counts(std::span<const size_t> counts,
                                                          DType dtype) const {
  uint64_t far = 0, near = 0;
  for (size_t m = 0; m < counts.size(); ++m) {
    if (static_cast<int>(m) == rank()) continue;
    (remote(static_cast<int>(m)) ? far : near) += counts[m] * dtype_size(dtype);
  }
  return {far, near};
}

SimulatedLink::Charge SimulatedLink::gatherv_charge(size_t send_count,
                                                    std::span<const size_t> recv_counts,
                                                    DType dtype) const {
  const auto [far, near] = to_each(send_count, dtype);
  return {far, split_counts(recv_counts, dtype).first, near};
}

SimulatedLink::Charge SimulatedLink::alltoallv_charge(std::span<const size_t> send_counts,
                                                      std::span<const size_t> recv_counts,
                                                      DType dtype) const {
  const auto out = split_counts(send_counts, dtype);
  return {out.first, split_counts(recv_counts, dtype).first, out.second};
}

SimulatedLink::Charge SimulatedLink::send_charge(size_t count, DType dtype, int dest) const {
  const uint64_t bytes = count * dtype_size(dtype);
  return remote(dest) ? Charge{bytes, 0, 0} : Charge{0, 0, bytes};
}

SimulatedLink::Charge SimulatedLink::recv_charge(size_t count, DType dtype, int source) const {
  return {0, remote(source) ? count * dtype_size(dtype) : 0, 0};
}

Status SimulatedLink::barrier() {
  return blocking({}, [&] { return inner_.barrier(); });
}

Status SimulatedLink::broadcast(void* buf, size_t count, DType dtype, int root) {
  return blocking(broadcast_charge(count, dtype, root),
                  [&] { return inner_.broadcast(buf, count, dtype, root); });
}

Status SimulatedLink::allreduce(const void* send, void* recv, size_t count, DType dtype,
                                ReduceOp op) {
  return blocking(allreduce_charge(count, dtype),
                  [&] { return inner_.allreduce(send, recv, count, dtype, op); });
}

Status SimulatedLink::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                     ReduceOp op) {
  return blocking(exchange_charge(recv_count, dtype),
                  [&] { return inner_.reduce_scatter(send, recv, recv_count, dtype, op); });
}

Status SimulatedLink::allgather(const void* send, void* recv, size_t send_count, DType dtype) {
  return blocking(exchange_charge(send_count, dtype),
                  [&] { return inner_.allgather(send, recv, send_count, dtype); });
}

Status SimulatedLink::allgatherv(const void* send, size_t send_count, void* recv,
                                 std::span<const size_t> recv_counts, DType dtype) {
  return blocking(gatherv_charge(send_count, recv_counts, dtype),
                  [&] { return inner_.allgatherv(send, send_count, recv, recv_counts, dtype); });
}

Status SimulatedLink::alltoall(const void* send, void* recv, size_t count, DType dtype) {
  return blocking(exchange_charge(count, dtype),
                  [&] { return inner_.alltoall(send, recv, count, dtype); });
}

Status SimulatedLink::alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                                std::span<const size_t> recv_counts, DType dtype) {
  return blocking(alltoallv_charge(send_counts, recv_counts, dtype),
                  [&] { return inner_.alltoallv(send, send_counts, recv, recv_counts, dtype); });
}

Status SimulatedLink::send(const void* buf, size_t count, DType dtype, int dest, int tag) {
  return blocking(send_charge(count, dtype, dest),
                  [&] { return inner_.send(buf, count, dtype, dest, tag); });
}

Status SimulatedLink::recv(void* buf, size_t count, DType dtype, int source, int tag) {
  return blocking(recv_charge(count, dtype, source),
                  [&] { return inner_.recv(buf, count, dtype, source, tag); });
}

Result<Request> SimulatedLink::ibroadcast(void* buf, size_t count, DType dtype, int root) {
  return nonblocking(broadcast_charge(count, dtype, root),
                     [&] { return inner_.ibroadcast(buf, count, dtype, root); });
}

Result<Request> SimulatedLink::iallreduce(const void* send, void* recv, size_t count, DType dtype,
                                          ReduceOp op) {
  return nonblocking(allreduce_charge(count, dtype),
                     [&] { return inner_.iallreduce(send, recv, count, dtype, op); });
}

Result<Request> SimulatedLink::ireduce_scatter(const void* send, void* recv, size_t recv_count,
                                               DType dtype, ReduceOp op) {
  return nonblocking(exchange_charge(recv_count, dtype),
                     [&] { return inner_.ireduce_scatter(send, recv, recv_count, dtype, op); });
}

Result<Request> SimulatedLink::iallgather(const void* send, void* recv, size_t send_count,
                                          DType dtype) {
  return nonblocking(exchange_charge(send_count, dtype),
                     [&] { return inner_.iallgather(send, recv, send_count, dtype); });
}

Result<Request> SimulatedLink::iallgatherv(const void* send, size_t send_count, void* recv,
                                           std::span<const size_t> recv_counts, DType dtype) {
  return nonblocking(gatherv_charge(send_count, recv_counts, dtype), [&] {
    return inner_.iallgatherv(send, send_count, recv, recv_counts, dtype);
  });
}

Result<Request> SimulatedLink::ialltoall(const void* send, void* recv, size_t count, DType dtype) {
  return nonblocking(exchange_charge(count, dtype),
                     [&] { return inner_.ialltoall(send, recv, count, dtype); });
}

Result<Request> SimulatedLink::ialltoallv(const void* send, std::span<const size_t> send_counts,
                                          void* recv, std::span<const size_t> recv_counts,
                                          DType dtype) {
  return nonblocking(alltoallv_charge(send_counts, recv_counts, dtype), [&] {
    return inner_.ialltoallv(send, send_counts, recv, recv_counts, dtype);
  });
}

Result<Request> SimulatedLink::isend(const void* buf, size_t count, DType dtype, int dest,
                                     int tag) {
  return nonblocking(send_charge(count, dtype, dest),
                     [&] { return inner_.isend(buf, count, dtype, dest, tag); });
}

Result<Request> SimulatedLink::irecv(void* buf, size_t count, DType dtype, int source, int tag) {
  return nonblocking(recv_charge(count, dtype, source),
                     [&] { return inner_.irecv(buf, count, dtype, source, tag); });
}

Result<std::unique_ptr<Communicator>> SimulatedLink::split(int color, int key,
                                                           const std::string& name) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> child, inner_.split(color, key, name));
  if (child == nullptr) return child;
  return std::unique_ptr<Communicator>(new SimulatedLink(std::move(child), shared_));
}

}  // namespace ms::comm
