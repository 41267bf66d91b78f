// Losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss), RoiAlign and
// GridSample: symbolic shape inference, error cases and small numeric checks.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/op_test_util.h"
#include "ops/run_node.h"

namespace sampan::ops {
namespace {

using ir::Dim;
using ir::TensorType;
using namespace testing;  // NOLINT(google-build-using-namespace)

Result<std::vector<TensorType>> Infer(const std::string& op, const std::vector<TensorType>& inputs,
                                      std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 22,
                                      size_t n_out = 1) {
  auto m = MakeGraph(op, inputs, std::move(attrs), opset, n_out);
  SP_RETURN_IF_ERROR(InferTypes(m->g));
  std::vector<TensorType> r;
  for (size_t i = 0; i < n_out; ++i) r.push_back(m->g.FindValue("out" + std::to_string(i))->type);
  return r;
}

Result<std::vector<Tensor>> RunOp(const std::string& op, const std::vector<const Tensor*>& inputs,
                                std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 22,
                                size_t n_out = 1) {
  return RunOneNode(op, inputs, std::move(attrs), opset, n_out);
}

TEST(MoreOps2Infer, SceNoneKeepsSymbolicDimsAndLogProb) {
  auto t = Infer("SoftmaxCrossEntropyLoss", {TT({S("N"), K(5), S("D")}), TT({S("N"), S("D")}, DType::kInt64)},
                 {{"reduction", ir::Attribute::String("none")}}, 22, 2);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)[0].ToString(), TT({S("N"), S("D")}).ToString());
  EXPECT_EQ((*t)[1].ToString(), TT({S("N"), K(5), S("D")}).ToString());
}

TEST(MoreOps2Infer, NllMeanIsScalar) {
  auto t = Infer("NegativeLogLikelihoodLoss", {TT({S("N"), K(3)}), TT({S("N")}, DType::kInt32), TT({K(3)})});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE((*t)[0].dims.has_value());
  EXPECT_TRUE((*t)[0].dims->empty());
}

TEST(MoreOps2Infer, RoiAlignAndGridSampleSymbolic) {
  auto r = Infer("RoiAlign", {TT({S("N"), K(8), S("H"), S("W")}), TT({S("R"), K(4)}), TT({S("R")}, DType::kInt64)},
                 {{"output_height", ir::Attribute::Int(7)}, {"output_width", ir::Attribute::Int(6)}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].ToString(), TT({S("R"), K(8), K(7), K(6)}).ToString());
  auto g = Infer("GridSample", {TT({S("N"), K(3), S("H"), S("W")}), TT({S("N"), S("h"), K(9), K(2)})});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)[0].ToString(), TT({S("N"), K(3), S("h"), K(9)}).ToString());
}

TEST(MoreOps2Infer, Errors) {
  auto bad_red = Infer("NegativeLogLikelihoodLoss", {TT({K(2), K(3)}), TT({K(2)}, DType::kInt64)},
                       {{"reduction", ir::Attribute::String("avg")}});
  EXPECT_EQ(bad_red.status().code(), StatusCode::kInvalidArgument);
  auto bad_rank = Infer("SoftmaxCrossEntropyLoss", {TT({K(2), K(3), K(4)}), TT({K(2)}, DType::kInt64)});
  EXPECT_EQ(bad_rank.status().code(), StatusCode::kInvalidArgument);
  auto bad_mode = Infer("RoiAlign", {TT({K(1), K(1), K(4), K(4)}), TT({K(1), K(4)}), TT({K(1)}, DType::kInt64)},
                        {{"mode", ir::Attribute::String("min")}});
  EXPECT_EQ(bad_mode.status().code(), StatusCode::kInvalidArgument);
  auto bad_grid = Infer("GridSample", {TT({K(1), K(1), K(4), K(4)}), TT({K(1), K(2), K(2), K(3)})});
  EXPECT_EQ(bad_grid.status().code(), StatusCode::kInvalidArgument);
  auto bad_pad = Infer("GridSample", {TT({K(1), K(1), K(4), K(4)}), TT({K(1), K(2), K(2), K(2)})},
                       {{"padding_mode", ir::Attribute::String("wrap")}});
  EXPECT_EQ(bad_pad.status().code(), StatusCode::kInvalidArgument);
  auto opset16_5d = Infer("GridSample", {TT({K(1), K(1), K(2), K(4), K(4)}), TT({K(1), K(2), K(2), K(2), K(3)})}, {},
                          16);
  EXPECT_EQ(opset16_5d.status().code(), StatusCode::kInvalidArgument);
}

