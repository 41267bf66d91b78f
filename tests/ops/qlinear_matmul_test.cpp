// QLinearMatMul (src/ops/qlinear_matmul.cpp): zero points, the scale multiplier, round half to
// even and saturation against hand-computed values; per-row scales; bad types and shapes.
#include <gtest/gtest.h>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

Tensor U8(const std::vector<uint8_t>& v, Shape s) {
  return Tensor::FromVector<uint8_t>(DType::kUInt8, v, s);
}
Tensor F32(const std::vector<float>& v, Shape s) {
  return Tensor::FromVector<float>(DType::kFloat32, v, s);
}

TEST(QLinearMatMul, RoundsHalfToEvenAndSaturates) {
  // a - 128 = [[4, 0], [12, 0]], b - 128 = [[1], [-128]]: the int product is [[4], [12]]; the
  // multiplier 0.5 * 0.5 / 2 = 0.125 gives 0.5 and 1.5, plus y_zero_point 10: 10.5 -> 10, 11.5 -> 12.
  const Tensor a = U8({132, 128, 140, 128}, {2, 2}), b = U8({129, 0}, {2, 1});
  const Tensor half = F32({0.5f}, {}), two = F32({2.f}, {}), zp = U8({128}, {}), yzp = U8({10}, {});
  auto r = RunOneNode("QLinearMatMul", {&a, &half, &zp, &b, &half, &zp, &two, &yzp}, {}, 21);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{2, 1}));
  ASSERT_EQ((*r)[0].dtype(), DType::kUInt8);
  EXPECT_EQ((*r)[0].data<uint8_t>()[0], 10);
  EXPECT_EQ((*r)[0].data<uint8_t>()[1], 12);
  // y_zero_point 255: 255.5 and 256.5 saturate to 255.
  const Tensor top = U8({255}, {});
  auto s = RunOneNode("QLinearMatMul", {&a, &half, &zp, &b, &half, &zp, &two, &top}, {}, 21);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)[0].data<uint8_t>()[0], 255);
  EXPECT_EQ((*s)[0].data<uint8_t>()[1], 255);
  // Per-row a_scale [2, 1] = [0.5, 1]: row 1's multiplier is 0.25, 12 * 0.25 + 10 = 13.
  const Tensor rows = F32({0.5f, 1.f}, {2, 1}), rows_zp = U8({128, 128}, {2, 1});
  auto p = RunOneNode("QLinearMatMul", {&a, &rows, &rows_zp, &b, &half, &zp, &two, &yzp}, {}, 21);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)[0].data<uint8_t>()[0], 10);
  EXPECT_EQ((*p)[0].data<uint8_t>()[1], 13);
}

TEST(QLinearMatMul, BadTypesAndShapesAreErrors) {
  const Tensor a = U8({132, 128, 140, 128}, {2, 2}), b = U8({129, 0}, {2, 1});
  const Tensor half = F32({0.5f}, {}), two = F32({2.f}, {}), zp = U8({128}, {}), yzp = U8({10}, {});
  const Tensor szp = Tensor::FromVector<int8_t>(DType::kInt8, {0}, {});
  auto t = RunOneNode("QLinearMatMul", {&a, &half, &szp, &b, &half, &zp, &two, &yzp}, {}, 21);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("QLinearMatMul 'n': a_zero_point is i8 but a is u8"), std::string::npos)
      << t.status().ToString();
  const Tensor b3 = U8({1, 2, 3}, {3, 1});
  auto k = RunOneNode("QLinearMatMul", {&a, &half, &zp, &b3, &half, &zp, &two, &yzp}, {}, 21);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("inner dimensions differ"), std::string::npos) << k.status().ToString();
  const Tensor cols = F32({0.5f, 1.f}, {1, 2});  // per column is b's, not a's
  const Tensor cols_zp = U8({128, 128}, {1, 2});
  auto s = RunOneNode("QLinearMatMul", {&a, &cols, &cols_zp, &b, &half, &zp, &two, &yzp}, {}, 21);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("a_scale must have 1 element"), std::string::npos) << s.status().ToString();
}

}  // namespace
}  // namespace sampan::ops
