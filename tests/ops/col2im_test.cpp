// Col2Im (src/ops/col2im.cpp): overlapping blocks sum, padding drops what falls outside,
// and inconsistent shapes are errors naming the mismatch.
#include <gtest/gtest.h>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

Tensor Ints(const std::vector<int64_t>& v) {
  return Tensor::FromVector<int64_t>(DType::kInt64, v, {static_cast<int64_t>(v.size())});
}

TEST(Col2Im, OverlappingBlocksSum) {
  // A 1x3 image from 1x2 blocks at stride 1: two positions; the middle pixel gets both.
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, {1, 10, 2, 20}, {1, 2, 2});  // [N, C*2, L=2]
  const Tensor image = Ints({1, 3}), block = Ints({1, 2});
  auto r = RunOneNode("Col2Im", {&x, &image, &block}, {}, 18);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{1, 1, 1, 3}));
  EXPECT_EQ((*r)[0].data<float>()[0], 1.f);
  EXPECT_EQ((*r)[0].data<float>()[1], 2.f + 10.f);
  EXPECT_EQ((*r)[0].data<float>()[2], 20.f);
  // Padding one column on each side: four positions, the outer block halves fall away.
  const Tensor xp = Tensor::FromVector<float>(DType::kFloat32, {1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 4});
  auto p = RunOneNode("Col2Im", {&xp, &image, &block}, {{"pads", ir::Attribute::Ints({0, 1, 0, 1})}}, 18);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  // Image pixel j receives block offset 0 of position j+1 and offset 1 of position j.
  EXPECT_EQ((*p)[0].data<float>()[0], 2.f + 5.f);
  EXPECT_EQ((*p)[0].data<float>()[1], 3.f + 6.f);
  EXPECT_EQ((*p)[0].data<float>()[2], 4.f + 7.f);
}

TEST(Col2Im, InconsistentShapesAreErrors) {
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, std::vector<float>(12, 1.f), {1, 3, 4});
  const Tensor image = Ints({1, 3}), block = Ints({1, 2});
  auto rows = RunOneNode("Col2Im", {&x, &image, &block}, {}, 18);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("not a multiple of the block size"), std::string::npos)
      << rows.status().ToString();
  const Tensor x2 = Tensor::FromVector<float>(DType::kFloat32, std::vector<float>(8, 1.f), {1, 2, 4});
  auto cols = RunOneNode("Col2Im", {&x2, &image, &block}, {}, 18);
  ASSERT_FALSE(cols.ok());
  EXPECT_NE(cols.status().message().find("block positions"), std::string::npos) << cols.status().ToString();
  const Tensor big = Ints({1, 5});
  auto fit = RunOneNode("Col2Im", {&x2, &image, &big}, {}, 18);
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(fit.status().message().find("does not fit"), std::string::npos) << fit.status().ToString();
}

}  // namespace
}  // namespace sampan::ops
