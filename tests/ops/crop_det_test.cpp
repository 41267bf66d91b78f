// CenterCropPad and Det (src/ops/center_crop_pad.cpp, det.cpp): values against direct
// computation and the errors bad inputs give (the node suite checks onnx's cases too).
#include <gtest/gtest.h>

#include <map>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

Tensor Ints(const std::vector<int64_t>& v) {
  return Tensor::FromVector<int64_t>(DType::kInt64, v, {static_cast<int64_t>(v.size())});
}

TEST(CenterCropPad, CropsAndPadsAroundTheCentre) {
  // [3, 5]: rows padded 3 -> 6 (one zero row in front, two behind), columns cropped 5 -> 2
  // (one dropped in front, two behind).
  std::vector<float> v(15);
  for (int i = 0; i < 15; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, v, {3, 5});
  const Tensor shape = Ints({6, 2});
  auto r = RunOneNode("CenterCropPad", {&x, &shape}, {}, 18);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{6, 2}));
  const std::vector<float> want = {0, 0, 2, 3, 7, 8, 12, 13, 0, 0, 0, 0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ((*r)[0].data<float>()[i], want[i]) << i;
  // Only axis -1, given as an attribute.
  const Tensor one = Ints({4});
  auto a = RunOneNode("CenterCropPad", {&x, &one}, {{"axes", ir::Attribute::Ints({-1})}}, 18);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)[0].shape(), (Shape{3, 4}));
  EXPECT_EQ((*a)[0].data<float>()[0], 1.f);
}

TEST(CenterCropPad, BadShapesAreErrors) {
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, std::vector<float>(6, 1.f), {2, 3});
  const Tensor three = Ints({1, 2, 3}), neg = Ints({2, -1}), ok = Ints({2, 2});
  auto count = RunOneNode("CenterCropPad", {&x, &three}, {}, 18);
  ASSERT_FALSE(count.ok());
  EXPECT_NE(count.status().message().find("3 values for 2 axes"), std::string::npos) << count.status().ToString();
  auto n = RunOneNode("CenterCropPad", {&x, &neg}, {}, 18);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("< 0"), std::string::npos);
  auto twice = RunOneNode("CenterCropPad", {&x, &ok}, {{"axes", ir::Attribute::Ints({1, -1})}}, 18);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("listed twice"), std::string::npos);
}

TEST(Det, MatchesCofactorExpansionAndSingularIsZero) {
  // Two 3x3 matrices: a general one (det -306) and a singular one (rows 1 and 3 equal).
  const Tensor x =
      Tensor::FromVector<float>(DType::kFloat32, {6, 1, 1, 4, -2, 5, 2, 8, 7, 1, 2, 3, 4, 5, 6, 1, 2, 3}, {2, 3, 3});
  auto r = RunOneNode("Det", {&x}, {}, 11);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{2}));
  EXPECT_NEAR((*r)[0].data<float>()[0], -306.f, 1e-3);
  EXPECT_EQ((*r)[0].data<float>()[1], 0.f);
  const Tensor rect = Tensor::FromVector<float>(DType::kFloat32, std::vector<float>(6, 1.f), {2, 3});
  auto bad = RunOneNode("Det", {&rect}, {}, 11);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("square"), std::string::npos) << bad.status().ToString();
}

}  // namespace
}  // namespace sampan::ops
