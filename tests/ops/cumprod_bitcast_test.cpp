// CumProd (src/ops/cumsum.cpp) and BitCast (src/ops/bitcast.cpp), opset 26.
#include <gtest/gtest.h>

#include <cstring>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)
using ir::Attribute;

Tensor Axis(int64_t a) {
  return Tensor::FromVector<int64_t>(DType::kInt64, {a}, {});
}

void ExpectNamesNode(const Status& st, StatusCode code, const std::string& op) {
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.ToString().find(op + " 'n'"), std::string::npos) << st.ToString();
}

std::vector<float> Floats(const Tensor& t) {
  return {t.data<float>(), t.data<float>() + t.numel()};
}

TEST(CumProd, ExclusiveAndReverse) {
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, {1, 2, 3}, {3});
  const Tensor axis = Axis(0);
  struct Case {
    int64_t exclusive, reverse;
    std::vector<float> want;
  };
  for (const Case& c : {Case{0, 0, {1, 2, 6}}, Case{1, 0, {1, 1, 2}}, Case{0, 1, {6, 6, 3}}, Case{1, 1, {6, 3, 1}}}) {
    auto r = RunOneNode("CumProd", {&x, &axis},
                        {{"exclusive", Attribute::Int(c.exclusive)}, {"reverse", Attribute::Int(c.reverse)}}, 26);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(Floats((*r)[0]), c.want) << "exclusive=" << c.exclusive << " reverse=" << c.reverse;
  }
}

TEST(CumProd, Int32AlongTheLastAxisWraps) {
  const Tensor x = Tensor::FromVector<int>(DType::kInt32, {1, 2, 3, 4, 5, 6, 65536, 65536, 3}, {3, 3});
  const Tensor axis = Axis(-1);
  auto r = RunOneNode("CumProd", {&x, &axis}, {}, 26);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const int32_t want[] = {1, 2, 6, 4, 20, 120, 65536, 0, 0};  // 2^32 wraps to 0
  for (int i = 0; i < 9; ++i) EXPECT_EQ((*r)[0].data<int32_t>()[i], want[i]) << i;
  const Tensor axis0 = Axis(0);
  auto down = RunOneNode("CumProd", {&x, &axis0}, {}, 26);
  ASSERT_TRUE(down.ok()) << down.status().ToString();
  const int32_t want0[] = {1, 2, 3, 4, 10, 18, 262144, 655360, 54};
  for (int i = 0; i < 9; ++i) EXPECT_EQ((*down)[0].data<int32_t>()[i], want0[i]) << i;
}

TEST(CumProd, Float16RoundsEachPartialProduct) {
  // As NumPy's cumprod in float16: 1025 * 3 = 3075 rounds to 3076 (ulp 2), * 3 = 9228 rounds
  // to 9232 (ulp 8). One rounding of 1025 * 9 = 9225 would give 9224.
  const Tensor x = Tensor::FromVector<float>(DType::kFloat16, {1025, 3, 3}, {3});
  const Tensor axis = Axis(0);
  auto r = RunOneNode("CumProd", {&x, &axis}, {}, 26);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(static_cast<float>((*r)[0].data<Half>()[1]), 3076.f);
  EXPECT_EQ(static_cast<float>((*r)[0].data<Half>()[2]), 9232.f);
}

TEST(CumProd, Errors) {
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, {1, 2}, {2});
  const Tensor bad_axis = Axis(1);
  ExpectNamesNode(RunOneNode("CumProd", {&x, &bad_axis}, {}, 26).status(), StatusCode::kInvalidArgument, "CumProd");
  const Tensor i8 = Tensor::FromVector<int>(DType::kInt8, {1, 2}, {2});
  const Tensor axis = Axis(0);
  ExpectNamesNode(RunOneNode("CumProd", {&i8, &axis}, {}, 26).status(), StatusCode::kUnsupported, "CumProd");
  const Tensor scalar = Tensor::FromVector<float>(DType::kFloat32, {3}, {});
  ExpectNamesNode(RunOneNode("CumProd", {&scalar, &axis}, {}, 26).status(), StatusCode::kInvalidArgument, "CumProd");
  const Tensor f_axis = Tensor::FromVector<float>(DType::kFloat32, {0}, {});
  ExpectNamesNode(RunOneNode("CumProd", {&x, &f_axis}, {}, 26).status(), StatusCode::kInvalidArgument, "CumProd");
}

TEST(CumSum, StillSumsAfterTheSharedWalk) {
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, {1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor axis = Axis(1);
  auto r = RunOneNode("CumSum", {&x, &axis}, {{"exclusive", Attribute::Int(1)}, {"reverse", Attribute::Int(1)}}, 14);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Floats((*r)[0]), (std::vector<float>{5, 3, 0, 11, 6, 0}));
}

