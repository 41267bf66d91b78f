// NonMaxSuppression: center-format boxes, thresholds, and inference of its output shape.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

TEST(NonMaxSuppressionRun, CenterBoxesAndThresholds) {
  // Two overlapping center-format boxes and one far away; one class.
  Tensor boxes = F32({0.5f, 0.5f, 1, 1, 0.55f, 0.5f, 1, 1, 5, 5, 1, 1}, {1, 3, 4});
  Tensor scores = F32({0.9f, 0.95f, 0.1f}, {1, 1, 3});
  Tensor max_out = Tensor::FromVector(DType::kInt64, std::vector<int64_t>{10}, {1});
  Tensor iou = F32({0.5f}, {1});
  Tensor score_th = F32({0.2f}, {1});
  auto sel = RunFirst("NonMaxSuppression", {boxes, scores, max_out, iou, score_th},
                      {{"center_point_box", ir::Attribute::Int(1)}}, 11);
  ASSERT_TRUE(sel.ok()) << sel.status().ToString();
  EXPECT_EQ(sel->shape(), (Shape{1, 3}));
  EXPECT_EQ(Values<int64_t>(*sel), (std::vector<int64_t>{0, 0, 1}));
  auto bad = InferFirst("NonMaxSuppression", {TT({K(1), K(3), K(4)}), TT({K(1), K(1)})}, {}, 11);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  auto sym = InferFirst("NonMaxSuppression", {TT({S("B"), S("N"), K(4)}), TT({S("B"), S("C"), S("N")})}, {}, 11);
  ASSERT_TRUE(sym.ok()) << sym.status().ToString();
  EXPECT_EQ(sym->ToString(), "i64[?,3]");
}

}  // namespace
}  // namespace sampan::ops
