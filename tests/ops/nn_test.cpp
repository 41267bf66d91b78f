// NN ops (conv, conv_transpose, pool, gemm, matmul, resize): symbolic shape
// inference, error cases and numerics the ONNX conformance cases do not cover
// (im2col tiling, groups + dilation + asymmetric pads, broadcast batches).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/run_node.h"

namespace sampan::ops {
namespace {

using ir::Dim;
using ir::TensorType;

struct OneNode {
  ir::Graph g;
  ir::Node* node = nullptr;
};

std::string Name(const char* prefix, size_t i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

// One node of `op`. Inputs with a defined `constants[i]` become constants, the
// rest graph inputs of `inputs[i]`'s type. A default TensorType = omitted input.
std::unique_ptr<OneNode> MakeGraph(const std::string& op, const std::vector<TensorType>& inputs,
                                   const std::vector<Tensor>& constants, std::map<std::string, ir::Attribute> attrs,
                                   int64_t opset, size_t n_out = 1) {
  auto m = std::make_unique<OneNode>();
  m->g.opsets[""] = opset;
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i < constants.size() && constants[i].defined()) {
      ins.push_back(m->g.AddConstant(Name("c", i), constants[i]).value());
      continue;
    }
    if (inputs[i].dtype == DType::kUndefined) {
      ins.push_back(nullptr);
      continue;
    }
    ir::Value* v = m->g.AddValue(Name("in", i), inputs[i]).value();
    m->g.inputs().push_back(v);
    ins.push_back(v);
  }
  std::vector<ir::Value*> outs;
  for (size_t i = 0; i < n_out; ++i) {
    outs.push_back(m->g.AddValue(i == 0 ? std::string("out") : Name("out", i)).value());
    m->g.outputs().push_back(outs.back());
  }
  m->node = m->g.AddNode(op, ins, outs, "n").value();
  m->node->attrs = std::move(attrs);
  return m;
}

Result<TensorType> InferOne(const std::string& op, const std::vector<TensorType>& inputs,
                            std::map<std::string, ir::Attribute> attrs = {}, const std::vector<Tensor>& constants = {},
                            int64_t opset = 19) {
  auto m = MakeGraph(op, inputs, constants, std::move(attrs), opset);
  SP_RETURN_IF_ERROR(InferTypes(m->g));
  return m->g.FindValue("out")->type;
}

Result<Tensor> RunOne(const std::string& op, const std::vector<const Tensor*>& inputs,
                      std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 19) {
  std::vector<TensorType> types;
  for (const Tensor* t : inputs) types.push_back(t ? TensorType::Static(t->dtype(), t->shape()) : TensorType{});
  auto m = MakeGraph(op, types, {}, std::move(attrs), opset);
  std::vector<Tensor> outs;
  SP_RETURN_IF_ERROR(RunNode(*m->node, opset, inputs, &outs));
  return outs[0];
}

TensorType TT(std::vector<Dim> dims, DType dt = DType::kFloat32) {
  return TensorType{dt, std::move(dims)};
}
Dim K(int64_t v) {
  return Dim::Known(v);
}
Dim S(const std::string& s) {
  return Dim::Symbol(s);
}

Tensor Random(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Tensor t = Tensor::Alloc(DType::kFloat32, shape);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// ---- shape inference -------------------------------------------------------------

TEST(NnOpsInfer, ConvKeepsSymbolicBatch) {
  auto t = InferOne("Conv", {TT({S("N"), K(3), K(224), K(224)}), TT({K(64), K(3), K(7), K(7)})},
                    {{"strides", ir::Attribute::Ints({2, 2})}, {"pads", ir::Attribute::Ints({3, 3, 3, 3})}});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ToString(), TT({S("N"), K(64), K(112), K(112)}).ToString());
}

TEST(NnOpsInfer, ConvUnknownSpatialAndSameUpper) {
  auto t = InferOne("Conv", {TT({S("N"), K(8), S("H"), K(15)}), TT({K(16), K(4), K(3), K(3)})},
                    {{"group", ir::Attribute::Int(2)},
                     {"auto_pad", ir::Attribute::String("SAME_UPPER")},
                     {"strides", ir::Attribute::Ints({2, 2})}});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(t->dims.has_value());
  EXPECT_EQ((*t->dims)[1].value, 16);
  EXPECT_FALSE((*t->dims)[2].known());
  EXPECT_EQ((*t->dims)[3].value, 8);
}

TEST(NnOpsInfer, ConvErrors) {
  // Channel mismatch.
  auto t = InferOne("Conv", {TT({K(1), K(3), K(8), K(8)}), TT({K(4), K(2), K(3), K(3)})});
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  // Bad auto_pad.
  t = InferOne("Conv", {TT({K(1), K(3), K(8), K(8)}), TT({K(4), K(3), K(3), K(3)})},
               {{"auto_pad", ir::Attribute::String("SAME_MIDDLE")}});
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  // Wrong strides length.
  t = InferOne("Conv", {TT({K(1), K(3), K(8), K(8)}), TT({K(4), K(3), K(3), K(3)})},
               {{"strides", ir::Attribute::Ints({1})}});
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  // Kernel bigger than input.
  t = InferOne("Conv", {TT({K(1), K(3), K(2), K(2)}), TT({K(4), K(3), K(3), K(3)})});
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

TEST(NnOpsInfer, PoolMissingKernelShape) {
  auto t = InferOne("MaxPool", {TT({K(1), K(3), K(8), K(8)})});
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  t = InferOne("AveragePool", {TT({K(1), K(3), K(8), K(8)})}, {{"kernel_shape", ir::Attribute::Ints({2})}});
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

TEST(NnOpsInfer, MaxPoolCeilModeAndGlobal) {
  auto t = InferOne("MaxPool", {TT({S("N"), K(64), K(112), K(112)})},
                    {{"kernel_shape", ir::Attribute::Ints({3, 3})},
                     {"strides", ir::Attribute::Ints({2, 2})},
                     {"ceil_mode", ir::Attribute::Int(1)}});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ToString(), TT({S("N"), K(64), K(56), K(56)}).ToString());
  t = InferOne("GlobalAveragePool", {TT({S("N"), S("C"), S("H"), S("W")})});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ToString(), TT({S("N"), S("C"), K(1), K(1)}).ToString());
}

TEST(NnOpsInfer, MatMulBroadcastAndErrors) {
  auto t = InferOne("MatMul", {TT({S("B"), S("S"), K(384)}), TT({K(384), K(1536)})});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ToString(), TT({S("B"), S("S"), K(1536)}).ToString());
  t = InferOne("MatMul", {TT({K(2), K(1), K(4), K(5)}), TT({K(3), K(5), K(6)})});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ToString(), TT({K(2), K(3), K(4), K(6)}).ToString());
  t = InferOne("MatMul", {TT({K(5)}), TT({K(5)})});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ToString(), TT({}).ToString());
  t = InferOne("MatMul", {TT({K(4), K(5)}), TT({K(6), K(7)})});
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

