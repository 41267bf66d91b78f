// Activations whose attributes the ONNX conformance cases leave at their defaults (Swish alpha).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

TEST(SwishRun, Alpha) {
  auto y = RunFirst("Swish", {F32({0.f, 1.f, -2.f}, {3})}, {{"alpha", ir::Attribute::Float(2.0f)}}, 24);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  const auto v = Values<float>(*y);
  EXPECT_FLOAT_EQ(v[0], 0.f);
  EXPECT_NEAR(v[1], 1.f / (1.f + std::exp(-2.f)), 1e-6);
  EXPECT_NEAR(v[2], -2.f / (1.f + std::exp(4.f)), 1e-6);
  auto bad = InferFirst("Swish", {TT({K(3)}, DType::kInt32)}, {}, 24);
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace sampan::ops
