// DeformConv (src/ops/deform_conv.cpp): bilinear samples at fractional offsets (zero outside),
// mask and bias, against hand-computed values; inconsistent shapes are errors.
#include <gtest/gtest.h>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

Tensor F32(const std::vector<float>& v, Shape s) {
  return Tensor::FromVector<float>(DType::kFloat32, v, s);
}

TEST(DeformConv, SamplesBilinearlyAtOffsets) {
  // X [[1, 2], [3, 4]], a 1x1 kernel of weight 1, every position shifted by (0.5, 0.5):
  // (0.5, 0.5) averages all four = 2.5; (0.5, 1.5) has only 2 and 4 inside, each 1/4: 1.5;
  // (1.5, 0.5): (3 + 4) / 4 = 1.75; (1.5, 1.5): 4 / 4 = 1.
  const Tensor x = F32({1, 2, 3, 4}, {1, 1, 2, 2}), w = F32({1}, {1, 1, 1, 1});
  const Tensor offset = F32(std::vector<float>(8, 0.5f), {1, 2, 2, 2});
  auto r = RunOneNode("DeformConv", {&x, &w, &offset}, {}, 19);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{1, 1, 2, 2}));
  const std::vector<float> want = {2.5f, 1.5f, 1.75f, 1.f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ((*r)[0].data<float>()[i], want[i]) << i;
  // Bias 10 and a mask of 2 on every tap: 10 + 2 * value.
  const Tensor bias = F32({10}, {1}), mask = F32(std::vector<float>(4, 2.f), {1, 1, 2, 2});
  auto m = RunOneNode("DeformConv", {&x, &w, &offset, &bias, &mask}, {}, 19);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ((*m)[0].data<float>()[i], 10.f + 2.f * want[i]) << i;
}

TEST(DeformConv, InconsistentShapesAreErrors) {
  const Tensor x = F32({1, 2, 3, 4}, {1, 1, 2, 2}), w = F32({1}, {1, 1, 1, 1});
  const Tensor three = F32(std::vector<float>(12, 0.f), {1, 3, 2, 2});
  auto c = RunOneNode("DeformConv", {&x, &w, &three}, {}, 19);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(
                "DeformConv 'n': offset's dim 1 (offset_group * prod(kernel) * spatial rank) is 3, expected 2"),
            std::string::npos)
      << c.status().ToString();
  const Tensor small = F32(std::vector<float>(2, 0.f), {1, 2, 1, 1});
  auto s = RunOneNode("DeformConv", {&x, &w, &small}, {}, 19);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("an offset spatial dim is 1, expected 2"), std::string::npos)
      << s.status().ToString();
  const Tensor w2 = F32({1, 1}, {1, 2, 1, 1});
  const Tensor offset = F32(std::vector<float>(8, 0.f), {1, 2, 2, 2});
  auto g = RunOneNode("DeformConv", {&x, &w2, &offset}, {}, 19);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("X has 1 channels but W expects 2"), std::string::npos) << g.status().ToString();
}

}  // namespace
}  // namespace sampan::ops
