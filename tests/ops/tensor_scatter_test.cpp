// TensorScatter (src/ops/tensor_scatter.cpp): per-batch write positions, circular wrap, and
// the errors bad shapes and indices give.
#include <gtest/gtest.h>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

Tensor Ints(const std::vector<int64_t>& v) {
  return Tensor::FromVector<int64_t>(DType::kInt64, v, {static_cast<int64_t>(v.size())});
}

TEST(TensorScatter, WritesEachBatchRowAtItsIndex) {
  // cache [2, 4, 1] of zeros, update [2, 2, 1]; row 0 written at 1, row 1 at 2.
  const Tensor cache = Tensor::FromVector<float>(DType::kFloat32, std::vector<float>(8, 0.f), {2, 4, 1});
  const Tensor update = Tensor::FromVector<float>(DType::kFloat32, {1, 2, 3, 4}, {2, 2, 1});
  const Tensor idx = Ints({1, 2});
  auto r = RunOneNode("TensorScatter", {&cache, &update, &idx}, {}, 24);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{2, 4, 1}));
  const std::vector<float> want = {0, 1, 2, 0, 0, 0, 3, 4};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ((*r)[0].data<float>()[i], want[i]) << i;
  // Circular: row 1 starts at 3 and wraps to 0.
  const Tensor wrap = Ints({0, 3});
  auto c = RunOneNode("TensorScatter", {&cache, &update, &wrap}, {{"mode", ir::Attribute::String("circular")}}, 24);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::vector<float> want_c = {1, 2, 0, 0, 4, 0, 0, 3};
  for (size_t i = 0; i < want_c.size(); ++i) EXPECT_EQ((*c)[0].data<float>()[i], want_c[i]) << i;
}

TEST(TensorScatter, BadShapesAndIndicesAreErrors) {
  const Tensor cache = Tensor::FromVector<float>(DType::kFloat32, std::vector<float>(8, 0.f), {2, 4, 1});
  const Tensor update = Tensor::FromVector<float>(DType::kFloat32, {1, 2, 3, 4}, {2, 2, 1});
  const Tensor past_end = Ints({1, 3});
  auto lin = RunOneNode("TensorScatter", {&cache, &update, &past_end}, {}, 24);
  ASSERT_FALSE(lin.ok());
  EXPECT_NE(lin.status().message().find("TensorScatter 'n': write_indices[1] = 3"), std::string::npos)
      << lin.status().ToString();
  const Tensor wide = Tensor::FromVector<float>(DType::kFloat32, std::vector<float>(8, 0.f), {2, 2, 2});
  auto dims = RunOneNode("TensorScatter", {&cache, &wide}, {}, 24);
  ASSERT_FALSE(dims.ok());
  EXPECT_NE(dims.status().message().find("update dim 2 is 2 but past_cache dim 2 is 1"), std::string::npos)
      << dims.status().ToString();
  auto axis0 = RunOneNode("TensorScatter", {&cache, &update}, {{"axis", ir::Attribute::Int(0)}}, 24);
  ASSERT_FALSE(axis0.ok());
  EXPECT_NE(axis0.status().message().find("axis must not be 0"), std::string::npos) << axis0.status().ToString();
  const Tensor three = Ints({0, 0, 0});
  auto count = RunOneNode("TensorScatter", {&cache, &update, &three}, {}, 24);
  ASSERT_FALSE(count.ok());
  EXPECT_NE(count.status().message().find("write_indices has 3 values"), std::string::npos)
      << count.status().ToString();
}

}  // namespace
}  // namespace sampan::ops
