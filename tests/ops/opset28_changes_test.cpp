// What opsets 27 and 28 changed in existing ops: Mod's fmod=0 on floats,
// BitShift on signed integers, SpaceToDepth's mode, Range on float16/bfloat16
// with stash_type, ReduceLogSum(Exp) without integers, Celu on every float type.
// Each change applies from its opset on; before it the old contract holds.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)
using ir::Attribute;

template <class T>
Tensor Vec(DType dt, const std::vector<T>& v, Shape shape) {
  return Tensor::FromVector<T>(dt, v, std::move(shape));
}

Status InferStatus(const std::string& op, const std::vector<ir::TensorType>& inputs,
                   std::map<std::string, Attribute> attrs, int64_t opset) {
  auto m = MakeGraph(op, inputs, std::move(attrs), opset, 1);
  return InferTypes(m->g);
}

void ExpectNamesNode(const Status& st, StatusCode code, const std::string& op) {
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.ToString().find(op + " 'n'"), std::string::npos) << st.ToString();
}

// ---- Mod-28: fmod=0 on floats is x - floor(x / y) * y (the sign of y).

TEST(Opset28Mod, FloorModOnFloats) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor a =
      Vec<float>(DType::kFloat32, {5.5f, -5.5f, 5.5f, -5.5f, 0.f, -0.f, 0.f, inf, 1.f, 1.f, -1.f, 1.f}, {12});
  const Tensor b = Vec<float>(DType::kFloat32, {2.f, 2.f, -2.f, -2.f, 3.f, 3.f, -3.f, 2.f, 0.f, inf, inf, -inf}, {12});
  auto r = RunOneNode("Mod", {&a, &b}, {}, 28);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const float* y = (*r)[0].data<float>();
  const float want[] = {1.5f, 0.5f, -0.5f, -1.5f, 0.f, 0.f, -0.f};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(y[i], want[i]) << i;
    EXPECT_EQ(std::signbit(y[i]), std::signbit(want[i])) << "sign of element " << i;
  }
  EXPECT_TRUE(std::isnan(y[7]));  // inf mod 2
  EXPECT_TRUE(std::isnan(y[8]));  // 1 mod 0
  EXPECT_EQ(y[9], 1.f);           // same signs: x
  EXPECT_EQ(y[10], inf);          // signs differ: y
  EXPECT_EQ(y[11], -inf);
}

TEST(Opset28Mod, Float16FloorModAndFmodStillTruncates) {
  const Tensor a = Vec<float>(DType::kFloat16, {-7.f, 7.f}, {2});
  const Tensor b = Vec<float>(DType::kFloat16, {3.f, -3.f}, {2});
  auto floor_mod = RunOneNode("Mod", {&a, &b}, {}, 28);
  ASSERT_TRUE(floor_mod.ok()) << floor_mod.status().ToString();
  EXPECT_EQ(static_cast<float>((*floor_mod)[0].data<Half>()[0]), 2.f);
  EXPECT_EQ(static_cast<float>((*floor_mod)[0].data<Half>()[1]), -2.f);
  auto trunc_mod = RunOneNode("Mod", {&a, &b}, {{"fmod", Attribute::Int(1)}}, 28);
  ASSERT_TRUE(trunc_mod.ok()) << trunc_mod.status().ToString();
  EXPECT_EQ(static_cast<float>((*trunc_mod)[0].data<Half>()[0]), -1.f);
  EXPECT_EQ(static_cast<float>((*trunc_mod)[0].data<Half>()[1]), 1.f);
}

TEST(Opset28Mod, FloatFmod0BeforeOpset28IsAnError) {
  const Tensor a = Vec<float>(DType::kFloat32, {1.f}, {1});
  auto r = RunOneNode("Mod", {&a, &a}, {}, 13);
  ExpectNamesNode(r.status(), StatusCode::kInvalidArgument, "Mod");
  EXPECT_NE(r.status().ToString().find("opset 28"), std::string::npos) << r.status().ToString();
}

// ---- BitShift-28: signed types; out-of-range shifts leave the sign fill.

