// Data-movement ops (gather, scatter, tile_pad, onehot, nonzero, space_depth,
// trilu, reverse_sequence): symbolic shape inference, error cases and numerics
// the ONNX conformance cases do not cover.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/run_node.h"

namespace sampan::ops {
namespace {

using ir::Dim;
using ir::TensorType;

// One input: a graph input of `type`, or a constant when `value` is set.
struct In {
  TensorType type;
  std::optional<Tensor> value;
};
In Var(DType t, ir::Dims d) {
  return In{TensorType{t, std::move(d)}, std::nullopt};
}
In Const(Tensor t) {
  return In{TensorType::Static(t.dtype(), t.shape()), std::move(t)};
}

struct OneNode {
  ir::Graph g;
  ir::Node* node = nullptr;
};

std::unique_ptr<OneNode> MakeGraph(const std::string& op, const std::vector<In>& inputs,
                                   std::map<std::string, ir::Attribute> attrs, int64_t opset, size_t outputs) {
  auto m = std::make_unique<OneNode>();
  m->g.opsets[""] = opset;
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ir::Value* v = nullptr;
    if (inputs[i].value) {
      v = m->g.AddConstant("in" + std::to_string(i), *inputs[i].value).value();
    } else {
      v = m->g.AddValue("in" + std::to_string(i), inputs[i].type).value();
      m->g.inputs().push_back(v);
    }
    ins.push_back(v);
  }
  std::vector<ir::Value*> outs;
  for (size_t i = 0; i < outputs; ++i) {
    outs.push_back(m->g.AddValue("out" + std::to_string(i)).value());
    m->g.outputs().push_back(outs.back());
  }
  m->node = m->g.AddNode(op, ins, outs, "n").value();
  m->node->attrs = std::move(attrs);
  return m;
}

Result<std::string> InferOne(const std::string& op, const std::vector<In>& inputs,
                             std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 18) {
  auto m = MakeGraph(op, inputs, std::move(attrs), opset, 1);
  SP_RETURN_IF_ERROR(InferTypes(m->g));
  return m->g.FindValue("out0")->type.ToString();
}

Result<std::vector<Tensor>> RunOp(const std::string& op, const std::vector<Tensor>& inputs,
                                  std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 18,
                                  size_t outputs = 1) {
  std::vector<In> ins;
  for (const Tensor& t : inputs) ins.push_back(Var(t.dtype(), {}));
  auto m = MakeGraph(op, ins, std::move(attrs), opset, outputs);
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : inputs) ptrs.push_back(&t);
  std::vector<Tensor> outs;
  SP_RETURN_IF_ERROR(RunNode(*m->node, opset, ptrs, &outs));
  return outs;
}

Tensor F32(std::vector<float> v, Shape s) {
  return Tensor::FromVector(DType::kFloat32, v, std::move(s));
}
Tensor I64(std::vector<int64_t> v, Shape s) {
  return Tensor::FromVector(DType::kInt64, v, std::move(s));
}

template <class T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

// ---- shape inference with symbolic dims --------------------------------------------

TEST(GatherScatterInfer, GatherKeepsSymbols) {
  auto r = InferOne("Gather",
                    {Var(DType::kFloat32, {Dim::Symbol("N"), Dim::Known(4), Dim::Known(5)}),
                     Var(DType::kInt64, {Dim::Known(2), Dim::Symbol("M")})},
                    {{"axis", ir::Attribute::Int(-2)}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "f32[N,2,M,5]");
}

TEST(GatherScatterInfer, GatherNDBatchDims) {
  auto r = InferOne("GatherND",
                    {Var(DType::kFloat32, {Dim::Symbol("B"), Dim::Known(3), Dim::Known(4), Dim::Known(5)}),
                     Var(DType::kInt64, {Dim::Symbol("B"), Dim::Symbol("K"), Dim::Known(2)})},
                    {{"batch_dims", ir::Attribute::Int(1)}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "f32[B,K,5]");
}

TEST(GatherScatterInfer, TileWithConstantRepeats) {
  auto r = InferOne("Tile", {Var(DType::kFloat32, {Dim::Symbol("N"), Dim::Known(3)}), Const(I64({1, 4}, {2}))});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "f32[N,12]");
  auto u =
      InferOne("Tile", {Var(DType::kFloat32, {Dim::Symbol("N"), Dim::Known(3)}), Var(DType::kInt64, {Dim::Known(2)})});
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(*u, "f32[?,?]");
}

TEST(GatherScatterInfer, PadWithAxesKeepsUnpaddedSymbols) {
  auto r =
      InferOne("Pad", {Var(DType::kFloat32, {Dim::Symbol("N"), Dim::Known(3), Dim::Known(8)}), Const(I64({1, -2}, {2})),
                       In{TensorType{DType::kFloat32, ir::Dims{}}, std::nullopt}, Const(I64({-1}, {1}))});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "f32[N,3,7]");
}

TEST(GatherScatterInfer, NonZeroAndDepthToSpace) {
  auto nz = InferOne("NonZero", {Var(DType::kFloat32, {Dim::Symbol("N"), Dim::Known(3)})});
  ASSERT_TRUE(nz.ok()) << nz.status().ToString();
  EXPECT_EQ(*nz, "i64[2,?]");
  auto d2s = InferOne("DepthToSpace",
                      {Var(DType::kFloat32, {Dim::Symbol("N"), Dim::Known(8), Dim::Known(2), Dim::Symbol("W")})},
                      {{"blocksize", ir::Attribute::Int(2)}});
  ASSERT_TRUE(d2s.ok()) << d2s.status().ToString();
  EXPECT_EQ(*d2s, "f32[N,2,4,?]");
}

