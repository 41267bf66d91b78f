// QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear: per-axis rounding and saturation,
// output types and errors, the all-zero input.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

TEST(QuantizeLinearRun, PerAxisRoundsHalfToEvenAndSaturates) {
  Tensor x = F32({0.5f, 1.5f, 2.5f, 1000.f, -3.f, 6.f}, {3, 2});
  Tensor scale = F32({1.f, 2.f}, {2});
  Tensor zp = Tensor::FromVector(DType::kInt8, std::vector<int8_t>{0, 1}, {2});
  auto q = RunFirst("QuantizeLinear", {x, scale, zp}, {{"axis", ir::Attribute::Int(1)}});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->dtype(), DType::kInt8);
  // col0 scale 1 zp 0: 0.5->0, 2.5->2, -3->-3; col1 scale 2 zp 1: 0.75->1+1, 500->127, 3->3+1.
  EXPECT_EQ(Values<int8_t>(*q), (std::vector<int8_t>{0, 2, 2, 127, -3, 4}));
  auto dq = RunFirst("DequantizeLinear", {*q, scale, zp}, {{"axis", ir::Attribute::Int(1)}});
  ASSERT_TRUE(dq.ok()) << dq.status().ToString();
  EXPECT_EQ(Values<float>(*dq), (std::vector<float>{0, 2, 2, 252, -3, 6}));
}

TEST(QuantizeLinearInfer, TypesAndErrors) {
  // No zero point: uint8 by default; symbolic dims kept.
  auto t = InferFirst("QuantizeLinear", {TT({S("N"), K(4)}), TT({})});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ToString(), "u8[N,4]");
  auto bad_axis = InferFirst("QuantizeLinear", {TT({K(2), K(4)}), TT({K(3)})});
  ASSERT_FALSE(bad_axis.ok());
  EXPECT_EQ(bad_axis.status().code(), StatusCode::kInvalidArgument);
  auto f8 = InferFirst("QuantizeLinear", {TT({K(4)}), TT({})},
                       {{"output_dtype", ir::Attribute::Int(static_cast<int64_t>(DType::kFloat8E4M3FN))}});
  ASSERT_TRUE(f8.ok()) << f8.status().ToString();
  EXPECT_EQ(f8->ToString(), "f8e4m3fn[4]");
  auto str = InferFirst("QuantizeLinear", {TT({K(4)}), TT({})},
                        {{"output_dtype", ir::Attribute::Int(static_cast<int64_t>(DType::kString))}});
  ASSERT_FALSE(str.ok());
  EXPECT_EQ(str.status().code(), StatusCode::kUnsupported);
  auto dq = InferFirst("DequantizeLinear", {TT({S("N")}, DType::kUInt8), TT({}, DType::kFloat16)});
  ASSERT_TRUE(dq.ok()) << dq.status().ToString();
  EXPECT_EQ(dq->ToString(), "f16[N]");
}

TEST(DynamicQuantizeLinearRun, AllZeros) {
  auto outs = RunValues("DynamicQuantizeLinear", {F32({0, 0, 0}, {3})}, {}, 11, 3);
  ASSERT_TRUE(outs.ok()) << outs.status().ToString();
  EXPECT_EQ(Values<uint8_t>((*outs)[0]), (std::vector<uint8_t>{0, 0, 0}));
  EXPECT_FLOAT_EQ(Values<float>((*outs)[1])[0], 1.0f / 255.0f);
  EXPECT_EQ(Values<uint8_t>((*outs)[2])[0], 0);
}

}  // namespace
}  // namespace sampan::ops
