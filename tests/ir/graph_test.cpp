// Graph editing and the structural verifier.
#include "ir/graph.h"

#include <gtest/gtest.h>

#include "ir/text.h"

namespace sampan::ir {
namespace {

std::unique_ptr<Graph> Parse(const char* text) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : std::make_unique<Graph>();
}

TEST(Graph, TypesToString) {
  TensorType t;
  t.dtype = DType::kFloat32;
  EXPECT_EQ(t.ToString(), "f32[*]");
  EXPECT_FALSE(t.is_static());
  t.dims = Dims{Dim::Symbol("N"), Dim::Known(3), Dim::Unknown()};
  EXPECT_EQ(t.ToString(), "f32[N,3,?]");
  EXPECT_TRUE(TensorType::Static(DType::kInt64, {2, 3}).is_static());
  EXPECT_EQ(TensorType::Static(DType::kInt64, {2, 3}).static_shape(), (Shape{2, 3}));
  EXPECT_EQ(TensorType::Static(DType::kBool, {}).ToString(), "bool[]");
}

TEST(Graph, AddValueAndFreshNames) {
  Graph g;
  Value* a = g.AddValue("a").value();
  EXPECT_EQ(g.FindValue("a"), a);
  EXPECT_EQ(g.FindValue("zz"), nullptr);
  auto dup = g.AddValue("a");
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("'a' is defined more than once"), std::string::npos);
  const std::string fresh = g.FreshName("a");
  EXPECT_NE(fresh, "a");
  EXPECT_EQ(g.FindValue(fresh), nullptr);
  Value* anon = g.AddValue("").value();
  EXPECT_FALSE(anon->name().empty());
  Value* anon2 = g.AddValue("").value();
  EXPECT_NE(anon->name(), anon2->name());
}

TEST(Graph, NodesKeepUseListsRight) {
  Graph g;
  Value* x = g.AddValue("x").value();
  Value* w = g.AddConstant("w", Tensor::FromVector<float>(DType::kFloat32, {1, 2}, {2})).value();
  Value* y = g.AddValue("y").value();
  g.inputs() = {x};
  Node* n = g.AddNode("Add", {x, w}, {y}, "add").value();
  g.outputs() = {y};
  EXPECT_TRUE(w->is_constant());
  EXPECT_EQ(y->producer(), n);
  EXPECT_EQ(y->producer_output(), 0);
  ASSERT_EQ(x->uses().size(), 1u);
  EXPECT_EQ(x->uses()[0], std::make_pair(n, 0));
  EXPECT_EQ(n->Label(), "Add 'add'");

  // Re-point an input.
  n->SetInput(1, x);
  EXPECT_TRUE(w->uses().empty());
  EXPECT_EQ(x->uses().size(), 2u);
  // Omit it, and extend past the end.
  n->SetInput(1, nullptr);
  EXPECT_EQ(x->uses().size(), 1u);
  n->SetInput(3, w);
  EXPECT_EQ(n->num_inputs(), 4u);
  EXPECT_EQ(n->input(2), nullptr);
  EXPECT_EQ(n->input(99), nullptr);

  // A second producer for y is refused.
  auto twice = g.AddNode("Neg", {x}, {y}, "neg");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("produced by both Add 'add' and Neg 'neg'"), std::string::npos);
}

TEST(Graph, ReplaceRemoveAndClean) {
  auto g = Parse(R"(graph (x: f32[2]) -> (z) {
      y = Neg(x) @neg
      z = Relu(y) @relu
    })");
  Value* x = g->FindValue("x");
  Value* y = g->FindValue("y");
  Node* neg = y->producer();
  // Bypass Neg: Relu reads x directly, then drop Neg and its output.
  g->ReplaceAllUsesWith(y, x);
  EXPECT_TRUE(y->uses().empty());
  EXPECT_EQ(g->nodes()[1]->input(0), x);
  g->RemoveNode(neg);
  EXPECT_EQ(y->producer(), nullptr);
  EXPECT_EQ(g->nodes().size(), 1u);
  EXPECT_TRUE(x->uses().size() == 1);
  g->RemoveUnusedValues();
  EXPECT_EQ(g->FindValue("y"), nullptr);
  EXPECT_NE(g->FindValue("x"), nullptr);
  EXPECT_TRUE(Verify(*g).ok()) << Verify(*g).ToString();
  EXPECT_EQ(PrintGraph(*g), "graph (x: f32[2]) -> (z) {\n  z = Relu(x) @relu\n}\n");

  // ReplaceAllUsesWith also retargets graph outputs.
  Value* z = g->FindValue("z");
  g->ReplaceAllUsesWith(z, x);
  EXPECT_EQ(g->outputs()[0], x);
}

TEST(Graph, OpsetLookup) {
  Graph g;
  EXPECT_EQ(g.opset(), 0);
  g.opsets["ai.onnx"] = 13;
  EXPECT_EQ(g.opset(), 13);
  g.opsets[""] = 17;
  EXPECT_EQ(g.opset(), 17);
}