TEST(MoreOps2Run, NllIgnoreIndexAndWeights) {
  // input [2, 3] log-probs, targets {2, 1}; target 1 ignored -> mean over one element.
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {-1, -2, -3, -4, -5, -6}, {2, 3});
  Tensor t = Tensor::FromVector<int64_t>(DType::kInt64, {2, 1}, {2});
  Tensor w = Tensor::FromVector<float>(DType::kFloat32, {1, 1, 2}, {3});
  auto r = RunOp("NegativeLogLikelihoodLoss", {&x, &t, &w}, {{"ignore_index", ir::Attribute::Int(1)}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FLOAT_EQ((*r)[0].data<float>()[0], 3.0f);  // (3 * 2) / 2
  // Out-of-range target that is not ignored -> error, not a crash.
  Tensor bad = Tensor::FromVector<int64_t>(DType::kInt64, {7, 0}, {2});
  EXPECT_EQ(RunOp("NegativeLogLikelihoodLoss", {&x, &bad}).status().code(), StatusCode::kInvalidArgument);
}

TEST(MoreOps2Run, SceUniformScores) {
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {0, 0, 0, 0}, {1, 4});
  Tensor t = Tensor::FromVector<int64_t>(DType::kInt64, {3}, {1});
  auto r = RunOp("SoftmaxCrossEntropyLoss", {&x, &t}, {}, 22, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR((*r)[0].data<float>()[0], std::log(4.0f), 1e-6);
  EXPECT_NEAR((*r)[1].data<float>()[2], -std::log(4.0f), 1e-6);
}

TEST(MoreOps2Run, GridSampleIdentityAndRoiAlignConstant) {
  // align_corners=1 grid hitting the pixel centres reproduces the input.
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {1, 2, 3, 4}, {1, 1, 2, 2});
  Tensor g = Tensor::FromVector<float>(DType::kFloat32, {-1, -1, 1, -1, -1, 1, 1, 1}, {1, 2, 2, 2});
  for (const char* mode : {"linear", "nearest", "cubic"}) {
    auto r = RunOp("GridSample", {&x, &g}, {{"align_corners", ir::Attribute::Int(1)}, {"mode", ir::Attribute::String(mode)}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (int i = 0; i < 4; ++i) EXPECT_NEAR((*r)[0].data<float>()[i], float(i + 1), 1e-5) << mode;
  }
  // RoiAlign over a constant image gives that constant.
  Tensor img = Tensor::FromVector<float>(DType::kFloat32, std::vector<float>(16, 2.5f), {1, 1, 4, 4});
  Tensor rois = Tensor::FromVector<float>(DType::kFloat32, {0.5f, 0.5f, 3.f, 2.5f}, {1, 4});
  Tensor bi = Tensor::FromVector<int64_t>(DType::kInt64, {0}, {1});
  auto r = RunOp("RoiAlign", {&img, &rois, &bi}, {{"output_height", ir::Attribute::Int(2)}, {"output_width", ir::Attribute::Int(2)}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (int i = 0; i < 4; ++i) EXPECT_NEAR((*r)[0].data<float>()[i], 2.5f, 1e-6);
}

}  // namespace
}  // namespace sampan::ops
