// Einsum, QuantizeLinear/DequantizeLinear/DynamicQuantizeLinear, NonMaxSuppression, Swish:
// symbolic shape inference, error cases and numerics that the ONNX conformance cases do not cover.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
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

std::unique_ptr<OneNode> MakeGraph(const std::string& op, const std::vector<TensorType>& inputs,
                                   std::map<std::string, ir::Attribute> attrs, int64_t opset, size_t num_outputs) {
  auto m = std::make_unique<OneNode>();
  m->g.opsets[""] = opset;
  std::vector<ir::Value*> ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ir::Value* v = m->g.AddValue("in" + std::to_string(i), inputs[i]).value();
    m->g.inputs().push_back(v);
    ins.push_back(v);
  }
  for (size_t i = 0; i < num_outputs; ++i) {
    ir::Value* out = m->g.AddValue(i == 0 ? std::string("out") : "out" + std::to_string(i)).value();
    m->g.outputs().push_back(out);
    outs.push_back(out);
  }
  m->node = m->g.AddNode(op, ins, outs, "n").value();
  m->node->attrs = std::move(attrs);
  return m;
}

Result<TensorType> InferOne(const std::string& op, const std::vector<TensorType>& inputs,
                            std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 21) {
  auto m = MakeGraph(op, inputs, std::move(attrs), opset, 1);
  SP_RETURN_IF_ERROR(InferTypes(m->g));
  return m->g.FindValue("out")->type;
}

Result<std::vector<Tensor>> RunAll(const std::string& op, const std::vector<Tensor>& inputs,
                                   std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 21,
                                   size_t num_outputs = 1) {
  std::vector<TensorType> types;
  for (const Tensor& t : inputs) types.push_back(TensorType::Static(t.dtype(), t.shape()));
  auto m = MakeGraph(op, types, std::move(attrs), opset, num_outputs);
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : inputs) ptrs.push_back(&t);
  std::vector<Tensor> outs;
  SP_RETURN_IF_ERROR(RunNode(*m->node, opset, ptrs, &outs));
  return outs;
}

Result<Tensor> RunOne(const std::string& op, const std::vector<Tensor>& inputs,
                      std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 21) {
  SP_ASSIGN_OR_RETURN(auto outs, RunAll(op, inputs, std::move(attrs), opset));
  return outs.at(0);
}

TensorType T(DType dt, std::vector<Dim> dims) { return TensorType{dt, std::move(dims)}; }
Dim K(int64_t v) { return Dim::Known(v); }
Dim S(const char* s) { return Dim::Symbol(s); }
Tensor F32(std::vector<float> v, Shape s) { return Tensor::FromVector(DType::kFloat32, v, std::move(s)); }

template <class E>
std::vector<E> Values(const Tensor& t) {
  return std::vector<E>(t.data<E>(), t.data<E>() + t.numel());
}

TEST(MoreOpsInfer, EinsumSymbolicBatchMatmul) {
  auto t = InferOne("Einsum", {T(DType::kFloat32, {S("B"), K(2), K(3)}), T(DType::kFloat32, {S("B"), K(3), K(5)})},
                    {{"equation", ir::Attribute::String("bij,bjk->bik")}}, 12);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ToString(), "f32[B,2,5]");
  // Implicit output with ellipsis: ellipsis dims first, then single-use letters sorted.
  auto e = InferOne("Einsum", {T(DType::kFloat32, {S("N"), K(4), K(3)}), T(DType::kFloat32, {K(3), K(7)})},
                    {{"equation", ir::Attribute::String("...ij,jk")}}, 12);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->ToString(), "f32[N,4,7]");
}

