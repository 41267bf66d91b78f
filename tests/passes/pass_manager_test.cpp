// The pass manager: order, switching passes off by name, unknown names listed,
// verification after each pass, and the whole pipeline on a small conv net.
#include "passes/pass_test_util.h"

namespace sampan::passes::testing {
namespace {

// A test-only pass that breaks graphs named "break_me" (removes the producer of
// the first graph output) and leaves every other graph alone.
Result<bool> BreakGraph(ir::Graph& g, PassContext& ctx) {
  if (g.name != "break_me" || g.outputs().empty() || g.outputs()[0]->producer() == nullptr) return false;
  ctx.Record("broke the graph");
  g.RemoveNode(g.outputs()[0]->producer());
  return true;
}
// Not registered (every registered pass is in the pipeline list): tests add it through
// PassManagerOptions::extra_passes, which run after the pipeline.
PassManagerOptions WithBreaker(PassManagerOptions o = {}) {
  o.extra_passes.push_back(PassDef{"zz_test_breaker", BreakGraph, /*target=*/""});
  return o;
}

TEST(PassManager, RegisteredPassesInOrder) {
  std::vector<std::string> names;
  for (const PassDef* p : AllPasses()) names.push_back(p->name);
  auto pos = [&](const std::string& n) {
    auto it = std::find(names.begin(), names.end(), n);
    EXPECT_NE(it, names.end()) << n;
    return it - names.begin();
  };
  EXPECT_LT(pos("dead_node_elimination"), pos("eliminate_noops"));
  EXPECT_LT(pos("eliminate_noops"), pos("constant_folding"));
  EXPECT_LT(pos("constant_folding"), pos("fold_batchnorm"));
  EXPECT_LT(pos("fold_batchnorm"), pos("fuse_matmul_add"));
  EXPECT_LT(pos("fuse_matmul_add"), pos("fuse_conv_residual"));
  EXPECT_LT(pos("fuse_conv_residual"), pos("fuse_activation"));
  // Quantized products take the epilogues the float fusions made: last.
  EXPECT_LT(pos("fuse_activation"), pos("fuse_quantized"));
  EXPECT_EQ(names.back(), "fuse_quantized");
  EXPECT_EQ(std::find(names.begin(), names.end(), "zz_test_breaker"), names.end());
  EXPECT_NE(FindPass("fold_batchnorm"), nullptr);
  EXPECT_EQ(FindPass("fold_batchnorms"), nullptr);
}

const char* kNet = R"(
  opset 17
  graph net (x: f32[1,3,8,8]) -> (y) {
    xi = Identity(x) @in_identity
    w = const f32[4,3,3,3] random
    c = Conv(xi, w) {pads=[1, 1, 1, 1]} @conv1
    scale = const f32[4] {1, 0.5, 2, 1}
    bias = const f32[4] {0, 0.1, -0.1, 0.2}
    mean = const f32[4] {0.1, 0, 0, -0.3}
    var = const f32[4] {1, 2, 0.5, 1}
    n = BatchNormalization(c, scale, bias, mean, var) @bn1
    r = Relu(n) @relu1
    w2 = const f32[4,4,1,1] random
    c2 = Conv(r, w2) @conv2
    s = Add(c2, r) @add
    y = Relu(s) @relu2
    dead = Neg(x) @unused
  }
)";

TEST(PassManager, FullPipelineOnConvNet) {
  auto g = MustParse(kNet);
  PassManager pm(PassManagerOptions{});
  ASSERT_TRUE(pm.Run(*g).ok());
  EXPECT_EQ(Nodes(*g),
            "r = sampan::FusedConv(x, w_bnfolded, conv1_bias_bnfolded) {activation=\"Relu\", pads=[1, 1, 1, 1]} "
            "@conv1\n"
            "y = sampan::FusedConv(r, w2, _, r) {activation=\"Relu\"} @conv2");
  EXPECT_EQ(pm.stats().size(), AllPasses().size());
  // Every pass that ran is listed with its node counts.
  for (const auto& s : pm.stats()) {
    EXPECT_TRUE(s.enabled) << s.name;
    EXPECT_GE(s.nodes_before, s.nodes_after) << s.name;
  }
  std::set<std::string> passes_with_rewrites;
  for (const auto& r : pm.context().rewrites) passes_with_rewrites.insert(r.pass);
  EXPECT_EQ(passes_with_rewrites, (std::set<std::string>{"dead_node_elimination", "eliminate_noops", "fold_batchnorm",
                                                         "fuse_conv_residual", "fuse_activation"}));
}

TEST(PassManager, FullPipelineNumerics) {
  std::set<std::string> all;
  for (const PassDef* p : AllPasses()) all.insert(p->name);
  CheckNumerics(kNet, all);
}

TEST(PassManager, DisablingAPassByName) {
  auto g = MustParse(kNet);
  PassManagerOptions o;
  o.disabled = {"fold_batchnorm", "eliminate_noops"};
  PassManager pm(o);
  ASSERT_TRUE(pm.Run(*g).ok());
  EXPECT_NE(FindNodeByOp(*g, "BatchNormalization"), nullptr);
  EXPECT_NE(FindNodeByOp(*g, "Identity"), nullptr);
  EXPECT_EQ(FindNodeByOp(*g, "Neg"), nullptr) << "dead_node_elimination still ran";
  for (const auto& s : pm.stats()) {
    const bool off = s.name == "fold_batchnorm" || s.name == "eliminate_noops";
    EXPECT_EQ(s.enabled, !off) << s.name;
    if (off) {
      EXPECT_FALSE(s.changed);
      EXPECT_EQ(s.nodes_before, s.nodes_after);
    }
  }
  for (const auto& r : pm.context().rewrites) {
    EXPECT_NE(r.pass, "fold_batchnorm");
    EXPECT_NE(r.pass, "eliminate_noops");
  }
}

TEST(PassManager, UnknownPassNameListsValidNames) {
  PassManagerOptions o;
  o.disabled = {"fold_batchnrom"};
  PassManager pm(o);
  Status st = pm.Validate();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("fold_batchnrom"), std::string::npos) << st.message();
  for (const PassDef* p : AllPasses()) EXPECT_NE(st.message().find(p->name), std::string::npos) << p->name;
  // Run refuses too, before touching the graph.
  auto g = MustParse(kNet);
  const std::string before = ir::PrintGraph(*g);
  EXPECT_FALSE(pm.Run(*g).ok());
  EXPECT_EQ(ir::PrintGraph(*g), before);
}

