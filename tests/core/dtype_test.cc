// Element types: sizes, names and parsing.
#include "core/dtype.h"

#include <gtest/gtest.h>

namespace ms {
namespace {

TEST(DType, SizesInBytes) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI32), 4u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_size(DType::kU16), 2u);
  EXPECT_EQ(dtype_size(DType::kU8), 1u);
}

TEST(DType, CodesAreFixedBecauseFilesStoreThem) {
  EXPECT_EQ(static_cast<int>(DType::kF32), 0);
  EXPECT_EQ(static_cast<int>(DType::kBF16), 1);
  EXPECT_EQ(static_cast<int>(DType::kU8), 6);
}

TEST(DType, NamesRoundTripThroughParse) {
  for (DType t : kAllDTypes) {
    Result<DType> parsed = parse_dtype(dtype_name(t));
    ASSERT_TRUE(parsed.ok()) << dtype_name(t);
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_EQ(dtype_name(DType::kBF16), "bf16");
}

TEST(DType, ParseAcceptsSafetensorsSpellings) {
  EXPECT_EQ(*parse_dtype("F32"), DType::kF32);
  EXPECT_EQ(*parse_dtype("BF16"), DType::kBF16);
  EXPECT_EQ(*parse_dtype("I64"), DType::kI64);
}

TEST(DType, ParseRejectsUnknownNames) {
  Result<DType> r = parse_dtype("f8");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("f8"), std::string::npos);
}

TEST(DType, FloatClassification) {
  EXPECT_TRUE(dtype_is_float(DType::kF32));
  EXPECT_TRUE(dtype_is_float(DType::kBF16));
  EXPECT_TRUE(dtype_is_float(DType::kF16));
  EXPECT_FALSE(dtype_is_float(DType::kI32));
  EXPECT_FALSE(dtype_is_float(DType::kU8));
}

}  // namespace
}  // namespace ms
