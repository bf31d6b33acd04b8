#include "supervise/machines.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "io/atomic_file.h"
#include "train/run_checks.h"

namespace ms::supervise {

Status check_rank_slots(int64_t ranks, unsigned cpus) {
  const int64_t limit =
      std::min<int64_t>(kMaxJobRanks, int64_t{kMaxRankSlotsPerCpu} * std::max(1u, cpus));
  if (ranks <= limit) return Status::OK();
  return InvalidArgument("--ranks " + std::to_string(ranks) +
                         " is more rank slots than this machine can run: at most " +
                         std::to_string(limit) + " (" + std::to_string(kMaxRankSlotsPerCpu) +
                         " per CPU, " + std::to_string(std::max(1u, cpus)) + " CPUs)");
}

MachinePool MachinePool::single_host(int ranks) {
  MachinePool pool;
  for (int i = 0; i < ranks; ++i) {
    Machine m;
    m.name = "slot" + std::to_string(i);
    m.first_slot = i;
    pool.machines_.push_back(std::move(m));
  }
  return pool;
}

Result<MachinePool> MachinePool::from_hostfile(const std::string& path) {
  MS_ASSIGN_OR_RETURN(const std::string text,
                      io::read_file(path, io::kMaxConfigFileBytes, "machines file"));
  return parse_hostfile(text, path);
}

Result<MachinePool> MachinePool::parse_hostfile(const std::string& text, const std::string& path) {
  MachinePool pool;
  pool.single_host_ = false;
  std::istringstream lines(text);
  std::string line;
  int slot = 0;
  std::set<std::string> hosts;
  for (int line_no = 1; std::getline(lines, line); ++line_no) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string host, word;
    if (!(words >> host)) continue;
    const std::string at = path + ":" + std::to_string(line_no);
    // A set, not pool.find(): a hostfile of a million lines must not take a million squared.
    if (!hosts.insert(host).second) return InvalidArgument(at + ": host " + host + " listed twice");
    int slots = 1;
    while (words >> word) {
      if (word.rfind("slots=", 0) == 0) {
        const std::string value = word.substr(6);
        if (value.empty() || value.size() > 6 ||
            value.find_first_not_of("0123456789") != std::string::npos ||
            std::stoi(value) < 1) {
          return InvalidArgument(at + ": \"" + word + "\" is not a positive slot count");
        }
        slots = std::stoi(value);
      } else if (word.rfind("max_slots=", 0) != 0) {
        return InvalidArgument(at + ": unknown hostfile word \"" + word +
                               "\" (expected slots=N)");
      }
    }
    if (slots > kMaxJobRanks - slot) {
      return InvalidArgument(at + ": the hostfile's slots add up to more than " +
                             std::to_string(kMaxJobRanks) + " ranks");
    }
    Machine m;
    m.name = host;
    m.first_slot = slot;
    m.slots = slots;
    pool.machines_.push_back(std::move(m));
    slot += slots;
  }
  if (pool.machines_.empty()) return InvalidArgument(path + ": lists no host");
  return pool;
}

int MachinePool::machines_in_use() const {
  int n = 0;
  for (const Machine& m : machines_) n += m.removed ? 0 : 1;
  return n;
}

int MachinePool::slots_in_use() const {
  int n = 0;
  for (const Machine& m : machines_) n += m.removed ? 0 : m.slots;
  return n;
}

std::vector<int> MachinePool::rank_slots(int np) const {
  std::vector<int> slots;
  for (const Machine& m : machines_) {
    for (int s = 0; !m.removed && s < m.slots && static_cast<int>(slots.size()) < np; ++s) {
      slots.push_back(m.first_slot + s);
    }
  }
  return slots;
}

int MachinePool::machine_of_slot(int slot) const {
  for (size_t i = 0; i < machines_.size(); ++i) {
    const Machine& m = machines_[i];
    if (slot >= m.first_slot && slot < m.first_slot + m.slots) return static_cast<int>(i);
  }
  return -1;
}

int MachinePool::find(const std::string& name) const {
  for (size_t i = 0; i < machines_.size(); ++i) {
    if (machines_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

void MachinePool::remove(int machine, std::string because) {
  machines_[static_cast<size_t>(machine)].removed = true;
  machines_[static_cast<size_t>(machine)].removed_because = std::move(because);
}

std::string MachinePool::hostfile_text() const {
  std::string text;
  for (const Machine& m : machines_) {
    if (!m.removed) text += m.name + " slots=" + std::to_string(m.slots) + "\n";
  }
  return text;
}

std::string MachinePool::excluded_text() const {
  std::string text;
  for (const Machine& m : machines_) {
    if (m.removed) text += m.name + ": " + m.removed_because + "\n";
  }
  return text;
}

Result<int> choose_world_size(const config::RunConfig& config, int available) {
  Status last = InvalidArgument("no rank is left to run on");
  for (int n = available; n >= 1; --n) {
    Result<int> dp = train::data_parallel_size(config, n);
    if (dp.ok()) return n;
    if (n == available) last = dp.status();
  }
  return InvalidArgument("no world size up to " + std::to_string(available) +
                         " ranks fits the run's layout; at " + std::to_string(available) + ": " +
                         last.message());
}

}  // namespace ms::supervise
