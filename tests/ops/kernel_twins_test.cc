// Every CUDA kernel against its CPU twin in lib/ops, on the same seeded random inputs of awkward
// sizes (1, 31, 1000, 2^20 + 3), through one table: a new kernel joins by adding a row. Outputs
// on the device sit between sentinel guard bands that must survive the kernel. Results compare
// by normalized error (max |gpu - cpu| over the output's scale); elementwise ops and casts must
// match exactly, reductions within fp32 summation-order rounding, and a reduction run twice must
// give the same bits. Without a GPU every case skips with the reason from device_count().
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>

#include "kernels/cast.cuh"
#include "kernels/device.h"
#include "kernels/elementwise.cuh"
#include "kernels/gemm.cuh"
#include "kernels/reduce.cuh"
#include "ops/cast.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/reduce.h"
#include "tests/ops/guarded.h"

namespace ms::kernels {
namespace {

using Rng = std::mt19937_64;

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Result<int> count = device_count();
    if (!count.ok()) GTEST_SKIP() << "no CUDA device: " << count.status().message();
  }
};

// Reports a failed device call as a test failure; returns whether it succeeded.
bool succeeded(const Status& s) {
  EXPECT_TRUE(s.ok()) << s.to_string();
  return s.ok();
}

// A device copy of `values` (an empty buffer, after a reported failure, if the copy fails).
template <typename T>
DeviceBuffer upload(const std::vector<T>& values) {
  Result<DeviceBuffer> buffer = DeviceBuffer::allocate(values.size() * sizeof(T));
  if (!succeeded(buffer.status())) return {};
  if (!succeeded(copy_to_device(buffer->data(), values.data(), values.size() * sizeof(T)))) {
    return {};
  }
  return std::move(buffer).value();
}

// What one comparison found: normalized error, and whether the guard bands survived.
struct Comparison {
  double error = 0;
  bool guards_intact = true;
};
Comparison failed() { return {std::numeric_limits<double>::infinity(), true}; }

// 0 when both are NaN or equal (infinities included), otherwise |got - expected| / scale.
double element_error(double got, double expected, double scale) {
  if ((std::isnan(got) && std::isnan(expected)) || got == expected) return 0;
  const double diff = std::fabs(got - expected);
  return std::isnan(diff) || scale == 0 ? std::numeric_limits<double>::infinity() : diff / scale;
}

template <typename T>
double normalized_error(const test::Guarded<T>& got, const test::Guarded<T>& expected) {
  double scale = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double v = std::fabs(test::widen(expected[i]));
    if (std::isfinite(v)) scale = std::max(scale, v);
  }
  double worst = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    worst = std::max(worst, element_error(test::widen(got[i]), test::widen(expected[i]), scale));
  }
  return worst;
}

// Runs `gpu` on a device copy of `host` (guard bands included), waits, and copies it back.
template <typename T>
bool run_on_device(test::Guarded<T>& host, const std::function<Status(T* out)>& gpu) {
  Result<DeviceBuffer> buffer = DeviceBuffer::allocate(host.storage_bytes());
  if (!succeeded(buffer.status())) return false;
  T* storage = buffer->as<T>();
  return succeeded(copy_to_device(storage, host.storage(), host.storage_bytes())) &&
         succeeded(gpu(storage + test::kGuardElements)) && succeeded(synchronize(nullptr)) &&
         succeeded(copy_to_host(host.storage(), storage, host.storage_bytes()));
}

// An op that writes an output array: the CPU twin and the kernel start from the same `initial`
// output (which in-place ops read).
template <typename Out>
Comparison compare_map(const std::vector<Out>& initial, const std::function<void(Out*)>& cpu,
                       const std::function<Status(Out*)>& gpu) {
  test::Guarded<Out> expected(initial);
  cpu(expected.data());
  test::Guarded<Out> got(initial);
  if (!run_on_device(got, gpu)) return failed();
  return {normalized_error(got, expected), got.guards_intact()};
}

// A reduction: the kernel runs twice into a guarded device scalar and must repeat its bits.
Comparison compare_reduction(float expected, double scale,
                             const std::function<Status(float* out)>& gpu) {
  test::Guarded<float> first(std::vector<float>{0.0f});
  test::Guarded<float> second(std::vector<float>{0.0f});
  if (!run_on_device(first, gpu) || !run_on_device(second, gpu)) return failed();
  EXPECT_EQ(std::memcmp(first.data(), second.data(), sizeof(float)), 0)
      << "two runs differ: " << first[0] << " vs " << second[0];
  return {element_error(first[0], expected, scale), first.guards_intact()};
}