TEST(Opset28BitShift, SignedRightIsArithmetic) {
  const Tensor x = Vec<int>(DType::kInt8, {-128, -7, 64, -1, -5, 5}, {6});
  const Tensor s = Vec<int>(DType::kInt8, {1, 1, 8, -1, 100, -3}, {6});
  auto r = RunOneNode("BitShift", {&x, &s}, {{"direction", Attribute::String("RIGHT")}}, 28);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const int8_t want[] = {-64, -4, 0, -1, -1, 0};
  for (int i = 0; i < 6; ++i) EXPECT_EQ((*r)[0].data<int8_t>()[i], want[i]) << i;
}

TEST(Opset28BitShift, SignedLeftDropsBitsPastTheSignBit) {
  const Tensor x = Vec<int>(DType::kInt32, {-1, 1 << 30, 1, 5, 3}, {5});
  const Tensor s = Vec<int>(DType::kInt32, {1, 1, 31, -2, 32}, {5});
  auto r = RunOneNode("BitShift", {&x, &s}, {{"direction", Attribute::String("LEFT")}}, 28);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const int32_t want[] = {-2, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::min(), 0, 0};
  for (int i = 0; i < 5; ++i) EXPECT_EQ((*r)[0].data<int32_t>()[i], want[i]) << i;
}

TEST(Opset28BitShift, UnsignedUnchangedAndSignedNeedsOpset28) {
  const Tensor x = Vec<int>(DType::kUInt8, {255, 255, 1}, {3});
  const Tensor s = Vec<int>(DType::kUInt8, {9, 4, 7}, {3});
  auto r = RunOneNode("BitShift", {&x, &s}, {{"direction", Attribute::String("RIGHT")}}, 11);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].data<uint8_t>()[0], 0);
  EXPECT_EQ((*r)[0].data<uint8_t>()[1], 15);
  EXPECT_EQ((*r)[0].data<uint8_t>()[2], 0);
  const Tensor xi = Vec<int>(DType::kInt16, {1}, {1});
  auto old = RunOneNode("BitShift", {&xi, &xi}, {{"direction", Attribute::String("LEFT")}}, 27);
  ExpectNamesNode(old.status(), StatusCode::kInvalidArgument, "BitShift");
}

// ---- SpaceToDepth-28: mode DCR (default) or CRD.

TEST(Opset28SpaceToDepth, CrdAndDcrOrderTheBlock) {
  // x[c][h][w] = 4c + 2h + w, C=2, 2x2, blocksize 2 -> 8 channels of 1x1.
  const Tensor x = Vec<float>(DType::kFloat32, {0, 1, 2, 3, 4, 5, 6, 7}, {1, 2, 2, 2});
  const std::map<std::string, Attribute> bs = {{"blocksize", Attribute::Int(2)}};
  auto dcr = RunOneNode("SpaceToDepth", {&x}, bs, 28);
  ASSERT_TRUE(dcr.ok()) << dcr.status().ToString();
  ASSERT_EQ((*dcr)[0].shape(), (Shape{1, 8, 1, 1}));
  const float want_dcr[] = {0, 4, 1, 5, 2, 6, 3, 7};  // channel (i * 2 + j) * C + c
  for (int i = 0; i < 8; ++i) EXPECT_EQ((*dcr)[0].data<float>()[i], want_dcr[i]) << i;
  auto crd_attrs = bs;
  crd_attrs["mode"] = Attribute::String("CRD");
  auto crd = RunOneNode("SpaceToDepth", {&x}, crd_attrs, 28);
  ASSERT_TRUE(crd.ok()) << crd.status().ToString();
  for (int i = 0; i < 8; ++i) EXPECT_EQ((*crd)[0].data<float>()[i], static_cast<float>(i)) << i;
  // CRD is the inverse of DepthToSpace CRD.
  auto back = RunOneNode("DepthToSpace", {&(*crd)[0]}, crd_attrs, 28);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  for (int i = 0; i < 8; ++i) EXPECT_EQ((*back)[0].data<float>()[i], x.data<float>()[i]) << i;
}

TEST(Opset28SpaceToDepth, ModeErrors) {
  const std::vector<ir::TensorType> in = {TT({K(1), K(2), K(2), K(2)})};
  ExpectNamesNode(
      InferStatus("SpaceToDepth", in, {{"blocksize", Attribute::Int(2)}, {"mode", Attribute::String("CRD")}}, 13),
      StatusCode::kInvalidArgument, "SpaceToDepth");
  ExpectNamesNode(
      InferStatus("SpaceToDepth", in, {{"blocksize", Attribute::Int(2)}, {"mode", Attribute::String("RCD")}}, 28),
      StatusCode::kInvalidArgument, "SpaceToDepth");
}

