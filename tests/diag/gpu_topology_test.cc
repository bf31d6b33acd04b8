// GPU placement from sysfs (diag/gpu_topology.h) over a fake /sys tree built in a temporary
// directory: PCI devices as nested bridge folders, class/ entries as links to them.
#include "diag/gpu_topology.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace ms::diag {
namespace {

namespace fs = std::filesystem;

class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("ms_sysfs_" + std::to_string(getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A PCI device at `path` below devices/ (e.g. "pci0000:17/0000:17:01.0/0000:18:00.0"),
  // linked from bus/pci/devices/<last component>, with its NUMA node.
  fs::path add_pci(const std::string& path, int numa) {
    const fs::path device = root_ / "devices" / path;
    fs::create_directories(device);
    std::ofstream(device / "numa_node") << numa << "\n";
    fs::create_directories(root_ / "bus/pci/devices");
    fs::create_directory_symlink(device, root_ / "bus/pci/devices" / device.filename());
    return device;
  }
  // class/<cls>/<name>/device -> the PCI device (or no device link: a virtual interface).
  void add_class(const std::string& cls, const std::string& name, const fs::path& device) {
    const fs::path entry = root_ / "class" / cls / name;
    fs::create_directories(entry);
    if (!device.empty()) fs::create_directory_symlink(device, entry / "device");
  }

  fs::path root_;
};

TEST(SysfsAddress, NvmlBusIdBecomesSysfsSpelling) {
  EXPECT_EQ(sysfs_pci_address("00000000:18:00.0"), "0000:18:00.0");
  EXPECT_EQ(sysfs_pci_address("00000000:AB:00.0"), "0000:ab:00.0");
  EXPECT_EQ(sysfs_pci_address("0001:18:00.0"), "0001:18:00.0");
}

TEST_F(FakeSysfs, NearestRdmaAdapterBehindTheSameSwitchWins) {
  add_pci("pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:00.0", 0);  // GPU behind a switch
  const fs::path near = add_pci("pci0000:17/0000:17:01.0/0000:18:00.0/0000:1a:00.0", 0);
  const fs::path same_root = add_pci("pci0000:17/0000:17:02.0/0000:20:00.0", 0);
  const fs::path far = add_pci("pci0000:97/0000:97:01.0/0000:98:00.0", 1);
  add_class("infiniband", "mlx5_3", far);
  add_class("infiniband", "mlx5_1", same_root);
  add_class("infiniband", "mlx5_0", near);
  add_class("net", "eth0", same_root);
  const GpuTopology t = gpu_topology("00000000:19:00.0", root_.string());
  EXPECT_EQ(t.numa_node, 0);
  EXPECT_EQ(t.nearest_nic, "mlx5_0 (same PCIe switch)");
}

TEST_F(FakeSysfs, WithoutRdmaThePciNetworkInterfaceIsNamedAndVirtualOnesIgnored) {
  add_pci("pci0000:97/0000:97:01.0/0000:98:00.0", 1);  // GPU on socket 1
  const fs::path nic0 = add_pci("pci0000:17/0000:17:02.0/0000:20:00.0", 0);
  const fs::path nic1 = add_pci("pci0000:a0/0000:a0:02.0/0000:a1:00.0", 1);
  add_class("net", "lo", {});
  add_class("net", "ens0", nic0);
  add_class("net", "ens1", nic1);
  const GpuTopology t = gpu_topology("00000000:98:00.0", root_.string());
  EXPECT_EQ(t.numa_node, 1);
  EXPECT_EQ(t.nearest_nic, "ens1 (same NUMA node)");
}

TEST_F(FakeSysfs, UnknownNumaNodeAndMissingGpuLeaveFieldsEmpty) {
  add_pci("pci0000:17/0000:17:01.0/0000:18:00.0", -1);
  const GpuTopology t = gpu_topology("00000000:18:00.0", root_.string());
  EXPECT_FALSE(t.numa_node.has_value());
  EXPECT_EQ(t.nearest_nic, "");
  const GpuTopology missing = gpu_topology("00000000:55:00.0", root_.string());
  EXPECT_FALSE(missing.numa_node.has_value());
  EXPECT_EQ(missing.nearest_nic, "");
}

}  // namespace
}  // namespace ms::diag
