// Passes and subgraphs: a value only a subgraph reads stays alive; each subgraph is optimized
// as a graph of its own and never rewritten across its boundary; the whole pipeline keeps
// control-flow graphs computing the same thing.
#include "passes/pass_test_util.h"

namespace sampan::passes::testing {
namespace {

const char* kLoopGraph = R"(
opset 17
graph g (m: i64[], x: f32[2], w: f32[2]) -> (y, s) {
  scale = Relu(w)
  unused = Neg(w)
  y, s = Loop(m, _, x) {body = graph b (i: i64[], c: bool[], acc: f32[2]) -> (c, acc4, t) {
    two = const f32[] {2}
    three = const f32[] {3}
    six = Mul(two, three)
    acc2 = Mul(acc, scale)
    acc3 = Identity(acc2)
    acc4 = Div(acc3, six)
    dead = Sin(acc)
    t = ReduceSum(acc4) {keepdims = 0}
  }}
}
)";

TEST(ControlFlowPasses, DeadNodeEliminationKeepsValuesOnlySubgraphsRead) {
  auto g = MustParse(kLoopGraph);
  PassRun r = RunPasses(*g, {"dead_node_elimination"});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  // Relu feeds only the body (through its capture); Neg feeds nothing; Sin inside the body is dead.
  EXPECT_EQ(OpList(*g), "Relu,Loop");
  const ir::Graph* body = FindNodeByOp(*g, "Loop")->subgraph("body");
  EXPECT_EQ(FindNodeByOp(*body, "Sin"), nullptr);
  EXPECT_NE(FindNodeByOp(*body, "Mul"), nullptr);
}

TEST(ControlFlowPasses, ACaptureNoLongerReadIsDroppedAndItsProducerWithIt) {
  // junk is read only by a dead node inside the body: once that node goes, the body no longer
  // captures junk, and the Exp producing it is dead in the enclosing graph.
  auto g = MustParse(R"(
opset 17
graph g (m: i64[], x: f32[2], w: f32[2]) -> (y) {
  junk = Exp(w)
  y = Loop(m, _, x) {body = graph b (i: i64[], c: bool[], acc: f32[2]) -> (c, acc2) {
    acc2 = Add(acc, w)
    dead = Sin(junk)
  }}
}
)");
  ASSERT_EQ(FindNodeByOp(*g, "Loop")->num_captures(), 2u);
  PassRun r = RunPasses(*g, {"dead_node_elimination"});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(OpList(*g), "Loop") << Structure(*g);
  const ir::Node* loop = FindNodeByOp(*g, "Loop");
  ASSERT_EQ(loop->num_captures(), 1u);
  EXPECT_EQ(loop->input(3)->name(), "w");
  EXPECT_EQ(loop->subgraph("body")->captures()[0]->name(), "w");
  std::map<std::string, Tensor> in = {{"m", Tensor::FromVector<int64_t>(DType::kInt64, {2}, {})},
                                      {"x", Tensor::FromVector<float>(DType::kFloat32, {1, -2}, {2})},
                                      {"w", Tensor::FromVector<float>(DType::kFloat32, {3, 0.5f}, {2})}};
  auto out = RunReference(std::move(g), in);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0].data<float>()[0], 7.f);
  EXPECT_EQ((*out)[0].data<float>()[1], -1.f);
}

TEST(ControlFlowPasses, SubgraphsAreOptimizedAsGraphsOfTheirOwn) {
  auto g = MustParse(kLoopGraph);
  PassRun r = RunPasses(*g, {"constant_folding", "eliminate_noops", "dead_node_elimination"});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  const ir::Graph* body = FindNodeByOp(*g, "Loop")->subgraph("body");
  // 2 * 3 folded, the Identity gone, inside the body.
  EXPECT_EQ(OpList(*body), "Mul,Div,ReduceSum") << Structure(*g);
  EXPECT_TRUE(ir::Verify(*g).ok());
}

