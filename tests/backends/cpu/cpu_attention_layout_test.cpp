// The CPU attention kernel on sampan::Attention {layout="bshd"} ([B, S, H, D] operands,
// ops/attention.h) against the reference kernel, and on a BERT head split/merge that the
// pass pipeline folds into that layout.
#include "backends/cpu/cpu_test_util.h"

namespace sampan::cpu::testing {
namespace {

void CompareWithReference(const std::string& graph, const std::map<std::string, Shape>& shapes, bool optimize,
                          uint64_t seed) {
  auto engine = CpuEngineFor(graph, 2, optimize);
  ASSERT_NE(engine, nullptr);
  reference::Executor ref(std::shared_ptr<const ir::Graph>(Parse(graph)));
  std::mt19937_64 rng(seed);
  std::map<std::string, Tensor> in;
  for (const auto& [name, shape] : shapes) in[name] = RandomTensor(DType::kFloat32, shape, rng);
  auto want = ref.Run(in);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  auto got = (*ctx)->Run(in);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < want->size(); ++i) EXPECT_LE(Mismatch((*got)[i], (*want)[i]), 1.0) << "output " << i;
  bool fast = false;
  for (const std::string& l : StepLabels(*engine, in)) {
    fast |= l.find("Attention") != std::string::npos && l.find("[cpu]") != std::string::npos;
    EXPECT_EQ(l.find("Transpose"), std::string::npos) << l;
  }
  EXPECT_TRUE(fast) << "the CPU attention kernel ran";
}

TEST(CpuAttentionLayout, BshdMatchesReference) {
  const std::string graph = R"(opset 17
    opset sampan 1
    graph g (q: f32[B,S,H,D], k: f32[B,T,H,D], v: f32[B,T,H,E], m: f32[B,1,1,T]) -> (y) {
      y = sampan::Attention(q, k, v, m) {scale=0.25, layout="bshd"} @att
    })";
  CompareWithReference(graph, {{"q", {2, 5, 3, 8}}, {"k", {2, 7, 3, 8}}, {"v", {2, 7, 3, 4}}, {"m", {2, 1, 1, 7}}},
                       false, 1);
  CompareWithReference(
      graph, {{"q", {1, 33, 4, 16}}, {"k", {1, 33, 4, 16}}, {"v", {1, 33, 4, 16}}, {"m", {1, 1, 1, 33}}}, false, 2);
}

TEST(CpuAttentionLayout, FoldedBertHeads) {
  // Built with the pass pipeline on: fuse_attention, then fold_attention_transposes.
  const std::string graph = R"(opset 17
    graph g (x: f32[B,S,32], m: f32[B,1,1,S]) -> (y) {
      split = const i64[4] {0, 0, 4, 8}
      wq = const f32[32,32] random
      wk = const f32[32,32] random
      pq = MatMul(x, wq) @pq
      pk = MatMul(x, wk) @pk
      xq = Reshape(pq, split) @rq
      xk = Reshape(pk, split) @rk
      xv = Reshape(x, split) @rv
      q = Transpose(xq) {perm=[0,2,1,3]} @tq
      kt = Transpose(xk) {perm=[0,2,3,1]} @tk
      v = Transpose(xv) {perm=[0,2,1,3]} @tv
      s = MatMul(q, kt) @qk
      c = const f32[] {0.35}
      sc = Mul(s, c) @scale
      sm = Add(sc, m) @mask
      p = Softmax(sm) {axis=-1} @softmax
      o = MatMul(p, v) @pv
      ot = Transpose(o) {perm=[0,2,1,3]} @to
      merge = const i64[3] {0, 0, 32}
      y = Reshape(ot, merge) @rm
    })";
  CompareWithReference(graph, {{"x", {2, 9, 32}}, {"m", {2, 1, 1, 9}}}, true, 3);
  builder::BuildConfig config;
  config.backend = "cpu";
  builder::BuildReport report;
  auto plan = builder::Build(Parse(graph), config, &report);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  bool folded = false;
  for (const auto& r : report.rewrites) folded |= r.pass == "fold_attention_transposes";
  EXPECT_TRUE(folded) << "the head transposes were folded into the attention";
}

}  // namespace
}  // namespace sampan::cpu::testing