TEST(BitCast, KeepsTheBits) {
  const Tensor f = Tensor::FromVector<float>(DType::kFloat32, {1.f, -2.5f}, {1, 2});
  auto r = RunOneNode("BitCast", {&f}, {{"to", Attribute::Int(static_cast<int64_t>(DType::kInt32))}}, 26);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].dtype(), DType::kInt32);
  ASSERT_EQ((*r)[0].shape(), (Shape{1, 2}));
  EXPECT_EQ((*r)[0].data<int32_t>()[0], 0x3F800000);
  EXPECT_EQ((*r)[0].data<int32_t>()[1], static_cast<int32_t>(0xC0200000u));

  const Tensor i8 = Tensor::FromVector<int>(DType::kInt8, {-1, -128, 127, 0}, {4});
  auto u = RunOneNode("BitCast", {&i8}, {{"to", Attribute::Int(static_cast<int64_t>(DType::kUInt8))}}, 26);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  const uint8_t want[] = {255, 128, 127, 0};
  for (int i = 0; i < 4; ++i) EXPECT_EQ((*u)[0].data<uint8_t>()[i], want[i]) << i;

  const Tensor h = Tensor::FromVector<float>(DType::kFloat16, {1.f, -2.f}, {2});
  auto bits = RunOneNode("BitCast", {&h}, {{"to", Attribute::Int(static_cast<int64_t>(DType::kUInt16))}}, 26);
  ASSERT_TRUE(bits.ok()) << bits.status().ToString();
  EXPECT_EQ((*bits)[0].data<uint16_t>()[0], 0x3C00);
  EXPECT_EQ((*bits)[0].data<uint16_t>()[1], 0xC000);
}

TEST(BitCast, BoolTakesOnlyZeroAndOne) {
  const Tensor ok = Tensor::FromVector<int>(DType::kUInt8, {1, 0}, {2});
  auto r = RunOneNode("BitCast", {&ok}, {{"to", Attribute::Int(static_cast<int64_t>(DType::kBool))}}, 26);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)[0].data<bool>()[0]);
  EXPECT_FALSE((*r)[0].data<bool>()[1]);
  const Tensor two = Tensor::FromVector<int>(DType::kUInt8, {0, 2}, {2});
  auto bad = RunOneNode("BitCast", {&two}, {{"to", Attribute::Int(static_cast<int64_t>(DType::kBool))}}, 26);
  ExpectNamesNode(bad.status(), StatusCode::kInvalidArgument, "BitCast");
  EXPECT_NE(bad.status().ToString().find("element 1"), std::string::npos) << bad.status().ToString();
}

TEST(BitCast, Errors) {
  const Tensor f = Tensor::FromVector<float>(DType::kFloat32, {1.f}, {1});
  auto width = RunOneNode("BitCast", {&f}, {{"to", Attribute::Int(static_cast<int64_t>(DType::kFloat16))}}, 26);
  ExpectNamesNode(width.status(), StatusCode::kInvalidArgument, "BitCast");
  EXPECT_NE(width.status().ToString().find("bit width"), std::string::npos) << width.status().ToString();
  ExpectNamesNode(RunOneNode("BitCast", {&f}, {{"to", Attribute::Int(8)}}, 26).status(), StatusCode::kInvalidArgument,
                  "BitCast");  // string
  ExpectNamesNode(RunOneNode("BitCast", {&f}, {{"to", Attribute::Int(99)}}, 26).status(), StatusCode::kInvalidArgument,
                  "BitCast");
  ExpectNamesNode(RunOneNode("BitCast", {&f}, {}, 26).status(), StatusCode::kInvalidArgument, "BitCast");
  const Tensor i64 = Tensor::FromVector<int64_t>(DType::kInt64, {1}, {1});
  // complex64 has 64 bits too, but Sampan does not store it.
  ExpectNamesNode(RunOneNode("BitCast", {&i64}, {{"to", Attribute::Int(14)}}, 26).status(), StatusCode::kUnsupported,
                  "BitCast");
}

TEST(CumProdBitCast, NotBeforeOpset26) {
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, {1, 2}, {2});
  const Tensor axis = Axis(0);
  ExpectNamesNode(RunOneNode("CumProd", {&x, &axis}, {}, 25).status(), StatusCode::kInvalidArgument, "CumProd");
  ExpectNamesNode(
      RunOneNode("BitCast", {&x}, {{"to", Attribute::Int(static_cast<int64_t>(DType::kInt32))}}, 25).status(),
      StatusCode::kInvalidArgument, "BitCast");
}

}  // namespace
}  // namespace sampan::ops