std::vector<bf16> random_bf16_bits(size_t n, Rng& rng) {
  std::vector<bf16> out(n);
  for (bf16& v : out) v.bits = static_cast<uint16_t>(rng());
  return out;
}
std::vector<f16> random_f16_bits(size_t n, Rng& rng) {
  std::vector<f16> out(n);
  for (f16& v : out) v.bits = static_cast<uint16_t>(rng());
  return out;
}

constexpr float kAlpha = 0.3f;

Comparison twin_add(size_t n, Rng& rng) {
  const auto a = test::random_floats(n, rng), b = test::random_floats(n, rng);
  const DeviceBuffer da = upload(a), db = upload(b);
  return compare_map<float>(
      std::vector<float>(n), [&](float* out) { ops::add(a.data(), b.data(), out, n); },
      [&](float* out) { return add(da.as<float>(), db.as<float>(), out, n); });
}

Comparison twin_scale(size_t n, Rng& rng) {
  const auto x = test::random_floats(n, rng);
  const DeviceBuffer dx = upload(x);
  return compare_map<float>(
      std::vector<float>(n), [&](float* out) { ops::scale(x.data(), kAlpha, out, n); },
      [&](float* out) { return scale(dx.as<float>(), kAlpha, out, n); });
}

Comparison twin_axpy(size_t n, Rng& rng) {
  const auto x = test::random_floats(n, rng), y = test::random_floats(n, rng);
  const DeviceBuffer dx = upload(x);
  return compare_map<float>(
      y, [&](float* out) { ops::axpy(kAlpha, x.data(), out, n); },
      [&](float* out) { return axpy(kAlpha, dx.as<float>(), out, n); });
}

Comparison twin_f32_to_bf16(size_t n, Rng& rng) {
  const auto x = test::random_float_bits(n, rng);
  const DeviceBuffer dx = upload(x);
  return compare_map<bf16>(
      std::vector<bf16>(n), [&](bf16* out) { ops::f32_to_bf16(x.data(), out, n); },
      [&](bf16* out) { return f32_to_bf16(dx.as<float>(), out, n); });
}

Comparison twin_bf16_to_f32(size_t n, Rng& rng) {
  const auto x = random_bf16_bits(n, rng);
  const DeviceBuffer dx = upload(x);
  return compare_map<float>(
      std::vector<float>(n), [&](float* out) { ops::bf16_to_f32(x.data(), out, n); },
      [&](float* out) { return bf16_to_f32(dx.as<bf16>(), out, n); });
}

Comparison twin_f32_to_f16(size_t n, Rng& rng) {
  const auto x = test::random_float_bits(n, rng);
  const DeviceBuffer dx = upload(x);
  return compare_map<f16>(
      std::vector<f16>(n), [&](f16* out) { ops::f32_to_f16(x.data(), out, n); },
      [&](f16* out) { return f32_to_f16(dx.as<float>(), out, n); });
}

Comparison twin_f16_to_f32(size_t n, Rng& rng) {
  const auto x = random_f16_bits(n, rng);
  const DeviceBuffer dx = upload(x);
  return compare_map<float>(
      std::vector<float>(n), [&](float* out) { ops::f16_to_f32(x.data(), out, n); },
      [&](float* out) { return f16_to_f32(dx.as<f16>(), out, n); });
}

// Scales for reduction errors: what the rounding error of each kind of reduction grows with.
double abs_sum(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += std::fabs(v);
  return s;
}
double square_sum(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double{v} * v;
  return s;
}
double exact_only(const std::vector<float>&) { return 0; }

using CpuReduce = float (*)(const float*, size_t);
using CpuReduceBf16 = float (*)(const bf16*, size_t);
using GpuReduce = Status (*)(const float*, size_t, float*, Stream);
using GpuReduceBf16 = Status (*)(const bf16*, size_t, float*, Stream);

// Inputs lean negative so sums are far from zero and the normalized error is meaningful.
template <CpuReduce cpu, GpuReduce gpu, double (*scale_of)(const std::vector<float>&)>
Comparison twin_reduce_f32(size_t n, Rng& rng) {
  const auto x = test::random_floats(n, rng, -3.0f, 2.0f);
  const DeviceBuffer dx = upload(x);
  return compare_reduction(cpu(x.data(), n), scale_of(x),
                           [&](float* out) { return gpu(dx.as<float>(), n, out, nullptr); });
}

