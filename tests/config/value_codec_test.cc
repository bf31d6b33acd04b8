// Scalar text rules shared by every config value: strict parsing, and number formatting that
// is both readable and exact.
#include "config/value_codec.h"

#include <gtest/gtest.h>

#include <limits>

namespace ms::config {
namespace {

TEST(ParseInt64, AcceptsOnlyWholeDecimalIntegers) {
  EXPECT_EQ(parse_int64("42"), 42);
  EXPECT_EQ(parse_int64("-7"), -7);
  EXPECT_EQ(parse_int64("+7"), 7);
  EXPECT_EQ(parse_int64("9223372036854775807"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(parse_int64("9223372036854775808"), std::nullopt);
  EXPECT_EQ(parse_int64("1.0"), std::nullopt);
  EXPECT_EQ(parse_int64("1e3"), std::nullopt);
  EXPECT_EQ(parse_int64("10x"), std::nullopt);
  EXPECT_EQ(parse_int64(""), std::nullopt);
}

TEST(ParseDouble, AcceptsFiniteNumbersOnly) {
  EXPECT_EQ(parse_double("3.0e-4"), 3.0e-4);
  EXPECT_EQ(parse_double("10000"), 10000.0);
  EXPECT_EQ(parse_double(".5"), 0.5);
  EXPECT_EQ(parse_double("-0.5"), -0.5);
  EXPECT_EQ(parse_double("nan"), std::nullopt);
  EXPECT_EQ(parse_double("inf"), std::nullopt);
  EXPECT_EQ(parse_double("1e999"), std::nullopt);
  EXPECT_EQ(parse_double("0.1.2"), std::nullopt);
}

TEST(FormatDouble, IsShortReadableAndExact) {
  EXPECT_EQ(format_double(0.0), "0");
  EXPECT_EQ(format_double(3.0e-4), "0.0003");
  EXPECT_EQ(format_double(10000.0), "10000");
  EXPECT_EQ(format_double(-2.5), "-2.5");
  EXPECT_EQ(format_double(1.0e-4), "0.0001");
  EXPECT_EQ(format_double(3.0e-5), "3.0e-5");
  EXPECT_EQ(format_double(1.0e-8), "1.0e-8");
  EXPECT_EQ(format_double(1.25e20), "1.25e20");
  for (double v : {0.1, 1.0 / 3.0, 2.0e-5, 9.99e-6, 123456789.125, 1.0e300, -4.9e-324}) {
    EXPECT_EQ(parse_double(format_double(v)), v) << format_double(v);
  }
}

TEST(DescribeNode, NamesWhatWasGiven) {
  EXPECT_EQ(describe_node(YAML::Load("ten")), "'ten'");
  EXPECT_EQ(describe_node(YAML::Load("[1]")), "a list");
  EXPECT_EQ(describe_node(YAML::Load("{a: 1}")), "a mapping");
  EXPECT_EQ(describe_node(YAML::Load("~")), "nothing");
}

}  // namespace
}  // namespace ms::config