TEST(ControlFlowPasses, AnOutputIsNotForwardedToAnEnclosingValue) {
  // The body's output is an Identity of a capture: removing it would make the output the
  // enclosing value itself, renamed; the pass must leave the boundary alone.
  auto g = MustParse(R"(
opset 17
graph g (c: bool[], x: f32[2]) -> (y) {
  y = If(c) {then_branch = graph t () -> (a) { a = Identity(x) }, else_branch = graph e () -> (b) { b = Neg(x) }}
}
)");
  PassRun r = RunPasses(*g, {"eliminate_noops"});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  const ir::Graph* then_b = FindNodeByOp(*g, "If")->subgraph("then_branch");
  EXPECT_EQ(then_b->outputs()[0]->name(), "a");
  EXPECT_EQ(g->nodes()[0]->input(1)->name(), "x");
  EXPECT_EQ(then_b->captures()[0]->name(), "x");
}

TEST(ControlFlowPasses, ForwardingAnEnclosingValueKeepsTheSubgraphBound) {
  // x2 = Identity(x) is read only by the branch: forwarding re-binds the capture to x.
  auto g = MustParse(R"(
opset 17
graph g (c: bool[], x: f32[2]) -> (y) {
  x2 = Identity(x)
  y = If(c) {then_branch = graph t () -> (a) { a = Neg(x2) }, else_branch = graph e () -> (b) { b = Abs(x2) }}
}
)");
  PassRun r = RunPasses(*g, {"eliminate_noops", "dead_node_elimination"});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(OpList(*g), "If");
  EXPECT_EQ(g->nodes()[0]->input(1)->name(), "x");
  Tensor c = Tensor::FromVector<bool>(DType::kBool, {true}, {});
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {1, -2}, {2});
  auto out = RunReference(std::move(g), {{"c", c}, {"x", x}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0].data<float>()[1], 2.f);
}

TEST(ControlFlowPasses, WholePipelineKeepsResults) {
  auto before = MustParse(kLoopGraph);
  auto after = MustParse(kLoopGraph);
  PassManager pm(PassManagerOptions{});
  ASSERT_TRUE(pm.Run(*after).ok());
  std::map<std::string, Tensor> in = {{"m", Tensor::FromVector<int64_t>(DType::kInt64, {4}, {})},
                                      {"x", Tensor::FromVector<float>(DType::kFloat32, {1, -2}, {2})},
                                      {"w", Tensor::FromVector<float>(DType::kFloat32, {3, 0.5f}, {2})}};
  auto a = RunReference(std::move(before), in);
  auto b = RunReference(std::move(after), in);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  for (size_t i = 0; i < a->size(); ++i) EXPECT_TRUE(AllClose((*b)[i], (*a)[i])) << i;
}

TEST(ControlFlowPasses, ConstantIfIsFoldedAndCommonSubexpressionsKeepSubgraphs) {
  auto g = MustParse(R"(
opset 17
graph g (x: f32[2]) -> (y, z, w) {
  t = const bool[] {1}
  k = const f32[2] {1, 2}
  y = If(t) {then_branch = graph a () -> (p) { p = Add(k, k) }, else_branch = graph b () -> (q) { q = Neg(k) }}
  z = If(t) {then_branch = graph a2 () -> (p2) { p2 = Add(x, k) }, else_branch = graph b2 () -> (q2) { q2 = Neg(x) }}
  w = If(t) {then_branch = graph a3 () -> (p3) { p3 = Add(x, k) }, else_branch = graph b3 () -> (q3) { q3 = Neg(x) }}
}
)");
  PassRun r = RunPasses(*g, {"constant_folding", "common_subexpression", "dead_node_elimination"});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  // The all-constant If became a constant; the two others (subgraphs) are not merged.
  EXPECT_EQ(OpList(*g), "If,If");
  EXPECT_TRUE(g->FindValue("y")->is_constant());
}

}  // namespace
}  // namespace sampan::passes::testing
