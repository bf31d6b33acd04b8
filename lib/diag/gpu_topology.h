// Where a GPU sits on its machine, read from sysfs: its NUMA node and the network adapter
// nearest to it on the PCIe tree (the one NCCL would pair it with). Used by `ms-diagnose info`;
// nothing here needs a driver, and a tree that cannot be read leaves the fields empty.
#pragma once

#include <optional>
#include <string>

namespace ms::diag {

// "0000:18:00.0" (sysfs' spelling: 4-digit domain, lower case) from NVML's "00000000:18:00.0".
std::string sysfs_pci_address(const std::string& nvml_bus_id);

struct GpuTopology {
  std::optional<int> numa_node;  // empty when sysfs says -1 or cannot be read
  // "mlx5_0 (same PCIe switch)": the RDMA device (class/infiniband) nearest to the GPU, else the
  // nearest PCI network interface (class/net); the relation is "same PCIe switch" (they share a
  // bridge below the root port), "same host bridge", "same NUMA node" or "other NUMA node".
  // Empty when the machine has no such adapter.
  std::string nearest_nic;
};

// The topology of the GPU at `nvml_bus_id`, read under `sysfs_root` ("/sys"; tests pass a
// fake tree).
GpuTopology gpu_topology(const std::string& nvml_bus_id, const std::string& sysfs_root);

}  // namespace ms::diag
