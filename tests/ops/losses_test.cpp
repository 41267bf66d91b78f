// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: symbolic shape inference, errors,
// ignore_index and weights, uniform scores.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

TEST(SoftmaxCrossEntropyLossInfer, NoneKeepsSymbolicDimsAndLogProb) {
  auto t = InferOneNode("SoftmaxCrossEntropyLoss", {TT({S("N"), K(5), S("D")}), TT({S("N"), S("D")}, DType::kInt64)},
                        {{"reduction", ir::Attribute::String("none")}}, 22, 2);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)[0].ToString(), TT({S("N"), S("D")}).ToString());
  EXPECT_EQ((*t)[1].ToString(), TT({S("N"), K(5), S("D")}).ToString());
}

TEST(NegativeLogLikelihoodLossInfer, MeanIsScalar) {
  auto t = InferOneNode("NegativeLogLikelihoodLoss", {TT({S("N"), K(3)}), TT({S("N")}, DType::kInt32), TT({K(3)})});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE((*t)[0].dims.has_value());
  EXPECT_TRUE((*t)[0].dims->empty());
}

TEST(LossInfer, Errors) {
  auto bad_red = InferOneNode("NegativeLogLikelihoodLoss", {TT({K(2), K(3)}), TT({K(2)}, DType::kInt64)},
                              {{"reduction", ir::Attribute::String("avg")}});
  EXPECT_EQ(bad_red.status().code(), StatusCode::kInvalidArgument);
  auto bad_rank = InferOneNode("SoftmaxCrossEntropyLoss", {TT({K(2), K(3), K(4)}), TT({K(2)}, DType::kInt64)});
  EXPECT_EQ(bad_rank.status().code(), StatusCode::kInvalidArgument);
}

TEST(NegativeLogLikelihoodLossRun, IgnoreIndexAndWeights) {
  // input [2, 3] log-probs, targets {2, 1}; target 1 ignored -> mean over one element.
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {-1, -2, -3, -4, -5, -6}, {2, 3});
  Tensor t = Tensor::FromVector<int64_t>(DType::kInt64, {2, 1}, {2});
  Tensor w = Tensor::FromVector<float>(DType::kFloat32, {1, 1, 2}, {3});
  auto r = RunOneNode("NegativeLogLikelihoodLoss", {&x, &t, &w}, {{"ignore_index", ir::Attribute::Int(1)}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FLOAT_EQ((*r)[0].data<float>()[0], 3.0f);  // (3 * 2) / 2
  // Out-of-range target that is not ignored -> error, not a crash.
  Tensor bad = Tensor::FromVector<int64_t>(DType::kInt64, {7, 0}, {2});
  EXPECT_EQ(RunOneNode("NegativeLogLikelihoodLoss", {&x, &bad}).status().code(), StatusCode::kInvalidArgument);
}

TEST(SoftmaxCrossEntropyLossRun, UniformScores) {
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {0, 0, 0, 0}, {1, 4});
  Tensor t = Tensor::FromVector<int64_t>(DType::kInt64, {3}, {1});
  auto r = RunOneNode("SoftmaxCrossEntropyLoss", {&x, &t}, {}, 22, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR((*r)[0].data<float>()[0], std::log(4.0f), 1e-6);
  EXPECT_NEAR((*r)[1].data<float>()[2], -std::log(4.0f), 1e-6);
}

}  // namespace
}  // namespace sampan::ops
