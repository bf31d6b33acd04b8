// The backend seam's table: every op of ops/backend.h, run through each backend this build
// has, against the lib/ops reference on the same seeded inputs. The CPU backend must match
// bitwise (it is lib/ops); a device backend joins the table with its tolerance. A case fails
// when the backend passes an argument to the wrong place (dx for dw, gate for up, a missing
// accumulation), so the table pins what the model relies on when it calls through the seam.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

TEST(Backend, Bf16BackendRoundsTheMatmulInputsAndNothingElse) {
  // Against the reference that reads the matmul-class inputs through bf16 (backend_cases.h):
  // bitwise, directly and behind the adapter; every other op is the f32 one.
  Backend& bf16 = cpu_backend(MatmulPrecision::kBf16);
  EXPECT_EQ(bf16.matmul_precision(), MatmulPrecision::kBf16);
  EXPECT_EQ(cpu_backend().matmul_precision(), MatmulPrecision::kF32);
  EXPECT_EQ(*backend_for(Device::host(), MatmulPrecision::kBf16), &bf16);
  const std::unique_ptr<Backend> mirrored = host_facing(bf16);
  for (Backend* be : {&bf16, mirrored.get()}) {
    for (const OpCase& c : backend_cases(MatmulPrecision::kBf16)) {
      const Floats want = c.run(nullptr);
      const Floats got = c.run(be);
      ASSERT_EQ(got.size(), want.size()) << c.name;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
            << "bf16 " << c.name << " element " << i << ": " << got[i] << " vs " << want[i];
      }
    }
  }
  // And the rounding is there: a linear layer's output moves by about bf16's 2^-9 relative.
  for (const OpCase& c : backend_cases()) {
    if (std::string(c.name) != "linear_forward") continue;
    const Floats f32 = c.run(&cpu_backend()), mixed = c.run(&bf16);
    double worst = 0;
    for (size_t i = 0; i < f32.size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(mixed[i]) - f32[i]));
    }
    EXPECT_GT(worst, 1e-5) << "the bf16 backend did not round";
    EXPECT_LT(worst, 3e-2) << "more than bf16 rounding";
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
