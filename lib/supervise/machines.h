// The machines a supervised job may run on, and which of them are removed. Two kinds of pool:
//   - a hostfile (OpenMPI's "host slots=N" lines, or bare host names: one slot): machines are
//     hosts, and every launch gets a hostfile of the hosts still in use ({hostfile});
//   - one machine (--ranks N): each rank slot stands for a machine, so the removal of a
//     "machine" is a rank-level exclusion the tests can observe (the excluded file).
// Slots are numbered over the whole pool in hostfile order (host 0's slots first), and a launch
// of np ranks fills the remaining machines' slots in that order, as mpirun's default by-slot
// mapping does.
#pragma once

#include <string>
#include <vector>

#include "config/run_config.h"
#include "core/status.h"

namespace ms::supervise {

struct Machine {
  std::string name;   // host name, or "slot<N>" on one machine
  int first_slot = 0;  // the pool-wide number of its first slot
  int slots = 1;
  bool removed = false;
  std::string removed_because;  // the incident that removed it
};

// The most ranks a supervised job may have, over all its machines: above the largest jobs run
// today (about 1e5 ranks), and small enough that the per-slot state and the world-size search
// (choose_world_size) stay cheap.
inline constexpr int kMaxJobRanks = 1 << 20;
// Rank slots one machine may offer (--ranks), per CPU: each slot is a process, and more than
// this many per CPU only thrash.
inline constexpr int kMaxRankSlotsPerCpu = 64;

// OK when one machine with `cpus` CPUs can run `ranks` rank slots (at most kMaxRankSlotsPerCpu
// per CPU and kMaxJobRanks); InvalidArgument naming --ranks, the value and the limit otherwise.
// Checked before anything is sized by the count.
Status check_rank_slots(int64_t ranks, unsigned cpus);

class MachinePool {
 public:
  // `ranks` slots on this machine, one "machine" each (check_rank_slots first).
  static MachinePool single_host(int ranks);
  // Parses a hostfile: one host a line, optionally "slots=N" (or "max_slots=N", which is
  // ignored); '#' starts a comment. InvalidArgument naming path:line for anything else, a
  // repeated host, slots that add up to more than kMaxJobRanks, or an empty file.
  static Result<MachinePool> from_hostfile(const std::string& path);
  static Result<MachinePool> parse_hostfile(const std::string& text, const std::string& path);

  bool single_host_mode() const { return single_host_; }
  const std::vector<Machine>& machines() const { return machines_; }
  int machines_in_use() const;
  int slots_in_use() const;
  // The pool-wide slot of every rank of an np-rank launch (np <= slots_in_use()).
  std::vector<int> rank_slots(int np) const;
  // The machine holding pool-wide slot `slot`; -1 when none.
  int machine_of_slot(int slot) const;
  // The machine named `name` (a host, or "slot<N>"); -1 when none.
  int find(const std::string& name) const;
  void remove(int machine, std::string because);

  // The hostfile of the machines in use ("host slots=N" lines).
  std::string hostfile_text() const;
  // The removed machines, one "name: because" a line (the exclusion list).
  std::string excluded_text() const;

 private:
  bool single_host_ = true;
  std::vector<Machine> machines_;
};

// The largest world size of at most `available` ranks that the config's layout accepts
// (train::data_parallel_size: pp x tp x cp dividing the trainers, train.global_batch divisible by
// dp x micro_batch, ...), so the global batch stays the same when machines go. InvalidArgument
// with the layout's complaint when no size from 1 to `available` fits.
Result<int> choose_world_size(const config::RunConfig& config, int available);

}  // namespace ms::supervise
