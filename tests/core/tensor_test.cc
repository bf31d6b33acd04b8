// Tensor: shapes, typed access, owning vs viewing storage, and dtype conversion.
#include "core/tensor.h"

#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace ms {
namespace {

TEST(Tensor, ShapeNumelAndBytes) {
  Tensor t = Tensor::zeros(DType::kBF16, {2, 3, 4});
  EXPECT_EQ(t.ndim(), 3u);
  EXPECT_EQ(t.dim(1), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_TRUE(t.owns_data());
  EXPECT_EQ(t.describe(), "bf16[2, 3, 4]");
  EXPECT_EQ(shape_string(std::vector<int64_t>{}), "[]");
  EXPECT_EQ(shape_numel(std::vector<int64_t>{}), 1);
  EXPECT_EQ(shape_numel(std::vector<int64_t>{5, 0}), 0);
}

TEST(Tensor, DefaultIsEmpty) {
  Tensor t;
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.nbytes(), 0u);
}

TEST(Tensor, ZerosIsZeroInEveryDType) {
  for (DType d : kAllDTypes) {
    Tensor t = Tensor::zeros(d, {7});
    const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
    for (size_t i = 0; i < t.nbytes(); ++i) EXPECT_EQ(bytes[i], 0) << dtype_name(d);
  }
}

TEST(Tensor, FillAndTypedAccess) {
  Tensor t = Tensor::empty(DType::kI32, {3, 2});
  t.fill<int32_t>(7);
  for (int32_t x : t.span<int32_t>()) EXPECT_EQ(x, 7);
  Tensor h = Tensor::empty(DType::kF16, {4});
  h.fill(f16{float_to_f16(1.5f)});
  EXPECT_EQ(f16_to_float(h.data<f16>()[3].bits), 1.5f);
}

TEST(Tensor, StorageIsAligned) {
  Tensor t = Tensor::empty(DType::kF32, {17});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % Buffer::kDefaultAlignment, 0u);
}

TEST(Tensor, ViewSharesMemoryAndCloneCopies) {
  std::vector<float> external = {1, 2, 3, 4};
  Tensor v = Tensor::view_of(DType::kF32, {2, 2}, external.data());
  EXPECT_FALSE(v.owns_data());
  v.data<float>()[0] = 10;
  EXPECT_EQ(external[0], 10);
  Tensor c = v.clone();
  EXPECT_TRUE(c.owns_data());
  c.data<float>()[1] = 20;
  EXPECT_EQ(external[1], 2);
  Tensor vv = c.view();
  EXPECT_EQ(vv.raw_data(), c.raw_data());
  EXPECT_EQ(vv.shape(), c.shape());
}

TEST(Tensor, FromBufferTakesOwnership) {
  Buffer b(12);
  void* p = b.data();
  Tensor t = Tensor::from_buffer(DType::kU16, {6}, std::move(b));
  EXPECT_EQ(t.raw_data(), p);
  EXPECT_TRUE(t.owns_data());
}

TEST(Tensor, MoveKeepsTheDataPointer) {
  Tensor a = Tensor::zeros(DType::kI64, {3});
  const void* p = a.raw_data();
  Tensor b = std::move(a);
  EXPECT_EQ(b.raw_data(), p);
  EXPECT_EQ(a.raw_data(), nullptr);  // NOLINT: the moved-from tensor is empty
  EXPECT_EQ(a.numel(), 0);
}

