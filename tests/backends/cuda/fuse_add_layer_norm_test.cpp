// The CUDA backend's lowering rewrite LayerNormalization(Add(a, b)) -> sampan::AddLayerNorm
// (backends/cuda/fuse_add_layer_norm.h), and the fused op's reference kernel: graphs
// before/after on the reference executor. Runs without a GPU (graph work only).
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include "backends/cuda/bert_layer.h"
#include "backends/cuda/fuse_add_layer_norm.h"
#include "backends/cuda/rewrite_test_util.h"
#include "builder/builder.h"
#include "passes/pass_test_util.h"

namespace sampan::cuda {
namespace {

using passes::testing::MustParse;
using passes::testing::OpList;
using testing::ExpectSameOutputs;
using testing::PlanOf;

// Post-LN residual block (BERT): y = LN(x + FFN(x)), plus an embedding-style sum whose
// second operand is broadcast over the batch ([S, C] against [B, S, C]).
const char* kResidual = R"(
  opset 17
  graph g (x: f32[2,5,16], pos: f32[5,16]) -> (y, e) {
    w = const f32[16,16] random
    h = MatMul(x, w) @ffn
    s = Add(h, x) @add
    sc = const f32[16] random
    bi = const f32[16] random
    y = LayerNormalization(s, sc, bi) {axis=-1, epsilon=1e-5} @ln
    es = Add(x, pos) @embed_add
    e = LayerNormalization(es, sc) {axis=-1, epsilon=1e-12} @embed_ln
  }
)";

TEST(CudaFuseAddLayerNorm, FusesResidualAndEmbeddingSums) {
  plan::Plan p = PlanOf(kResidual);
  auto done = FuseAddLayerNorm(p);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->size(), 2u);
  EXPECT_EQ(OpList(*p.graph), "MatMul,sampan::AddLayerNorm,sampan::AddLayerNorm");
  EXPECT_EQ(p.choices.count("add"), 0u);
  EXPECT_EQ(p.choices.count("embed_add"), 0u);
  EXPECT_EQ(p.choices.count("ln"), 1u);
  EXPECT_EQ(p.rewrites.size(), 2u);
  const ir::Node* f = nullptr;
  for (const auto& n : p.graph->nodes())
    if (n->name == "ln") f = n.get();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->op_type, "AddLayerNorm");
  ASSERT_EQ(f->num_inputs(), 4u);
  EXPECT_EQ(f->input(0)->name(), "h");
  EXPECT_EQ(f->input(1)->name(), "x");
  EXPECT_FLOAT_EQ(f->attr_float("epsilon", 0.f), 1e-5f);
  EXPECT_EQ(ir::PrintType(f->output(0)->type), "f32[2,5,16]");

  // Same outputs as the unfused graph.
  auto before = MustParse(kResidual);
  auto inputs = passes::testing::RandomInputs(*before, 5);
  auto want = passes::testing::RunReference(std::move(before), inputs);
  reference::Executor exec(p.graph);
  auto got = exec.Run(inputs);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(passes::testing::AllClose((*got)[i], (*want)[i], 1e-6)) << "output " << i;
}

TEST(CudaFuseAddLayerNorm, LeavesSumsReadElsewhere) {
  // The sum is also a graph output: it must stay.
  plan::Plan p = PlanOf(R"(
    opset 17
    graph g (x: f32[3,8], r: f32[3,8]) -> (y, s) {
      s = Add(x, r) @add
      sc = const f32[8] random
      y = LayerNormalization(s, sc) {axis=-1} @ln
    })");
  auto done = FuseAddLayerNorm(p);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(done->empty());
  EXPECT_EQ(OpList(*p.graph), "Add,LayerNormalization");
}

TEST(CudaFuseAddLayerNorm, LeavesNormsWithStatistics) {
  plan::Plan p = PlanOf(R"(
    opset 17
    graph g (x: f32[3,8], r: f32[3,8]) -> (y, mean) {
      s = Add(x, r) @add
      sc = const f32[8] random
      y, mean = LayerNormalization(s, sc) {axis=-1} @ln
    })");
  auto done = FuseAddLayerNorm(p);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(done->empty());
}

// In FP16 the fused op rounds the sum as Add does: bit-identical to the two ops.
TEST(CudaFuseAddLayerNorm, Fp16SumIsRoundedLikeAdd) {
  const char* text = R"(
    opset 17
    graph g (a: f16[4,32], b: f16[4,32]) -> (y) {
      s = Add(a, b) @add
      sc = const f16[32] random
      bi = const f16[32] random
      y = LayerNormalization(s, sc, bi) {axis=-1} @ln
    })";
  plan::Plan p = PlanOf(text);
  auto done = FuseAddLayerNorm(p);
  ASSERT_TRUE(done.ok() && done->size() == 1u);
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  std::map<std::string, Tensor> in;
  for (const char* name : {"a", "b"}) {
    Tensor f = Tensor::Alloc(DType::kFloat32, {4, 32});
    for (int64_t i = 0; i < f.numel(); ++i) f.mutable_data<float>()[i] = u(rng);
    in[name] = *CastTensor(f, DType::kFloat16);
  }
  auto want = passes::testing::RunReference(MustParse(text), in);
  reference::Executor exec(p.graph);
  auto got = exec.Run(in);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
  EXPECT_TRUE(passes::testing::AllClose((*got)[0], (*want)[0], 0.0));
}

// The whole pipeline on a BERT layer, as the GPU build sees it: the passes leave one
// Attention {layout=bshd} and no Transpose, the lowering rewrite one AddLayerNorm, and
// the result computes what the exported graph does.
TEST(CudaFuseAddLayerNorm, BertLayerPipeline) {
  const std::string text = sampan::testing::BertLayer(2, 9, 32, 2);
  builder::BuildConfig config;  // reference backend: passes and precision, no lowering
  auto p = builder::Build(MustParse(text), config, nullptr);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto done = FuseAddLayerNorm(*p);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->size(), 1u);
  size_t attention = 0, transposes = 0, add_ln = 0;
  for (const auto& n : p->graph->nodes()) {
    if (n->op_type == "Attention") {
      ++attention;
      EXPECT_EQ(n->attr_string("layout", ""), "bshd");
    }
    transposes += n->op_type == "Transpose";
    add_ln += n->op_type == "AddLayerNorm";
  }
  EXPECT_EQ(attention, 1u);
  EXPECT_EQ(transposes, 0u);
  EXPECT_EQ(add_ln, 1u);
  auto before = MustParse(text);
  auto inputs = passes::testing::RandomInputs(*before, 3);
  auto want = passes::testing::RunReference(std::move(before), inputs);
  reference::Executor exec(p->graph);
  auto got = exec.Run(inputs);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
  EXPECT_TRUE(passes::testing::AllClose((*got)[0], (*want)[0], 1e-4));
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
