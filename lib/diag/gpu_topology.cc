// GPU placement from sysfs; see gpu_topology.h. A PCI device's canonical sysfs path lists the
// bridges above it (/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0/...), so the number of
// leading path components two devices share says how close they are on the PCIe tree.
#include "diag/gpu_topology.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

namespace ms::diag {

namespace {

namespace fs = std::filesystem;

std::optional<int> read_numa_node(const fs::path& device) {
  std::ifstream in(device / "numa_node");
  int node = -1;
  if (!(in >> node) || node < 0) return std::nullopt;
  return node;
}

// The device's path with links resolved, as components; empty when it cannot be resolved.
std::vector<std::string> pci_path(const fs::path& link) {
  std::error_code error;
  const fs::path real = fs::canonical(link, error);
  if (error) return {};
  std::vector<std::string> parts;
  for (const fs::path& part : real) parts.push_back(part.string());
  return parts;
}

size_t common_prefix(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// Index of the root complex component ("pci0000:17") in a device path, or npos.
size_t root_index(const std::vector<std::string>& parts) {
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].rfind("pci", 0) == 0 && parts[i].find(':') != std::string::npos) return i;
  }
  return std::string::npos;
}

struct Candidate {
  std::string name;
  size_t shared = 0;     // path components shared with the GPU
  int closeness = 0;     // 3 switch, 2 host bridge, 1 NUMA node, 0 other
  std::string relation;
};

// The adapters of one sysfs class that sit on PCI (their `device` link resolves), ranked by
// closeness to the GPU at `gpu`; the best first.
std::vector<Candidate> rank_adapters(const fs::path& class_dir,
                                     const std::vector<std::string>& gpu,
                                     std::optional<int> gpu_numa) {
  std::vector<Candidate> candidates;
  std::error_code error;
  const size_t gpu_root = root_index(gpu);
  for (const fs::directory_entry& entry : fs::directory_iterator(class_dir, error)) {
    const fs::path device = entry.path() / "device";
    const std::vector<std::string> nic = pci_path(device);
    const size_t nic_root = root_index(nic);
    if (nic.empty() || nic_root == std::string::npos) continue;  // virtual: lo, bridges, veth
    Candidate c;
    c.name = entry.path().filename().string();
    c.shared = common_prefix(gpu, nic);
    const std::optional<int> nic_numa = read_numa_node(device);
    if (gpu_root != std::string::npos && c.shared > gpu_root + 1) {
      c.closeness = 3;
      c.relation = "same PCIe switch";
    } else if (gpu_root != std::string::npos && c.shared > gpu_root) {
      c.closeness = 2;
      c.relation = "same host bridge";
    } else if (gpu_numa && nic_numa && *gpu_numa == *nic_numa) {
      c.closeness = 1;
      c.relation = "same NUMA node";
    } else {
      c.relation = "other NUMA node";
    }
    candidates.push_back(std::move(c));
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.closeness != b.closeness) return a.closeness > b.closeness;
    if (a.shared != b.shared) return a.shared > b.shared;
    return a.name < b.name;
  });
  return candidates;
}

}  // namespace

std::string sysfs_pci_address(const std::string& nvml_bus_id) {
  std::string address = nvml_bus_id;
  std::transform(address.begin(), address.end(), address.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // NVML pads the domain to 8 digits, sysfs to 4.
  const size_t colon = address.find(':');
  if (colon == 8 && address.compare(0, 4, "0000") == 0) address.erase(0, 4);
  return address;
}

GpuTopology gpu_topology(const std::string& nvml_bus_id, const std::string& sysfs_root) {
  GpuTopology topology;
  if (nvml_bus_id.empty()) return topology;
  const fs::path root(sysfs_root);
  const fs::path gpu_device = root / "bus/pci/devices" / sysfs_pci_address(nvml_bus_id);
  topology.numa_node = read_numa_node(gpu_device);
  const std::vector<std::string> gpu = pci_path(gpu_device);
  if (gpu.empty()) return topology;
  // RDMA adapters first: they are what NCCL's network transport uses.
  for (const char* cls : {"class/infiniband", "class/net"}) {
    const std::vector<Candidate> ranked = rank_adapters(root / cls, gpu, topology.numa_node);
    if (!ranked.empty()) {
      topology.nearest_nic = ranked.front().name + " (" + ranked.front().relation + ")";
      break;
    }
  }
  return topology;
}

}  // namespace ms::diag
