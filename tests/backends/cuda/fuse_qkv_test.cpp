// The CUDA backend's lowering rewrite of self-attention's three projections into one
// GEMM read as packed [B, S, 3, H, D] by the attention (backends/cuda/fuse_qkv.h): on
// a BERT layer built in FP16 for the reference backend (passes and precision, no
// lowering), node counts and results before/after on the reference executor; what it
// leaves alone (FP32, a pre-Ampere device, projections read elsewhere). Runs without a
// GPU (graph work only).
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include "backends/cuda/bert_layer.h"
#include "backends/cuda/fuse_qkv.h"
#include "builder/builder.h"
#include "passes/pass_test_util.h"
#include "backends/reference/executor.h"

namespace sampan::cuda {
namespace {

using passes::testing::MustParse;

Result<plan::Plan> BuildPlan(const std::string& text, builder::Precision precision) {
  builder::BuildConfig config;  // reference backend
  config.precision = precision;
  return builder::Build(MustParse(text), config, nullptr);
}

size_t Count(const plan::Plan& p, const std::string& op) {
  size_t n = 0;
  for (const auto& node : p.graph->nodes()) n += node->op_type == op;
  return n;
}

TEST(CudaFuseQkv, BertLayerProjectionsBecomeOneGemm) {
  const std::string text = sampan::testing::BertLayer(2, 9, 32, 2);
  auto before = BuildPlan(text, builder::Precision::kFP16);
  auto after = BuildPlan(text, builder::Precision::kFP16);
  ASSERT_TRUE(before.ok() && after.ok()) << after.status().ToString();
  ASSERT_EQ(Count(*after, "FusedMatMul"), 4u);  // q, k, v, o
  auto done = FuseQkvProjections(*after, 9);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(done->size(), 1u);
  EXPECT_EQ(Count(*after, "FusedMatMul"), 2u);
  const ir::Node* attn = passes::testing::FindNodeByOp(*after->graph, "Attention");
  ASSERT_NE(attn, nullptr);
  EXPECT_EQ(attn->attr_string("layout", ""), "bs3hd");
  EXPECT_EQ(attn->input(1), nullptr);
  EXPECT_EQ(attn->input(2), nullptr);
  const ir::Value* packed = attn->input(0);
  EXPECT_EQ(packed->type.ToString(), "f16[2,9,3,2,16]");
  const ir::Node* mm = packed->producer()->input(0)->producer();
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->input(1)->data.shape(), (Shape{32, 96}));
  EXPECT_EQ(mm->input(2)->data.shape(), (Shape{96}));
  // The new nodes carry the plan choices of the ones they replace (FP16, no tactic yet:
  // the builder times the merged GEMM after the rewrite).
  ASSERT_TRUE(after->choices.count(mm->name));
  EXPECT_EQ(after->choices.at(mm->name).precision, "fp16");
  EXPECT_TRUE(after->choices.at(mm->name).tactic.empty());
  EXPECT_TRUE(after->choices.count(packed->producer()->name));

  auto g = MustParse(text);
  auto inputs = passes::testing::RandomInputs(*g, 5);
  reference::Executor x_before(before->graph), x_after(after->graph);
  auto want = x_before.Run(inputs);
  auto got = x_after.Run(inputs);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
  EXPECT_TRUE(passes::testing::AllClose((*got)[0], (*want)[0], 1e-3));
}

TEST(CudaFuseQkv, LeavesWhatTheFusedKernelWouldNotRun) {
  const std::string text = sampan::testing::BertLayer(2, 9, 32, 2);
  auto fp32 = BuildPlan(text, builder::Precision::kFP32);
  ASSERT_TRUE(fp32.ok());
  auto none = FuseQkvProjections(*fp32, 9);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty()) << "FP32 attention runs the GEMM path, which reads separate Q, K, V";
  auto fp16 = BuildPlan(text, builder::Precision::kFP16);
  ASSERT_TRUE(fp16.ok());
  auto old_gpu = FuseQkvProjections(*fp16, 7);
  ASSERT_TRUE(old_gpu.ok());
  EXPECT_TRUE(old_gpu->empty()) << "no fused attention kernel below sm_80";
}

TEST(CudaFuseQkv, ProjectionReadElsewhereIsKept) {
  // The key projection also feeds a graph output: merging would drop it.
  std::string text = sampan::testing::BertLayer(1, 4, 16, 2);
  text.replace(text.find(") -> (y)"), 8, ") -> (y, ak)");
  auto p = BuildPlan(text, builder::Precision::kFP16);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto done = FuseQkvProjections(*p, 9);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(done->empty());
}

// transformers' newer BERT reshapes with the head count left to infer ([B, S, -1, D]).
TEST(CudaFuseQkv, HeadCountLeftToInfer) {
  std::string text = sampan::testing::BertLayer(2, 9, 32, 2);
  const std::string heads = "heads = const i64[4] {0, 0, 2, 16}";
  ASSERT_NE(text.find(heads), std::string::npos);
  text.replace(text.find(heads), heads.size(), "heads = const i64[4] {0, 0, -1, 16}");
  auto before = BuildPlan(text, builder::Precision::kFP16);
  auto after = BuildPlan(text, builder::Precision::kFP16);
  ASSERT_TRUE(before.ok() && after.ok()) << after.status().ToString();
  auto done = FuseQkvProjections(*after, 9);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(done->size(), 1u);
  const ir::Node* attn = passes::testing::FindNodeByOp(*after->graph, "Attention");
  ASSERT_NE(attn, nullptr);
  EXPECT_EQ(attn->input(0)->type.ToString(), "f16[2,9,3,2,16]");
  auto g = MustParse(text);
  auto inputs = passes::testing::RandomInputs(*g, 6);
  reference::Executor x_before(before->graph), x_after(after->graph);
  auto want = x_before.Run(inputs);
  auto got = x_after.Run(inputs);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
  EXPECT_TRUE(passes::testing::AllClose((*got)[0], (*want)[0], 1e-3));
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
