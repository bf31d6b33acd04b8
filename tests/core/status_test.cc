// Status and Result: the error-reporting contract of lib/.
#include "core/status.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace ms {
namespace {

TEST(Status, DefaultIsOkAndCostsNothing) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.to_string(), "OK");
  EXPECT_TRUE(Status::OK().ok());
}

TEST(Status, FactoriesSetCodeAndMessage) {
  EXPECT_EQ(InvalidArgument("x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NotFound("x").code(), StatusCode::kNotFound);
  EXPECT_EQ(Corruption("x").code(), StatusCode::kCorruption);
  EXPECT_EQ(IOError("x").code(), StatusCode::kIOError);
  EXPECT_EQ(CommError("x").code(), StatusCode::kCommError);
  EXPECT_EQ(Unavailable("x").code(), StatusCode::kUnavailable);
  Status s = Corruption("bad magic in 'a.idx'");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "bad magic in 'a.idx'");
  EXPECT_EQ(s.to_string(), "Corruption: bad magic in 'a.idx'");
}

TEST(Status, WithContextPrefixesTheMessageAndKeepsTheCode) {
  Status s = NotFound("no such tensor").with_context("manifest.json");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "manifest.json: no such tensor");
  EXPECT_TRUE(Status::OK().with_context("ignored").ok());
}

TEST(Status, ErrnoErrorNamesTheCallThePathAndTheReason) {
  Status s = ErrnoError("cannot open", "/tmp/x", ENOENT);
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(s.message(), "cannot open '/tmp/x': No such file or directory");
}

Result<int> parse_positive(int x) {
  if (x <= 0) return InvalidArgument("not positive: " + std::to_string(x));
  return x;
}

Status double_into(int x, int& out) {
  MS_ASSIGN_OR_RETURN(int v, parse_positive(x));
  out = 2 * v;
  return Status::OK();
}

Status check_both(int a, int b) {
  MS_RETURN_IF_ERROR(parse_positive(a).status());
  MS_RETURN_IF_ERROR(parse_positive(b).status());
  return Status::OK();
}

TEST(Result, HoldsAValueOrAnError) {
  Result<int> good = parse_positive(3);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 3);
  Result<int> bad = parse_positive(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "not positive: -1");
}

TEST(Result, FromOkStatusIsAnInternalError) {
  Result<int> r{Status::OK()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(Macros, AssignOrReturnPropagatesErrors) {
  int out = 0;
  EXPECT_TRUE(double_into(4, out).ok());
  EXPECT_EQ(out, 8);
  EXPECT_EQ(double_into(0, out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out, 8);
}

TEST(Macros, ReturnIfErrorStopsAtTheFirstError) {
  EXPECT_TRUE(check_both(1, 2).ok());
  EXPECT_EQ(check_both(1, -2).message(), "not positive: -2");
  EXPECT_EQ(check_both(-1, -2).message(), "not positive: -1");
}

}  // namespace
}  // namespace ms
