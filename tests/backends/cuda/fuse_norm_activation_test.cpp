// The CUDA backend's lowering rewrite Relu(BatchNormalization(x)) -> sampan::FusedBatchNorm
// (backends/cuda/fuse_norm_activation.h) and the fused op's reference kernel: graphs
// before/after on the reference executor. Runs without a GPU (graph work only).
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include "backends/cuda/fuse_norm_activation.h"
#include "backends/cuda/rewrite_test_util.h"
#include "passes/pass_test_util.h"

namespace sampan::cuda {
namespace {

using passes::testing::MustParse;
using passes::testing::OpList;
using testing::ExpectSameOutputs;
using testing::PlanOf;

// DenseNet's order (Concat, BatchNorm, ReLU) and a ReLU6 (Clip) after another BatchNorm;
// a BatchNorm read by two nodes and one whose running statistics are outputs stay.
const char* kNet = R"(
  opset 15
  graph g (a: f32[2,3,4,4], b: f32[2,5,4,4]) -> (y1, y2, y3, n3, y4, mean) {
    cat = Concat(a, b) {axis=1} @cat
    s = const f32[8] random
    o = const f32[8] random
    m = const f32[8] {0.1, -0.2, 0.3, 0.0, 0.05, -0.1, 0.2, 0.1}
    v = const f32[8] {0.5, 1.5, 0.8, 2.0, 0.9, 1.1, 0.7, 1.3}
    n1 = BatchNormalization(cat, s, o, m, v) {epsilon=1e-5} @bn1
    y1 = Relu(n1) @relu1
    n2 = BatchNormalization(cat, s, o, m, v) @bn2
    lo = const f32[] {0.0}
    hi = const f32[] {6.0}
    y2 = Clip(n2, lo, hi) @relu6
    n3 = BatchNormalization(cat, s, o, m, v) @bn3
    y3 = Relu(n3) @relu3
    n4, mean = BatchNormalization(cat, s, o, m, v) {training_mode=1} @bn4
    y4 = Relu(n4) @relu4
  }
)";

TEST(CudaFuseNormActivation, FusesInferenceBatchNormAndItsActivation) {
  plan::Plan p = PlanOf(kNet);
  auto done = FuseNormActivation(p);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(done->size(), 2u);
  EXPECT_EQ(p.choices.count("relu1"), 0u);
  EXPECT_EQ(p.choices.count("relu6"), 0u);
  EXPECT_EQ(p.choices.count("bn1"), 1u);
  size_t fused = 0;
  for (const auto& n : p.graph->nodes()) {
    if (n->op_type != "FusedBatchNorm") continue;
    ++fused;
    EXPECT_EQ(n->domain, "sampan");
    EXPECT_EQ(n->num_inputs(), 5u);
    if (n->name == "bn1") {
      EXPECT_EQ(n->attr_string("activation", ""), "Relu");
      EXPECT_EQ(n->output(0)->name(), "y1");
    } else {
      EXPECT_EQ(n->name, "bn2");
      EXPECT_EQ(n->attr_string("activation", ""), "Clip");
      EXPECT_EQ(n->attr_floats("activation_params"), (std::vector<float>{0.f, 6.f}));
    }
  }
  EXPECT_EQ(fused, 2u);

  // Same outputs as the unfused graph (the training-mode node is left to the reference).
  ExpectSameOutputs(kNet, p, 1e-6, 5);
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