// The bf16 rows measure their error against the widened bf16 values.
template <CpuReduceBf16 cpu, GpuReduceBf16 gpu, double (*scale_of)(const std::vector<float>&)>
Comparison twin_reduce_bf16(size_t n, Rng& rng) {
  const auto x = test::to_bf16(test::random_floats(n, rng, -3.0f, 2.0f));
  std::vector<float> widened(n);
  ops::bf16_to_f32(x.data(), widened.data(), n);
  const DeviceBuffer dx = upload(x);
  return compare_reduction(cpu(x.data(), n), scale_of(widened),
                           [&](float* out) { return gpu(dx.as<bf16>(), n, out, nullptr); });
}

struct TwinCase {
  const char* name;
  double tolerance;  // largest normalized error allowed; 0: identical values
  Comparison (*run)(size_t n, Rng& rng);
};
Comparison twin_round_to_bf16(size_t n, Rng& rng) {
  const auto x = test::random_float_bits(n, rng);
  const DeviceBuffer dx = upload(x);
  return compare_map<float>(
      std::vector<float>(n), [&](float* out) { ops::round_to_bf16(x.data(), out, n); },
      [&](float* out) { return round_to_bf16(dx.as<float>(), out, n); });
}

void PrintTo(const TwinCase& c, std::ostream* os) { *os << c.name; }

// Pairwise (CPU) and tree (GPU) sums each stay within about 100 ulps of sum|x| at 2^20 terms.
constexpr double kSumTolerance = 1e-5;

const TwinCase kTwinCases[] = {
    {"add", 0, twin_add},
    {"scale", 0, twin_scale},
    {"axpy", 0, twin_axpy},
    {"f32_to_bf16", 0, twin_f32_to_bf16},
    {"bf16_to_f32", 0, twin_bf16_to_f32},
    {"round_to_bf16", 0, twin_round_to_bf16},
    {"f32_to_f16", 0, twin_f32_to_f16},
    {"f16_to_f32", 0, twin_f16_to_f32},
    {"sum_f32", kSumTolerance, twin_reduce_f32<ops::sum, sum, abs_sum>},
    {"sum_bf16", kSumTolerance, twin_reduce_bf16<ops::sum, sum, abs_sum>},
    {"sum_of_squares_f32", kSumTolerance,
     twin_reduce_f32<ops::sum_of_squares, sum_of_squares, square_sum>},
    {"sum_of_squares_bf16", kSumTolerance,
     twin_reduce_bf16<ops::sum_of_squares, sum_of_squares, square_sum>},
    {"max_f32", 0, twin_reduce_f32<ops::max, max, exact_only>},
    {"max_bf16", 0, twin_reduce_bf16<ops::max, max, exact_only>},
    {"absmax_f32", 0, twin_reduce_f32<ops::absmax, absmax, exact_only>},
    {"absmax_bf16", 0, twin_reduce_bf16<ops::absmax, absmax, exact_only>},
};

class KernelTwinTest : public GpuTest, public ::testing::WithParamInterface<TwinCase> {};

TEST_P(KernelTwinTest, MatchesCpuTwinOnAwkwardSizes) {
  const TwinCase& c = GetParam();
  Rng rng(2024);
  for (size_t n : {size_t{1}, size_t{31}, size_t{1000}, (size_t{1} << 20) + 3}) {
    const Comparison result = c.run(n, rng);
    EXPECT_TRUE(result.guards_intact) << c.name << " wrote outside its output, n=" << n;
    EXPECT_LE(result.error, c.tolerance) << c.name << " n=" << n;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, KernelTwinTest, ::testing::ValuesIn(kTwinCases),
                         [](const auto& info) { return std::string(info.param.name); });

class KernelEdgeTest : public GpuTest {};

TEST_F(KernelEdgeTest, EmptyReductionsWriteTheIdentity) {
  const auto identity = [](GpuReduce gpu) {
    test::Guarded<float> out(std::vector<float>{42.0f});
    EXPECT_TRUE(run_on_device<float>(out, [&](float* o) { return gpu(nullptr, 0, o, nullptr); }));
    return out[0];
  };
  EXPECT_EQ(identity(sum), 0.0f);
  EXPECT_EQ(identity(sum_of_squares), 0.0f);
  EXPECT_EQ(identity(absmax), 0.0f);
  EXPECT_EQ(identity(max), -std::numeric_limits<float>::infinity());
}

TEST_F(KernelEdgeTest, NanPropagatesThroughReductionsLikeTheCpu) {
  std::vector<float> x(5000, 1.0f);
  x[4321] = std::numeric_limits<float>::quiet_NaN();
  const DeviceBuffer dx = upload(x);
  for (GpuReduce gpu :
       {GpuReduce{sum}, GpuReduce{sum_of_squares}, GpuReduce{max}, GpuReduce{absmax}}) {
    test::Guarded<float> out(std::vector<float>{0.0f});
    ASSERT_TRUE(run_on_device<float>(
        out, [&](float* o) { return gpu(dx.as<float>(), x.size(), o, nullptr); }));
    EXPECT_TRUE(std::isnan(out[0]));
  }
}

TEST_F(KernelEdgeTest, CopyOnDeviceCopiesExactlyTheBytesAskedFor) {
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f;
  const DeviceBuffer dx = upload(x);
  test::Guarded<float> out(x.size() - 3);
  ASSERT_TRUE(run_on_device<float>(out, [&](float* o) {
    return copy_on_device(o, dx.as<float>() + 3, out.size() * sizeof(float), nullptr);
  }));
  EXPECT_TRUE(out.guards_intact()) << "copied outside out";
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], x[i + 3]) << i;
}

