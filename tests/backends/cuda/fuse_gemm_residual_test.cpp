// The CUDA backend's lowering rewrite Add(product, r) -> product with residual input Z
// (backends/cuda/fuse_gemm_residual.h), and the fused ops' reference kernels with Z:
// graphs before/after on the reference executor. Runs without a GPU (graph work only).
#include <gtest/gtest.h>

#include <random>

#if SAMPAN_HAVE_CUDA

#include "backends/cuda/fuse_gemm_residual.h"
#include "backends/cuda/rewrite_test_util.h"
#include "passes/pass_test_util.h"

namespace sampan::cuda {
namespace {

using passes::testing::MustParse;
using passes::testing::OpList;
using testing::ExpectSameOutputs;
using testing::PlanOf;

const ir::Node* Named(const ir::Graph& g, const std::string& name) {
  for (const auto& n : g.nodes())
    if (n->name == name) return n.get();
  return nullptr;
}

// A pre-LN transformer's two residual sums: the MLP's FusedMatMul + Add (the sum read by
// the next block and a graph output, so AddLayerNorm cannot take it), and an output
// projection computed on rows ([B*S, C] Gemm) and reshaped back before its Add.
const char* kPreLn = R"(
  opset 17
  opset sampan 1
  graph g (x: f32[2,5,16], r: f32[2,5,16]) -> (s1, y) {
    w1 = const f32[16,16] random
    b1 = const f32[16] random
    h = sampan::FusedMatMul(x, w1, b1) @mlp
    s1 = Add(r, h) @add1
    shape_rows = const i64[2] {10, 16}
    rows = Reshape(s1, shape_rows) @rows
    w2 = const f32[16,16] random
    b2 = const f32[16] random
    p = Gemm(rows, w2, b2) {transB=1} @proj
    shape_bs = const i64[3] {2, 5, 16}
    pv = Reshape(p, shape_bs) @proj_bs
    y = Add(pv, s1) @add2
  }
)";

TEST(CudaFuseGemmResidual, JoinsResidualsOfProducts) {
  plan::Plan p = PlanOf(kPreLn);
  auto done = FuseGemmResidual(p);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->size(), 2u);
  EXPECT_EQ(p.rewrites.size(), 2u);
  EXPECT_EQ(p.choices.count("add1"), 0u);
  EXPECT_EQ(p.choices.count("add2"), 0u);
  const ir::Node* mlp = Named(*p.graph, "mlp");
  ASSERT_NE(mlp, nullptr);
  EXPECT_EQ(mlp->op_type, "FusedMatMul");
  ASSERT_EQ(mlp->num_inputs(), 4u);
  EXPECT_EQ(mlp->input(3)->name(), "r");
  EXPECT_EQ(mlp->output(0)->name(), "s1");  // the Add's value, a graph output, is kept
  const ir::Node* proj = Named(*p.graph, "proj");
  ASSERT_NE(proj, nullptr);
  EXPECT_EQ(proj->domain, "sampan");
  EXPECT_EQ(proj->op_type, "FusedGemm");
  ASSERT_EQ(proj->num_inputs(), 4u);
  EXPECT_EQ(proj->attr_int("transB", 0), 1);
  EXPECT_EQ(ir::PrintType(proj->input(3)->type), "f32[10,16]");  // s1 seen as rows
  const ir::Node* back = Named(*p.graph, "proj_bs");
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->output(0)->name(), "y");
  EXPECT_EQ(OpList(*p.graph).find("Add"), std::string::npos) << OpList(*p.graph);
  ExpectSameOutputs(kPreLn, p, 1e-5);
}

TEST(CudaFuseGemmResidual, LeavesWhatCannotJoin) {
  // An activation on the product (relu(P) + r is not relu(P + r)), a residual that
  // broadcasts, a product read twice, and a Gemm whose C is not a bias.
  const char* text = R"(
    opset 17
    opset sampan 1
    graph g (x: f32[4,8], r: f32[4,8], v: f32[8], c: f32[4,8]) -> (y1, y2, y3, h3, y4) {
      w = const f32[8,8] random
      h1 = sampan::FusedMatMul(x, w) {activation="Relu"} @act
      y1 = Add(h1, r) @add_act
      h2 = MatMul(x, w) @bcast
      y2 = Add(h2, v) @add_bcast
      h3 = MatMul(r, w) @twice
      y3 = Add(h3, x) @add_twice
      h4 = Gemm(x, w, c) {beta=0.5} @full_c
      y4 = Add(h4, r) @add_full_c
    })";
  plan::Plan p = PlanOf(text);
  auto done = FuseGemmResidual(p);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(done->empty()) << (*done)[0];
  EXPECT_EQ(OpList(*p.graph), "sampan::FusedMatMul,Add,MatMul,Add,MatMul,Add,Gemm,Add");
}

// Sequence-first attention exported at batch 1: the projection's rows go back through a
// Transpose that only moves the batch axis of size 1, which keeps the elements in order;
// a Transpose that does move elements stops the match.
TEST(CudaFuseGemmResidual, SeesThroughTransposesOfUnitAxes) {
  const char* text = R"(
    opset 17
    graph g (a: f32[5,16], r: f32[1,5,16], q: f32[5,16], r2: f32[16,5]) -> (y, y2) {
      w = const f32[16,16] random
      b = const f32[16] random
      p = Gemm(a, w, b) @proj
      shape_sbc = const i64[3] {5, 1, 16}
      pv = Reshape(p, shape_sbc) @proj_sbc
      pt = Transpose(pv) {perm=[1, 0, 2]} @proj_bsc
      y = Add(pt, r) @add
      p2 = MatMul(q, w) @moved
      pt2 = Transpose(p2) {perm=[1, 0]} @moved_t
      y2 = Add(pt2, r2) @add_moved
    })";
  plan::Plan p = PlanOf(text);
  auto done = FuseGemmResidual(p);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(done->size(), 1u);
  EXPECT_EQ(OpList(*p.graph), "MatMul,Transpose,Add,Reshape,sampan::FusedGemm,Reshape,Transpose");
  ExpectSameOutputs(text, p, 1e-5);
}

// In FP16 the reference kernel rounds once, after product + bias + residual in float.
TEST(CudaFuseGemmResidual, Fp16ResidualMatchesWithinRounding) {
  const char* text = R"(
    opset 17
    opset sampan 1
    graph g (x: f16[3,4,32], r: f16[3,4,32]) -> (y) {
      w = const f16[32,32] random
      b = const f16[32] random
      h = sampan::FusedMatMul(x, w, b) @mm
      y = Add(h, r) @add
    })";
  plan::Plan p = PlanOf(text);
  auto done = FuseGemmResidual(p);
  ASSERT_TRUE(done.ok() && done->size() == 1u);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::map<std::string, Tensor> inputs;
  for (const char* name : {"x", "r"}) {
    Tensor f = Tensor::Alloc(DType::kFloat32, {3, 4, 32});
    for (int64_t i = 0; i < f.numel(); ++i) f.mutable_data<float>()[i] = u(rng);
    inputs[name] = *CastTensor(f, DType::kFloat16);
  }
  auto want = passes::testing::RunReference(MustParse(text), inputs);
  reference::Executor exec(p.graph);
  auto got = exec.Run(inputs);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
  EXPECT_TRUE(passes::testing::AllClose((*got)[0], (*want)[0], 1e-2));
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
