// MaxUnpool (src/ops/max_unpool.cpp): values land at MaxPool's flat indices, output_shape
// enlarges the output around the unpooled block, and bad indices or shapes are errors.
#include <gtest/gtest.h>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

Tensor Ints(const std::vector<int64_t>& v, Shape shape) {
  return Tensor::FromVector<int64_t>(DType::kInt64, v, shape);
}

std::map<std::string, ir::Attribute> Pool2x2() {
  return {{"kernel_shape", ir::Attribute::Ints({2, 2})}, {"strides", ir::Attribute::Ints({2, 2})}};
}

TEST(MaxUnpool, PlacesValuesAtTheirIndices) {
  // A 2x2 pooled map unpools to 4x4; indices 5, 7, 13, 15 are (1,1), (1,3), (3,1), (3,3).
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, {5, 6, 7, 8}, {1, 1, 2, 2});
  const Tensor i = Ints({5, 7, 13, 15}, {1, 1, 2, 2});
  auto r = RunOneNode("MaxUnpool", {&x, &i}, Pool2x2(), 11);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{1, 1, 4, 4}));
  std::vector<float> want(16, 0.f);
  want[5] = 5, want[7] = 6, want[13] = 7, want[15] = 8;
  for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ((*r)[0].data<float>()[k], want[k]) << k;
  // output_shape 5x5: the same 4x4 block at the origin, one zero row and column beyond it.
  const Tensor shape = Ints({1, 1, 5, 5}, {4});
  auto s = RunOneNode("MaxUnpool", {&x, &i, &shape}, Pool2x2(), 11);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ((*s)[0].shape(), (Shape{1, 1, 5, 5}));
  for (int64_t k = 0; k < 25; ++k) {
    const int64_t row = k / 5, col = k % 5;
    const float expect = row < 4 && col < 4 ? want[static_cast<size_t>(row * 4 + col)] : 0.f;
    EXPECT_EQ((*s)[0].data<float>()[k], expect) << k;
  }
}

TEST(MaxUnpool, BadIndicesAndShapesAreErrors) {
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, {5, 6, 7, 8}, {1, 1, 2, 2});
  const Tensor far = Ints({5, 7, 13, 16}, {1, 1, 2, 2});
  auto idx = RunOneNode("MaxUnpool", {&x, &far}, Pool2x2(), 11);
  ASSERT_FALSE(idx.ok());
  EXPECT_NE(idx.status().message().find("MaxUnpool 'n': I[3] = 16 is outside"), std::string::npos)
      << idx.status().ToString();
  const Tensor i = Ints({5, 7, 13, 15}, {1, 1, 2, 2});
  const Tensor small = Ints({1, 1, 3, 4}, {4});
  auto shp = RunOneNode("MaxUnpool", {&x, &i, &small}, Pool2x2(), 11);
  ASSERT_FALSE(shp.ok());
  EXPECT_NE(shp.status().message().find("output_shape[2] = 3 is smaller"), std::string::npos)
      << shp.status().ToString();
  const Tensor flat = Ints({5, 7, 13, 15}, {1, 1, 4});
  auto rank = RunOneNode("MaxUnpool", {&x, &flat}, Pool2x2(), 11);
  ASSERT_FALSE(rank.ok());
  EXPECT_NE(rank.status().message().find("I has rank 3 but X has rank 4"), std::string::npos)
      << rank.status().ToString();
}

}  // namespace
}  // namespace sampan::ops
