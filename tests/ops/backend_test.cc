// The backend seam's table: every op of ops/backend.h, run through each backend this build
// has, against the lib/ops reference on the same seeded inputs. The CPU backend must match
// bitwise (it is lib/ops); a device backend joins the table with its tolerance. A case fails
// when the backend passes an argument to the wrong place (dx for dw, gate for up, a missing
// accumulation), so the table pins what the model relies on when it calls through the seam.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend_cases.h"
#include "host_facing_backend.h"
#include "ops/backend.h"
#include "ops/backend_registry.h"

namespace ms::ops {
namespace {

TEST(Backend, EveryOpMatchesTheCpuReference) {
  // The host backend, and the host backend behind the adapter that carries the table to a
  // device backend (host_facing_backend.h): bitwise both, which also checks the adapter's sizes.
  const std::unique_ptr<Backend> mirrored = host_facing(cpu_backend());
  for (Backend* be : {&cpu_backend(), mirrored.get()}) {
    const std::string device = be == mirrored.get() ? "host-facing cpu" : "cpu";
    for (const OpCase& c : backend_cases()) {
      const Floats want = c.run(nullptr);
      const Floats got = c.run(be);
      ASSERT_EQ(got.size(), want.size()) << device << " " << c.name;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
            << device << " " << c.name << " element " << i << ": " << got[i] << " vs "
            << want[i];
      }
    }
  }
}

TEST(Backend, CpuBackendIsTheHostAndIssuesOnItsStream) {
  Backend& be = cpu_backend();
  EXPECT_EQ(be.device(), Device::host());
  EXPECT_EQ(be.stream().device, Device::host());
  EXPECT_TRUE(be.runtime().synchronize(be.stream()).ok());
}

TEST(Backend, ADeviceThisBuildCannotRunIsRefusedByName) {
  // ms_ops_tests links no kernels/: nothing registers a CUDA backend.
  EXPECT_EQ(*backend_for(Device::host()), &cpu_backend());
  const Result<Backend*> cuda = backend_for(Device::cuda(1));
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(cuda.status().message().find("cuda:1 needs a build with CUDA"), std::string::npos)
      << cuda.status().message();
  EXPECT_EQ(describe_device(Device::host()), "cpu");
  EXPECT_EQ(device_memory(Device::cuda(0)).peak, 0u);
}

}  // namespace
}  // namespace ms::ops
