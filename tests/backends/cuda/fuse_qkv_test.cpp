// The CUDA backend's lowering rewrite of self-attention's three projections into one
// GEMM read as packed [B, S, 3, H, D] by the attention (backends/cuda/fuse_qkv.h): on
// a BERT layer built in FP16 for the reference backend (passes and precision, no
// lowering), node counts and results before/after on the reference executor; what it
// leaves alone (FP32, a pre-Ampere device, projections read elsewhere). Runs without a
// GPU (graph work only).
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include <unistd.h>

#include <filesystem>

#include "backends/cuda/bert_layer.h"
#include "backends/cuda/fold_attention_views.h"
#include "backends/cuda/fuse_qkv.h"
#include "backends/reference/executor.h"
#include "base/npy.h"
#include "builder/builder.h"
#include "passes/pass_test_util.h"

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

// Both MHA exports end the same way: rows [S*B, E] (`o` permuted), the output
// projection, and [S, B, E] transposed back to [B, S, E].
std::string SeqFirstOutProjection(const char* o) {
  return StrCat("      shp2 = const i64[2] {10, 32}\n      orow = Reshape(", o, R"(, shp2)
      wo = const f32[32,32] random
      bo = const f32[32] random
      g1 = Gemm(orow, wo, bo) {transB=1}
      shp3 = const i64[3] {5, 2, 32}
      r4 = Reshape(g1, shp3)
      y = Transpose(r4) {perm=[1,0,2]}
)");
}

// torch.nn.MultiheadAttention's sequence-first export (torchvision's ViT): B=2, S=5,
// E=32, H=2, D=16, K transposed to [B*H, D, S], Q divided by sqrt(D).
std::string SeqFirstMha(const std::string& extra_output = "") {
  return StrCat(R"(
    opset 17
    graph g (x: f32[2,5,32]) -> (y)",
                extra_output, R"() {
      xt = Transpose(x) {perm=[1,0,2]}
      w = const f32[32,96] random
      bi = const f32[96] random
      mm = MatMul(xt, w)
      p = Add(bi, mm)
      s0 = const i64[1] {0}
      e1 = const i64[1] {32}
      e2 = const i64[1] {64}
      e3 = const i64[1] {96}
      ax = const i64[1] {-1}
      qs = Slice(p, s0, e1, ax)
      ks = Slice(p, e1, e2, ax)
      vs = Slice(p, e2, e3, ax)
      shp = const i64[3] {5, 4, 16}
      qr = Reshape(qs, shp)
      kr = Reshape(ks, shp)
      vr = Reshape(vs, shp)
      qt = Transpose(qr) {perm=[1,0,2]}
      kt = Transpose(kr) {perm=[1,2,0]}
      vt = Transpose(vr) {perm=[1,0,2]}
      c = const f32[] {4.0}
      qd = Div(qt, c)
      sc = MatMul(qd, kt)
      sm = Softmax(sc) {axis=-1}
      o = MatMul(sm, vt)
      ot = Transpose(o) {perm=[1,0,2]}
    )",
                SeqFirstOutProjection("ot"), "    }");
}

// Rewrites `text`'s attention and checks it against the plan without the rewrite.
void ExpectFolded(const std::string& what, const std::string& text, uint64_t seed) {
  auto before = BuildPlan(text, builder::Precision::kFP16);
  auto after = BuildPlan(text, builder::Precision::kFP16);
  ASSERT_TRUE(before.ok() && after.ok()) << what << ": " << after.status().ToString();
  ASSERT_EQ(Count(*after, "Attention"), 1u) << what << ": fuse_attention did not form the attention";
  auto done = FoldAttentionViews(*after, 9);
  ASSERT_TRUE(done.ok()) << what << ": " << done.status().ToString();
  ASSERT_EQ(done->size(), 1u) << what;
  EXPECT_EQ(Count(*after, "Gather") + Count(*after, "Slice") + Count(*after, "Squeeze") + Count(*after, "Unsqueeze"),
            0u)
      << what;
  const ir::Node* attn = passes::testing::FindNodeByOp(*after->graph, "Attention");
  ASSERT_NE(attn, nullptr);
  EXPECT_EQ(attn->attr_string("layout", ""), "bs3hd") << what;
  EXPECT_EQ(attn->input(0)->type.ToString(), "f16[2,5,3,2,16]") << what;
  auto g = MustParse(text);
  auto inputs = passes::testing::RandomInputs(*g, seed);
  reference::Executor x_before(before->graph), x_after(after->graph);
  auto want = x_before.Run(inputs);
  auto got = x_after.Run(inputs);
  ASSERT_TRUE(want.ok() && got.ok()) << what << ": " << got.status().ToString();
  ASSERT_EQ((*got)[0].shape(), (*want)[0].shape()) << what;
  EXPECT_TRUE(passes::testing::AllClose((*got)[0], (*want)[0], 1e-3)) << what;
  std::printf("%s: %s\n", what.c_str(), done->front().c_str());
}

