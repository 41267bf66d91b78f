// Cast / CastLike / QuantizeLinear / DequantizeLinear with float8, float4, e8m0 and 2/4-bit
// types. Expected values are worked by hand (most mirror onnx's node tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "base/small_types.h"
#include "ops/op_test_util.h"

namespace sampan::ops::testing {
namespace {

using ir::Attribute;

Tensor F32(const std::vector<float>& v, Shape shape) {
  return Tensor::FromVector(DType::kFloat32, v, std::move(shape));
}
Tensor F16(const std::vector<float>& v, Shape shape) {
  return Tensor::FromVector(DType::kFloat16, v, std::move(shape));
}

// A small-type tensor from element values (converted as Cast does: exact for these values).
Tensor Small(DType t, const std::vector<float>& v, Shape shape) {
  return CastTensor(F32(v, {static_cast<int64_t>(v.size())}), t).value().Reshaped(std::move(shape));
}

std::vector<double> Values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(ElementAsDouble(t, i));
  return v;
}

Attribute Int(int64_t v) {
  return Attribute::Int(v);
}
int64_t Code(DType t) {
  return static_cast<int64_t>(t);
}

TEST(CastOp, EveryNewTypeRoundTripsThroughFloat) {
  const std::vector<float> v = {0.f, 1.f, -1.f, 0.5f, -0.5f, 1.5f};  // exact in every float type here
  for (DType t : {DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ,
                  DType::kFloat4E2M1, DType::kFloat6E2M3, DType::kFloat6E3M2}) {
    Tensor x = F32(v, {2, 3});
    auto to = RunOneNode("Cast", {&x}, {{"to", Int(Code(t))}}, 28);
    ASSERT_TRUE(to.ok()) << DTypeName(t) << ": " << to.status().ToString();
    EXPECT_EQ((*to)[0].dtype(), t);
    EXPECT_EQ((*to)[0].nbytes(), DTypeBytes(t, 6));
    auto back = RunOneNode("Cast", {&(*to)[0]}, {{"to", Int(Code(DType::kFloat32))}}, 28);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(Values((*back)[0]), (std::vector<double>(v.begin(), v.end()))) << DTypeName(t);
  }
}

TEST(CastOp, SaturateAttribute) {
  Tensor x = F32({1e6f, -1e6f}, {2});
  auto sat = RunOneNode("Cast", {&x}, {{"to", Int(Code(DType::kFloat8E5M2))}}, 19);
  auto nosat = RunOneNode("Cast", {&x}, {{"to", Int(Code(DType::kFloat8E5M2))}, {"saturate", Int(0)}}, 19);
  ASSERT_TRUE(sat.ok() && nosat.ok());
  EXPECT_EQ(Values((*sat)[0]), (std::vector<double>{57344, -57344}));
  EXPECT_EQ(Values((*nosat)[0]), (std::vector<double>{HUGE_VAL, -HUGE_VAL}));
}

TEST(CastOp, RoundModeForE8M0) {
  Tensor x = F32({1.1f, 3.f}, {2});
  for (auto [mode, want] :
       {std::pair<const char*, std::vector<double>>{"up", {2, 4}}, {"down", {1, 2}}, {"nearest", {1, 4}}}) {
    auto y =
        RunOneNode("Cast", {&x}, {{"to", Int(Code(DType::kFloat8E8M0))}, {"round_mode", Attribute::String(mode)}}, 24);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    EXPECT_EQ(Values((*y)[0]), want) << mode;
  }
  auto bad =
      RunOneNode("Cast", {&x}, {{"to", Int(Code(DType::kFloat8E8M0))}, {"round_mode", Attribute::String("odd")}}, 24);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("round_mode 'odd'"), std::string::npos) << bad.status().ToString();
}

