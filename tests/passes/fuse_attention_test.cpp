// fuse_attention: scaled dot-product attention -> sampan::Attention, including the
// form torch's ONNX export gives scaled_dot_product_attention with a boolean mask
// (scalar factors on Q and K^T, mask = Where(b, 0, -inf), a NaN guard after Softmax).
#include "passes/pass_test_util.h"

namespace sampan::passes::testing {
namespace {

// B=2, H=2, Sq=3, Sk=4, D=8. keep = m > 2 keeps about a quarter of the keys, so some
// rows are fully masked (softmax of all -inf: NaN, which the guard turns into 0).
const char* kTorchSdpa = R"(
  opset 17
  graph g (q: f32[2,2,3,8], k: f32[2,2,4,8], v: f32[2,2,4,8], m: i64[2,1,3,4]) -> (y) {
    two = const i64[] {2}
    keep = Greater(m, two) @keep
    zero = const f32[1] {0}
    ninf = const f32[1] {-inf}
    mask = Where(keep, zero, ninf) @mask
    c = const f32[] {0.59460356}
    qs = Mul(q, c) @qs
    kt = Transpose(k) {perm=[0,1,3,2]} @kt
    kts = Mul(kt, c) @kts
    s = MatMul(qs, kts) @qk
    sm = Add(s, mask) @add
    p = Softmax(sm) {axis=-1} @softmax
    bad = IsNaN(p) @isnan
    zero2 = const f32[1] {0}
    pg = Where(bad, zero2, p) @guard
    y = MatMul(pg, v) @pv
  }
)";

TEST(FuseAttention, TorchSdpaExportWithNanGuard) {
  PassRun run;
  auto g = ParseAndRun(kTorchSdpa, {"fuse_attention"}, &run);
  EXPECT_EQ(OpList(*g), "Greater,Where,sampan::Attention");
  const ir::Node* att = FindNodeByOp(*g, "Attention");
  ASSERT_NE(att, nullptr);
  EXPECT_NEAR(att->attr_float("scale", 0.f), 0.59460356 * 0.59460356, 1e-6);
  EXPECT_EQ(att->attr_int("k_transposed", -1), 0);
  ASSERT_EQ(att->num_inputs(), 4u);
  EXPECT_EQ(att->input(0)->name(), "q");
  EXPECT_EQ(att->input(1)->name(), "k");
  EXPECT_EQ(att->input(3)->name(), "mask");
  ASSERT_EQ(run.rewrites.size(), 1u);
  EXPECT_NE(run.rewrites[0].description.find("NaN guard"), std::string::npos);
}

// Same outputs on random inputs, fully masked rows included (zeros both ways).
TEST(FuseAttention, TorchSdpaExportNumerics) {
  for (uint64_t seed : {1, 2, 3}) CheckNumerics(kTorchSdpa, {"fuse_attention"}, 1e-5, seed);
}

TEST(FuseAttention, GuardWithNonZeroFillIsNotFused) {
  std::string text = kTorchSdpa;
  const std::string from = "zero2 = const f32[1] {0}";
  text.replace(text.find(from), from.size(), "zero2 = const f32[1] {0.5}");
  auto g = ParseAndRun(text, {"fuse_attention"});
  EXPECT_EQ(FindNodeByOp(*g, "Attention"), nullptr);
}

TEST(FuseAttention, ProbabilitiesReadElsewhereAreNotFused) {
  auto g = ParseAndRun(R"(
    opset 17
    graph g (q: f32[1,2,3,4], k: f32[1,2,3,4], v: f32[1,2,3,4]) -> (y, p) {
      kt = Transpose(k) {perm=[0,1,3,2]} @kt
      s = MatMul(q, kt) @qk
      p = Softmax(s) {axis=-1} @softmax
      y = MatMul(p, v) @pv
    }
  )",
                       {"fuse_attention"});
  EXPECT_EQ(FindNodeByOp(*g, "Attention"), nullptr);
}

TEST(FuseAttention, PlainScaledAttention) {
  const char* text = R"(
    opset 17
    graph g (q: f32[1,2,3,4], k: f32[1,2,5,4], v: f32[1,2,5,6]) -> (y) {
      kt = Transpose(k) {perm=[0,1,3,2]} @kt
      s = MatMul(q, kt) @qk
      c = const f32[] {2}
      d = Div(s, c) @div
      p = Softmax(d) {axis=-1} @softmax
      y = MatMul(p, v) @pv
    }
  )";
  auto g = ParseAndRun(text, {"fuse_attention"});
  EXPECT_EQ(OpList(*g), "sampan::Attention");
  CheckNumerics(text, {"fuse_attention"});
}

// MaxViT's export: both products as Einsum over [B, G, H, S, D] (spaces in the equation),
// K scaled, a relative-position bias [H, S, S] added before the Softmax.
TEST(FuseAttention, EinsumProductsWithPositionBias) {
  const char* text = R"(
    opset 17
    graph g (q: f32[2,3,2,5,4], k: f32[2,3,2,5,4], v: f32[2,3,2,5,4]) -> (y) {
      c = const f32[] {0.5}
      ks = Mul(k, c) @ks
      s = Einsum(q, ks) {equation="B G H I D, B G H J D -> B G H I J"} @qk
      bias = const f32[2,5,5] random
      sb = Add(s, bias) @add
      p = Softmax(sb) {axis=-1} @softmax
      y = Einsum(p, v) {equation="bghij,bghjd->bghid"} @pv
    }
  )";
  auto g = ParseAndRun(text, {"fuse_attention"});
  EXPECT_EQ(OpList(*g), "sampan::Attention");
  const ir::Node& a = *g->nodes()[0];
  EXPECT_EQ(a.attr_int("k_transposed", -1), 0);
  EXPECT_FLOAT_EQ(a.attr_float("scale", 0.f), 0.5f);
  EXPECT_EQ(a.num_inputs(), 4u);
  CheckNumerics(text, {"fuse_attention"});
}

// Einsums that are not attention's products are left alone: K already transposed in the
// equation ("...dj"), a contraction over a batch label, the scores transposed.
TEST(FuseAttention, OtherEinsumsAreNotFused) {
  for (const char* eq : {"bhid,bhdj->bhij", "bhid,bhjd->bij", "bhid,bhjd->bhji"}) {
    const std::string text =
        StrCat(R"(
      opset 17
      graph g (q: f32[2,2,3,4], k: f32[2,2,3,4], kt: f32[2,2,4,3], v: f32[2,2,3,4]) -> (y) {
        s = Einsum(q, )",
               std::string(eq).find("dj") != std::string::npos ? "kt" : "k", R"() {equation=")", eq, R"("} @qk
        p = Softmax(s) {axis=-1} @softmax
        y = MatMul(p, v) @pv
      }
    )");
    auto g = ParseAndRun(text, {"fuse_attention"});
    if (!g) continue;  // an equation the importer/inference rejects for these shapes
    EXPECT_EQ(OpList(*g).find("Attention"), std::string::npos) << eq;
  }
}

}  // namespace
}  // namespace sampan::passes::testing