TEST(CudaFoldAttentionViews, VitBlockReadsThePackedProjection) {
  ExpectFolded("torch 1 MHA (ViT)", SeqFirstMha(), 7);
  auto p = BuildPlan(SeqFirstMha(), builder::Precision::kFP16);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(FoldAttentionViews(*p, 9).ok());
  EXPECT_EQ(Count(*p, "Transpose"), 0u);
  EXPECT_EQ(Count(*p, "Div"), 0u) << "Q's division is the attention's scale";
  const ir::Node* attn = passes::testing::FindNodeByOp(*p->graph, "Attention");
  ASSERT_NE(attn, nullptr);
  EXPECT_FLOAT_EQ(attn->attr_float("scale", 0.f), 0.25f);
}

TEST(CudaFoldAttentionViews, LeavesWhatItCannotProve) {
  // FP32 (the GEMM path reads separate operands), a pre-Ampere device, and a projection
  // that is also a graph output.
  auto fp32 = BuildPlan(SeqFirstMha(), builder::Precision::kFP32);
  ASSERT_TRUE(fp32.ok());
  auto none = FoldAttentionViews(*fp32, 9);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto fp16 = BuildPlan(SeqFirstMha(), builder::Precision::kFP16);
  ASSERT_TRUE(fp16.ok());
  auto old_gpu = FoldAttentionViews(*fp16, 7);
  ASSERT_TRUE(old_gpu.ok());
  EXPECT_TRUE(old_gpu->empty());
  auto shared = BuildPlan(SeqFirstMha(", p"), builder::Precision::kFP16);
  ASSERT_TRUE(shared.ok()) << shared.status().ToString();
  auto kept = FoldAttentionViews(*shared, 9);
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE(kept->empty());
}

// torch >= 2's MultiheadAttention export (the one torch 2.11 writes for ViT):
// unflatten/unsqueeze/transpose/squeeze of the [S, B, 3E] projection, Gather of each
// part, [S, B*H, D] views transposed, then [B, H, S, D] views for SDPA, and the output
// permuted (2, 0, 1, 3) into [S*B, E] rows.
const std::string kTorch2Mha = StrCat(R"(
    opset 17
    graph g (x: f32[2,5,32]) -> (y) {
      xt = Transpose(x) {perm=[1,0,2]}
      w = const f32[32,96] random
      bi = const f32[96] random
      mm = MatMul(xt, w)
      p = Add(mm, bi)
      u = const i64[4] {5, 2, 3, 32}
      p4 = Reshape(p, u)
      ax0 = const i64[1] {0}
      p5 = Unsqueeze(p4, ax0)
      pt = Transpose(p5) {perm=[3,1,2,0,4]}
      ax3 = const i64[1] {3}
      ps = Squeeze(pt, ax3)
      i0 = const i64[] {0}
      i1 = const i64[] {1}
      i2 = const i64[] {2}
      q0 = Gather(ps, i0) {axis=0}
      k0 = Gather(ps, i1) {axis=0}
      v0 = Gather(ps, i2) {axis=0}
      shp = const i64[3] {5, 4, 16}
      shp4 = const i64[4] {2, 2, 5, 16}
      qr = Reshape(q0, shp)
      kr = Reshape(k0, shp)
      vr = Reshape(v0, shp)
      qt = Transpose(qr) {perm=[1,0,2]}
      kt = Transpose(kr) {perm=[1,0,2]}
      vt = Transpose(vr) {perm=[1,0,2]}
      q4 = Reshape(qt, shp4)
      k4 = Reshape(kt, shp4)
      v4 = Reshape(vt, shp4)
      kT = Transpose(k4) {perm=[0,1,3,2]}
      sc = MatMul(q4, kT)
      c = const f32[] {0.25}
      scs = Mul(sc, c)
      sm = Softmax(scs) {axis=-1}
      o = MatMul(sm, v4)
      op = Transpose(o) {perm=[2,0,1,3]}
    )",
                                      SeqFirstOutProjection("op"), "    }");