TEST(NnOpsInfer, GemmShapes) {
  auto t = InferOne("Gemm", {TT({S("N"), K(2048)}), TT({K(1000), K(2048)}), TT({K(1000)})},
                    {{"transB", ir::Attribute::Int(1)}});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ToString(), TT({S("N"), K(1000)}).ToString());
  t = InferOne("Gemm", {TT({K(3), K(4)}), TT({K(5), K(6)})});
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

TEST(NnOpsInfer, ResizeScalesConstant) {
  Tensor scales = Tensor::FromVector(DType::kFloat32, std::vector<float>{1, 1, 2, 2}, {4});
  auto t = InferOne("Resize", {TT({S("N"), K(256), K(20), S("W")}), TensorType{}, TT({K(4)})},
                    {{"mode", ir::Attribute::String("nearest")}}, {Tensor(), Tensor(), scales});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ToString(), TT({S("N"), K(256), K(40), Dim::Unknown()}).ToString());
  // Unknown sizes: rank kept, resized dims unknown.
  t = InferOne("Resize", {TT({K(1), K(3), K(20), K(20)}), TensorType{}, TensorType{}, TT({K(4)}, DType::kInt64)});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(t->dims.has_value());
  EXPECT_EQ(t->dims->size(), 4u);
  // Bad mode.
  t = InferOne("Resize", {TT({K(1), K(3), K(20), K(20)}), TensorType{}, TT({K(4)})},
               {{"mode", ir::Attribute::String("bogus")}}, {Tensor(), Tensor(), scales});
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