TEST(PassManager, AfterPassCallbackSeesEveryPassThatRan) {
  auto g = MustParse(kNet);
  std::vector<std::string> seen;
  PassManagerOptions o;
  o.disabled = {"constant_folding"};
  o.after_pass = [&](const std::string& name, const ir::Graph&) { seen.push_back(name); };
  PassManager pm(o);
  ASSERT_TRUE(pm.Run(*g).ok());
  std::vector<std::string> expected;
  for (const PassDef* p : AllPasses())
    if (p->name != "constant_folding") expected.push_back(p->name);
  EXPECT_EQ(seen, expected);
}

const char* kBreakMe = R"(
  opset 17
  graph break_me (x: f32[2]) -> (y) {
    y = Relu(x) @relu
  }
)";

TEST(PassManager, VerifiesAfterEachPass) {
  auto g = MustParse(kBreakMe);
  PassManager pm(WithBreaker());
  Status st = pm.Run(*g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("zz_test_breaker"), std::string::npos) << st.ToString();
  EXPECT_NE(st.ToString().find("invalid"), std::string::npos) << st.ToString();
}

TEST(PassManager, VerificationCanBeSwitchedOff) {
  auto g = MustParse(kBreakMe);
  PassManagerOptions o = WithBreaker();
  o.verify = false;
  PassManager pm(o);
  EXPECT_TRUE(pm.Run(*g).ok());
}

TEST(PassManager, BreakerPassDisabledByName) {
  auto g = MustParse(kBreakMe);
  PassManagerOptions o = WithBreaker();
  o.disabled = {"zz_test_breaker"};
  PassManager pm(o);
  EXPECT_TRUE(pm.Run(*g).ok());
  EXPECT_EQ(OpList(*g), "Relu");
}

}  // namespace
}  // namespace sampan::passes::testing