TEST(Graph, AttributeAccessors) {
  auto g = Parse(R"(graph (x: f32[2]) -> (y) {
      y = Foo(x) {i=3, f=0.5, s="abc", is=[1, 2], fs=[0.5, 1.5]} @foo
    })");
  const Node& n = *g->nodes()[0];
  EXPECT_EQ(n.attr_int("i", 0), 3);
  EXPECT_EQ(n.attr_int("missing", 7), 7);
  EXPECT_EQ(n.attr_int("s", 7), 7);  // wrong type: default
  EXPECT_EQ(n.attr_float("f", 0), 0.5f);
  EXPECT_EQ(n.attr_float("i", 0), 3.f);  // ints widen to float
  EXPECT_EQ(n.attr_string("s", ""), "abc");
  EXPECT_EQ(n.attr_ints("is"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(n.attr_floats("fs"), (std::vector<float>{0.5f, 1.5f}));
  EXPECT_EQ(*n.required_int("i"), 3);
  EXPECT_EQ(*n.required_float("f"), 0.5f);
  EXPECT_EQ(*n.required_ints("is"), (std::vector<int64_t>{1, 2}));
  auto missing = n.required_int("axis");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.status().message(), "Foo 'foo': missing required attribute 'axis'");
  auto wrong = n.required_ints("s");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(), "Foo 'foo': attribute 's' must be ints, got string");
  EXPECT_FALSE(n.required_float("is").ok());
}

TEST(Graph, TopologicalSortIsStableAndFindsCycles) {
  auto g = Parse(R"(graph (x: f32[2]) -> (d) {
      d = Add(b, c) @d
      b = Neg(x) @b
      c = Relu(x) @c
    })");
  ASSERT_TRUE(g->TopologicalSort().ok());
  EXPECT_EQ(g->nodes()[0]->name, "b");
  EXPECT_EQ(g->nodes()[1]->name, "c");
  EXPECT_EQ(g->nodes()[2]->name, "d");

  auto cyc = Parse(R"(graph (x: f32[2]) -> (q) {
      p = Add(x, q) @p
      q = Neg(p) @q
    })");
  Status st = cyc->TopologicalSort();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cycle through"), std::string::npos) << st.ToString();
  EXPECT_EQ(cyc->nodes().size(), 2u) << "nodes must not be lost on failure";
}

TEST(Verify, AcceptsWellFormedGraph) {
  auto g = Parse(R"(graph (x: f32[2]) -> (y, c) {
      c = const f32[2] {1, 2}
      t = Add(x, c)
      y = Relu(t)
    })");
  EXPECT_TRUE(Verify(*g).ok()) << Verify(*g).ToString();
}

TEST(Verify, DanglingInput) {
  Graph g;
  g.name = "g";
  Value* x = g.AddValue("x").value();
  Value* ghost = g.AddValue("ghost").value();
  Value* y = g.AddValue("y").value();
  g.inputs() = {x};
  (void)g.AddNode("Add", {x, ghost}, {y}, "add").value();
  g.outputs() = {y};
  Status st = Verify(g);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("Add 'add' input 1 'ghost' is not a graph input, a constant, or produced by any node"),
            std::string::npos)
      << st.message();
}

TEST(Verify, DoubleProducer) {
  // AddNode refuses a second producer (see NodesKeepUseListsRight), so the double definition a
  // buggy importer or pass can still create is a value that is a graph input and a node output.
  Graph h;
  h.name = "h";
  Value* a = h.AddValue("a").value();
  Value* b = h.AddValue("b").value();
  h.inputs() = {a, b};
  (void)h.AddNode("Neg", {a}, {b}, "neg").value();
  h.outputs() = {b};
  Status st = Verify(h);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("value 'b' is defined more than once (again by Neg 'neg')"), std::string::npos)
      << st.message();
}

TEST(Verify, OutputOfRemovedNodeCanBeProducedAgain) {
  Graph g;
  g.name = "g";
  Value* x = g.AddValue("x").value();
  Value* y = g.AddValue("y").value();
  g.inputs() = {x};
  Node* a = g.AddNode("Neg", {x}, {y}, "a").value();
  g.RemoveNode(a);                                     // y has no producer now
  Node* b = g.AddNode("Relu", {x}, {y}, "b").value();  // fine: b produces y
  (void)b;
  g.outputs() = {y};
  EXPECT_TRUE(Verify(g).ok());
}

TEST(Verify, Cycle) {
  auto g = Parse(R"(graph loop (x: f32[2]) -> (q) {
      p = Add(x, q) @p
      q = Neg(p) @q
    })");
  Status st = Verify(*g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Add 'p' input 1 'q' is used before Neg 'q' produces it"), std::string::npos)
      << st.message();
}

TEST(Verify, ListsEveryProblemAtOnce) {
  Graph g;
  g.name = "many";
  Value* x = g.AddValue("x").value();
  Value* g1 = g.AddValue("ghost1").value();
  Value* g2 = g.AddValue("ghost2").value();
  Value* y = g.AddValue("y").value();
  Value* never = g.AddValue("never").value();
  Value* c = g.AddConstant("c", Tensor::FromVector<float>(DType::kFloat32, {1, 2}, {2})).value();
  c->type = TensorType::Static(DType::kFloat32, {3});  // declared type disagrees with the data
  g.inputs() = {x};
  (void)g.AddNode("Add", {g1, g2}, {y}, "add").value();
  g.outputs() = {y, never};
  Status st = Verify(g);
  ASSERT_FALSE(st.ok());
  const std::string& m = st.message();
  EXPECT_NE(m.find("graph 'many' is malformed (4 problems)"), std::string::npos) << m;
  EXPECT_NE(m.find("'ghost1'"), std::string::npos) << m;
  EXPECT_NE(m.find("'ghost2'"), std::string::npos) << m;
  EXPECT_NE(m.find("graph output 'never' is never produced"), std::string::npos) << m;
  EXPECT_NE(m.find("constant 'c' is declared f32[3] but holds f32[2]"), std::string::npos) << m;
}

}  // namespace
}  // namespace sampan::ir
