#include "base/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace sampan {
namespace {

TEST(Status, OkAndErrors) {
  Status ok = Status::Ok();
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.ToString(), "OK");
  Status e = InvalidArgument("bad ", 3, " things");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.message(), "bad 3 things");
  EXPECT_EQ(e.ToString(), "Invalid argument: bad 3 things");
  EXPECT_EQ(NotFound("x").code(), StatusCode::kNotFound);
  EXPECT_EQ(Unsupported("x").code(), StatusCode::kUnsupported);
  EXPECT_EQ(IoError("x").code(), StatusCode::kIoError);
  EXPECT_EQ(OutOfRange("x").code(), StatusCode::kOutOfRange);
  EXPECT_EQ(FailedPrecondition("x").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Internal("x").ToString(), "Internal error: x");
}

TEST(Status, WithContextPrefixesAndKeepsCode) {
  Status e = NotFound("file 'a.npy'").WithContext("input x");
  EXPECT_EQ(e.code(), StatusCode::kNotFound);
  EXPECT_EQ(e.message(), "input x: file 'a.npy'");
  EXPECT_TRUE(Status::Ok().WithContext("ignored").ok());
  EXPECT_EQ(Status::Ok().WithContext("ignored").message(), "");
}

TEST(Status, StatusCodeNamesAreDistinct) {
  EXPECT_STREQ(StatusCodeName(StatusCode::kOk), "OK");
  EXPECT_STREQ(StatusCodeName(StatusCode::kUnsupported), "Unsupported");
  EXPECT_STREQ(StatusCodeName(static_cast<StatusCode>(999)), "Unknown");
}

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument(x, " is odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  SP_ASSIGN_OR_RETURN(int h, Half(x));
  SP_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  SP_RETURN_IF_ERROR(Half(x).status());
  return Status::Ok();
}

TEST(Result, ValueOrStatus) {
  Result<int> r = Half(8);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 4);
  EXPECT_TRUE(r.status().ok());
  Result<int> bad = Half(3);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "3 is odd");
}

TEST(Result, MacrosPropagate) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> q = Quarter(6);  // 6 -> 3 -> odd
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().message(), "3 is odd");
  EXPECT_TRUE(CheckEven(2).ok());
  EXPECT_EQ(CheckEven(5).code(), StatusCode::kInvalidArgument);
}

TEST(Result, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
  Result<std::unique_ptr<int>> e = Status(StatusCode::kInternal, "boom");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInternal);
}

TEST(StrCat, MixedTypes) {
  EXPECT_EQ(StrCat("a", 1, '-', 2.5, std::string("z")), "a1-2.5z");
}

}  // namespace
}  // namespace sampan
