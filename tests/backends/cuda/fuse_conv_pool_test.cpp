// The CUDA backend's lowering rewrite MaxPool(Conv(x)) -> sampan::FusedConvPool
// (backends/cuda/fuse_conv_pool.h) and the fused op's reference kernel: graphs before and
// after on the reference executor. Runs without a GPU (graph work only).
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include "backends/cuda/fuse_conv_pool.h"
#include "backends/cuda/rewrite_test_util.h"
#include "ir/text.h"
#include "ops/run_node.h"
#include "passes/pass_test_util.h"

namespace sampan::cuda {
namespace {

using testing::ExpectSameOutputs;
using testing::PlanOf;

// ResNet's stem (7x7/2 conv + ReLU, 3x3/2 pool with padding), a bias-free 5x5 conv into a
// ceil-mode pool, and four that stay: a conv whose output has a second reader, one on 8
// input channels, an FP32 one, a pool with Indices.
const char* kNet = R"(
  opset 17
  opset sampan 1
  graph g (x: f16[2,3,30,34], x8: f16[1,8,12,12], xf: f32[1,3,12,12]) -> (y1, y2, y3, r3, y4, y5, y6, i6) {
    w = const f16[16,3,7,7] random
    b = const f16[16] random
    c1 = sampan::FusedConv(x, w, b) {activation="Relu", kernel_shape=[7,7], strides=[2,2], pads=[3,3,3,3]} @stem
    y1 = MaxPool(c1) {kernel_shape=[3,3], strides=[2,2], pads=[1,1,1,1]} @pool1
    w5 = const f16[8,3,5,5] random
    c2 = Conv(x, w5) {pads=[1,2,1,2]} @conv2
    y2 = MaxPool(c2) {kernel_shape=[3,2], strides=[2,3], ceil_mode=1} @pool2
    c3 = Conv(x, w5) {strides=[2,2]} @conv3
    y3 = MaxPool(c3) {kernel_shape=[2,2], strides=[2,2]} @pool3
    r3 = Relu(c3) @relu3
    w8 = const f16[16,8,3,3] random
    c4 = Conv(x8, w8) @conv4
    y4 = MaxPool(c4) {kernel_shape=[2,2]} @pool4
    wf = const f32[8,3,3,3] random
    c5 = Conv(xf, wf) @conv5
    y5 = MaxPool(c5) {kernel_shape=[2,2]} @pool5
    c6 = Conv(x, w5) @conv6
    y6, i6 = MaxPool(c6) {kernel_shape=[2,2]} @pool6
  }
)";

TEST(CudaFuseConvPool, FusesStemConvolutionsAndTheirPool) {
  plan::Plan p = PlanOf(kNet);
  auto done = FuseConvPool(p);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(done->size(), 2u);
  EXPECT_EQ(p.choices.count("pool1"), 0u);
  EXPECT_EQ(p.choices.count("pool2"), 0u);
  EXPECT_EQ(p.choices.count("pool3"), 1u);
  size_t fused = 0;
  for (const auto& n : p.graph->nodes()) {
    if (n->op_type != "FusedConvPool") continue;
    ++fused;
    EXPECT_EQ(n->domain, "sampan");
    if (n->name == "stem") {
      EXPECT_EQ(n->num_inputs(), 3u);
      EXPECT_EQ(n->attr_string("activation", ""), "Relu");
      EXPECT_EQ(n->attr_ints("pool_kernel_shape"), (std::vector<int64_t>{3, 3}));
      EXPECT_EQ(n->attr_ints("pool_pads"), (std::vector<int64_t>{1, 1, 1, 1}));
      EXPECT_EQ(n->output(0)->name(), "y1");
    } else {
      EXPECT_EQ(n->name, "conv2");
      EXPECT_EQ(n->attr_int("pool_ceil_mode", 0), 1);
      EXPECT_EQ(n->attr_ints("pool_strides"), (std::vector<int64_t>{2, 3}));
      EXPECT_EQ(n->attr_ints("pads"), (std::vector<int64_t>{1, 2, 1, 2}));
    }
  }
  EXPECT_EQ(fused, 2u);
  ExpectSameOutputs(kNet, p, 1e-3, 5);
}

TEST(CudaFuseConvPool, ReferenceKernelRejectsAMissingPoolKernel) {
  auto g = ir::ParseGraph(R"(
    opset 17
    opset sampan 1
    graph g (x: f32[1,3,8,8]) -> (y) {
      w = const f32[4,3,3,3] random
      y = sampan::FusedConvPool(x, w) {pool_strides=[2,2]} @bad
    }
  )");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto st = ops::InferTypes(**g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("pool_kernel_shape"), std::string::npos) << st.ToString();
  EXPECT_NE(st.ToString().find("bad"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