TEST(MoreOpsInfer, EinsumErrors) {
  auto missing = InferOne("Einsum", {T(DType::kFloat32, {K(2), K(2)})}, {}, 12);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  auto rank = InferOne("Einsum", {T(DType::kFloat32, {K(2), K(2)})}, {{"equation", ir::Attribute::String("ijk->i")}},
                       12);
  ASSERT_FALSE(rank.ok());
  EXPECT_EQ(rank.status().code(), StatusCode::kInvalidArgument);
  auto mismatch = InferOne("Einsum", {T(DType::kFloat32, {K(2), K(3)}), T(DType::kFloat32, {K(4), K(5)})},
                           {{"equation", ir::Attribute::String("ij,jk->ik")}}, 12);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  auto bad_out = InferOne("Einsum", {T(DType::kFloat32, {K(2), K(3)})}, {{"equation", ir::Attribute::String("ij->z")}},
                          12);
  ASSERT_FALSE(bad_out.ok());
  EXPECT_EQ(bad_out.status().code(), StatusCode::kInvalidArgument);
}

TEST(MoreOpsRun, EinsumDiagonalTraceAndBroadcast) {
  Tensor a = F32({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  auto diag = RunOne("Einsum", {a}, {{"equation", ir::Attribute::String("ii->i")}}, 12);
  ASSERT_TRUE(diag.ok()) << diag.status().ToString();
  EXPECT_EQ(Values<float>(*diag), (std::vector<float>{1, 5, 9}));
  auto trace = RunOne("Einsum", {a}, {{"equation", ir::Attribute::String("ii")}}, 12);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->rank(), 0);
  EXPECT_EQ(Values<float>(*trace), (std::vector<float>{15}));
  // Ellipsis broadcasting: [2,1,2] x [3,2] -> [2,3] sums over k.
  Tensor x = F32({1, 2, 3, 4}, {2, 1, 2});
  Tensor y = F32({1, 1, 2, 2, 3, 3}, {3, 2});
  auto b = RunOne("Einsum", {x, y}, {{"equation", ir::Attribute::String("...k,...k->...")}}, 12);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->shape(), (Shape{2, 3}));
  EXPECT_EQ(Values<float>(*b), (std::vector<float>{3, 6, 9, 7, 14, 21}));
  Tensor i1 = Tensor::FromVector(DType::kInt32, std::vector<int32_t>{1, 2, 3}, {3});
  auto dot = RunOne("Einsum", {i1, i1}, {{"equation", ir::Attribute::String("i,i->")}}, 12);
  ASSERT_TRUE(dot.ok()) << dot.status().ToString();
  EXPECT_EQ(Values<int32_t>(*dot), (std::vector<int32_t>{14}));
}

TEST(MoreOpsRun, QuantizePerAxisRoundsHalfToEvenAndSaturates) {
  Tensor x = F32({0.5f, 1.5f, 2.5f, 1000.f, -3.f, 6.f}, {3, 2});
  Tensor scale = F32({1.f, 2.f}, {2});
  Tensor zp = Tensor::FromVector(DType::kInt8, std::vector<int8_t>{0, 1}, {2});
  auto q = RunOne("QuantizeLinear", {x, scale, zp}, {{"axis", ir::Attribute::Int(1)}});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->dtype(), DType::kInt8);
  // col0 scale 1 zp 0: 0.5->0, 2.5->2, -3->-3; col1 scale 2 zp 1: 0.75->1+1, 500->127, 3->3+1.
  EXPECT_EQ(Values<int8_t>(*q), (std::vector<int8_t>{0, 2, 2, 127, -3, 4}));
  auto dq = RunOne("DequantizeLinear", {*q, scale, zp}, {{"axis", ir::Attribute::Int(1)}});
  ASSERT_TRUE(dq.ok()) << dq.status().ToString();
  EXPECT_EQ(Values<float>(*dq), (std::vector<float>{0, 2, 2, 252, -3, 6}));
}

