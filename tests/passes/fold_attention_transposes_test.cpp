// fold_attention_transposes: the head split/merge transposes around sampan::Attention
// become its layout="bshd" (run after fuse_attention, as in the pipeline).
#include "passes/pass_test_util.h"

namespace sampan::passes::testing {
namespace {

// BertSelfAttention as exported by torch (and tests/models/build_minilm.py): K is
// transposed straight to [B, H, D, S]. Cross attention (Sq = 3, Sk = 5), B=2, H=4, D=6.
const char* kBertKeyT = R"(
  opset 17
  graph g (x: f32[2,3,24], mem: f32[2,5,24], m: f32[2,1,1,5]) -> (y) {
    wq = const f32[24,24] random
    wk = const f32[24,24] random
    wv = const f32[24,24] random
    heads = const i64[4] {0, 0, 4, 6}
    merge = const i64[3] {0, 0, 24}
    pq = MatMul(x, wq) @pq
    pk = MatMul(mem, wk) @pk
    pv = MatMul(mem, wv) @pv
    rq = Reshape(pq, heads) @rq
    rk = Reshape(pk, heads) @rk
    rv = Reshape(pv, heads) @rv
    q = Transpose(rq) {perm=[0,2,1,3]} @tq
    kt = Transpose(rk) {perm=[0,2,3,1]} @tk
    v = Transpose(rv) {perm=[0,2,1,3]} @tv
    s = MatMul(q, kt) @qk
    c = const f32[] {2.4494898}
    d = Div(s, c) @div
    sm = Add(d, m) @add
    p = Softmax(sm) {axis=-1} @softmax
    o = MatMul(p, v) @pv_mm
    ot = Transpose(o) {perm=[0,2,1,3]} @to
    y = Reshape(ot, merge) @merge
  }
)";

TEST(FoldAttentionTransposes, BertKeyPreTransposed) {
  PassRun run;
  auto g = ParseAndRun(kBertKeyT, {"fuse_attention", "fold_attention_transposes"}, &run);
  EXPECT_EQ(OpList(*g), "MatMul,MatMul,MatMul,Reshape,Reshape,Reshape,sampan::Attention,Reshape");
  const ir::Node* att = FindNodeByOp(*g, "Attention");
  ASSERT_NE(att, nullptr);
  EXPECT_EQ(att->attr_string("layout", ""), "bshd");
  EXPECT_EQ(att->attr_int("k_transposed", -1), 0);
  EXPECT_NEAR(att->attr_float("scale", 0.f), 1 / 2.4494898, 1e-6);
  ASSERT_EQ(att->num_inputs(), 4u);
  EXPECT_EQ(att->input(0)->name(), "rq");
  EXPECT_EQ(att->input(1)->name(), "rk");
  EXPECT_EQ(att->input(2)->name(), "rv");
  EXPECT_EQ(att->input(3)->name(), "m");
  EXPECT_EQ(att->output(0)->name(), "ot");
  EXPECT_EQ(ir::PrintType(att->output(0)->type), "f32[2,3,4,6]");
  bool recorded = false;
  for (const auto& r : run.rewrites) recorded |= r.pass == "fold_attention_transposes";
  EXPECT_TRUE(recorded);
}

TEST(FoldAttentionTransposes, BertKeyPreTransposedNumerics) {
  for (uint64_t seed : {1, 2}) CheckNumerics(kBertKeyT, {"fuse_attention", "fold_attention_transposes"}, 1e-5, seed);
}

// torch's scaled_dot_product_attention export: K as [B, H, S, D], transposed inside the
// pattern (k_transposed=0 after fuse_attention), boolean mask with fully masked rows.
const char* kSdpa = R"(
  opset 17
  graph g (x: f32[2,7,16], mf: i64[2,1,7,7]) -> (y) {
    wq = const f32[16,16] random
    wk = const f32[16,16] random
    wv = const f32[16,16] random
    heads = const i64[4] {2, 7, 2, 8}
    merge = const i64[3] {2, 7, 16}
    pq = MatMul(x, wq) @pq
    pk = MatMul(x, wk) @pk
    pv = MatMul(x, wv) @pv
    rq = Reshape(pq, heads) @rq
    rk = Reshape(pk, heads) @rk
    rv = Reshape(pv, heads) @rv
    q = Transpose(rq) {perm=[0,2,1,3]} @tq
    k = Transpose(rk) {perm=[0,2,1,3]} @tk
    v = Transpose(rv) {perm=[0,2,1,3]} @tv
    two = const i64[] {2}
    keep = Greater(mf, two) @keep
    zero = const f32[1] {0}
    ninf = const f32[1] {-inf}
    mask = Where(keep, zero, ninf) @mask
    cq = const f32[] {0.59460356}
    qs = Mul(q, cq) @qs
    ktr = Transpose(k) {perm=[0,1,3,2]} @ktr
    kts = Mul(ktr, cq) @kts
    s = MatMul(qs, kts) @qk
    sm = Add(s, mask) @add
    p = Softmax(sm) {axis=-1} @softmax
    bad = IsNaN(p) @isnan
    zero2 = const f32[1] {0}
    pg = Where(bad, zero2, p) @guard
    o = MatMul(pg, v) @pv_mm
    ot = Transpose(o) {perm=[0,2,1,3]} @to
    y = Reshape(ot, merge) @merge
  }
)";

