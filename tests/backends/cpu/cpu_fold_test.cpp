// What the CPU program computes once while preparing (shape arithmetic whose
// inputs are known) and what it leaves as steps: random draws, whatever their
// inputs, and results above ops::kMaxShapeFoldElements.
#include "backends/cpu/cpu_test_util.h"
#include "ops/draw_test_op.h"
#include "ops/fold_limits.h"

namespace sampan::cpu::testing {
namespace {

::testing::AssertionResult HasStep(const std::vector<std::string>& labels, const std::string& node) {
  std::string all;
  for (const std::string& l : labels) {
    // A step's label is "<op> <node> [<kernel>]".
    if (l.find(" " + node + " ") != std::string::npos) return ::testing::AssertionSuccess() << l << " is a step";
    all += "\n  " + l;
  }
  return ::testing::AssertionFailure() << "no step for '" << node << "'; the steps:" << all;
}

TEST(CpuFold, RandomDrawIsAStepNotAConstant) {
  ASSERT_TRUE(ops::testing::kDrawRegistered);
  auto engine = CpuEngineFor(R"(
    opset 17
    graph g (x: i64[1], w: f32[3]) -> (y, z) {
      d = sampan.test::Draw() @draw
      y = Add(x, d) @add_draw
      s = const i64[1] {3}
      c = ConstantOfShape(s) @zeros
      z = Add(w, c) @add_zeros
    }
  )");
  ASSERT_NE(engine, nullptr);
  Tensor x = Tensor::Zeros(DType::kInt64, {1}).value();
  Tensor w = Tensor::Zeros(DType::kFloat32, {3}).value();
  const std::vector<std::string> labels = StepLabels(*engine, {{"x", x}, {"w", w}});
  EXPECT_TRUE(HasStep(labels, "draw"));
  EXPECT_FALSE(HasStep(labels, "zeros")) << "deterministic with known inputs: folded";
}

TEST(CpuFold, LargeResultsOfKnownInputsRunAsSteps) {
  // ConstantOfShape of a known shape folds up to the shared limit, and runs per
  // inference above it (as the CUDA planner does).
  const int64_t n = ops::kMaxShapeFoldElements;
  auto engine = CpuEngineFor(R"(
    opset 17
    graph g (x: f32[1]) -> (y, z) {
      small = const i64[1] {)" + std::to_string(n) + R"(}
      large = const i64[1] {)" + std::to_string(n + 1) + R"(}
      a = ConstantOfShape(small) @at_limit
      b = ConstantOfShape(large) @over_limit
      y = Add(x, a) @add_a
      z = Add(x, b) @add_b
    }
  )");
  ASSERT_NE(engine, nullptr);
  Tensor x = Tensor::Zeros(DType::kFloat32, {1}).value();
  const std::vector<std::string> labels = StepLabels(*engine, {{"x", x}});
  EXPECT_FALSE(HasStep(labels, "at_limit"));
  EXPECT_TRUE(HasStep(labels, "over_limit"));
}

}  // namespace
}  // namespace sampan::cpu::testing