TEST(NnOpsInfer, ConvTransposeOutputSize) {
  auto t = InferOne("ConvTranspose", {TT({S("N"), K(16), K(10), K(10)}), TT({K(16), K(8), K(4), K(4)})},
                    {{"strides", ir::Attribute::Ints({2, 2})}, {"pads", ir::Attribute::Ints({1, 1, 1, 1})}});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ToString(), TT({S("N"), K(8), K(20), K(20)}).ToString());
}

// ---- numerics ----------------------------------------------------------------------

// Direct N-D (2-D here) convolution, the obvious way.
std::vector<float> NaiveConv2d(const Tensor& x, const Tensor& w, const Tensor* b, int64_t group, std::vector<int64_t> s,
                               std::vector<int64_t> d, std::vector<int64_t> p, Shape* out) {
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t M = w.dim(0), kh = w.dim(2), kw = w.dim(3), Cg = C / group, Mg = M / group;
  const int64_t OH = (H + p[0] + p[2] - ((kh - 1) * d[0] + 1)) / s[0] + 1;
  const int64_t OW = (W + p[1] + p[3] - ((kw - 1) * d[1] + 1)) / s[1] + 1;
  *out = {N, M, OH, OW};
  std::vector<float> y(static_cast<size_t>(N * M * OH * OW));
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = b ? b->data<float>()[m] : 0.0;
          const int64_t g = m / Mg;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = oh * s[0] - p[0] + i * d[0], iw = ow * s[1] - p[1] + j * d[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += px[((n * C + g * Cg + c) * H + ih) * W + iw] * pw[((m * Cg + c) * kh + i) * kw + j];
              }
          y[static_cast<size_t>(((n * M + m) * OH + oh) * OW + ow)] = static_cast<float>(acc);
        }
  return y;
}

void ExpectClose(const Tensor& got, const std::vector<float>& want, const Shape& shape) {
  ASSERT_EQ(got.shape(), shape);
  const float* p = got.data<float>();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(p[i], want[i], 1e-4 + 1e-4 * std::abs(want[i])) << "at " << i;
}

TEST(NnOpsRun, ConvGroupsDilationAsymmetricPads) {
  Tensor x = Random({2, 6, 11, 13}, 1), w = Random({4, 3, 3, 2}, 2), b = Random({4}, 3);
  std::map<std::string, ir::Attribute> attrs = {{"group", ir::Attribute::Int(2)},
                                                {"strides", ir::Attribute::Ints({2, 1})},
                                                {"dilations", ir::Attribute::Ints({1, 2})},
                                                {"pads", ir::Attribute::Ints({1, 0, 2, 3})}};
  auto y = RunOne("Conv", {&x, &w, &b}, attrs);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  Shape shape;
  auto want = NaiveConv2d(x, w, &b, 2, {2, 1}, {1, 2}, {1, 0, 2, 3}, &shape);
  ExpectClose(*y, want, shape);
}

TEST(NnOpsRun, ConvManyTilesAndDepthwise) {
  // K = 64*9 = 576 -> the im2col buffer holds ~1820 columns, so 50x50 needs two tiles.
  Tensor x = Random({1, 64, 50, 50}, 4), w = Random({5, 64, 3, 3}, 5);
  auto y = RunOne("Conv", {&x, &w}, {{"pads", ir::Attribute::Ints({1, 1, 1, 1})}});
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  Shape shape;
  ExpectClose(*y, NaiveConv2d(x, w, nullptr, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}, &shape), shape);
  Tensor wd = Random({64, 1, 3, 3}, 6);
  y = RunOne("Conv", {&x, &wd},
             {{"group", ir::Attribute::Int(64)},
              {"strides", ir::Attribute::Ints({2, 2})},
              {"pads", ir::Attribute::Ints({1, 1, 1, 1})}});
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  ExpectClose(*y, NaiveConv2d(x, wd, nullptr, 64, {2, 2}, {1, 1}, {1, 1, 1, 1}, &shape), shape);
}