template <typename T>
Tensor make(DType d, std::vector<T> values) {
  Tensor t = Tensor::empty(d, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

TEST(Convert, IntegersRoundTripThroughEveryDTypeThatHoldsThem) {
  // 0..255 fit in every dtype, and are exact in bf16 and f16.
  std::vector<int64_t> values(256);
  for (int i = 0; i < 256; ++i) values[i] = i;
  Tensor source = make(DType::kI64, values);
  for (DType d : kAllDTypes) {
    Result<Tensor> there = convert(source, d);
    ASSERT_TRUE(there.ok()) << dtype_name(d) << ": " << there.status().to_string();
    EXPECT_EQ(there->dtype(), d);
    EXPECT_EQ(there->shape(), source.shape());
    Result<Tensor> back = convert(*there, DType::kI64);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    for (int i = 0; i < 256; ++i) EXPECT_EQ(back->data<int64_t>()[i], i) << dtype_name(d);
  }
}

TEST(Convert, FloatsRoundToNearestEvenAndKeepNaN) {
  Tensor source = make(DType::kF32, std::vector<float>{1.0f, 1.0f + 0x1p-8f, 1e10f,
                                                       std::numeric_limits<float>::quiet_NaN()});
  Result<Tensor> b = convert(source, DType::kBF16);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data<bf16>()[1].bits, 0x3f80);  // tie rounds to even
  Result<Tensor> h = convert(source, DType::kF16);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->data<f16>()[2].bits, 0x7c00);  // overflow is inf for float -> float
  EXPECT_TRUE(std::isnan(f16_to_float(h->data<f16>()[3].bits)));
  Result<Tensor> back = convert(*b, DType::kF32);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->data<float>()[0], 1.0f);
  EXPECT_TRUE(std::isnan(back->data<float>()[3]));
}

TEST(Convert, SameDTypeIsACopy) {
  Tensor source = make(DType::kU8, std::vector<uint8_t>{1, 2, 3});
  Result<Tensor> copy = convert(source, DType::kU8);
  ASSERT_TRUE(copy.ok());
  EXPECT_NE(copy->raw_data(), source.raw_data());
  EXPECT_EQ(copy->data<uint8_t>()[2], 3);
}

TEST(Convert, IntegerOutOfRangeIsAnErrorNamingTheElement) {
  Tensor source = make(DType::kI32, std::vector<int32_t>{1, 255, 256});
  Result<Tensor> r = convert(source, DType::kU8);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(r.status().message(),
            "convert i32 -> u8: element 2 (value 256) does not fit in u8");
  EXPECT_FALSE(convert(make(DType::kI64, std::vector<int64_t>{-1}), DType::kU16).ok());
  EXPECT_FALSE(convert(make(DType::kI64, std::vector<int64_t>{int64_t{1} << 31}), DType::kI32).ok());
  EXPECT_TRUE(convert(make(DType::kI64, std::vector<int64_t>{(int64_t{1} << 31) - 1}), DType::kI32).ok());
}

TEST(Convert, FloatToIntegerNeedsWholeNumbersInRange) {
  EXPECT_FALSE(convert(make(DType::kF32, std::vector<float>{1.5f}), DType::kI32).ok());
  EXPECT_FALSE(convert(make(DType::kF32, std::vector<float>{-1.0f}), DType::kU8).ok());
  EXPECT_FALSE(convert(make(DType::kF32, std::vector<float>{256.0f}), DType::kU8).ok());
  EXPECT_FALSE(convert(make(DType::kF32, std::vector<float>{0x1p31f}), DType::kI32).ok());
  EXPECT_FALSE(convert(make(DType::kF32, std::vector<float>{0x1p63f}), DType::kI64).ok());
  EXPECT_FALSE(convert(make(DType::kF32, std::vector<float>{std::nanf("")}), DType::kI64).ok());
  Result<Tensor> ok = convert(make(DType::kF32, std::vector<float>{-0x1p31f, -0x1p63f}), DType::kI64);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->data<int64_t>()[1], std::numeric_limits<int64_t>::min());
}

TEST(Convert, IntegerBeyondTheFloatRangeIsAnError) {
  EXPECT_TRUE(convert(make(DType::kI32, std::vector<int32_t>{65504}), DType::kF16).ok());
  Result<Tensor> r = convert(make(DType::kI32, std::vector<int32_t>{65520}), DType::kF16);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(convert(make(DType::kI64, std::vector<int64_t>{int64_t{1} << 62}), DType::kBF16).ok());
}

}  // namespace
}  // namespace ms
