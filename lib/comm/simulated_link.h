// A slow link between nodes, simulated on one machine (docs/comm.md, "Simulated links"): a
// Communicator that forwards every operation to the real one and then holds its completion back
// by the time the bytes this rank exchanges with members on other nodes would take on a link
// of `gbps` with `latency_us` per operation. Nodes come from node_ids() (hostnames, or
// comm.ranks_per_node for tests on one machine).
//
// The model, per rank: one link into the other nodes, used by one operation at a time in issue
// order; an operation crossing nodes occupies it for latency + max(bytes sent, bytes received)
// to other nodes * 8 / (gbps * 1e9) seconds, from the later of its issue and the link's last
// release. Collectives are charged as direct exchanges (a reduce-scatter or all-gather block to
// or from each other member, an all-reduce as both), so full-precision and compressed schemes are
// charged on the same terms. A nonblocking operation's request completes no earlier than its
// link release, so overlap hides the delay as it would hide a real transfer; a blocking one
// sleeps until then. Within a node nothing is added.
//
// Counters, per group name, of the bytes each rank sent within and across nodes and of the
// delay charged and the part of it the caller waited for, are shared by every group split from
// the same root.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"

namespace ms::comm {

struct LinkModel {
  double gbps = 0;        // 0: no link is simulated
  double latency_us = 0;
};

// Traffic of one group (by name) through a SimulatedLink.
struct LinkTraffic {
  uint64_t intra_node_bytes = 0;  // sent to members on this rank's node
  uint64_t inter_node_bytes = 0;  // sent to members on other nodes
  double delay_s = 0;             // link time charged
  double waited_s = 0;            // of it, time the caller was held (not hidden by overlap)
};

// The node of every member of `group`, numbered 0, 1, ... in order of first appearance by rank.
// Collective. ranks_per_node > 0: world rank / ranks_per_node (one machine posing as several
// nodes); 0: the hostnames.
Result<std::vector<int>> node_ids(Communicator& group, int64_t ranks_per_node);

class SimulatedLink final : public Communicator {
 public:
  // Wraps `inner` (kept by reference; it must outlive this object). `node_of_world_rank` maps
  // every world rank the groups split from this one may hold to its node.
  SimulatedLink(Communicator& inner, std::vector<int> node_of_world_rank, LinkModel model);
  ~SimulatedLink() override;

  // Every group's traffic so far, by group name (summed over groups of the same name).
  std::map<std::string, LinkTraffic> traffic() const;

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const std::string& name() const override { return inner_.name(); }
  const std::vector<int>& world_ranks() const override { return inner_.world_ranks(); }
  uint64_t next_seq() const override { return inner_.next_seq(); }
  Device memory() const override { return inner_.memory(); }
  void set_watchdog(std::shared_ptr<Watchdog> watchdog) override;

  Status barrier() override;
  Status broadcast(void* buf, size_t count, DType dtype, int root) override;
  Status allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;
  Status reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                        ReduceOp op) override;
  Status allgather(const void* send, void* recv, size_t send_count, DType dtype) override;
  Status allgatherv(const void* send, size_t send_count, void* recv,
                    std::span<const size_t> recv_counts, DType dtype) override;
  Status alltoall(const void* send, void* recv, size_t count, DType dtype) override;
  Status alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                   std::span<const size_t> recv_counts, DType dtype) override;
  Status send(const void* buf, size_t count, DType dtype, int dest, int tag) override;
  Status recv(void* buf, size_t count, DType dtype, int source, int tag) override;

  Result<Request> ibroadcast(void* buf, size_t count, DType dtype, int root) override;
  Result<Request> iallreduce(const void* send, void* recv, size_t count, DType dtype,
                             ReduceOp op) override;
  Result<Request> ireduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                  ReduceOp op) override;
  Result<Request> iallgather(const void* send, void* recv, size_t send_count,
                             DType dtype) override;
  Result<Request> iallgatherv(const void* send, size_t send_count, void* recv,
                              std::span<const size_t> recv_counts, DType dtype) override;
  Result<Request> ialltoall(const void* send, void* recv, size_t count, DType dtype) override;
  Result<Request> ialltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                             std::span<const size_t> recv_counts, DType dtype) override;
  Result<Request> isend(const void* buf, size_t count, DType dtype, int dest, int tag) override;
  Result<Request> irecv(void* buf, size_t count, DType dtype, int source, int tag) override;

  Result<std::unique_ptr<Communicator>> split(int color, int key,
                                              const std::string& name) override;

 private:
  struct Shared;
  class DelayedRequest;
  SimulatedLink(std::unique_ptr<Communicator> owned, std::shared_ptr<Shared> shared);
  // What an operation moves for this rank: bytes sent to and received from members on other
  // nodes, and bytes sent to this node's other members.
  struct Charge {
    uint64_t sent = 0, received = 0, intra = 0;
  };
  bool remote(int member) const;
  int remote_members() const;
  // Bytes of one block of `count` elements sent to every other member: (remote, intra).
  std::pair<uint64_t, uint64_t> to_each(size_t count, DType dtype) const;
  std::pair<uint64_t, uint64_t> split_counts(std::span<const size_t> counts, DType dtype) const;
  Charge broadcast_charge(size_t count, DType dtype, int root) const;
  Charge allreduce_charge(size_t count, DType dtype) const;
  Charge exchange_charge(size_t count, DType dtype) const;
  Charge gatherv_charge(size_t send_count, std::span<const size_t> recv_counts,
                        DType dtype) const;
  Charge alltoallv_charge(std::span<const size_t> send_counts,
                          std::span<const size_t> recv_counts, DType dtype) const;
  Charge send_charge(size_t count, DType dtype, int dest) const;
  Charge recv_charge(size_t count, DType dtype, int source) const;
  // Books the link for `charge` (counting its bytes) and returns the wall time the operation
  // may complete.
  double book(const Charge& charge);
  // A blocking operation: books the link, runs `call`, holds the caller until the release.
  Status blocking(const Charge& charge, const std::function<Status()>& call);
  // A nonblocking one: books the link and wraps `call`'s request so that it completes no
  // earlier than the release.
  Result<Request> nonblocking(const Charge& charge, const std::function<Result<Request>()>& call);

  std::unique_ptr<Communicator> owned_;
  Communicator& inner_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace ms::comm
