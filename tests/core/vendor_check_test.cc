// vendor_error: the one message shape for failed MPI/CUDA/NCCL calls.
#include "core/vendor_check.h"

#include <gtest/gtest.h>

#include "core/logging.h"

namespace ms {
namespace {

class VendorCheck : public ::testing::Test {
 protected:
  void TearDown() override { log::set_identity("", 0); }
};

TEST_F(VendorCheck, MessageNamesCallLocationHostRankAndDetail) {
  log::set_identity("node07", 3);
  Status s = vendor_error("MPI", "MPI_Allreduce(...)", "MPI_ERR_TRUNCATE: message truncated",
                          "/home/ci/megascale/lib/comm/mpi.cc", 42);
  EXPECT_EQ(s.code(), StatusCode::kCommError);
  EXPECT_EQ(s.message(),
            "MPI call 'MPI_Allreduce(...)' failed at lib/comm/mpi.cc:42 on host node07 rank 3: "
            "MPI_ERR_TRUNCATE: message truncated");
}

TEST_F(VendorCheck, CodeCanSayTheDeviceIsUnavailable) {
  Status s = vendor_error("CUDA", "cudaGetDeviceCount(&n)", "no CUDA-capable device",
                          "kernels/device.cu", 7, StatusCode::kUnavailable);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(vendor_error("X", "f()", "d", "f.cc", 1, StatusCode::kOk).code(),
            StatusCode::kInternal);
}

TEST_F(VendorCheck, MacroRecordsThisFileAndLine) {
  const int line = __LINE__ + 1;
  Status s = MS_VENDOR_ERROR("NCCL", "ncclAllReduce(...)", "unhandled system error");
  EXPECT_NE(s.message().find("tests/core/vendor_check_test.cc:" + std::to_string(line)),
            std::string::npos)
      << s.message();
}

TEST(ProjectRelativePath, StartsAtTheProjectsTopLevelFolder) {
  EXPECT_EQ(project_relative_path("/src/lib/x/y/lib/comm/mpi.cc"), "lib/comm/mpi.cc");
  EXPECT_EQ(project_relative_path("/w/main/kernels/add.cu"), "kernels/add.cu");
  EXPECT_EQ(project_relative_path("/w/main/cmd/ms-train/main.cc"), "cmd/ms-train/main.cc");
  EXPECT_EQ(project_relative_path("lib/core/a.cc"), "lib/core/a.cc");
  EXPECT_EQ(project_relative_path("/elsewhere/a.cc"), "/elsewhere/a.cc");
}

}  // namespace
}  // namespace ms