TEST(CastOp, CastLikeTakesTheSecondInputsType) {
  Tensor x = F32({-9, -1, 7, 8}, {4});
  Tensor like = Tensor::Alloc(DType::kInt4, {0});
  auto y = RunOneNode("CastLike", {&x, &like}, {}, 21);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ((*y)[0].dtype(), DType::kInt4);
  EXPECT_EQ(Values((*y)[0]), (std::vector<double>{0, -1, 7, 0}));
}

TEST(CastOp, TypesNewerThanTheOpsetAreErrors) {
  Tensor x = F32({1}, {1});
  auto old = RunOneNode("Cast", {&x}, {{"to", Int(Code(DType::kInt2))}}, 24);  // int2 arrived in Cast-25
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(old.status().ToString().find("has no i2 (added in opset 25)"), std::string::npos)
      << old.status().ToString();
  auto c64 = RunOneNode("Cast", {&x}, {{"to", Int(Code(DType::kComplex64))}}, 24);
  ASSERT_FALSE(c64.ok());
  EXPECT_EQ(c64.status().code(), StatusCode::kUnsupported);
}

TEST(QuantizeOp, Int4PerAxisWithZeroPoint) {
  // test_quantizelinear_int4: x / scale rounded half to even, + zero point 1, saturated to [-8, 7].
  Tensor x = F32({0, 2.5f, 4.8f, 8.6f, -30, -20, 6, 9, 12, 15, 16, 40}, {3, 4});
  Tensor s = F32({2, 3, 4}, {3});
  Tensor zp = Small(DType::kInt4, {1, 1, 1}, {3});
  auto y = RunOneNode("QuantizeLinear", {&x, &s, &zp}, {{"axis", Int(0)}}, 21);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ((*y)[0].dtype(), DType::kInt4);
  EXPECT_EQ(Values((*y)[0]), (std::vector<double>{1, 2, 3, 5, -8, -6, 3, 4, 4, 5, 5, 7}));
  // The packed bytes: element 0 in the low nibble.
  EXPECT_EQ((*y)[0].nbytes(), 6u);
  EXPECT_EQ((*y)[0].data<uint8_t>()[0], 0x21);
}

TEST(QuantizeOp, Int2AndUint2Saturate) {
  Tensor x = F32({0, 2.5f, 4.8f, 8.6f, -4, -3, 1, 2, -0.f, -2.5f, -4.8f, -8.6f}, {3, 4});
  Tensor s = F32({2, 3, 4}, {3});
  auto y = RunOneNode("QuantizeLinear", {&x, &s}, {{"axis", Int(0)}, {"output_dtype", Int(Code(DType::kInt2))}}, 25);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(Values((*y)[0]), (std::vector<double>{0, 1, 1, 1, -1, -1, 0, 1, 0, -1, -1, -2}));
  auto u = RunOneNode("QuantizeLinear", {&x, &s}, {{"axis", Int(0)}, {"output_dtype", Int(Code(DType::kUInt2))}}, 25);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(Values((*u)[0]), (std::vector<double>{0, 1, 2, 3, 0, 0, 0, 1, 0, 0, 0, 0}));
  auto old = RunOneNode("QuantizeLinear", {&x, &s}, {{"axis", Int(0)}, {"output_dtype", Int(Code(DType::kInt2))}}, 23);
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.status().ToString().find("needs opset 25"), std::string::npos) << old.status().ToString();
}

TEST(QuantizeOp, Float8SaturateAndZeroPoint) {
  Tensor x = F32({0, 1, 2, 100000, 200}, {5});
  Tensor s = F32({2}, {});
  Tensor zp = Small(DType::kFloat8E4M3FN, {0}, {1});
  auto y = RunOneNode("QuantizeLinear", {&x, &s, &zp}, {}, 19);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(Values((*y)[0]), (std::vector<double>{0, 0.5, 1, 448, 96}));
  auto nosat = RunOneNode("QuantizeLinear", {&x, &s, &zp}, {{"saturate", Int(0)}}, 19);
  ASSERT_TRUE(nosat.ok());
  EXPECT_TRUE(std::isnan(ElementAsDouble((*nosat)[0], 3)));
  Tensor zp1 = Small(DType::kFloat8E4M3FN, {1}, {1});
  auto bad = RunOneNode("QuantizeLinear", {&x, &s, &zp1}, {}, 19);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("float8 zero point must be 0"), std::string::npos) << bad.status().ToString();
}

