// QLinearConv (src/ops/qlinear_conv.cpp): zero points, bias, per-channel weight scales,
// rounding and saturation against hand-computed values; bad types and shapes.
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

TEST(QLinearConv, MatchesHandComputedValues) {
  // x [1, 1, 1, 3] - 10 = [1, 2, 3]; w [2, 1, 1, 2] - 5 = [[1, -1], [2, 1]]; valid conv, width 2:
  // channel 0: [1 - 2, 2 - 3] = [-1, -1]; channel 1: [2 + 2, 4 + 3] = [4, 7]; bias [1, 0].
  // Multipliers x_scale * w_scale / y_scale: 0.5 * [1, 0.5] / 1 = [0.5, 0.25]; y_zp 100.
  // channel 0: 0 * 0.5 = 0 -> 100, 100; channel 1: [1, 1.75] -> 101, 101.75 -> 102.
  const Tensor x = U8({11, 12, 13}, {1, 1, 1, 3}), w = U8({6, 4, 7, 6}, {2, 1, 1, 2});
  const Tensor xs = F32({0.5f}, {}), xzp = U8({10}, {}), ws = F32({1.f, 0.5f}, {2}), wzp = U8({5, 5}, {2});
  const Tensor ys = F32({1.f}, {}), yzp = U8({100}, {});
  const Tensor bias = Tensor::FromVector<int32_t>(DType::kInt32, {1, 0}, {2});
  auto r = RunOneNode("QLinearConv", {&x, &xs, &xzp, &w, &ws, &wzp, &ys, &yzp, &bias}, {}, 10);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{1, 2, 1, 2}));
  const std::vector<uint8_t> want = {100, 100, 101, 102};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ((*r)[0].data<uint8_t>()[i], want[i]) << i;
  // Padding one column each side: the edge taps read zero (x_zp, after the shift); y_zp 254 saturates.
  const Tensor top = U8({254}, {});
  auto p = RunOneNode("QLinearConv", {&x, &xs, &xzp, &w, &ws, &wzp, &ys, &top, &bias},
                      {{"pads", ir::Attribute::Ints({0, 1, 0, 1})}}, 10);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ((*p)[0].shape(), (Shape{1, 2, 1, 4}));
  // Channel 1 taps [2, 1] over the shifted, padded row [0, 1, 2, 3, 0]: 1 at position 0 (0.25 + 254 -> 254),
  // 7 at position 2 (1.75 + 254 -> 256, saturated to 255).
  EXPECT_EQ((*p)[0].data<uint8_t>()[4], 254);
  EXPECT_EQ((*p)[0].data<uint8_t>()[6], 255);
}

TEST(QLinearConv, BadTypesAndShapesAreErrors) {
  const Tensor x = U8({11, 12, 13}, {1, 1, 1, 3}), w = U8({6, 4, 7, 6}, {2, 1, 1, 2});
  const Tensor xs = F32({0.5f}, {}), xzp = U8({10}, {}), ws = F32({1.f, 0.5f}, {2}), wzp = U8({5, 5}, {2});
  const Tensor ys = F32({1.f}, {}), yzp = U8({100}, {});
  const Tensor szp = Tensor::FromVector<int8_t>(DType::kInt8, {0}, {});
  auto t = RunOneNode("QLinearConv", {&x, &xs, &szp, &w, &ws, &wzp, &ys, &yzp}, {}, 10);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("QLinearConv 'n': x_zero_point is i8 but x is u8"), std::string::npos)
      << t.status().ToString();
  const Tensor ws3 = F32({1.f, 1.f, 1.f}, {3});
  auto s = RunOneNode("QLinearConv", {&x, &xs, &xzp, &w, &ws3, &wzp, &ys, &yzp}, {}, 10);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("has 3 elements, expected 1 or 2"), std::string::npos) << s.status().ToString();
  const Tensor w3 = U8({6, 4}, {2, 1, 2});
  auto k = RunOneNode("QLinearConv", {&x, &xs, &xzp, &w3, &ws, &wzp, &ys, &yzp}, {}, 10);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("x has rank 4 but w has rank 3"), std::string::npos) << k.status().ToString();
}

}  // namespace
}  // namespace sampan::ops