TEST(MoreOpsInfer, QuantizeTypesAndErrors) {
  // No zero point: uint8 by default; symbolic dims kept.
  auto t = InferOne("QuantizeLinear", {T(DType::kFloat32, {S("N"), K(4)}), T(DType::kFloat32, {})});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ToString(), "u8[N,4]");
  auto bad_axis = InferOne("QuantizeLinear", {T(DType::kFloat32, {K(2), K(4)}), T(DType::kFloat32, {K(3)})});
  ASSERT_FALSE(bad_axis.ok());
  EXPECT_EQ(bad_axis.status().code(), StatusCode::kInvalidArgument);
  auto f8 = InferOne("QuantizeLinear", {T(DType::kFloat32, {K(4)}), T(DType::kFloat32, {})},
                     {{"output_dtype", ir::Attribute::Int(static_cast<int64_t>(DType::kFloat8E4M3FN))}});
  ASSERT_TRUE(f8.ok()) << f8.status().ToString();
  EXPECT_EQ(f8->ToString(), "f8e4m3fn[4]");
  auto str = InferOne("QuantizeLinear", {T(DType::kFloat32, {K(4)}), T(DType::kFloat32, {})},
                      {{"output_dtype", ir::Attribute::Int(static_cast<int64_t>(DType::kString))}});
  ASSERT_FALSE(str.ok());
  EXPECT_EQ(str.status().code(), StatusCode::kUnsupported);
  auto dq = InferOne("DequantizeLinear", {T(DType::kUInt8, {S("N")}), T(DType::kFloat16, {})});
  ASSERT_TRUE(dq.ok()) << dq.status().ToString();
  EXPECT_EQ(dq->ToString(), "f16[N]");
}

TEST(MoreOpsRun, DynamicQuantizeAllZeros) {
  auto outs = RunAll("DynamicQuantizeLinear", {F32({0, 0, 0}, {3})}, {}, 11, 3);
  ASSERT_TRUE(outs.ok()) << outs.status().ToString();
  EXPECT_EQ(Values<uint8_t>((*outs)[0]), (std::vector<uint8_t>{0, 0, 0}));
  EXPECT_FLOAT_EQ(Values<float>((*outs)[1])[0], 1.0f / 255.0f);
  EXPECT_EQ(Values<uint8_t>((*outs)[2])[0], 0);
}

TEST(MoreOpsRun, NmsCenterBoxesAndThresholds) {
  // Two overlapping center-format boxes and one far away; one class.
  Tensor boxes = F32({0.5f, 0.5f, 1, 1, 0.55f, 0.5f, 1, 1, 5, 5, 1, 1}, {1, 3, 4});
  Tensor scores = F32({0.9f, 0.95f, 0.1f}, {1, 1, 3});
  Tensor max_out = Tensor::FromVector(DType::kInt64, std::vector<int64_t>{10}, {1});
  Tensor iou = F32({0.5f}, {1});
  Tensor score_th = F32({0.2f}, {1});
  auto sel = RunOne("NonMaxSuppression", {boxes, scores, max_out, iou, score_th},
                    {{"center_point_box", ir::Attribute::Int(1)}}, 11);
  ASSERT_TRUE(sel.ok()) << sel.status().ToString();
  EXPECT_EQ(sel->shape(), (Shape{1, 3}));
  EXPECT_EQ(Values<int64_t>(*sel), (std::vector<int64_t>{0, 0, 1}));
  auto bad = InferOne("NonMaxSuppression", {T(DType::kFloat32, {K(1), K(3), K(4)}), T(DType::kFloat32, {K(1), K(1)})},
                      {}, 11);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  auto sym = InferOne("NonMaxSuppression",
                      {T(DType::kFloat32, {S("B"), S("N"), K(4)}), T(DType::kFloat32, {S("B"), S("C"), S("N")})}, {}, 11);
  ASSERT_TRUE(sym.ok()) << sym.status().ToString();
  EXPECT_EQ(sym->ToString(), "i64[?,3]");
}

TEST(MoreOpsRun, SwishAlpha) {
  auto y = RunOne("Swish", {F32({0.f, 1.f, -2.f}, {3})}, {{"alpha", ir::Attribute::Float(2.0f)}}, 24);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  const auto v = Values<float>(*y);
  EXPECT_FLOAT_EQ(v[0], 0.f);
  EXPECT_NEAR(v[1], 1.f / (1.f + std::exp(-2.f)), 1e-6);
  EXPECT_NEAR(v[2], -2.f / (1.f + std::exp(4.f)), 1e-6);
  auto bad = InferOne("Swish", {T(DType::kInt32, {K(3)})}, {}, 24);
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace sampan::ops
