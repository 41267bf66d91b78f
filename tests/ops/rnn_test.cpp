// RNN / GRU / LSTM: symbolic shape inference and attribute errors that the
// ONNX conformance cases do not cover.
#include <gtest/gtest.h>

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

struct RnnGraph {
  ir::Graph g;
};

// One recurrent node with inputs X, W, R and outputs Y, Y_h (and Y_c for LSTM).
std::unique_ptr<RnnGraph> MakeRnn(const std::string& op, const std::vector<TensorType>& inputs,
                                  std::map<std::string, ir::Attribute> attrs) {
  auto m = std::make_unique<RnnGraph>();
  m->g.opsets[""] = 14;
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ir::Value* v = m->g.AddValue("in" + std::to_string(i), inputs[i]).value();
    m->g.inputs().push_back(v);
    ins.push_back(v);
  }
  std::vector<ir::Value*> outs;
  const int n = op == "LSTM" ? 3 : 2;
  for (int i = 0; i < n; ++i) {
    ir::Value* v = m->g.AddValue("out" + std::to_string(i)).value();
    m->g.outputs().push_back(v);
    outs.push_back(v);
  }
  ir::Node* node = m->g.AddNode(op, ins, outs, "n").value();
  node->attrs = std::move(attrs);
  return m;
}

TEST(RnnOpsTest, SymbolicBatchShapeInference) {
  // LSTM, bidirectional, layout 1: X [N, 7, 5], W [2, 16, 5], R [2, 16, 4].
  TensorType x{DType::kFloat32, ir::Dims{Dim::Symbol("N"), Dim::Known(7), Dim::Known(5)}};
  auto m = MakeRnn(
      "LSTM", {x, TensorType::Static(DType::kFloat32, {2, 16, 5}), TensorType::Static(DType::kFloat32, {2, 16, 4})},
      {{"direction", ir::Attribute::String("bidirectional")}, {"layout", ir::Attribute::Int(1)}});
  ASSERT_TRUE(InferTypes(m->g).ok());
  const TensorType& y = m->g.FindValue("out0")->type;
  ASSERT_TRUE(y.dims.has_value());
  EXPECT_EQ(*y.dims, (ir::Dims{Dim::Symbol("N"), Dim::Known(7), Dim::Known(2), Dim::Known(4)}));
  const TensorType& yh = m->g.FindValue("out1")->type;
  ASSERT_TRUE(yh.dims.has_value());
  EXPECT_EQ(*yh.dims, (ir::Dims{Dim::Symbol("N"), Dim::Known(2), Dim::Known(4)}));
  EXPECT_EQ(m->g.FindValue("out2")->type.dims, yh.dims);
  EXPECT_EQ(y.dtype, DType::kFloat32);
}

TEST(RnnOpsTest, BadDirectionIsInvalidArgument) {
  TensorType x = TensorType::Static(DType::kFloat32, {3, 2, 5});
  auto m = MakeRnn(
      "GRU", {x, TensorType::Static(DType::kFloat32, {1, 12, 5}), TensorType::Static(DType::kFloat32, {1, 12, 4})},
      {{"direction", ir::Attribute::String("sideways")}});
  Status st = InferTypes(m->g);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sampan::ops