TEST(FoldAttentionTransposes, TorchSdpaExport) {
  auto g = ParseAndRun(kSdpa, {"fuse_attention", "fold_attention_transposes"});
  const ir::Node* att = FindNodeByOp(*g, "Attention");
  ASSERT_NE(att, nullptr);
  EXPECT_EQ(att->attr_string("layout", ""), "bshd");
  EXPECT_EQ(att->attr_int("k_transposed", -1), 0);
  EXPECT_EQ(FindNodeByOp(*g, "Transpose"), nullptr);
  for (uint64_t seed : {1, 2, 3}) CheckNumerics(kSdpa, {"fuse_attention", "fold_attention_transposes"}, 1e-5, seed);
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(FoldAttentionTransposes, NotWhenATransposeIsReadElsewhere) {
  // Q's [B, H, S, D] form is also a graph output: the Transpose must stay, so nothing folds.
  const std::string text = Replace(kBertKeyT, "-> (y)", "-> (y, q)");
  auto g = ParseAndRun(text, {"fuse_attention", "fold_attention_transposes"});
  const ir::Node* att = FindNodeByOp(*g, "Attention");
  ASSERT_NE(att, nullptr);
  EXPECT_FALSE(att->has_attr("layout"));
  CheckNumerics(text, {"fuse_attention", "fold_attention_transposes"});
}

TEST(FoldAttentionTransposes, NotWithoutTheMergeTranspose) {
  // The output stays [B, H, S, D] (read directly): no bshd form for it, so nothing folds.
  const std::string text = Replace(Replace(kBertKeyT, "ot = Transpose(o) {perm=[0,2,1,3]} @to\n", ""),
                                   "y = Reshape(ot, merge) @merge", "y = Relu(o) @relu");
  auto g = ParseAndRun(text, {"fuse_attention", "fold_attention_transposes"});
  const ir::Node* att = FindNodeByOp(*g, "Attention");
  ASSERT_NE(att, nullptr);
  EXPECT_FALSE(att->has_attr("layout"));
}

TEST(FoldAttentionTransposes, NotForOtherPermutations) {
  // V transposed to [B, H, D, S] is not a head split.
  const std::string text =
      Replace(Replace(kBertKeyT, "v = Transpose(rv) {perm=[0,2,1,3]} @tv", "v = Transpose(rv) {perm=[0,2,3,1]} @tv"),
              "o = MatMul(p, v) @pv_mm", "vt = Transpose(v) {perm=[0,1,3,2]} @vt\n    o = MatMul(p, vt) @pv_mm");
  auto g = ParseAndRun(text, {"fuse_attention", "fold_attention_transposes"});
  const ir::Node* att = FindNodeByOp(*g, "Attention");
  ASSERT_NE(att, nullptr);
  EXPECT_FALSE(att->has_attr("layout"));
  CheckNumerics(text, {"fuse_attention", "fold_attention_transposes"});
}

}  // namespace
}  // namespace sampan::passes::testing