// timm's batch-first attention: [B, S, 3, H, D], permute (2, 0, 3, 1, 4), Gather; the
// output transposed back and reshaped to [B, S, E] (or, `direct`, read as it is).
std::string TimmAttention(bool direct) {
  return StrCat(R"(
    opset 17
    graph g (x: f32[2,5,32]) -> (y) {
      w = const f32[32,96] random
      bi = const f32[96] random
      mm = MatMul(x, w)
      p = Add(mm, bi)
      s5 = const i64[5] {2, 5, 3, 2, 16}
      p5 = Reshape(p, s5)
      pt = Transpose(p5) {perm=[2,0,3,1,4]}
      i0 = const i64[] {0}
      i1 = const i64[] {1}
      i2 = const i64[] {2}
      q = Gather(pt, i0) {axis=0}
      k = Gather(pt, i1) {axis=0}
      v = Gather(pt, i2) {axis=0}
      kT = Transpose(k) {perm=[0,1,3,2]}
      sc = MatMul(q, kT)
      c = const f32[] {0.25}
      scs = Mul(sc, c)
      sm = Softmax(scs) {axis=-1}
      o = MatMul(sm, v)
)",
                direct ? "      y = Sigmoid(o)\n" : R"(      ot = Transpose(o) {perm=[0,2,1,3]}
      s3 = const i64[3] {2, 5, 32}
      y0 = Reshape(ot, s3)
      wo = const f32[32,32] random
      y = MatMul(y0, wo)
)",
                "    }");
}

TEST(CudaFoldAttentionViews, Torch2MultiheadAttentionExport) {
  ExpectFolded("torch 2 MHA", kTorch2Mha, 8);
  auto p = BuildPlan(kTorch2Mha, builder::Precision::kFP16);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(FoldAttentionViews(*p, 9).ok());
  EXPECT_EQ(Count(*p, "Transpose"), 0u) << "the output rows are read in [B, S] order: no transpose left";
}

TEST(CudaFoldAttentionViews, TimmBatchFirstAttention) {
  ExpectFolded("timm, output reshaped", TimmAttention(false), 9);
  ExpectFolded("timm, output read as it is", TimmAttention(true), 10);
}

// --fp8: the Q/K/V projections are FP8 products (sampan::QMatMul) of one quantized activation
// whose weights share a scale (builder/calibrate.cpp): they merge into one FP8 GEMM, same results.
TEST(CudaFuseQkv, Fp8ProjectionsBecomeOneFp8Gemm) {
  const std::string text = sampan::testing::BertLayer(2, 16, 32, 2);
  const std::filesystem::path calib = std::filesystem::temp_directory_path() / StrCat("sampan_qkv_fp8_", ::getpid());
  std::filesystem::create_directories(calib);
  auto g0 = MustParse(text);
  for (int k = 0; k < 2; ++k) {
    auto sample = passes::testing::RandomInputs(*g0, 40 + k);
    for (const auto& [name, t] : sample) ASSERT_TRUE(WriteNpy((calib / StrCat(name, ".", k, ".npy")).string(), t).ok());
  }
  auto build = [&]() {
    builder::BuildConfig config;  // reference backend
    config.precision = builder::Precision::kFP16;
    config.calibration.fp8 = true;
    config.calibration.method = builder::CalibMethod::kMinMax;
    config.calibration.data_dir = calib.string();
    return builder::Build(MustParse(text), config, nullptr);
  };
  auto before = build();
  auto after = build();
  ASSERT_TRUE(before.ok() && after.ok()) << after.status().ToString();
  ASSERT_EQ(Count(*after, "QMatMul"), 4u);  // q, k, v, o
  auto done = FuseQkvProjections(*after, 9);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(done->size(), 1u);
  EXPECT_EQ(Count(*after, "QMatMul"), 2u);
  const ir::Node* attn = passes::testing::FindNodeByOp(*after->graph, "Attention");
  ASSERT_NE(attn, nullptr);
  EXPECT_EQ(attn->attr_string("layout", ""), "bs3hd");
  const ir::Node* mm = attn->input(0)->producer()->input(0)->producer();
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->op_type, "QMatMul");
  EXPECT_EQ(mm->input(0)->type.dtype, DType::kFloat8E4M3FN);
  EXPECT_EQ(mm->input(3)->data.shape(), (Shape{32, 96}));
  EXPECT_EQ(mm->input(6)->data.shape(), (Shape{96}));
  auto inputs = passes::testing::RandomInputs(*g0, 5);
  reference::Executor x_before(before->graph), x_after(after->graph);
  auto want = x_before.Run(inputs);
  auto got = x_after.Run(inputs);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
  EXPECT_TRUE(passes::testing::AllClose((*got)[0], (*want)[0], 1e-3));
  std::filesystem::remove_all(calib);
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
