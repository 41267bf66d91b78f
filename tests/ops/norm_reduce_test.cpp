// Normalization, softmax, reduction, arg-reduce, TopK and CumSum ops: symbolic
// shape inference, error cases and a few numeric checks that the ONNX node
// tests do not cover.
#include <gtest/gtest.h>

#include <cmath>

#include "ir/graph.h"
#include "ops/run_node.h"

namespace sampan::ops {
namespace {

using ir::Dim;
using ir::Dims;
using ir::TensorType;

Dims Sym(std::initializer_list<Dim> d) {
  return Dims(d);
}

// One-node graph; inputs given as types (nullopt-typed name = omitted) or constants.
struct OneNode {
  ir::Graph g;
  ir::Node* node = nullptr;

  OneNode(const std::string& op, int64_t opset, const std::vector<TensorType>& inputs,
          const std::vector<Tensor>& consts = {}, size_t num_outputs = 1) {
    g.opsets[""] = opset;
    std::vector<ir::Value*> ins;
    for (size_t i = 0; i < inputs.size(); ++i) {
      ir::Value* v = g.AddValue("in" + std::to_string(i), inputs[i]).value();
      g.inputs().push_back(v);
      ins.push_back(v);
    }
    for (size_t i = 0; i < consts.size(); ++i) ins.push_back(g.AddConstant("c" + std::to_string(i), consts[i]).value());
    std::vector<ir::Value*> outs;
    for (size_t i = 0; i < num_outputs; ++i) {
      outs.push_back(g.AddValue("out" + std::to_string(i)).value());
      g.outputs().push_back(outs.back());
    }
    node = g.AddNode(op, ins, outs, "n").value();
  }
  Status Infer() { return InferTypes(g); }
  const TensorType& Out(size_t i = 0) const { return node->output(i)->type; }
};

// A node with `nout` outputs for RunNode (which takes the inputs directly).
struct Bare {
  ir::Graph g;
  ir::Node* n = nullptr;
  explicit Bare(const std::string& op, size_t nout = 1) {
    std::vector<ir::Value*> outs;
    for (size_t i = 0; i < nout; ++i) outs.push_back(g.AddValue("o" + std::to_string(i)).value());
    n = g.AddNode(op, {}, outs, "n").value();
  }
};

TEST(NormReduceOps, ReduceSymbolicKeepdims) {
  OneNode n("ReduceMean", 18, {{DType::kFloat32, Sym({Dim::Symbol("N"), Dim::Known(8), Dim::Symbol("S")})}},
            {Tensor::FromVector(DType::kInt64, std::vector<int64_t>{-1}, Shape{1})});
  ASSERT_TRUE(n.Infer().ok());
  EXPECT_EQ(n.Out().ToString(), "f32[N,8,1]");
}

TEST(NormReduceOps, ReduceSymbolicNoKeepdimsAttributeAxes) {
  OneNode n("ReduceSum", 11, {{DType::kFloat32, Sym({Dim::Symbol("N"), Dim::Known(8), Dim::Symbol("S")})}});
  n.node->attrs["axes"] = ir::Attribute::Ints({1});
  n.node->attrs["keepdims"] = ir::Attribute::Int(0);
  ASSERT_TRUE(n.Infer().ok());
  EXPECT_EQ(n.Out().ToString(), "f32[N,S]");
}

TEST(NormReduceOps, ReduceAxesInputUnknown) {
  // Axes is a graph input: rank known from its length when keepdims=0.
  OneNode n("ReduceMax", 18,
            {{DType::kFloat32, Sym({Dim::Symbol("N"), Dim::Known(8), Dim::Known(3)})},
             {DType::kInt64, Sym({Dim::Known(2)})}});
  n.node->attrs["keepdims"] = ir::Attribute::Int(0);
  ASSERT_TRUE(n.Infer().ok());
  ASSERT_TRUE(n.Out().has_rank());
  EXPECT_EQ(n.Out().dims->size(), 1u);
}

TEST(NormReduceOps, ReduceBadAxisIsInvalidArgument) {
  OneNode n("ReduceSum", 13, {{DType::kFloat32, Sym({Dim::Known(2), Dim::Known(3)})}},
            {Tensor::FromVector(DType::kInt64, std::vector<int64_t>{2}, Shape{1})});
  Status st = n.Infer();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
}

TEST(NormReduceOps, ReduceEmptyAxesNoop) {
  OneNode n("ReduceSum", 13, {{DType::kFloat32, Sym({Dim::Symbol("N"), Dim::Known(3)})}});
  n.node->attrs["noop_with_empty_axes"] = ir::Attribute::Int(1);
  ASSERT_TRUE(n.Infer().ok());
  EXPECT_EQ(n.Out().ToString(), "f32[N,3]");
}

TEST(NormReduceOps, ReduceNumericStridedAxes) {
  // x[2,3,4] = 0..23; ReduceSum over axes {0, 2} keepdims=0 -> [3].
  Bare b_("ReduceSum");
  ir::Node& node = *b_.n;
  node.attrs["keepdims"] = ir::Attribute::Int(0);
  node.attrs["axes"] = ir::Attribute::Ints({0, 2});
  std::vector<float> xs(24);
  for (int i = 0; i < 24; ++i) xs[static_cast<size_t>(i)] = static_cast<float>(i);
  Tensor x = Tensor::FromVector(DType::kFloat32, xs, Shape{2, 3, 4});
  std::vector<Tensor> out;
  ASSERT_TRUE(RunNode(node, 11, {&x}, &out).ok());
  ASSERT_EQ(out[0].shape(), (Shape{3}));
  // j: sum over i,k of 12i + 4j + k = 2*(0+1+2+3) + 8*4j + 12*4 = 12 + 32j + 48
  for (int j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(out[0].data<float>()[j], 60.f + 32.f * static_cast<float>(j));
}

TEST(NormReduceOps, SoftmaxOldOpsetFlattens) {
  // Opset 11: axis=1 normalizes over the flattened [3*2] row.
  Bare b_("Softmax");
  ir::Node& node = *b_.n;
  Tensor x = Tensor::FromVector(DType::kFloat32, std::vector<float>(6, 1.f), Shape{1, 3, 2});
  std::vector<Tensor> out;
  ASSERT_TRUE(RunNode(node, 11, {&x}, &out).ok());
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(out[0].data<float>()[i], 1.f / 6.f, 1e-6);
  ASSERT_TRUE(RunNode(node, 13, {&x}, &out).ok());  // opset 13: last axis only
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(out[0].data<float>()[i], 0.5f, 1e-6);
}

// float16/bfloat16 Softmax rounds each step to the type as the onnx reference
// (numpy + ml_dtypes) does, bfloat16 summing in bfloat16: bit-exact against it.
// Rounding only the final result differs in 4 (float16) and 12 (bfloat16) of 18.
TEST(NormReduceOps, SoftmaxReducedFloatsRoundEachStep) {
  std::vector<float> x;
  for (int i = 0; i < 18; ++i) x.push_back(static_cast<float>(((i * 5) % 23) / 8.0 - 1.375));
  // x.reshape(2, 9).astype(dt); t = x - x.max(-1, keepdims); y = exp(t); y /= y.sum(-1, keepdims)
  const std::vector<uint16_t> want_f16 = {0x2628, 0x29c0, 0x2d5f, 0x3104, 0x34b0, 0x27e7, 0x2b62, 0x2ee6, 0x3272,
                                          0x34dd, 0x281a, 0x2ba8, 0x2f28, 0x32af, 0x25a3, 0x2944, 0x2ceb, 0x3098};
  const std::vector<uint16_t> want_bf16 = {0x3cc3, 0x3d37, 0x3dab, 0x3e1f, 0x3e95, 0x3cfb, 0x3d6b, 0x3ddb, 0x3e4d,
                                           0x3e9b, 0x3d03, 0x3d75, 0x3de4, 0x3e56, 0x3cb4, 0x3d29, 0x3d9d, 0x3e13};
  Bare b_("Softmax");
  for (auto [dt, want] : {std::pair{DType::kFloat16, want_f16}, std::pair{DType::kBFloat16, want_bf16}}) {
    Tensor t = Tensor::FromVector(dt, x, Shape{2, 9});
    std::vector<Tensor> out;
    ASSERT_TRUE(RunNode(*b_.n, 13, {&t}, &out).ok());
    const auto* bits = static_cast<const uint16_t*>(out[0].raw());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(bits[i], want[i]) << DTypeName(dt) << " at " << i;
  }
}

// LpNormalization of an all-zero slice gives 0, not 0/0 = NaN (onnx >= 1.20).
TEST(NormReduceOps, LpNormZeroVectorGivesZero) {
  Bare b_("LpNormalization");
  b_.n->attrs["axis"] = ir::Attribute::Int(0);
  for (int64_t p : {1, 2}) {
    b_.n->attrs["p"] = ir::Attribute::Int(p);
    Tensor x = Tensor::FromVector(DType::kFloat32, std::vector<float>{3, 0, 4, 0}, Shape{2, 2});
    std::vector<Tensor> out;
    ASSERT_TRUE(RunNode(*b_.n, 22, {&x}, &out).ok());
    const float* y = out[0].data<float>();
    EXPECT_FLOAT_EQ(y[0], p == 2 ? 0.6f : 3.f / 7.f);
    EXPECT_FLOAT_EQ(y[2], p == 2 ? 0.8f : 4.f / 7.f);
    EXPECT_EQ(y[1], 0.f);
    EXPECT_EQ(y[3], 0.f);
  }
}

TEST(NormReduceOps, SoftmaxBadAxis) {
  OneNode n("Softmax", 13, {{DType::kFloat32, Sym({Dim::Symbol("N"), Dim::Known(3)})}});
  n.node->attrs["axis"] = ir::Attribute::Int(2);
  EXPECT_EQ(n.Infer().code(), StatusCode::kInvalidArgument);
}

TEST(NormReduceOps, ArgMaxSymbolic) {
  OneNode n("ArgMax", 13, {{DType::kFloat32, Sym({Dim::Symbol("N"), Dim::Known(5), Dim::Symbol("T")})}});
  n.node->attrs["axis"] = ir::Attribute::Int(1);
  n.node->attrs["keepdims"] = ir::Attribute::Int(0);
  ASSERT_TRUE(n.Infer().ok());
  EXPECT_EQ(n.Out().ToString(), "i64[N,T]");
}

TEST(NormReduceOps, TopKSymbolicAndUnknownK) {
  OneNode n("TopK", 11,
            {{DType::kFloat32, Sym({Dim::Symbol("N"), Dim::Known(10)})}, {DType::kInt64, Sym({Dim::Known(1)})}}, {}, 2);
  ASSERT_TRUE(n.Infer().ok());
  EXPECT_EQ(n.Out(0).ToString(), "f32[N,?]");
  EXPECT_EQ(n.Out(1).ToString(), "i64[N,?]");
}

TEST(NormReduceOps, TopKTooLargeK) {
  OneNode n("TopK", 11, {{DType::kFloat32, Sym({Dim::Symbol("N"), Dim::Known(10)})}},
            {Tensor::FromVector(DType::kInt64, std::vector<int64_t>{11}, Shape{1})}, 2);
  EXPECT_EQ(n.Infer().code(), StatusCode::kInvalidArgument);
}

TEST(NormReduceOps, TopKOpset1Attribute) {
  Bare b2_("TopK", 2);
  ir::Node* n = b2_.n;
  n->attrs["k"] = ir::Attribute::Int(2);
  Tensor x = Tensor::FromVector(DType::kFloat32, std::vector<float>{3, 1, 4, 1, 5}, Shape{5});
  std::vector<Tensor> out;
  ASSERT_TRUE(RunNode(*n, 1, {&x}, &out).ok());
  EXPECT_EQ(out[0].data<float>()[0], 5.f);
  EXPECT_EQ(out[0].data<float>()[1], 4.f);
  EXPECT_EQ(out[1].data<int64_t>()[0], 4);
  EXPECT_EQ(out[1].data<int64_t>()[1], 2);
  n->attrs.erase("k");
  EXPECT_EQ(RunNode(*n, 1, {&x}, &out).code(), StatusCode::kInvalidArgument);
}

TEST(NormReduceOps, LayerNormStatsShapes) {
  OneNode n("LayerNormalization", 17,
            {{DType::kFloat32, Sym({Dim::Symbol("B"), Dim::Symbol("S"), Dim::Known(16)})},
             {DType::kFloat32, Sym({Dim::Known(16)})}},
            {}, 3);
  ASSERT_TRUE(n.Infer().ok());
  EXPECT_EQ(n.Out(0).ToString(), "f32[B,S,16]");
  EXPECT_EQ(n.Out(1).ToString(), "f32[B,S,1]");
  EXPECT_EQ(n.Out(2).ToString(), "f32[B,S,1]");
}

TEST(NormReduceOps, LayerNormBadScale) {
  OneNode n("LayerNormalization", 17,
            {{DType::kFloat32, Sym({Dim::Symbol("B"), Dim::Known(16)})}, {DType::kFloat32, Sym({Dim::Known(8)})}});
  EXPECT_EQ(n.Infer().code(), StatusCode::kInvalidArgument);
}

TEST(NormReduceOps, GroupNormRequiresNumGroups) {
  OneNode n("GroupNormalization", 21,
            {{DType::kFloat32, Sym({Dim::Symbol("N"), Dim::Known(4), Dim::Known(2)})},
             {DType::kFloat32, Sym({Dim::Known(4)})},
             {DType::kFloat32, Sym({Dim::Known(4)})}});
  EXPECT_EQ(n.Infer().code(), StatusCode::kInvalidArgument);
  n.node->attrs["num_groups"] = ir::Attribute::Int(3);  // 4 channels not divisible by 3
  EXPECT_EQ(n.Infer().code(), StatusCode::kInvalidArgument);
  n.node->attrs["num_groups"] = ir::Attribute::Int(2);
  ASSERT_TRUE(n.Infer().ok());
  EXPECT_EQ(n.Out().ToString(), "f32[N,4,2]");
}

TEST(NormReduceOps, GroupNormOpset18PerGroupAffine) {
  // Opset 18: scale/bias have one value per group.
  Bare b_("GroupNormalization");
  ir::Node& node = *b_.n;
  node.attrs["num_groups"] = ir::Attribute::Int(2);
  node.attrs["epsilon"] = ir::Attribute::Float(0.f);
  Tensor x = Tensor::FromVector(DType::kFloat32, std::vector<float>{1, 3, 10, 30}, Shape{1, 4, 1});
  Tensor scale = Tensor::FromVector(DType::kFloat32, std::vector<float>{1, 2}, Shape{2});
  Tensor bias = Tensor::FromVector(DType::kFloat32, std::vector<float>{0, 100}, Shape{2});
  std::vector<Tensor> out;
  Status st = RunNode(node, 18, {&x, &scale, &bias}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const float* y = out[0].data<float>();
  EXPECT_NEAR(y[0], -1.f, 1e-5);
  EXPECT_NEAR(y[1], 1.f, 1e-5);
  EXPECT_NEAR(y[2], 98.f, 1e-5);
  EXPECT_NEAR(y[3], 102.f, 1e-5);
}

TEST(NormReduceOps, BatchNormTrainingOutputsOldOpsetUnsupported) {
  OneNode n("BatchNormalization", 9,
            {{DType::kFloat32, Sym({Dim::Symbol("N"), Dim::Known(2), Dim::Known(3)})},
             {DType::kFloat32, Sym({Dim::Known(2)})},
             {DType::kFloat32, Sym({Dim::Known(2)})},
             {DType::kFloat32, Sym({Dim::Known(2)})},
             {DType::kFloat32, Sym({Dim::Known(2)})}},
            {}, 3);
  EXPECT_EQ(n.Infer().code(), StatusCode::kUnsupported);
}

TEST(NormReduceOps, BatchNormInferenceNumeric) {
  Bare b_("BatchNormalization");
  ir::Node& node = *b_.n;
  node.attrs["epsilon"] = ir::Attribute::Float(0.f);
  Tensor x = Tensor::FromVector(DType::kFloat32, std::vector<float>{1, 2, 3, 4}, Shape{1, 2, 2});
  Tensor s = Tensor::FromVector(DType::kFloat32, std::vector<float>{2, 1}, Shape{2});
  Tensor b = Tensor::FromVector(DType::kFloat32, std::vector<float>{0, 1}, Shape{2});
  Tensor m = Tensor::FromVector(DType::kFloat32, std::vector<float>{1, 0}, Shape{2});
  Tensor v = Tensor::FromVector(DType::kFloat32, std::vector<float>{4, 1}, Shape{2});
  std::vector<Tensor> out;
  ASSERT_TRUE(RunNode(node, 15, {&x, &s, &b, &m, &v}, &out).ok());
  const float* y = out[0].data<float>();
  EXPECT_FLOAT_EQ(y[0], 0.f);  // (1-1)/2*2+0
  EXPECT_FLOAT_EQ(y[1], 1.f);  // (2-1)/2*2
  EXPECT_FLOAT_EQ(y[2], 4.f);  // 3*1+1
  EXPECT_FLOAT_EQ(y[3], 5.f);
}

TEST(NormReduceOps, CumSumReverseExclusiveInt) {
  Bare b_("CumSum");
  ir::Node& node = *b_.n;
  node.attrs["reverse"] = ir::Attribute::Int(1);
  node.attrs["exclusive"] = ir::Attribute::Int(1);
  Tensor x = Tensor::FromVector(DType::kInt64, std::vector<int64_t>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  Tensor axis = Tensor::FromVector(DType::kInt32, std::vector<int32_t>{-1}, Shape{});
  std::vector<Tensor> out;
  ASSERT_TRUE(RunNode(node, 14, {&x, &axis}, &out).ok());
  const std::vector<int64_t> want{5, 3, 0, 11, 6, 0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out[0].data<int64_t>()[i], want[i]);
  Tensor bad_axis = Tensor::FromVector(DType::kInt32, std::vector<int32_t>{2}, Shape{});
  EXPECT_EQ(RunNode(node, 14, {&x, &bad_axis}, &out).code(), StatusCode::kInvalidArgument);
}

TEST(NormReduceOps, LrnMissingSize) {
  OneNode n("LRN", 13, {{DType::kFloat32, Sym({Dim::Symbol("N"), Dim::Known(3), Dim::Known(4), Dim::Known(4)})}});
  EXPECT_EQ(n.Infer().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sampan::ops