TEST(QuantizeOp, Float4AddsTheZeroPoint) {
  Tensor x = F32({0, 2.5f, 4.8f, 8.6f, -30, -20, 6, 9, -0.f, -2.5f, -4.8f, -8.6f}, {3, 4});
  Tensor s = F32({2, 3, 4}, {3});
  Tensor zp = Small(DType::kFloat4E2M1, {0, 0, 1}, {3});
  auto y = RunOneNode("QuantizeLinear", {&x, &s, &zp}, {{"axis", Int(0)}}, 23);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  // Row 2 has zero point 1: -0.625 + 1 = 0.375 -> 0.5, -1.2 + 1 -> 0 (-0.2), -2.15 + 1 -> -1.
  EXPECT_EQ(Values((*y)[0]), (std::vector<double>{0, 1, 2, 4, -6, -6, 2, 3, 1, 0.5, -0, -1}));
}

TEST(QuantizeOp, DivisionInTheInputsPromotedType) {
  // 6.25 / 0.59521484375 = 10.5004...: float16 division gives exactly 10.5 (-> 10, ties to even),
  // float32 keeps 10.5004 (-> 11), as NumPy computes f16/f16 in f16 and f16/f32 in f32.
  Tensor x = F16({6.25f}, {1});
  Tensor s16 = F16({0.59521484375f}, {});
  Tensor s32 = F32({0.59521484375f}, {});
  Tensor zp = Tensor::FromVector(DType::kInt8, std::vector<int8_t>{0}, {});
  auto a = RunOneNode("QuantizeLinear", {&x, &s16, &zp}, {}, 21);
  auto b = RunOneNode("QuantizeLinear", {&x, &s32, &zp}, {}, 21);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ElementAsInt64((*a)[0], 0), 10);
  EXPECT_EQ(ElementAsInt64((*b)[0], 0), 11);
  // `precision` (opset 23): both operands rounded to float16 first.
  Tensor x32 = F32({2.5003f}, {1});
  Tensor one = F32({1}, {});
  auto p = RunOneNode("QuantizeLinear", {&x32, &one, &zp}, {{"precision", Int(Code(DType::kFloat16))}}, 23);
  auto q = RunOneNode("QuantizeLinear", {&x32, &one, &zp}, {}, 23);
  ASSERT_TRUE(p.ok() && q.ok()) << p.status().ToString();
  EXPECT_EQ(ElementAsInt64((*p)[0], 0), 2);
  EXPECT_EQ(ElementAsInt64((*q)[0], 0), 3);
}

TEST(QuantizeOp, BlockedInt4) {
  // Blocks of 2 along axis 1; scale [2, 2], zero points int4.
  Tensor x = F32({1, 2, 3, 4, -8, -6, 10, 20}, {2, 4});
  Tensor s = F32({1, 2, 2, 4}, {2, 2});
  Tensor zp = Small(DType::kInt4, {0, 1, -1, 0}, {2, 2});
  auto y = RunOneNode("QuantizeLinear", {&x, &s, &zp}, {{"axis", Int(1)}, {"block_size", Int(2)}}, 21);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  // Row 0: 1/1, 2/1, 3/2 = 1.5 (-> 2) + 1, 4/2 + 1; row 1: -8/2 - 1, -6/2 - 1, 10/4 = 2.5 (-> 2), 20/4.
  EXPECT_EQ(Values((*y)[0]), (std::vector<double>{1, 2, 3, 3, -5, -4, 2, 5}));
}

