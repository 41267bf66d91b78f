// Subgraph attributes in the IR: captures bound to the node's trailing inputs, the text form
// (parse, print, parse back), deep copy, and the verifier's checks.
#include "ir/subgraph.h"

#include <gtest/gtest.h>

#include "ir/graph.h"
#include "ir/text.h"

namespace sampan::ir {
namespace {

const char* kIfText = R"(
opset 17
graph g (c: bool[], x: f32[2]) -> (y) {
  k = const f32[2] {1, 2}
  y = If(c) {else_branch = graph e () -> (n) { n = Neg(x) },
             then_branch = graph t () -> (a) { a = Add(x, k) }}
}
)";

TEST(Subgraph, ParsedNamesOfTheEnclosingGraphBecomeCaptures) {
  auto g = ParseGraph(kIfText);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_TRUE(Verify(**g).ok()) << Verify(**g).ToString();
  const Node& node = *(*g)->nodes()[0];
  ASSERT_EQ(node.subgraphs().size(), 2u);
  // Both branches bind the union {x, k} (else reads only x) in one order.
  EXPECT_EQ(node.num_captures(), 2u);
  EXPECT_EQ(node.num_explicit_inputs(), 1u);
  const Graph* then_b = node.subgraph("then_branch");
  const Graph* else_b = node.subgraph("else_branch");
  ASSERT_EQ(then_b->captures().size(), 2u);
  ASSERT_EQ(else_b->captures().size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(then_b->captures()[k]->name(), node.input(1 + k)->name());
    EXPECT_EQ(else_b->captures()[k]->name(), node.input(1 + k)->name());
  }
  // The enclosing values are ordinary uses of the node.
  EXPECT_EQ((*g)->FindValue("x")->uses().size(), 1u);
  EXPECT_EQ((*g)->FindValue("k")->uses().size(), 1u);
}

TEST(Subgraph, PrintsAndParsesBack) {
  auto g = ParseGraph(kIfText);
  ASSERT_TRUE(g.ok());
  PrintOptions o;
  o.print_types = false;
  const std::string once = PrintGraph(**g, o);
  EXPECT_NE(once.find("then_branch=graph t () -> (a) {"), std::string::npos) << once;
  EXPECT_NE(once.find("y = If(c)"), std::string::npos) << once;  // captures stay implicit
  auto again = ParseGraph(once);
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << once;
  EXPECT_EQ(PrintGraph(**again, o), once);
  EXPECT_EQ((*again)->nodes()[0]->num_captures(), 2u);
}

TEST(Subgraph, NestedSubgraphsCaptureThroughEveryLevel) {
  auto g = ParseGraph(R"(
opset 17
graph g (m: i64[], x: f32[2], w: f32[2]) -> (y) {
  y = Loop(m, _, x) {body = graph b (i: i64[], c: bool[], acc: f32[2]) -> (c, acc2) {
    odd = Cast(i) {to = 9}
    step = If(odd) {then_branch = graph t () -> (nw) { nw = Neg(w) },
                    else_branch = graph e () -> (w2) { w2 = Identity(w) }}
    acc2 = Add(acc, step)
  }}
}
)");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_TRUE(Verify(**g).ok()) << Verify(**g).ToString();
  const Node& loop = *(*g)->nodes()[0];
  ASSERT_EQ(loop.num_captures(), 1u);
  EXPECT_EQ(loop.input(3)->name(), "w");
  const Graph* body = loop.subgraph("body");
  const Node* inner_if = body->nodes()[1].get();
  ASSERT_EQ(inner_if->op_type, "If");
  // The If inside the body reads the body's own capture of w.
  EXPECT_EQ(inner_if->input(1), body->captures()[0]);
  int count = 0;
  (*g)->ForEachSubgraph([&](Graph&) { ++count; });
  EXPECT_EQ(count, 3);
}

TEST(Subgraph, AnUndefinedNameIsAnErrorOnlyAtTheTop) {
  auto g = ParseGraph(R"(
opset 17
graph g (c: bool[]) -> (y) {
  y = If(c) {then_branch = graph t () -> (a) { a = Neg(nowhere) }, else_branch = graph e () -> (b) { b = Neg(nowhere) }}
}
)");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("nowhere"), std::string::npos) << g.status().ToString();
}

TEST(Subgraph, CloneIsDeep) {
  auto g = ParseGraph(kIfText);
  ASSERT_TRUE(g.ok());
  std::unique_ptr<Graph> copy = (*g)->Clone();
  ASSERT_TRUE(Verify(*copy).ok()) << Verify(*copy).ToString();
  PrintOptions o;
  EXPECT_EQ(PrintGraph(*copy, o), PrintGraph(**g, o));
  Node& n = *copy->nodes()[0];
  EXPECT_NE(n.subgraph("then_branch"), (*g)->nodes()[0]->subgraph("then_branch"));
  // Changing the copy's branch leaves the original alone.
  n.subgraph("then_branch")->nodes()[0]->op_type = "Sub";
  EXPECT_EQ((*g)->nodes()[0]->subgraph("then_branch")->nodes()[0]->op_type, "Add");
  // The copy's captures are bound to the copy's values.
  EXPECT_EQ(n.input(1), copy->FindValue(n.input(1)->name()));
  EXPECT_NE(n.input(1), (*g)->FindValue(n.input(1)->name()));
}

TEST(Subgraph, VerifierChecksTheBinding) {
  auto g = ParseGraph(kIfText);
  ASSERT_TRUE(g.ok());
  Node& n = *(*g)->nodes()[0];
  // One branch losing a capture: the counts differ.
  Graph* else_b = n.subgraph("else_branch");
  ir::Value* extra = else_b->AddCapture("extra").value();
  (void)extra;
  Status st = Verify(**g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("enclosing values"), std::string::npos) << st.ToString();
  // A missing trailing input.
  else_b->captures().pop_back();
  ASSERT_TRUE(Verify(**g).ok());
  n.SetInput(2, nullptr);
  st = Verify(**g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("is missing"), std::string::npos) << st.ToString();
}

TEST(Subgraph, BindCapturesNamesWhatItCannotResolve) {
  auto g = ParseGraph(kIfText);
  ASSERT_TRUE(g.ok());
  Node& n = *(*g)->nodes()[0];
  n.subgraph("then_branch")->AddCapture("ghost").value();
  Graph& top = **g;
  Status st = BindCaptures(&n, [&](const std::string& name) { return top.FindValue(name); });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("ghost"), std::string::npos);
}

}  // namespace
}  // namespace sampan::ir