// ---- errors -----------------------------------------------------------------------------

TEST(GatherScatterErrors, GatherBadAxis) {
  auto r = InferOne("Gather", {Var(DType::kFloat32, {Dim::Known(3)}), Var(DType::kInt64, {Dim::Known(2)})},
                    {{"axis", ir::Attribute::Int(2)}});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(GatherScatterErrors, GatherIndexOutOfRangeNamesNodeAndIndex) {
  auto r = RunOp("Gather", {F32({1, 2, 3}, {3}), I64({0, 3}, {2})});
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'n'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("index 3"), std::string::npos) << r.status().message();
  EXPECT_EQ(RunOp("Gather", {F32({1, 2, 3}, {3}), I64({-4}, {1})}).status().code(), StatusCode::kInvalidArgument);
}

TEST(GatherScatterErrors, OutOfRangeIndicesInOtherOps) {
  EXPECT_EQ(
      RunOp("GatherElements", {F32({1, 2, 3, 4}, {2, 2}), I64({0, 2, 1, 0}, {2, 2})}, {{"axis", ir::Attribute::Int(1)}})
          .status()
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(RunOp("GatherND", {F32({1, 2, 3, 4}, {2, 2}), I64({1, -3}, {1, 2})}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RunOp("ScatterElements", {F32({1, 2, 3}, {3}), I64({5}, {1}), F32({9}, {1})}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RunOp("ScatterND", {F32({1, 2, 3}, {3}), I64({-4}, {1, 1}), F32({9}, {1})}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(GatherScatterErrors, MissingOrBadAttributes) {
  auto d2s =
      InferOne("DepthToSpace", {Var(DType::kFloat32, {Dim::Known(1), Dim::Known(4), Dim::Known(2), Dim::Known(2)})});
  EXPECT_EQ(d2s.status().code(), StatusCode::kInvalidArgument);
  auto pad = InferOne("Pad", {Var(DType::kFloat32, {Dim::Known(3)})}, {{"mode", ir::Attribute::String("mirror")}}, 10);
  EXPECT_EQ(pad.status().code(), StatusCode::kInvalidArgument);
  auto nopads = InferOne("Pad", {Var(DType::kFloat32, {Dim::Known(3)})}, {}, 10);
  EXPECT_EQ(nopads.status().code(), StatusCode::kInvalidArgument);
  auto red = InferOne("ScatterElements",
                      {Var(DType::kFloat32, {Dim::Known(3)}), Var(DType::kInt64, {Dim::Known(1)}),
                       Var(DType::kFloat32, {Dim::Known(1)})},
                      {{"reduction", ir::Attribute::String("avg")}});
  EXPECT_EQ(red.status().code(), StatusCode::kInvalidArgument);
  auto crop = InferOne("Pad", {Var(DType::kFloat32, {Dim::Known(3)}), Const(I64({-2, -2}, {2}))});
  EXPECT_EQ(crop.status().code(), StatusCode::kInvalidArgument);
}

// ---- numerics ----------------------------------------------------------------------------

TEST(GatherScatterNumeric, PadNegativeCropsThenReflects) {
  // [1 2 3 4], pads (-1, +2): crop to [2 3 4], reflect two at the end -> [2 3 4 3 2].
  auto r = RunOp("Pad", {F32({1, 2, 3, 4}, {4}), I64({-1, 2}, {2})}, {{"mode", ir::Attribute::String("reflect")}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Values<float>((*r)[0]), (std::vector<float>{2, 3, 4, 3, 2}));
}

TEST(GatherScatterNumeric, ScatterNDReductionsWithDuplicates) {
  auto r = RunOp("ScatterND", {F32({1, 2, 3}, {3}), I64({1, 1, 0}, {3, 1}), F32({10, 20, 5}, {3})},
                 {{"reduction", ir::Attribute::String("add")}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Values<float>((*r)[0]), (std::vector<float>{6, 32, 3}));
}

TEST(GatherScatterNumeric, OneHotOutOfRangeIsAllOff) {
  auto r = RunOp("OneHot", {I64({1, -1, 3}, {3}), I64({3}, {}), F32({0, 1}, {2})}, {}, 11);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Values<float>((*r)[0]), (std::vector<float>{0, 1, 0, 0, 0, 1, 0, 0, 0}));
}

TEST(GatherScatterNumeric, UniqueUnsortedOutputs) {
  auto r = RunOp("Unique", {F32({2, 1, 2, 0}, {4})}, {{"sorted", ir::Attribute::Int(0)}}, 11, 4);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Values<float>((*r)[0]), (std::vector<float>{2, 1, 0}));
  EXPECT_EQ(Values<int64_t>((*r)[1]), (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(Values<int64_t>((*r)[2]), (std::vector<int64_t>{0, 1, 0, 2}));
  EXPECT_EQ(Values<int64_t>((*r)[3]), (std::vector<int64_t>{2, 1, 1}));
}

TEST(GatherScatterNumeric, GatherScalarIndexDropsAxis) {
  auto r = RunOp("Gather", {F32({1, 2, 3, 4, 5, 6}, {2, 3}), I64({-1}, {})}, {{"axis", ir::Attribute::Int(1)}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].shape(), (Shape{2}));
  EXPECT_EQ(Values<float>((*r)[0]), (std::vector<float>{3, 6}));
}

}  // namespace
}  // namespace sampan::ops