TEST(NnOpsRun, MatMulBroadcastBatchAndVector) {
  Tensor a = Random({2, 1, 3, 4}, 7), b = Random({3, 4, 5}, 8);
  auto y = RunOne("MatMul", {&a, &b});
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  ASSERT_EQ(y->shape(), (Shape{2, 3, 3, 5}));
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const float* py = y->data<float>();
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t m = 0; m < 3; ++m)
        for (int64_t n = 0; n < 5; ++n) {
          float acc = 0;
          for (int64_t k = 0; k < 4; ++k) acc += pa[(i * 3 + m) * 4 + k] * pb[(j * 4 + k) * 5 + n];
          EXPECT_NEAR(py[((i * 3 + j) * 3 + m) * 5 + n], acc, 1e-5);
        }
  Tensor v = Random({4}, 9);
  y = RunOne("MatMul", {&v, &b});
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->shape(), (Shape{3, 5}));
}

TEST(NnOpsRun, GemmTransBBroadcastC) {
  Tensor a = Random({3, 4}, 10), b = Random({5, 4}, 11), c = Random({1, 5}, 12);
  auto y = RunOne(
      "Gemm", {&a, &b, &c},
      {{"transB", ir::Attribute::Int(1)}, {"alpha", ir::Attribute::Float(0.5f)}, {"beta", ir::Attribute::Float(2.f)}});
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  ASSERT_EQ(y->shape(), (Shape{3, 5}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      float acc = 0;
      for (int64_t k = 0; k < 4; ++k) acc += a.data<float>()[i * 4 + k] * b.data<float>()[j * 4 + k];
      EXPECT_NEAR(y->data<float>()[i * 5 + j], 0.5f * acc + 2.f * c.data<float>()[j], 1e-5);
    }
}

TEST(NnOpsRun, ResizeNearestUint8AndLinearHalfPixel) {
  Tensor x = Tensor::FromVector(DType::kUInt8, std::vector<int>{10, 20, 30, 40}, {1, 1, 2, 2});
  Tensor scales = Tensor::FromVector(DType::kFloat32, std::vector<float>{1, 1, 2, 2}, {4});
  auto y = RunOne("Resize", {&x, nullptr, &scales}, {{"mode", ir::Attribute::String("nearest")}});
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  ASSERT_EQ(y->shape(), (Shape{1, 1, 4, 4}));
  const uint8_t* p = y->data<uint8_t>();
  EXPECT_EQ(p[0], 10);
  EXPECT_EQ(p[3], 20);
  EXPECT_EQ(p[15], 40);
  Tensor xf = Tensor::FromVector(DType::kFloat32, std::vector<float>{0, 4}, {1, 2});
  Tensor s2 = Tensor::FromVector(DType::kFloat32, std::vector<float>{1, 2}, {2});
  y = RunOne("Resize", {&xf, nullptr, &s2}, {{"mode", ir::Attribute::String("linear")}});
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  ASSERT_EQ(y->shape(), (Shape{1, 4}));
  const float want[4] = {0, 1, 3, 4};  // half_pixel: x_orig = -0.25, 0.25, 0.75, 1.25 (edge-clamped)
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y->data<float>()[i], want[i], 1e-6);
}

TEST(NnOpsRun, MaxPoolIndicesAndAveragePoolPads) {
  Tensor x = Random({1, 2, 5, 5}, 13);
  std::vector<TensorType> types = {TensorType::Static(DType::kFloat32, x.shape())};
  auto m = MakeGraph("MaxPool", types, {},
                     {{"kernel_shape", ir::Attribute::Ints({2, 2})}, {"strides", ir::Attribute::Ints({2, 2})}}, 19, 2);
  std::vector<Tensor> outs;
  ASSERT_TRUE(RunNode(*m->node, 19, {&x}, &outs).ok());
  ASSERT_EQ(outs[1].dtype(), DType::kInt64);
  const float* px = x.data<float>();
  for (int64_t i = 0; i < outs[0].numel(); ++i) EXPECT_EQ(outs[0].data<float>()[i], px[outs[1].data<int64_t>()[i]]);
  auto y = RunOne("AveragePool", {&x},
                  {{"kernel_shape", ir::Attribute::Ints({3, 3})}, {"pads", ir::Attribute::Ints({1, 1, 1, 1})}});
  ASSERT_TRUE(y.ok());
  // Corner: average of the 2x2 valid taps (count_include_pad = 0).
  const float corner = (px[0] + px[1] + px[5] + px[6]) / 4;
  EXPECT_NEAR(y->data<float>()[0], corner, 1e-6);
}

}  // namespace
}  // namespace sampan::ops