// gemm: (m, n, k), transposes and row padding; C is guarded and its padding must survive.
struct GemmCase {
  int64_t m, n, k;
  ops::Transpose ta, tb;
  int64_t pad;
};

template <typename In>
void check_gemm_twin(const GemmCase& g, Rng& rng) {
  const int64_t lda = ops::gemm_stored_cols(g.ta, g.m, g.k) + g.pad;
  const int64_t ldb = ops::gemm_stored_cols(g.tb, g.k, g.n) + g.pad;
  const int64_t ldc = g.n + g.pad;
  const int64_t a_rows = g.ta == ops::Transpose::kNo ? g.m : g.k;
  const int64_t b_rows = g.tb == ops::Transpose::kNo ? g.k : g.n;
  const auto a32 = test::random_floats(static_cast<size_t>(a_rows * lda), rng, -1.0f, 1.0f);
  const auto b32 = test::random_floats(static_cast<size_t>(b_rows * ldb), rng, -1.0f, 1.0f);
  const auto c0 = test::random_floats(static_cast<size_t>(g.m * ldc), rng, -1.0f, 1.0f);
  const float alpha = 1.25f, beta = -0.5f;
  Comparison result;
  if constexpr (std::is_same_v<In, float>) {
    const DeviceBuffer da = upload(a32), db = upload(b32);
    result = compare_map<float>(
        c0,
        [&](float* c) {
          ops::sgemm(g.ta, g.tb, g.m, g.n, g.k, alpha, a32.data(), lda, b32.data(), ldb, beta, c,
                     ldc);
        },
        [&](float* c) {
          return kernels::sgemm(g.ta, g.tb, g.m, g.n, g.k, alpha, da.as<float>(), lda,
                                db.as<float>(), ldb, beta, c, ldc);
        });
  } else {
    const auto a16 = test::to_bf16(a32), b16 = test::to_bf16(b32);
    const DeviceBuffer da = upload(a16), db = upload(b16);
    result = compare_map<float>(
        c0,
        [&](float* c) {
          ops::gemm_bf16(g.ta, g.tb, g.m, g.n, g.k, alpha, a16.data(), lda, b16.data(), ldb, beta,
                         c, ldc);
        },
        [&](float* c) {
          return kernels::gemm_bf16(g.ta, g.tb, g.m, g.n, g.k, alpha, da.as<bf16>(), lda,
                                    db.as<bf16>(), ldb, beta, c, ldc);
        });
  }
  EXPECT_TRUE(result.guards_intact);
  EXPECT_LE(result.error, 1e-5) << "m=" << g.m << " n=" << g.n << " k=" << g.k
                                << " ta=" << int(g.ta) << " tb=" << int(g.tb) << " pad=" << g.pad;
}

std::vector<GemmCase> gemm_cases() {
  std::vector<GemmCase> cases;
  const int64_t shapes[][3] = {{1, 1, 1}, {31, 17, 5}, {128, 96, 64}, {1000, 31, 77}};
  for (const auto& s : shapes) {
    for (auto ta : {ops::Transpose::kNo, ops::Transpose::kYes}) {
      for (auto tb : {ops::Transpose::kNo, ops::Transpose::kYes}) {
        for (int64_t pad : {0, 3}) cases.push_back({s[0], s[1], s[2], ta, tb, pad});
      }
    }
  }
  return cases;
}

class GemmTwinTest : public GpuTest {};

TEST_F(GemmTwinTest, SgemmMatchesOpenBlas) {
  Rng rng(5);
  for (const GemmCase& g : gemm_cases()) check_gemm_twin<float>(g, rng);
}

TEST_F(GemmTwinTest, GemmBf16MatchesWidenedOpenBlas) {
  Rng rng(6);
  for (const GemmCase& g : gemm_cases()) check_gemm_twin<bf16>(g, rng);
}

}  // namespace
}  // namespace ms::kernels
