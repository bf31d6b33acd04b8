// Shared by the multi-rank tests of lib/parallel: tp groups carved out of the world, seeded
// random tensors identical on every rank, slicing of global matrices into a rank's shard,
// gathering shards back, and the 1e-5 relative comparison against the single-process result.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/mpi_communicator.h"
#include "core/philox.h"
#include "parallel/tp_layout.h"

namespace ms::parallel::testing {

// Each test runs at every tp in {1, 2, 4} that divides the world size; consecutive ranks form
// a tp group, as they do in the Mesh (tp varies fastest).
class TpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto world = comm::MpiCommunicator::world();
    ASSERT_TRUE(world.ok()) << world.status().to_string();
    world_ = std::move(world).value();
  }

  std::vector<int> tp_sizes() const {
    std::vector<int> sizes;
    for (int tp : {1, 2, 4}) {
      if (world_->size() % tp == 0) sizes.push_back(tp);
    }
    return sizes;
  }

  std::unique_ptr<comm::Communicator> tp_group(int tp) {
    const int rank = world_->rank();
    auto group = world_->split(rank / tp, rank, "tp");
    EXPECT_TRUE(group.ok()) << group.status().to_string();
    return group.ok() ? std::move(group).value() : nullptr;
  }

  std::unique_ptr<comm::MpiCommunicator> world_;
};

// n uniform values in [lo, hi), the same on every rank for the same (seed, name).
inline std::vector<float> random_values(size_t n, uint64_t seed, std::string_view name,
                                        float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  fill_uniform(v, seed, stream_id(name), 0, lo, hi);
  return v;
}

// Rows `rows` of a row-major matrix of `width` columns.
inline std::vector<float> rows_of(const std::vector<float>& m, int64_t width, TpSlice rows) {
  return {m.begin() + rows.offset * width, m.begin() + (rows.offset + rows.length) * width};
}

// Columns `cols` of a row-major (height, width) matrix, as a (height, cols.length) matrix.
inline std::vector<float> cols_of(const std::vector<float>& m, int64_t height, int64_t width,
                                  TpSlice cols) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(height * cols.length));
  for (int64_t i = 0; i < height; ++i) {
    const auto row = m.begin() + i * width + cols.offset;
    out.insert(out.end(), row, row + cols.length);
  }
  return out;
}

// Every rank's `local` (all the same size) back to back in tp rank order.
inline std::vector<float> gather(comm::Communicator& tp, const std::vector<float>& local) {
  std::vector<float> all(local.size() * static_cast<size_t>(tp.size()));
  EXPECT_TRUE(tp.allgather(local.data(), all.data(), local.size(), DType::kF32).ok());
  return all;
}

// Gathers each rank's (height, width / tp) column block into the (height, width) matrix.
inline std::vector<float> gather_cols(comm::Communicator& tp, const std::vector<float>& local,
                                      int64_t height, int64_t width) {
  const std::vector<float> blocks = gather(tp, local);
  const int64_t part = width / tp.size();
  std::vector<float> out(static_cast<size_t>(height * width));
  for (int r = 0; r < tp.size(); ++r) {
    for (int64_t i = 0; i < height; ++i) {
      std::copy_n(blocks.begin() + (r * height + i) * part, part,
                  out.begin() + i * width + r * part);
    }
  }
  return out;
}

// |got - want| <= 1e-5 * max |want| elementwise: fp32 reduction-order tolerance, relative to
// the tensor's scale.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(w));
  const float tol = 1e-5f * std::max(scale, 1e-30f);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_LE(std::fabs(got[i] - want[i]), tol)
        << what << " element " << i << ": got " << got[i] << ", want " << want[i];
  }
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace ms::parallel::testing
