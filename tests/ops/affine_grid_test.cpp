// AffineGrid (src/ops/affine_grid.cpp): the identity transform gives the normalised base
// grid (both align_corners conventions, 2-D and 3-D), and mismatched inputs are errors.
#include <gtest/gtest.h>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

TEST(AffineGrid, IdentityGivesTheBaseGrid) {
  const Tensor theta = Tensor::FromVector<float>(DType::kFloat32, {1, 0, 0, 0, 1, 0}, {1, 2, 3});
  const Tensor size = Tensor::FromVector<int64_t>(DType::kInt64, {1, 1, 2, 4}, {4});
  for (int align : {0, 1}) {
    auto r = RunOneNode("AffineGrid", {&theta, &size}, {{"align_corners", ir::Attribute::Int(align)}}, 20);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ((*r)[0].shape(), (Shape{1, 2, 4, 2}));
    const float* g = (*r)[0].data<float>();
    // Point (h=1, w=2): x along W, y along H.
    const float x = align ? -1.f + 2.f * 2 / 3 : -1.f + 5.f / 4, y = align ? 1.f : 0.5f;
    EXPECT_NEAR(g[(1 * 4 + 2) * 2], x, 1e-6) << align;
    EXPECT_NEAR(g[(1 * 4 + 2) * 2 + 1], y, 1e-6) << align;
  }
  // 3-D: a translation by (0.5, 0, -0.25).
  const Tensor t3 = Tensor::FromVector<float>(DType::kFloat32, {1, 0, 0, 0.5f, 0, 1, 0, 0, 0, 0, 1, -0.25f}, {1, 3, 4});
  const Tensor s3 = Tensor::FromVector<int64_t>(DType::kInt64, {1, 1, 2, 2, 2}, {5});
  auto r3 = RunOneNode("AffineGrid", {&t3, &s3}, {{"align_corners", ir::Attribute::Int(1)}}, 20);
  ASSERT_TRUE(r3.ok()) << r3.status().ToString();
  ASSERT_EQ((*r3)[0].shape(), (Shape{1, 2, 2, 2, 3}));
  const float* g3 = (*r3)[0].data<float>();
  EXPECT_NEAR(g3[0], -0.5f, 1e-6);   // x = -1 + 0.5
  EXPECT_NEAR(g3[2], -1.25f, 1e-6);  // z = -1 - 0.25
}

TEST(AffineGrid, MismatchedInputsAreErrors) {
  const Tensor theta = Tensor::FromVector<float>(DType::kFloat32, std::vector<float>(6, 0.f), {1, 2, 3});
  const Tensor size3d = Tensor::FromVector<int64_t>(DType::kInt64, {1, 1, 2, 2, 2}, {5});
  auto r = RunOneNode("AffineGrid", {&theta, &size3d}, {}, 20);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("theta must be [N, 3, 4]"), std::string::npos) << r.status().ToString();
  const Tensor batch2 = Tensor::FromVector<int64_t>(DType::kInt64, {2, 1, 2, 2}, {4});
  auto b = RunOneNode("AffineGrid", {&theta, &batch2}, {}, 20);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("for a batch of 2"), std::string::npos) << b.status().ToString();
  const Tensor zero = Tensor::FromVector<int64_t>(DType::kInt64, {1, 1, 0, 2}, {4});
  EXPECT_FALSE(RunOneNode("AffineGrid", {&theta, &zero}, {}, 20).ok());
}

}  // namespace
}  // namespace sampan::ops