TEST(DequantizeOp, Int4AndInt2WithZeroPoints) {
  Tensor x = Small(DType::kInt4, {0, 1, 7, -4, -8}, {5});
  Tensor s = F32({2}, {});
  Tensor zp = Small(DType::kInt4, {1}, {1});
  auto y = RunOneNode("DequantizeLinear", {&x, &s, &zp}, {{"axis", Int(0)}}, 21);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(Values((*y)[0]), (std::vector<double>{-2, 0, 12, -10, -18}));
  Tensor x2 = Small(DType::kUInt2, {0, 1, 2, 3}, {4});
  Tensor zp2 = Small(DType::kUInt2, {1}, {1});
  auto y2 = RunOneNode("DequantizeLinear", {&x2, &s, &zp2}, {{"axis", Int(0)}}, 25);
  ASSERT_TRUE(y2.ok()) << y2.status().ToString();
  EXPECT_EQ(Values((*y2)[0]), (std::vector<double>{-2, 0, 2, 4}));
  Tensor zp8 = Tensor::FromVector(DType::kUInt8, std::vector<uint8_t>{1}, {1});
  auto mixed = RunOneNode("DequantizeLinear", {&x2, &s, &zp8}, {{"axis", Int(0)}}, 25);
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().ToString().find("zero point type u8 != input type u2"), std::string::npos);
}

TEST(DequantizeOp, Float8ToFloat16AndE8M0Scales) {
  Tensor x = Small(DType::kFloat8E4M3FN, {0, 0.5f, 1, 448, -104}, {5});
  Tensor s = F16({2}, {});
  auto y = RunOneNode("DequantizeLinear", {&x, &s}, {}, 19);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ((*y)[0].dtype(), DType::kFloat16);
  EXPECT_EQ(Values((*y)[0]), (std::vector<double>{0, 1, 2, 896, -208}));
  Tensor zp = Small(DType::kFloat8E4M3FN, {0.5f}, {});
  auto bad = RunOneNode("DequantizeLinear", {&x, &s, &zp}, {}, 19);
  ASSERT_FALSE(bad.ok());
  // An e8m0 scale (a power of two) needs output_dtype.
  Tensor q = Tensor::FromVector(DType::kInt8, std::vector<int8_t>{1, 2, -3}, {3});
  Tensor e8 = Small(DType::kFloat8E8M0, {8}, {});
  auto z = RunOneNode("DequantizeLinear", {&q, &e8}, {{"output_dtype", Int(Code(DType::kFloat32))}}, 24);
  ASSERT_TRUE(z.ok()) << z.status().ToString();
  EXPECT_EQ(Values((*z)[0]), (std::vector<double>{8, 16, -24}));
  auto no_out = RunOneNode("DequantizeLinear", {&q, &e8}, {}, 24);
  ASSERT_FALSE(no_out.ok());
  EXPECT_NE(no_out.status().ToString().find("needs output_dtype"), std::string::npos) << no_out.status().ToString();
  auto old = RunOneNode("DequantizeLinear", {&q, &e8}, {{"output_dtype", Int(Code(DType::kFloat32))}}, 23);
  ASSERT_FALSE(old.ok());
}

TEST(QuantizeRoundTrip, Int4BlockedWeights) {
  // Quantize random weights to int4 in blocks of 4 and back: within half a step of the scale.
  Tensor w = Random({4, 8}, 7);
  Tensor s = Tensor::Alloc(DType::kFloat32, {4, 2});
  for (int64_t i = 0; i < 8; ++i) s.mutable_data<float>()[i] = 0.125f;
  auto q = RunOneNode("QuantizeLinear", {&w, &s},
                      {{"axis", Int(1)}, {"block_size", Int(4)}, {"output_dtype", Int(Code(DType::kInt4))}}, 21);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  auto d = RunOneNode("DequantizeLinear", {&(*q)[0], &s}, {{"axis", Int(1)}, {"block_size", Int(4)}}, 21);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float want = std::clamp(w.data<float>()[i], -1.0f, 7 * 0.125f);
    EXPECT_NEAR(ElementAsDouble((*d)[0], i), want, 0.0625 + 1e-6) << i;
  }
}

}  // namespace
}  // namespace sampan::ops::testing
