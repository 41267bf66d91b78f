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
      small = const i64[1] {)" +
                             std::to_string(n) + R"(}
      large = const i64[1] {)" +
                             std::to_string(n + 1) + R"(}
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

// Weights a program folds (here scaled by the input's height) belong to that program; the
// engine's weight cache finds reordered and packed weights by their source's address. A
// program that dies frees its folded weights, and the next program's, of the same size,
// may get the same address: the cache must not hand back the old weights (it keeps every
// source it saw alive, so addresses it knows are never reused).
TEST(CpuFold, FoldedWeightsOfAnEndedProgramAreNotReused) {
  auto engine = CpuEngineFor(R"(
    opset 17
    graph g (x: f32[1,2,?,4], m: f32[3,2]) -> (y, z) {
      wc = const f32[3,2,1,1] {1.0, 2.0, -1.0, 0.5, 0.25, -2.0}
      mc = const f32[2,5] {1.0, 2.0, 3.0, 4.0, 5.0, -1.0, -2.0, -3.0, -4.0, -5.0}
      shp = Shape(x) @shape
      i2 = const i64[] {2}
      h = Gather(shp, i2) {axis=0} @height
      hf = Cast(h) {to=1} @height_f32
      w = Mul(wc, hf) @scaled_w
      wm = Mul(mc, hf) @scaled_m
      y = Conv(x, w) @conv
      z = MatMul(m, wm) @matmul
    }
  )");
  ASSERT_NE(engine, nullptr);
  std::mt19937_64 rng(5);
  const Tensor m = RandomTensor(DType::kFloat32, {3, 2}, rng);
  for (int64_t h : {4, 8, 4, 16}) {
    const Tensor x = RandomTensor(DType::kFloat32, {1, 2, h, 4}, rng);
    // A context (and its programs) per height: each ends before the next begins.
    auto ctx = engine->CreateContext();
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    auto out = (*ctx)->Run({{"x", x}, {"m", m}});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const float w[3][2] = {{1.0f, 2.0f}, {-1.0f, 0.5f}, {0.25f, -2.0f}};
    const float mc[2][5] = {{1, 2, 3, 4, 5}, {-1, -2, -3, -4, -5}};
    const Tensor& y = (*out)[0];
    const Tensor& z = (*out)[1];
    ASSERT_EQ(y.shape(), (Shape{1, 3, h, 4}));
    for (int64_t k = 0; k < 3; ++k)
      for (int64_t p = 0; p < h * 4; ++p) {
        const float want =
            static_cast<float>(h) * (w[k][0] * x.data<float>()[p] + w[k][1] * x.data<float>()[h * 4 + p]);
        ASSERT_NEAR(y.data<float>()[k * h * 4 + p], want, 1e-3f * (1 + std::fabs(want))) << "height " << h;
      }
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < 5; ++c) {
        const float want =
            static_cast<float>(h) * (m.data<float>()[r * 2] * mc[0][c] + m.data<float>()[r * 2 + 1] * mc[1][c]);
        ASSERT_NEAR(z.data<float>()[r * 5 + c], want, 1e-3f * (1 + std::fabs(want))) << "height " << h;
      }
  }
}

}  // namespace
}  // namespace sampan::cpu::testing