// ---- Range-27: float16/bfloat16, start + i * delta in the stash type.

TEST(Opset27Range, Float16ComputedInFloat) {
  // 2048 + 1 == 2048 in float16: repeated float16 additions would stall; start + i * delta
  // in float, rounded once, gives 2048, 2049 -> 2048 (ties to even), 2050, 2051 -> 2052.
  const Tensor s = Vec<float>(DType::kFloat16, {2048.f}, {});
  const Tensor l = Vec<float>(DType::kFloat16, {2052.f}, {});
  const Tensor d = Vec<float>(DType::kFloat16, {1.f}, {});
  auto r = RunOneNode("Range", {&s, &l, &d}, {}, 27);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{4}));
  const float want[] = {2048.f, 2048.f, 2050.f, 2052.f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(static_cast<float>((*r)[0].data<Half>()[i]), want[i]) << i;
}

TEST(Opset27Range, BFloat16WithDoubleStash) {
  const Tensor s = Vec<float>(DType::kBFloat16, {1.f}, {});
  const Tensor l = Vec<float>(DType::kBFloat16, {-2.f}, {});
  const Tensor d = Vec<float>(DType::kBFloat16, {-1.5f}, {});
  auto r = RunOneNode("Range", {&s, &l, &d}, {{"stash_type", Attribute::Int(11)}}, 27);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{2}));
  EXPECT_EQ(static_cast<float>((*r)[0].data<BFloat16>()[0]), 1.f);
  EXPECT_EQ(static_cast<float>((*r)[0].data<BFloat16>()[1]), -0.5f);
}

TEST(Opset27Range, Errors) {
  const std::vector<ir::TensorType> h = {TT({}, DType::kFloat16), TT({}, DType::kFloat16), TT({}, DType::kFloat16)};
  EXPECT_EQ(InferStatus("Range", h, {}, 26).code(), StatusCode::kUnsupported);
  ExpectNamesNode(InferStatus("Range", h, {{"stash_type", Attribute::Int(10)}}, 27), StatusCode::kUnsupported, "Range");
  const std::vector<ir::TensorType> f = {TT({}), TT({}), TT({})};
  ExpectNamesNode(InferStatus("Range", f, {{"stash_type", Attribute::Int(1)}}, 26), StatusCode::kInvalidArgument,
                  "Range");
  EXPECT_TRUE(InferStatus("Range", f, {{"stash_type", Attribute::Int(1)}}, 27).ok());
}

// ---- ReduceLogSum(Exp)-28: floating-point types only.

TEST(Opset28ReduceLogSum, IntegersRefusedFromOpset28) {
  const std::vector<ir::TensorType> in = {TT({K(2), K(3)}, DType::kInt32)};
  EXPECT_TRUE(InferStatus("ReduceLogSum", in, {}, 18).ok());
  ExpectNamesNode(InferStatus("ReduceLogSum", in, {}, 28), StatusCode::kInvalidArgument, "ReduceLogSum");
  ExpectNamesNode(InferStatus("ReduceLogSumExp", in, {}, 28), StatusCode::kInvalidArgument, "ReduceLogSumExp");
  const Tensor x = Vec<float>(DType::kFloat32, {1.f, 2.f, 3.f, 4.f}, {2, 2});
  auto r = RunOneNode("ReduceLogSum", {&x}, {}, 28);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR((*r)[0].data<float>()[0], std::log(10.f), 1e-6);
}

// ---- Celu-28: float16, bfloat16 and double besides float.

TEST(Opset28Celu, Float16) {
  const Tensor x = Vec<float>(DType::kFloat16, {-1.f, 0.f, 2.f}, {3});
  auto r = RunOneNode("Celu", {&x}, {{"alpha", Attribute::Float(2.f)}}, 28);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // alpha * expm1(x / alpha) = 2 * (e^-0.5 - 1) = -0.786938
  EXPECT_NEAR(static_cast<float>((*r)[0].data<Half>()[0]), -0.786938f, 1e-3);
  EXPECT_EQ(static_cast<float>((*r)[0].data<Half>()[1]), 0.f);
  EXPECT_EQ(static_cast<float>((*r)[0].data<Half>()[2]), 2.f);
}

}  // namespace
}  // namespace sampan::ops
